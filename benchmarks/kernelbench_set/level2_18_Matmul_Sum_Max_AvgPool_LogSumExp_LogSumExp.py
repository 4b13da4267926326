# problem: level2/18_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp.py
# After the sum over features every later op (max, mean, logsumexp over one element) is the
# identity, and sum_j (x @ W.T + b)[i, j] = x[i] . colsum(W) + sum(b): the column sums of W
# (one read of W), the bias sum, then a GEMV.
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


@triton.jit
def vector_sum_kernel(v_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(v_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = x.contiguous()
        v = column_sums(self.linear.weight)
        shift = torch.empty(1, device=x.device, dtype=torch.float32)
        vector_sum_kernel[(1,)](self.linear.bias, shift, self.linear.bias.numel(), BLOCK=1024)
        out = torch.empty(x.shape[0], 1, device=x.device, dtype=torch.float32)
        gemv_kernel[(x.shape[0],)](x, v, shift, out, x.shape[1], x.stride(0), 1.0,
                                   HAS_SHIFT=True, BLOCK=1024, num_warps=4)
        return out
