# problem: level1/40_LayerNorm.py
# LayerNorm over (features, dim1, dim2) = 4M elements per row: per-block partial sums, then one
# pass that reduces the row's partials and normalizes its block.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def partial_sums_kernel(x_ptr, sums_ptr, sqs_ptr, n, blocks, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    block = tl.program_id(1)
    offs = block * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row.to(tl.int64) * n + offs, mask=offs < n, other=0.0)
    tl.store(sums_ptr + row * blocks + block, tl.sum(x, axis=0))
    tl.store(sqs_ptr + row * blocks + block, tl.sum(x * x, axis=0))


@triton.jit
def normalize_kernel(x_ptr, w_ptr, b_ptr, out_ptr, sums_ptr, sqs_ptr, n, blocks, eps,
                     BLOCK: tl.constexpr, PARTS: tl.constexpr):
    row = tl.program_id(0)
    block = tl.program_id(1)
    parts = tl.arange(0, PARTS)
    total = tl.sum(tl.load(sums_ptr + row * blocks + parts, mask=parts < blocks, other=0.0), 0)
    total_sq = tl.sum(tl.load(sqs_ptr + row * blocks + parts, mask=parts < blocks, other=0.0), 0)
    mean = total / n
    var = tl.maximum(total_sq / n - mean * mean, 0.0)
    rstd = 1.0 / tl.sqrt(var + eps)
    offs = block * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    base = row.to(tl.int64) * n
    x = tl.load(x_ptr + base + offs, mask=mask, other=0.0)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + base + offs, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n = self.ln.weight.numel()
        rows = x.numel() // n
        block = 4096
        blocks = triton.cdiv(n, block)
        sums = torch.empty(rows, blocks, device=x.device, dtype=torch.float32)
        sqs = torch.empty_like(sums)
        out = torch.empty_like(x)
        partial_sums_kernel[(rows, blocks)](x, sums, sqs, n, blocks, BLOCK=block, num_warps=8)
        normalize_kernel[(rows, blocks)](x, self.ln.weight, self.ln.bias, out, sums, sqs, n,
                                         blocks, self.ln.eps, BLOCK=block,
                                         PARTS=triton.next_power_of_2(blocks), num_warps=8)
        return out
