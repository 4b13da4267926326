# problem: level1/95_CrossEntropyLoss.py
# Mean cross entropy: one program per row computes logsumexp(row) - row[target], then one
# program sums the per-row losses in a fixed order (deterministic) and divides by the batch.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_loss_kernel(x_ptr, target_ptr, loss_ptr, cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * stride
    offs = tl.arange(0, BLOCK)
    x = tl.load(base + offs, mask=offs < cols, other=-float("inf"))
    top = tl.max(x, axis=0)
    lse = top + tl.log(tl.sum(tl.exp(x - top), axis=0))
    target = tl.load(target_ptr + row)
    tl.store(loss_ptr + row, lse - tl.load(base + target))


@triton.jit
def mean_kernel(loss_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(loss_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        predictions = predictions.contiguous()
        rows, cols = predictions.shape
        losses = torch.empty(rows, device=predictions.device, dtype=torch.float32)
        out = torch.empty((), device=predictions.device, dtype=torch.float32)
        row_loss_kernel[(rows,)](predictions, targets, losses, cols, predictions.stride(0),
                                 BLOCK=triton.next_power_of_2(cols), num_warps=8)
        mean_kernel[(1,)](losses, out, rows, BLOCK=1024, num_warps=4)
        return out
