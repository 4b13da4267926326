"""Where the timed calls' inputs sit in device memory (split out of ``validate.timer``, which
re-exports every name here): ``placed_copies`` makes copies of the inputs at several places,
``PlacementTurns`` says which copy each timed call reads, ``placement_count`` how many copies
inputs of a size get.

Imports only torch, the standard library and ``validate.measure``; the grader's worker calls a
private copy of this module beside the timer's (``grade.worker.guards.private``).
"""
from __future__ import annotations

import torch

from .measure import _clone, _empty, _storage_nbytes, _Tensor, _type, _untyped_storage, is_cuda

# bound at import, before any submission runs (``warm_plan``, ``warm_cache``): every op here is
# one whose dispatcher kernels the grading worker checks are still its own
# (``grade.worker.guards.dispatch``)
_copy, _narrow, _set = torch.Tensor.copy_, torch.Tensor.narrow, torch.Tensor.set_
_uint8, _int16 = torch.uint8, torch.int16
_device_properties, _torch_device = torch.cuda.get_device_properties, torch.device

# Where a kernel's tensors sit in device memory moves its time by up to 4% on an H100 (an fp16
# GEMM read 0.0600-0.0627 ms across 8 placements in one process, each repeating within 0.24%;
# ``scripts/placement_probe.py``), and a fresh process draws one placement: the same kernel
# graded twice differed by that much. Timed calls read ``PLACEMENTS`` copies of the inputs, each
# behind a padding allocation of its own size, so a sample (and a captured graph) averages over
# them. Where the copies fit in half the L2 cache with room for one more (the outputs), every
# call reads the next copy: on an H100 (3 grades each) cycling four copies took row_sum_64x96's
# speedup spread from 3.88% to 0.66%. Copies that do not fit together evict each other: a 1M-
# element scale-add (8 MB of inputs, 50 MB L2) read 40% slower when its calls cycled four and
# spread 10%. A timing graph therefore reads them in blocks (``PlacementTurns``): each copy's
# calls run one after another, the first of them finding the inputs where the copy before left
# the cache, the rest hot, so four copies cost four colder calls a sample, not every call.
# Inputs of more than ``PLACED_MAX_BYTES`` get no copies (the memory admitted for a grade holds
# one set of them, and such a call reads most of its inputs from DRAM wherever they sit).
PLACEMENTS = 4
PLACED_MAX_BYTES = 64 << 20
# "blocks": as above; "turns": copies only where they fit in half the L2, every call the next
PLACINGS = ("blocks", "turns")
PLACING = "blocks"
_PAD_STEP = 2 << 20  # the caching allocator's large-segment granularity


def _l2_bytes(device: str) -> int:
    try:
        return int(getattr(_device_properties(_torch_device(device)), "L2_cache_size", 0) or 0)
    except Exception:  # noqa: BLE001 — no such device: no copies
        return 0


