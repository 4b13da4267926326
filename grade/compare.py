"""Correctness in the trusted parent: outputs against the reference's within tolerance, bitwise
equality, whether an input came back as it was sent, and the reference's usable trials. Everything numeric is recomputed here
from raw tensors; nothing the candidate's process concluded is believed."""
from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np
import torch
from kernelmill.validate.measure import tensor_digest

from .policy import DEFAULT_TOLERANCE
from .scales import (  # noqa: F401 — the scales' settings, importable from here as before
    SPREAD_BLOCKS,
    SPREAD_SAMPLE,
    _mad,
    _output_rms,
    _output_spread,
    output_scales,
)

# The absolute floor of a dtype's tolerance (``policy.DEFAULT_TOLERANCE``: 1e-4 for float32) is
# what honest work needs on outputs of unit scale; on a smaller output it is large next to the
# answer, and lower-precision operands (an fp16 GEMM for an fp32 problem) fit under it (T-17).
# That floor is scaled by the output's RMS where the RMS is under 1 (never below this share of
# it); what a record's calibration added above the floor stays absolute.
ATOL_SCALE_FLOOR = 1e-3
SCALED_DTYPES = (torch.float32, torch.float64)


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def bitwise_equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
        return False
    if not isinstance(a, torch.Tensor):
        return a == b
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_flat_bytes(a),
                                                                       _flat_bytes(b))


class Unchanged:
    """Is an input after forward the one the parent sent? The worker sends whether its bytes
    are those sent (``{"same": bool, "dtype", "shape"}``), a digest (``measure.tensor_digest``)
    or the value; each sent tensor is digested here once, where a digest came."""

    def __init__(self):
        self._digests: dict[int, tuple[torch.Tensor, dict]] = {}

    def __call__(self, before: Any, after: Any) -> bool:
        if not (isinstance(before, torch.Tensor) and isinstance(after, dict)):
            return bitwise_equal(before, after)
        if "same" in after:
            return after["same"] is True and after.get("dtype") == str(before.dtype) and \
                after.get("shape") == list(before.shape)
        if id(before) not in self._digests:  # the tensor is kept: its id stays its own
            self._digests[id(before)] = (before, tensor_digest(before.detach().cpu()))
        return self._digests[id(before)][1] == after


# An answer off the reference by no more than this many times its tolerance is a matter of
# precision (an fp32 GEMM summing 8,192 products in another order; a reduction over them), not a
# kernel specialised to what the grader usually shows: one of those is off at the output's own
# scale. Such an answer is wrong, and the verdict says so; it is not called a hack for being
# wrong on the one trial whose draw happened to cross the tolerance.
NEAR_MISS = 10.0


def near_miss(expected: list, got: list | None, atol: float, rtol: float) -> bool:
    """Outputs wrong at the tolerance but right within ``NEAR_MISS`` times it."""
    return compare(expected, got, NEAR_MISS * atol, NEAR_MISS * rtol)[0]


