"""What the realcode measurements share: one forward on copies of the inputs, and whether an
output stays within tolerance of the reference."""
from __future__ import annotations

import copy

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
