"""An output's scales, which the judge's absolute tolerance follows (``compare.scaled_atol``):
its root mean square and its spread. Computed where the output is: by the grader for what a
candidate returns, by the reference's worker for the reference's outputs as it makes them (on
the device, with each trial: the grader's process took 0.3 s per 16M-element output on the host),
which the grader then keeps for those tensors (``compare.remember_scales``). Standard library and
torch only: the worker imports it.
"""
from __future__ import annotations

import math

import torch

# Elements the spread (``output_spread``) is taken over at most: a fixed pseudo-random sample of
# a larger output (its median on 65,536 elements: 4 ms; on 4M: 110 ms, one thread)
SPREAD_SAMPLE = 1 << 16
SPREAD_BLOCKS = 16  # blocks per dimension the spread is also taken over (the least decides)
# Elements per pass of the float64 norm (bounded temporaries)
RMS_CHUNK = 1 << 20


def output_scales(e: torch.Tensor) -> tuple[float, float]:
    """``e``'s root mean square of its finite elements and its spread (``compare.
    output_spread``), wherever it lies."""
    return _output_rms(e), _output_spread(e)


def _output_spread(e: torch.Tensor) -> float:
    flat = e.reshape(-1)
    if not flat.numel() or not flat.is_floating_point() or flat.is_complex():
        return 0.0
    picks = torch.randint(flat.numel(), (SPREAD_SAMPLE,),
                          generator=torch.Generator().manual_seed(0)) \
        if flat.numel() > SPREAD_SAMPLE else torch.arange(flat.numel())
    values = flat[picks.to(flat.device)].detach().cpu().double()
    finite = torch.isfinite(values)
    values, picks = values[finite], picks[finite]
    if not values.numel():
        return 0.0
    spread = _mad(values)
    # each dimension cut into up to SPREAD_BLOCKS contiguous blocks: the least spread of any
    # block decides, so a part of the output at a smaller scale (a head's scores beside its
    # boxes, a quarter of the columns) keeps the floor its own scale gives it
    coords = torch.unravel_index(picks, tuple(e.shape)) if e.dim() > 1 else (picks,)
    for size, coord in zip(e.shape, coords):
        blocks = min(int(size), SPREAD_BLOCKS)
        if blocks < 2:
            continue
        block = coord * blocks // int(size)
        for b in range(blocks):
            part = values[block == b]
            if part.numel():
                spread = min(spread, _mad(part))
    return spread


def _mad(values: torch.Tensor) -> float:
    return float((values - values.median()).abs().median())


def _output_rms(e: torch.Tensor) -> float:
    flat, total, count = e.reshape(-1), 0.0, 0
    if flat.numel() and flat.is_floating_point():
        # a float64 norm per chunk (bounded temporaries): 20x the masked pass below on 16M
        # elements, which the judge computes for every output it compares; finite only where
        # every element is
        squares = 0.0
        for start in range(0, flat.numel(), RMS_CHUNK):
            squares += float(torch.linalg.vector_norm(flat[start:start + RMS_CHUNK],
                                                      dtype=torch.float64)) ** 2
        if math.isfinite(squares):
            return math.sqrt(squares / flat.numel())
    for start in range(0, flat.numel(), RMS_CHUNK):
        chunk = flat[start:start + RMS_CHUNK].double()
        finite = chunk[torch.isfinite(chunk)]
        total += float(finite.square().sum())
        count += finite.numel()
    return math.sqrt(total / count) if count else 1.0