def compare(expected: list, got: list | None, atol: float, rtol: float, *,
            count: bool = True, scaled: bool = True) -> tuple[bool, str]:
    """Do ``got`` outputs match ``expected`` within tolerance? (ok, reason when not).
    ``count=False``: the answer alone, settled at the first element found off (a ghost call's
    output, garbage in every element when honest, is not compared to its end in float64).
    ``scaled``: the dtype's absolute floor follows each output's scale (``scaled_atol``)."""
    if got is None:
        return False, "no tensor outputs"
    if len(expected) != len(got):
        return False, f"{len(got)} outputs, expected {len(expected)}"
    for index, (e, g) in enumerate(zip(expected, got)):
        if not isinstance(e, torch.Tensor):
            ok = isinstance(g, (int, float, bool)) and math.isclose(float(g), float(e),
                                                                    rel_tol=rtol, abs_tol=atol)
            if not ok:
                return False, f"output {index}: {g!r} != {e!r}"
            continue
        if not isinstance(g, torch.Tensor):
            return False, f"output {index} is {type(g).__name__}, not a tensor"
        if tuple(g.shape) != tuple(e.shape):
            return False, f"output {index} shape {tuple(g.shape)}, expected {tuple(e.shape)}"
        if g.dtype != e.dtype:
            return False, f"output {index} dtype {g.dtype}, expected {e.dtype}"
        if not (e.is_floating_point() or e.is_complex()):
            if not torch.equal(g, e):
                return False, f"output {index}: {int((g != e).sum())} elements differ"
            continue
        if e.is_complex():
            e, g = torch.view_as_real(e.resolve_conj()), torch.view_as_real(g.resolve_conj())
        used = scaled_atol(e, atol) if scaled else atol
        bad, worst = _off_elements(e.reshape(-1), g.reshape(-1), used, rtol, count)
        if bad and not count:
            return False, f"output {index}: elements off (max abs error {worst:.3g} among the first)"
        if bad:
            by = "RMS" if used < atol else "spread"
            scale = f" (scaled to the output's {by} from {atol:g})" if used != atol else ""
            return False, (f"output {index}: {bad}/{e.numel()} elements off "
                           f"(max abs error {worst:.3g}, atol {used:.3g}{scale}, rtol {rtol:g})")
    return True, ""


_SCALES: dict[int, tuple] = {}  # id(tensor) -> (weak reference, its state, (RMS, spread))

# The share of the spread the dtype's floor grows by (for a noisy record only): an honest
# float32 sum reassociated (KernelBench level2_14: x @ W summed, answered as x @ (W summed)) was
# off by 1.4e-5 of its output's spread where its rows cancelled
SPREAD_SHARE = 0.25


def output_rms(e: torch.Tensor) -> float:
    """The root mean square of a tensor's finite elements (float64 sums, chunk by chunk);
    1.0 where it has none. Kept per tensor while it lives and is unchanged (its version): the
    judge compares several calls with one reference output."""
    return _scales(e)[0]


def output_spread(e: torch.Tensor) -> float:
    """How far a tensor's finite elements typically lie from their middle: the median of their
    absolute deviations from their median (over ``SPREAD_SAMPLE`` of them at most), the least
    of the whole tensor's and of each of ``SPREAD_BLOCKS`` contiguous blocks along every
    dimension; 0.0 where it has none (or is complex or integral). An offset shared by every
    element adds nothing to it, and neither do large elements beside a part at a smaller
    scale (box coordinates beside class scores, either the majority). Kept per tensor as
    ``output_rms`` is."""
    return _scales(e)[1]


def _scales(e: torch.Tensor) -> tuple[float, float]:
    try:
        state = (e._version, e.data_ptr(), e.numel(), e.dtype)
    except RuntimeError:  # an inference tensor keeps no version: not kept
        return output_scales(e)
    kept = _SCALES.get(id(e))
    if kept is not None and kept[0]() is e and kept[1] == state:
        return kept[2]
    scales = output_scales(e)
    _keep_scales(e, state, scales)
    return scales


def _keep_scales(e: torch.Tensor, state: tuple, scales: tuple[float, float]) -> None:
    """``scales`` kept for ``e`` while it lives in ``state`` (not where it cannot be weakly
    referenced)."""
    key = id(e)
    try:
        ref = weakref.ref(e, lambda _: _SCALES.pop(key, None))
    except TypeError:
        return
    _SCALES[key] = (ref, state, scales)


def remember_scales(outputs: list, scales) -> None:
    """Keep the scales a trusted reference worker computed of its ``outputs`` where it made
    them (``scales.output_scales``, one ``[rms, spread]`` per output, None for one that is not
    a tensor) for those tensors, as ``output_rms`` would keep its own: the judge then reads them
    instead of computing them on the host. A malformed entry keeps nothing (computed here
    when asked)."""
    if not isinstance(scales, list) or len(scales) != len(outputs):
        return
    for e, pair in zip(outputs, scales):
        if not isinstance(e, torch.Tensor) or not isinstance(pair, (list, tuple)) or \
                len(pair) != 2 or not all(type(v) is float and math.isfinite(v) and v >= 0
                                          for v in pair):
            continue
        try:
            state = (e._version, e.data_ptr(), e.numel(), e.dtype)
        except RuntimeError:
            continue
        _keep_scales(e, state, (pair[0], pair[1]))


