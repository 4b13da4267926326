"""What the realcode measurements share: one forward on copies of the inputs, and whether an
output stays within tolerance of the reference."""
from __future__ import annotations

import copy
import math

from .. import checks as C


def forward(model, inputs: list, seed: int, copies: bool = True) -> list:
    """One forward under ``seed``, detached outputs; on copies of the inputs unless ``copies``
    is false (the probe saw the forward leave its inputs alone)."""
    import torch

    from ..measure import output_tensors

    args = [v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for v in inputs] \
        if copies else list(inputs)
    torch.manual_seed(seed)
    with torch.no_grad():
        return output_tensors(model(*args))


def within(out: list | None, ref: list, tol: float) -> bool:
    return out is not None and C.shapes_equal(out, ref) and C.max_error(out, ref) <= tol


def _numel(shape) -> int:
    count = 1
    for size in shape:
        count *= int(size)
    return count


def extra_flops(packet, args: tuple, out) -> float | None:
    """FLOPs (a multiply-add as 2) of an accumulating ATen op torch's FLOP formulas leave out:
    matrix-vector and dot products, outer products, distances, FFTs (5 n log2 n), bags of
    embeddings; None for any other op, or arguments not as expected."""
    import torch

    name = packet.__name__
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    try:
        if name == "mv":
            return 2.0 * tensors[0].numel()
        if name == "addmv":
            return 2.0 * tensors[1].numel()
        if name in ("dot", "vdot"):
            return 2.0 * tensors[0].numel()
        if name == "addr":
            return 2.0 * tensors[1].numel() * tensors[2].numel()
        if name == "_cdist_forward":  # (..., P, M) against (..., R, M)
            x1, x2 = tensors[0], tensors[1]
            return 3.0 * x1.numel() * x2.shape[-2]
        if name == "_euclidean_dist":  # the same by a matrix product (P, M) @ (M, R)
            return 2.0 * tensors[0].numel() * tensors[1].shape[-2]
        if name == "_pdist_forward":  # (N, M): every pair of rows
            n, m = tensors[0].shape
            return 3.0 * n * (n - 1) / 2 * m
        if name in ("_fft_r2c", "_fft_c2c", "_fft_c2r"):
            x, dims = tensors[0], [int(d) for d in args[1]]
            length = _numel(x.shape[d] for d in dims) if name != "_fft_c2r" else \
                _numel(out.shape[d] for d in dims)
            return 5.0 * max(x.numel(), out.numel()) * math.log2(max(2, length))
        if name in ("_embedding_bag", "_embedding_bag_forward_only"):
            return 2.0 * tensors[1].numel() * tensors[0].shape[-1]
    except (IndexError, TypeError, ValueError, AttributeError):
        return None
    return None
