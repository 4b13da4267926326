# problem: level2/14_Gemm_Divide_Sum_Scaling.py
# sum_j (x @ W.T)[i, j] / 2 * s = (x[i] . colsum(W)) * s / 2: the column sums of W (one read of
# W, split over row blocks, summed in a fixed order), then a GEMV; no (batch, hidden) product.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def column_partials_kernel(w_ptr, part_ptr, rows, cols, rows_per_split, stride,
                           BR: tl.constexpr, BC: tl.constexpr):
    """part[s, c] = sum of w[r, c] over the rows of split s."""
    cb = tl.program_id(0)
    split = tl.program_id(1)
    c = cb * BC + tl.arange(0, BC)
    acc = tl.zeros((BC,), dtype=tl.float32)
    first = split * rows_per_split
    for r0 in range(first, first + rows_per_split, BR):
        r = r0 + tl.arange(0, BR)
        tile = tl.load(w_ptr + r[:, None].to(tl.int64) * stride + c[None, :],
                       mask=(r[:, None] < tl.minimum(rows, first + rows_per_split))
                       & (c[None, :] < cols), other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(part_ptr + split * cols + c, acc, mask=c < cols)


@triton.jit
def column_total_kernel(part_ptr, out_ptr, cols, SPLITS: tl.constexpr, BC: tl.constexpr):
    c = tl.program_id(0) * BC + tl.arange(0, BC)
    s = tl.arange(0, SPLITS)
    tile = tl.load(part_ptr + s[:, None] * cols + c[None, :], mask=c[None, :] < cols, other=0.0)
    tl.store(out_ptr + c, tl.sum(tile, axis=0), mask=c < cols)


@triton.jit
def gemv_kernel(x_ptr, v_ptr, shift_ptr, out_ptr, cols, stride, scale,
                HAS_SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    """out[i] = scale * (x[i] . v) (+ shift[0])."""
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row.to(tl.int64) * stride + offs, mask=offs < cols, other=0.0)
        acc += x * tl.load(v_ptr + offs, mask=offs < cols, other=0.0)
    total = tl.sum(acc, axis=0) * scale
    if HAS_SHIFT:
        total += tl.load(shift_ptr)
    tl.store(out_ptr + row, total)


SPLITS = 16


def column_sums(w):
    """The sum of w's rows, as a vector of w.shape[1] values."""
    rows, cols = w.shape
    parts = torch.empty(SPLITS, cols, device=w.device, dtype=torch.float32)
    total = torch.empty(cols, device=w.device, dtype=torch.float32)
    column_partials_kernel[(triton.cdiv(cols, 64), SPLITS)](
        w, parts, rows, cols, triton.cdiv(rows, SPLITS), w.stride(0), BR=32, BC=64, num_warps=4)
    column_total_kernel[(triton.cdiv(cols, 256),)](parts, total, cols, SPLITS=SPLITS, BC=256)
    return total


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = x.contiguous()
        v = column_sums(self.weight)
        out = torch.empty(x.shape[0], 1, device=x.device, dtype=torch.float32)
        gemv_kernel[(x.shape[0],)](x, v, v, out, x.shape[1], x.stride(0),
                                   float(self.scaling_factor) / 2.0, HAS_SHIFT=False,
                                   BLOCK=1024, num_warps=4)
        return out