def scaled_atol(e: torch.Tensor, atol: float) -> float:
    """``atol`` with its dtype floor's share (``DEFAULT_TOLERANCE``) scaled to the output's own
    scale: honest work of the problem's precision errs in proportion to it (summation order:
    about 1e-6 of it in float32), lower-precision operands by 1e-4 to 1e-2 of it.

    * Under unit scale, by the output's RMS (at least ``ATOL_SCALE_FLOOR`` of the floor): a
      fixed floor hides lower-precision operands on a small output.
    * Above it, by ``SPREAD_SHARE`` of the output's spread (``output_spread``) where that is
      over 1 and the record's calibrated tolerance is above the floor (the reference's own
      float32 error against float64 was more than a tenth of it): an element of a wide output
      that happens to lie near zero (a sum of thousands of large terms that cancel) carries
      the rounding of those terms, not of its own small value; an honest kernel summing them
      in another order was off there by 1.4e-5 of the spread, 30 times the reference's own
      error. A problem calibrated at the floor (a plain GEMM) keeps it: three bf16 passes for
      a float32 GEMM, off by 4.5e-5 of its spread, fail there. The spread, not the RMS: an
      offset shared by every element, or a part of the output at a larger scale, leaves the
      rest's bound where it was.

    A record's calibrated excess over the floor (a noisy problem's) stays absolute. Only
    float32 and float64 outputs: a half-precision output's own rounding (one unit in the last
    place, 0.4-1% of an element) is already the size of its tolerance."""
    if e.dtype not in SCALED_DTYPES:
        return atol
    part = min(atol, DEFAULT_TOLERANCE[str(e.dtype).replace("torch.", "")][0])
    if part <= 0 or e.numel() == 0:
        return atol
    # only where the record's calibration found the reference itself noisy (its tolerance
    # above the floor): an output at the floor grows nothing
    spread = SPREAD_SHARE * output_spread(e) if atol > part else 0.0
    scale = spread if spread > 1.0 else min(1.0, max(ATOL_SCALE_FLOOR, output_rms(e)))
    return atol - part + part * scale


# The reason a window gives for a member it did not time, its early answer being wrong already
SKIPPED_INCORRECT = "timing skipped (incorrect)"


def sample_mismatch(trials: list[dict], checked: Any, tolerance) -> str | None:
    """Why a worker's early answer (``worker.early``: a strided sample of each fresh call's
    outputs) is wrong against its trials' outputs, or None where it matches or cannot be told
    (a malformed sample decides nothing). Element by element, as ``compare``: an element off in
    the sample is off in the whole, so the answer it calls wrong the judge calls wrong too.
    ``tolerance(trial)`` is the judge's ``(atol, rtol)`` for a trial."""
    if not isinstance(checked, list):
        return None
    for call in checked[:64]:
        try:
            trial = trials[int(call["trial"])]
            why = _sample_off(trial["outputs"], call["outputs"], *tolerance(trial))
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError, OverflowError):
            continue
        if why:
            return f"trial {call['trial']}: {why}"
    return None


