"""The worker-side measurement module, shared by the validator (``probe``) and the grader
(``grade.worker``): build a namespace from source text, flatten outputs, synchronize, flush L2,
take the statistics of timing samples (``median_ci_pct``, ``summarize``) and read the device
memory behind a forward's outputs (``outputs_overlap``, ``output_bytes``, ``calls_disagree``).
Timing a callable (``Timer``, ``measure``) is ``validate.timer``'s, which calls the originals
bound here.

Every function this module relies on is bound when it is imported, before any candidate code
runs, so patching ``time``, ``statistics`` or ``torch.cuda`` afterwards cannot change a
measurement (the grader's worker also reports such patches).

Imports only torch, NumPy and the standard library.
"""
from __future__ import annotations

import contextlib
import hashlib
import linecache
import math
import statistics
import sys
import time
import types
from typing import Any

import numpy
import torch

from .gpu_lock import GpuLock, _Held  # noqa: F401 — re-exported: moved to gpu_lock

# ---------------------------------------------------------------- originals, bound at import

_perf_counter = time.perf_counter
_thread_time = time.thread_time
_process_time = time.process_time
# the CUDA caching allocator's counters, read through torch's C binding (torch's Python wrapper
# looks its helpers up at each call, where a submission could rebind them)
_cuda_memory_stats = getattr(torch._C, "_cuda_memoryStats", None)
_cuda_get_device = getattr(torch._C, "_cuda_getDevice", None)
_median = statistics.median
_sorted = sorted
_isinstance = isinstance
_type = type
_Tensor = torch.Tensor
_empty = torch.empty
_clone = torch.Tensor.clone
_zero = torch.Tensor.zero_
_no_grad = torch.no_grad
_cuda_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed = torch.cuda.Event.elapsed_time
_event_wait = torch.cuda.Event.synchronize
_CUDAGraph = torch.cuda.CUDAGraph
_capture_begin = torch.cuda.CUDAGraph.capture_begin
_capture_end = torch.cuda.CUDAGraph.capture_end
_graph_replay = torch.cuda.CUDAGraph.replay
# the builtin itself (``torch.cuda._sleep`` looks it up at each call); None on a CPU-only build
_cuda_sleep = getattr(torch._C, "_cuda_sleep", None)
_Stream = torch.cuda.Stream
_stream_ctx = torch.cuda.stream
_current_stream = torch.cuda.current_stream
_profiler_enabled = torch.autograd._profiler_enabled
_untyped_storage = torch.Tensor.untyped_storage
_storage_ptr = torch.UntypedStorage.data_ptr
_storage_nbytes = torch.UntypedStorage.nbytes
_tensor_to = torch.Tensor.to
_isnan = numpy.isnan
_nullcontext = contextlib.nullcontext

# (owner, attribute) pairs this module and the timer (``validate.timer``, through the bindings
# above) call while timing: a worker that runs untrusted code reports any of them replaced
# (``grade.worker`` adds them to its guarded list).
GUARDED = (
    (torch.cuda, "synchronize"), (torch.cuda, "Event"), (torch.cuda, "stream"),
    (torch.cuda, "current_stream"), (torch.cuda.Event, "record"),
    (torch.cuda.Event, "elapsed_time"), (torch.cuda.Event, "synchronize"),
    (torch.cuda.CUDAGraph, "capture_begin"), (torch.cuda.CUDAGraph, "capture_end"),
    (torch.cuda.CUDAGraph, "replay"), (time, "perf_counter"), (time, "thread_time"),
    (time, "process_time"), (statistics, "median"),
    *(((torch._C, "_cuda_sleep"),) if _cuda_sleep is not None else ()),
    *(((torch._C, "_cuda_memoryStats"), (torch._C, "_cuda_getDevice"))
      if _cuda_memory_stats is not None and _cuda_get_device is not None else ()),
)

Z95 = 1.959963984540054


# ---------------------------------------------------------------- building and outputs