def placement_count(size: int, l2_bytes: int, placing: str = PLACING,
                    copies: int = PLACEMENTS) -> int:
    """How many placements inputs of ``size`` bytes get (``placed_copies``): as many as fit,
    with room for one more, in half the L2 cache (``l2_bytes``), up to ``copies``; with
    "blocks" placing, ``copies`` also where they do not fit, for inputs of at most
    ``PLACED_MAX_BYTES``. 1: no copies."""
    if size <= 0 or l2_bytes <= 0:
        return 1
    fit = min(copies, l2_bytes // 2 // size - 1)
    if fit >= 2:
        return fit
    return copies if placing == "blocks" and size <= PLACED_MAX_BYTES else 1


def placed_copies(values: list, device: str, copies: int = PLACEMENTS,
                  placing: str = PLACING) -> list[list]:
    """``values`` and the device copies ``placement_count`` asks for, each allocated behind a
    padding tensor of a different size (kept for the process's life). Just ``[values]`` off
    CUDA or where it asks for one."""
    tensors = [v for v in values if _type(v) is _Tensor]
    size = sum(v.numel() * v.element_size() for v in tensors)
    if not is_cuda(device) or not tensors:
        return [values]
    copies = placement_count(size, _l2_bytes(device), placing, copies)
    if copies < 2:
        return [values]
    sets, pads = [values], []
    for index in range(1, copies):
        pads.append(_empty(index * _PAD_STEP + size, dtype=torch.uint8, device=device))
        sets.append([_clone(v) if _type(v) is _Tensor else v for v in values])
    _PADS.extend(pads)  # alive for the process's life: what is freed may be handed out again
    return sets


# ``warm_plan``'s reads: each chunk converted into a scratch tensor of twice its bytes (a
# conversion is an elementwise kernel's read through the L2 cache, where a same-type copy may be
# the copy engine's), so the scratch holds 2 MiB of the cache however much is read
WARM_CHUNK = 1 << 20


def warm_plan(values: list, device: str, budget: int | None = None) -> tuple[list, int]:
    """The reads ``warm_cache`` makes of ``values`` (the tensors a call is about to read, which
    stay where they are: a placement's buffers), and the bytes they cover: every byte of each
    tensor's storage, in order, up to ``budget`` bytes in all (default: half the L2 cache, as
    ``placement_count`` leaves the other half to the call's outputs); none off CUDA unless
    ``budget`` says. Made before the timing window, by functions bound at import: each read a
    pair (scratch chunk, source chunk) of views kept with the plan, so that replaying it makes
    no lookup a submission could hook and drops no object."""
    left = (_l2_bytes(device) // 2 if is_cuda(device) else 0) if budget is None else int(budget)
    tensors = [value for value in values if _type(value) is _Tensor]
    if left <= 0 or not tensors:
        return [], 0
    scratch = _empty(WARM_CHUNK, dtype=_int16, device=device)
    pairs, done = [], 0
    for value in tensors:
        storage = _untyped_storage(value)
        size = min(int(_storage_nbytes(storage)), left)
        if size <= 0:
            continue
        data = _set(_empty(0, dtype=_uint8, device=device), storage)
        for start in range(0, size, WARM_CHUNK):
            length = min(WARM_CHUNK, size - start)
            pairs.append((_narrow(scratch, 0, 0, length), _narrow(data, 0, start, length)))
        left, done = left - size, done + size
    return pairs, done


def warm_cache(pairs: list) -> bool:
    """Read a ``warm_plan``'s chunks on the GPU, so that a call that follows finds them in the
    L2 cache as a timed call of a block finds its copy (its block's calls before it read it).
    Inputs just copied in from the host are not found there: a 1M-element scale-add's honest
    call read 5.2-5.5 µs on them and 2.79 µs as scored, where the one-call check holds a scored
    call to 0.75 of it (H100). False where a read failed: the call then finds the cache as it
    is (slower, never faster, than a warm one)."""
    try:
        for into, source in pairs:
            _copy(into, source)
    except Exception:  # noqa: BLE001 — unread is the stricter side
        return False
    return True


class PlacementTurns:
    """Which of ``copies`` placements of the inputs (``placed_copies``) each timed call reads.
    While a timing graph of n calls is captured (``capture``: the ``Timer``'s ``place``), call
    j reads copy ``j * copies // n`` with "blocks" placing (each copy's calls together);
    otherwise, and with "turns", each call the next copy."""

    def __init__(self, copies: int, placing: str = PLACING):
        self.copies, self.placing = max(1, int(copies)), placing
        self.calls = 0
        self._slot: tuple[int, int] | None = None

    def capture(self, index: int | None, calls: int) -> None:
        """Call ``index`` of a graph of ``calls`` is captured next; None: the capture ended."""
        self._slot = None if index is None else (int(index), max(1, int(calls)))

    def next(self) -> int:
        """The copy the next timed call reads."""
        self.calls += 1
        if self.copies < 2:
            return 0
        if self._slot is not None and self.placing == "blocks":
            index, calls = self._slot
            return min(self.copies - 1, index * self.copies // calls)
        return self.calls % self.copies


_PADS: list = []