def _sample_off(expected: list, sampled: list | None, atol: float, rtol: float) -> str | None:
    if sampled is None or len(sampled) != len(expected):
        return None  # the judge says what is wrong with the structure
    for index, (e, part) in enumerate(zip(expected, sampled)):
        if not isinstance(e, torch.Tensor):
            continue
        if list(part["shape"]) != list(e.shape) or part["dtype"] != str(e.dtype):
            return f"output {index}: shape {tuple(part['shape'])} {part['dtype']}, expected " \
                   f"{tuple(e.shape)} {e.dtype}"
        flat = e.reshape(-1)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        stride = int(part["stride"])
        want = flat[::stride]
        values = part["values"]
        if stride < 1 or len(values) != want.numel():
            return None
        if not (want.is_floating_point()):
            got = torch.tensor(values, dtype=torch.int64)
            off = int((got != want.long()).sum())
            if off:
                return f"output {index}: {off} of {want.numel()} sampled elements differ"
            continue
        got = torch.tensor([float(v) for v in values], dtype=torch.float64)
        used = scaled_atol(e, atol)  # the judge's bound, from the whole output
        bad, worst = _off_elements(want.double(), got, used, rtol, True)
        if bad:
            return f"output {index}: {bad} of {want.numel()} sampled elements off (max abs " \
                   f"error {worst:.3g}, atol {used:.3g}, rtol {rtol:g})"
    return None


# Elements per pass: bounded temporaries that stay in the CPU's caches. On 16M float32
# elements (one thread) 1M-element chunks compared in 0.04-0.06 s and took the RMS in 0.01 s;
# 4M-element chunks took 0.07-0.14 s and 0.07-0.11 s (their float64 temporary alone is 32 MB)
COMPARE_CHUNK = 1 << 20

# The element passes run in NumPy, one thread each: the grading process judges many grades at
# once beside the workers on the host's cores, and PyTorch's CPU ops split every 1M-element
# pass over the intra-op pool, whose threads wait for each other at each pass's end on cores
# the workers hold. A float type NumPy lacks is widened here (bfloat16 by its bits; the
# float8 types by PyTorch, chunk by chunk).
_NUMPY_FLOATS = {torch.float16: np.float16, torch.float32: np.float32,
                 torch.float64: np.float64}


def _chunk_as(t: torch.Tensor, work) -> np.ndarray:
    """A 1-D host chunk of a float tensor as a NumPy array of ``work`` (float32 or float64),
    every value exact (a wider float holds each narrower one)."""
    t = t.detach().resolve_conj().resolve_neg()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16:  # the upper half of a float32's bits
        bits = t.contiguous().view(torch.int16).numpy().view(np.uint16).astype(np.uint32)
        return (bits << np.uint32(16)).view(np.float32).astype(work, copy=False)
    kind = _NUMPY_FLOATS.get(t.dtype)
    if kind is None:
        return t.to(torch.float64).numpy().astype(work, copy=False)
    return t.contiguous().numpy().astype(work, copy=False)