def load_namespace(source: str, tag: str, *, require: tuple[str, ...] = ()) -> dict:
    """Execute ``source`` (held in memory) as a fresh module ``kernelmill_<tag>``.

    Its lines are registered with ``linecache`` so tracebacks and Triton's ``inspect`` see them
    under ``<kernelmill-<tag>>``. Raises ``NameError`` when a name in ``require`` is missing."""
    filename = f"<kernelmill-{tag}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(f"kernelmill_{tag}")
    module.__file__ = filename
    sys.modules[module.__name__] = module
    exec(compile(source, filename, "exec", dont_inherit=True), module.__dict__)  # noqa: S102 — isolated worker
    for name in require:
        if name not in module.__dict__:
            raise NameError(f"source does not define {name}")
    return module.__dict__


# Bound before any submission runs: a digest is computed with the functions as they were.
# SHA-256 (SHA-NI): 1.7 GB/s where BLAKE2b did 0.86 GB/s on a 2-core x86 machine; digests
# were half a large candidate's in-process time on an H100's host (16 of 64 MB: 2.6 s)
_sha256 = hashlib.sha256
_contiguous = torch.Tensor.contiguous
_reshape = torch.Tensor.reshape
_view = torch.Tensor.view
_numpy = torch.Tensor.numpy
_np_empty, _np_equal = numpy.empty, numpy.equal


def tensor_digest(tensor: torch.Tensor) -> dict:
    """What identifies a host tensor's contents bit for bit (dtype, shape and a SHA-256 of its
    bytes): a worker sends this instead of a tensor the parent only checks for being unchanged
    (an input after forward), and the parent computes the same of what it sent."""
    data = _numpy(_view(_reshape(_contiguous(tensor), -1), torch.uint8))
    return {"sha256": _sha256(data).hexdigest(), "dtype": str(tensor.dtype),
            "shape": list(tensor.shape)}


SAME_BITS_HEAD = 512  # words ``same_bits`` compares first
_WORDS = ((8, torch.int64), (4, torch.int32), (2, torch.int16), (1, torch.uint8))