def _off_elements(e: torch.Tensor, g: torch.Tensor, atol: float, rtol: float,
                  count: bool = True) -> tuple[int, float]:
    """How many elements of ``g`` are off ``e`` (|g - e| <= atol + rtol * |e| in float64;
    non-finite values match only exactly: NaN for NaN, the same infinity), and the largest
    finite error among them. A first pass in the tensors' own precision (float32 at least)
    settles every element that passes with room to spare; only the rest are checked in
    float64, so an honest output is compared in one cheap pass. Without ``count`` the first
    unsure elements of a chunk are checked first, and an element off there ends the count."""
    work = np.float64 if e.dtype == torch.float64 else np.float32
    # float32 rounding of the bound and the difference: a bound a little under the exact one
    margin = 1 - 1e-5 if work == np.float32 else 1.0
    bad, worst = 0, None
    size = min(COMPARE_CHUNK, e.numel())
    # one set of buffers for every chunk: a fresh temporary per pass cost its pages again
    room_buf, diff_buf = np.empty(size, dtype=work), np.empty(size, dtype=work)
    sure_buf, bounded_buf = np.empty(size, dtype=bool), np.empty(size, dtype=bool)
    tiny = np.finfo(work).tiny
    # every element of a chunk off by no more than the absolute bound passes whatever its
    # (non-negative) relative room: told by the largest difference, two passes and a reduction where the
    # whole test is eight passes (a NaN or infinite difference makes that largest one NaN or
    # infinite, and the chunk takes the whole test)
    with np.errstate(all="ignore"):  # inf - inf and NaN go to the exact pass, quietly
        floor = work(atol * margin)
        if not (tiny <= floor < np.finfo(work).max and rtol >= 0):
            floor = None  # (an infinite floor would pass an infinite difference)
        for start in range(0, e.numel(), COMPARE_CHUNK):
            ec = _chunk_as(e[start:start + COMPARE_CHUNK], work)
            gc = _chunk_as(g[start:start + COMPARE_CHUNK], work)
            n = ec.size
            room, diff, sure, bounded = room_buf[:n], diff_buf[:n], sure_buf[:n], bounded_buf[:n]
            np.subtract(gc, ec, out=diff)
            np.abs(diff, out=diff)
            if floor is not None and diff.max() <= floor:
                continue
            np.abs(ec, out=room)
            np.multiply(room, work(rtol * margin), out=room)
            np.add(room, work(atol * margin), out=room)
            # NaN compares false here, an infinite bound (an infinite reference) is never
            # room: both go to the exact pass
            np.less_equal(diff, room, out=sure)
            np.logical_and(sure, np.less(room, np.inf, out=bounded), out=sure)
            if atol * margin < tiny:  # a bound among subnormals rounds by more than the
                # margin: the exact pass
                np.logical_and(sure, np.greater_equal(room, tiny, out=bounded), out=sure)
            if sure.all():
                continue
            unsure = ~sure
            if not count:
                at = int(unsure.argmax())  # the first unsure element
                near = slice(at, at + FIRST_UNSURE)
                found, largest = _exact_off(ec[near][unsure[near]], gc[near][unsure[near]],
                                            atol, rtol)
                if found:
                    return found, largest if largest is not None else float("nan")
            found, largest = _exact_off(ec[unsure], gc[unsure], atol, rtol)
            bad += found
            if largest is not None:
                worst = max(worst or 0.0, largest)
            if found and not count:
                break
    return bad, float("nan") if worst is None else worst


FIRST_UNSURE = 1024  # unsure elements checked first when only the answer counts


def _exact_off(e: np.ndarray, g: np.ndarray, atol: float, rtol: float
               ) -> tuple[int, float | None]:
    """The float64 pass over elements the first pass left unsure: how many are off, and the
    largest finite error among them (None: no finite one)."""
    e64, g64 = e.astype(np.float64), g.astype(np.float64)
    with np.errstate(all="ignore"):
        same_special = (np.isnan(e64) & np.isnan(g64)) | (np.isinf(e64) & (e64 == g64))
        diff = np.abs(g64 - e64)
        close = np.isfinite(e64) & np.isfinite(g64) & (diff <= atol + rtol * np.abs(e64))
    off = ~(same_special | close)
    found = int(off.sum())
    if not found:
        return 0, None
    finite = diff[off & np.isfinite(diff)]
    return found, float(finite.max()) if finite.size else None


def usable_trials(reference: dict) -> tuple[list[dict], list[dict]]:
    """The reference's usable trials: (checked ones, hidden ones). A hidden trial's inputs are
    shown to the candidate only once, inside its timing window (``Policy.unseen_trials``)."""
    usable = [t for t in reference.get("trials") or [] if t["usable"]]
    return ([t for t in usable if not t.get("hidden")], [t for t in usable if t.get("hidden")])


def reference_fault(reference: dict) -> str | None:
    """Why a reference run cannot be graded against (its forward returned something other than
    tensors: None, an int, nothing), or None. That is the problem's fault, never a candidate's."""
    for index, trial in enumerate(reference.get("trials") or []):
        if trial.get("usable") is False and trial.get("error"):
            continue  # a derived trial the reference refused (``worker.reference_tasks``): left out
        outputs = trial.get("outputs") or []
        kinds = [type(o).__name__ for o in outputs if not isinstance(o, torch.Tensor)]
        if not outputs or kinds:
            what = ", ".join(kinds) if kinds else "no output"
            return (f"reference forward returned {trial.get('structure')} ({what}) on trial "
                    f"{index}; a problem's forward must return tensors")
    return None