def _as_words(tensor: torch.Tensor, size: int) -> torch.Tensor | None:
    """The tensor's bytes as integers of ``size`` bytes (None where its offset forbids it)."""
    data = _view(_reshape(_contiguous(tensor), -1), torch.uint8)
    try:
        return _view(data, dict(_WORDS)[size])
    except RuntimeError:  # an offset the wider type cannot view
        return None


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two host tensors hold the same dtype, shape and bytes (NaN payloads and signed
    zeros included): compared in NumPy as the widest integers their size allows, 6 ms for
    64 MB where a SHA-256 of the bytes took 37 (2-core host), and no PyTorch op (the witness
    counts those the harness runs)."""
    if _type(a) is not _Tensor or _type(b) is not _Tensor or a.dtype != b.dtype or \
            a.shape != b.shape:
        return False
    nbytes = a.numel() * a.element_size()
    for size, _dtype in _WORDS:  # one word size for both: never arrays of two lengths
        if nbytes % size == 0:
            words = (_as_words(a, size), _as_words(b, size))
            if words[0] is not None and words[1] is not None:
                return _same_words(_numpy(words[0]), _numpy(words[1]))
    return False  # unreachable: single bytes always view


def same_bytes_in_pieces(pieces, b: torch.Tensor) -> bool:
    """Whether 1-D byte tensors on the host (``pieces``, in order, each read before the next
    is asked for) hold the bytes of the host tensor ``b``, all of them and no more."""
    right = _numpy(_view(_reshape(_contiguous(b), -1), torch.uint8))
    at = 0
    for piece in pieces:
        left = _numpy(piece)
        n = left.size
        if at + n > right.size or not _same_words(_words(left), _words(right[at:at + n])):
            return False
        at += n
    return at == right.size


def _words(data):
    """A 1-D NumPy byte array as the widest integers its length allows."""
    for size, dtype in ((8, numpy.uint64), (4, numpy.uint32), (2, numpy.uint16)):
        if data.size % size == 0:
            return data.view(dtype)
    return data


SAME_BITS_CHUNK = 1 << 20  # words compared per pass (one reused flag per word)


def _same_words(left, right) -> bool:
    """Two equal-length NumPy integer arrays hold the same words: a look at the first words
    (tensors that differ mostly differ at their start: an output shipped for another trial),
    then chunk by chunk into one buffer of flags, to the first chunk that differs. One pass
    over all the words in a whole-array comparison allocated a flag per word every time, a
    fresh mapping of the host's memory for a large tensor (its page faults cost 3x the
    comparison: 120 against 36 ms for 256 MB)."""
    if left.size > SAME_BITS_HEAD and \
            not (left[:SAME_BITS_HEAD] == right[:SAME_BITS_HEAD]).all():
        return False
    flags = _np_empty(min(left.size, SAME_BITS_CHUNK), dtype=bool)
    for start in range(0, left.size, SAME_BITS_CHUNK):
        a, b = left[start:start + SAME_BITS_CHUNK], right[start:start + SAME_BITS_CHUNK]
        if not _np_equal(a, b, out=flags[:a.size]).all():
            return False
    return True


def flatten_outputs(out) -> tuple[str, list]:
    """A forward's return value, one level deep: ``("tensor"|"tuple:N"|"list:N"|type, items)``.

    Items are returned as they are (never touched: they may be candidate objects)."""
    if _isinstance(out, _Tensor):
        return "tensor", [out]
    if _type(out) in (tuple, list):
        return f"{_type(out).__name__}:{len(out)}", list(out)
    return _type(out).__name__, [out]


def output_fault(out) -> str | None:
    """Why a problem's forward result cannot be graded, or None: the grader compares a tensor or
    a tuple/list of tensors, nothing else (an int, None, a dict, nested containers)."""
    structure, items = flatten_outputs(out)
    kinds = [_type(item).__name__ for item in items if not _isinstance(item, _Tensor)]
    if items and not kinds:
        return None
    what = ", ".join(kinds) if kinds else "no output"
    return f"forward returned {structure} ({what}); a problem's forward must return tensors"


def output_tensors(out: Any) -> list:
    """Every tensor of a forward's result, in order, detached (tuples, lists and dicts flattened,
    Python scalars as 0-d tensors)."""
    if out is None:
        return []
    if _isinstance(out, _Tensor):
        return [out.detach()]
    if _isinstance(out, (list, tuple)):
        return [t for item in out for t in output_tensors(item)]
    if _isinstance(out, dict):
        return [t for key in _sorted(out, key=str) for t in output_tensors(out[key])]
    if _isinstance(out, (bool, int, float)):
        return [torch.tensor(out)]
    raise TypeError(f"forward returned {_type(out).__name__}; expected tensors")


# ---------------------------------------------------------------- device helpers

def is_cuda(device: str) -> bool:
    return str(device).startswith("cuda")


def synchronize(device: str) -> None:
    """Wait for all work on the device (every stream); nothing on CPU."""
    if is_cuda(device):
        _cuda_synchronize()


class L2Flush:
    """A buffer twice the size of the device's L2 cache; ``flush()`` overwrites it."""

    def __init__(self, device: str, nbytes: int | None = None):
        if nbytes is None:
            l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()),
                         "L2_cache_size", 0) or (128 << 20)
            nbytes = 2 * int(l2)
        self.buffer = _empty(max(1, nbytes // 4), dtype=torch.int32, device=device)

    def flush(self) -> None:
        _zero(self.buffer)


# ---------------------------------------------------------------- statistics

def median_ci_pct(samples: list[float]) -> float | None:
    """95% confidence half-width of the median, in percent of the median (order statistics,
    no distribution assumed); None with fewer than 6 samples or a zero median."""
    n = len(samples)
    if n < 6:
        return None
    ordered = _sorted(samples)
    half = Z95 * math.sqrt(n) / 2
    low = max(0, int(math.floor(n / 2 - half)) - 1)
    high = min(n - 1, int(math.ceil(n / 2 + half)))
    median = _median(ordered)
    if median <= 0:
        return None
    return 100.0 * (ordered[high] - ordered[low]) / 2 / median


# two-sided 95% quantiles of Student's t by degrees of freedom (1-30; past 30, ``t95``'s series)
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(df: int) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom: the table to
    30, then the Cornish-Fisher series in 1/df about Z95 (within 2e-4 of the exact quantile
    from df 30 on; Z95 alone dropped every CI 4% at once between 30 and 31)."""
    if df <= len(_T95):
        return _T95[max(df, 1) - 1]
    z = Z95
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


# A participant with at least this many turns reads its own scatter; one with fewer (2-4 turns
# leave a scatter too uncertain to stand alone), the larger of its own and the window's pooled.
OWN_SCATTER_TURNS = 5
# The standard error of a median of k normal readings over sigma / sqrt(k): k <= 2 is a mean
# (1); beyond, the large-k factor sqrt(pi / 2) (for k = 3-7 it is 1.09-1.21: a little wide).
MEDIAN_SE = math.sqrt(math.pi / 2)
# Shamos's scale: the median of the pairwise gaps |x_i - x_j| of normal readings is 0.9539 sigma.
SHAMOS = 1.0483
# Where over half the gaps are 0 (turn medians repeat exactly: rounded to 1 ns, read off a
# coarse event clock), the median gap says nothing: the mean gap, 2 sigma / sqrt(pi) of normal
# readings, reads the rest. Only readings all alike read a scatter of 0.
MEAN_GAP = math.sqrt(math.pi) / 2


def _scatter(values: list[float]) -> float:
    """Sigma of ``values`` (two or more) from their pairwise gaps (``SHAMOS``, ``MEAN_GAP``)."""
    gaps = _gaps(values)
    middle = _median(gaps)
    return SHAMOS * middle if middle > 0 else MEAN_GAP * sum(gaps) / len(gaps)


def turn_ci_pct(turns: dict[str, list[float]]) -> dict[str, float | None]:
    """Each participant's 95% half-width (percent of its time) counted in turns, from its turns'
    medians: a turn's samples share the GPU's state of that moment (an fp16 GEMM at the power
    cap moved 2-7% from one 10 ms turn to the next while a turn's own samples agreed within
    0.5%, H200), so a median rests on as many independent readings as it has turns, however
    many samples they hold. A participant's scatter is Shamos's (``_scatter``: 1.0483 x the
    median gap between two of its turns' log medians; no centre to fit, one disturbed turn
    among several moves it little). With ``OWN_SCATTER_TURNS`` turns or more it reads its own
    (df: its turns less one); with fewer, the larger of its own and the pooled one (the
    participants' own scatters, each weighted by its df; df: their turns less one each), so a
    quiet participant never narrows a swinging one. With k readable turns: t(df) x se(k) x
    scatter / sqrt(k), se the median's factor (``MEDIAN_SE``). None where a participant has no
    readable turn, or fewer than two and nobody's are pooled."""
    logs = {name: [math.log(m) for m in medians if m > 0 and math.isfinite(m)]
            for name, medians in turns.items()}
    own = {name: _scatter(values) for name, values in logs.items() if len(values) >= 2}
    pooled_df = sum(len(logs[name]) - 1 for name in own)
    pooled = math.sqrt(sum((len(logs[name]) - 1) * scale ** 2 for name, scale in own.items())
                       / pooled_df) if pooled_df else None
    out: dict[str, float | None] = {}
    for name, values in logs.items():
        k = len(values)
        if k >= OWN_SCATTER_TURNS:
            scale, df = own[name], k - 1
        elif pooled is not None and k:
            scale, df = max(own.get(name, 0.0), pooled), pooled_df
        else:
            out[name] = None
            continue
        se = 1.0 if k <= 2 else MEDIAN_SE
        out[name] = 100.0 * t95(df) * se * scale / math.sqrt(k)
    return out


def _gaps(values: list[float]) -> list[float]:
    return [abs(a - b) for i, a in enumerate(values) for b in values[i + 1:]]


def summarize(method: str, samples: list[float], **extra) -> dict:
    """The timing report: ``{method, reps, ci_pct, ms (the median), mean_ms, min_ms}`` plus
    ``extra``."""
    return {"method": method, "reps": len(samples),
            "ci_pct": median_ci_pct(samples), "ms": _median(samples) if samples else None,
            "mean_ms": sum(samples) / len(samples) if samples else None,
            "min_ms": min(samples) if samples else None, **extra}


# ---------------------------------------------------------------- output memory

def _spans(output) -> list[tuple[int, int]]:
    """The device memory (start, end) behind each tensor of a forward's result (one level deep,
    tensors of exactly ``torch.Tensor``: anything else the parent refuses when it is shown)."""
    _kind, items = flatten_outputs(output)
    spans = []
    for item in items:
        if _type(item) is _Tensor:
            storage = _untyped_storage(item)
            start = _storage_ptr(storage)
            spans.append((start, start + max(1, _storage_nbytes(storage))))
    return spans


def outputs_overlap(outputs: list) -> bool:
    """Whether any two calls' outputs share memory (the same tensor returned again, views of
    one storage, a buffer the forward keeps). With every output held, an honest call's output
    is fresh memory."""
    spans = _sorted((span, call) for call, output in enumerate(outputs) for span in _spans(output))
    end, owner = -1, -1
    for (start, stop), call in spans:
        if start < end and call != owner:
            return True
        if stop > end:
            end, owner = stop, call
    return False


def output_bytes(output) -> int:
    return sum(stop - start for start, stop in _spans(output))


def _host(tensor: torch.Tensor) -> torch.Tensor:
    return _tensor_to(tensor, "cpu", copy=True)


def _tensor_gap(a, b_host, atol: float, rtol: float) -> tuple[float, float, int]:
    """(largest |a - b|, largest |b|, elements off) of a device tensor and a host one, off
    where |a - b| > atol + rtol * |b| element by element (NaN matches only NaN); inf and every
    element off when the two differ in type, shape or dtype. Copies and NumPy only: no
    PyTorch op the witness would count as the harness computing."""
    if _type(a) is not _Tensor or _type(b_host) is not _Tensor or a.shape != b_host.shape or \
            a.dtype != b_host.dtype:
        return math.inf, 0.0, max(1, getattr(b_host, "numel", lambda: 1)())
    a_host = _host(a)
    if a.numel() == 0 or same_bits(a_host, b_host):
        return 0.0, 0.0, 0
    x = _numpy(_tensor_to(a_host, torch.float64))
    y = _numpy(_tensor_to(b_host, torch.float64))
    both_nan = _isnan(x) & _isnan(y)
    gap = abs(x - y)
    gap[both_nan] = 0.0
    off = ~(gap <= atol + rtol * abs(y)) & ~both_nan  # NaN gaps (one side NaN) are off
    largest = float(gap.max())
    return (math.inf if math.isnan(largest) else largest), float(abs(y).max()), int(off.sum())


def calls_disagree(outputs: list, tolerance: tuple[float, float] = (0.0, 0.0)) -> dict:
    """After a replay: the captured call whose output has the most elements off the last
    call's, judged element by element with ``tolerance`` (atol, rtol) — ``{"calls": N}`` alone
    when every one is bit for bit the same; else its index, the elements ``off``, and the
    largest gap and value for the message, with ``gap_all``, the largest gap of any float
    output of any call, and ``exact_off``, the calls' outputs of other kinds (integers,
    booleans, a shape or type changed) that differ at all. A nondeterministic kernel differs
    by rounding, a call that left part of its output to others by whole values."""
    report: dict[str, Any] = {"calls": len(outputs)}
    if len(outputs) < 2:
        return report
    atol, rtol = tolerance
    kind, items = flatten_outputs(outputs[-1])
    last = [_host(t) if _type(t) is _Tensor else t for t in items]
    worst = (-1, 0.0, 0.0, None)  # (off, gap, scale, call)
    gap_all, exact_off = 0.0, 0
    for call, output in enumerate(outputs[:-1]):
        other_kind, other = flatten_outputs(output)
        if other_kind != kind or len(other) != len(last):
            worst = (max(1, worst[0]), math.inf, 0.0, call)
            exact_off += 1
            break
        for a, b in zip(other, last):
            gap, scale, off = _tensor_gap(a, b, atol, rtol)
            if gap > 0 and (off, gap) > worst[:2]:
                worst = (off, gap, scale, call)
            floating = _type(a) is _Tensor and _type(b) is _Tensor and \
                a.is_floating_point() and a.dtype == b.dtype and a.shape == b.shape
            if floating:
                gap_all = max(gap_all, gap)
            elif gap > 0:
                exact_off += 1
    if worst[3] is not None:
        report.update(call=worst[3], off=worst[0], max_abs=worst[1], scale=worst[2],
                      gap_all=gap_all, exact_off=exact_off)
    return report
