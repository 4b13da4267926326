"""Validate problem records on a device: the parent side of the validator.

``validate_file(in_path, out_path, ...)`` reads records, validates each in isolated workers and
writes every record (passed or not) with its ``validation`` section, resumably.

Per problem (``validate_source``):

1. static check of the source (``curate.problem.check_source``);
2. on CPU, shrink its sizes (``synth.resize.shrink_for_cpu``) so the checks run in seconds;
3. libcst ablations of ``Model.forward`` (``ablation.ablations``);
4. worker 1 (``probe.probe_problem``): every single-process check, fp64 calibration, aten trace,
   flops/bytes, output statistics and eager timing;
5. worker 2 (``probe.replay_problem``, on CUDA by default): the same build in a fresh process
   (cross-process determinism) and TorchInductor (match + median time);
6. verdicts (``checks.judge``), roofline, difficulty.

A problem that crashes, hangs or cannot be read gets ``validation.passed = false`` with the
reason in ``checks.runs``; the run goes on. ``validation.passed`` is true only when no gating check
failed (a skipped check, ``passed: null``, never fails and never passes).

Several workers may share one GPU (``workers_per_gpu``) so Inductor compiles overlap; timing runs
take an exclusive per-GPU file lock so no measurement overlaps another worker's kernels.
Memory: before its workers start, a CPU worker estimates the problem's peak device memory on the
meta device (``memory.py``; ``validation.memory``); a worker starts only when that fits in what
its GPU has left (``admission.py``), one that still runs out of memory while sharing is rerun
alone, and a problem that does not fit alone is flagged ``too_large`` (never ``runs``).
On CPU the same estimate (plus a worker's own memory) is admitted against the host's memory
(``admission.host_budget``: what is available, or ``host_memory_gib``), each worker's address
space is limited to what it was admitted for, a worker that still runs out of it is rerun alone
with the whole budget, and a problem that needs more than the budget is flagged ``too_large``
with "out of host memory".
On CPU each worker of a problem may use ``cpu_budget_s`` CPU seconds (RLIMIT_CPU; CPU time, so a
busy host does not make a problem slow); one that uses it up, or whose shrunk size predicts
more (``CPU_SECONDS_PER_CPU_SIZE`` per CPU size of its largest tensor), is flagged
``too_slow_on_cpu`` instead of running into the wall-clock ``timeout_s``; so is one that ran
into that timeout having used a quarter of its budget (a busy host: slow, not hung).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelmill.core.errors import KernelmillError, ProblemError
from kernelmill.core.problem import check_source
from kernelmill.core.progress import track
from kernelmill.core.record import Record
from kernelmill.core.stats import StageStats
from kernelmill.core.step import Step, option
from kernelmill.core.store import JsonlWriter, read_records

from . import checks as C
from .admission import Tenancy, address_limit, budget_for, host_budget, run_on_host
from .backends import get_backend, resolve_device
from .difficulty import difficulty
from .roofline import roofline

log = logging.getLogger("kernelmill")

PROBE = "kernelmill.validate.probe:probe_problem"
ESTIMATE = "kernelmill.validate.memory:estimate_problem"
ESTIMATE_BYTES = 1 << 30  # host memory the estimator may hold (a worker and the source's import)
REPLAY = "kernelmill.validate.probe:replay_problem"
# checks that describe a problem without deciding whether it is kept. constant_params_used: a
# constant that does nothing at any value is usually a cheap add (real attention's key bias, zero
# after Hugging Face's init, cancels in the softmax); the expensive case, a branch it silences,
# fails no_dead_branches
NON_GATING = frozenset({"roofline", "constant_params_used"})
# checks that need the second worker (its timing window, its Inductor compile)
REPLAY_CHECKS = frozenset({"runtime", "launch_overhead", "inductor"})
# why the Inductor check did not run on CPU: the card and the report quote it, so it names
# options that exist (`kernelmill build` has no --inductor flag)
INDUCTOR_OFF_ON_CPU = ("skipped on cpu (turn it on with `kernelmill validate --inductor`, or "
                       "`inductor = true` in the [validate] table of the build config)")
# CPU seconds a probe takes, about, as a function of how many times the CPU size
# (synth.resize.CPU_MAX_NUMEL elements) its largest tensor still holds after shrinking: the
# default CPU build's 113 problems, all at or under the CPU size, took median 2.2 and max 8.4
# CPU-s (an LSTM); its float16 einsum left at 512x the CPU size by the old resize took 49.5
# (shared 2-core host, 2026-11-29). Fixed part + per CPU size, with room for the LSTM's kind.
CPU_SECONDS_FIXED = 8.0
CPU_SECONDS_PER_CPU_SIZE = 0.1


@dataclass
class ValidateConfig:
    """Validation settings; each field is also a ``kernelmill validate`` flag."""

    seed: int = option(0, "base seed of all input, weight and RNG draws")
    timeout_s: float = option(300.0, "wall-clock limit per worker (s)", result=False)
    min_ms: float = option(0.1, "runtime band: fastest eager time kept (ms, CUDA)")
    max_ms: float = option(1000.0, "runtime band: slowest eager time kept (ms, CUDA)")
    max_launch_ratio: float = option(0.8, "host issue time / GPU time above which a problem is "
                                     "launch-bound")
    sensitivity_margin: float = option(10.0, "input/weight changes must move outputs by this "
                                       "many tolerances")
    min_sensitive_fraction: float = option(0.01, "... in at least this fraction of elements")
    max_zero_fraction: float = option(0.99, "fail when an all-zeros answer is right on this "
                                      "fraction")
    max_constant_fraction: float = option(0.99, "fail when a constant answer is right on this "
                                          "fraction")
    max_dead_work: float = option(0.5, "fail when more than this share of the matmul/conv/"
                                  "attention work cannot reach the output")
    dead_call_share: float = option(0.1, "... or when one call carrying this share of it "
                                    "cannot reach the output at all")
    max_offset_slack: float = option(0.05, "fail when rtol on the output's magnitude adds this "
                                     "share of its variation across inputs to the slack an "
                                     "output varying about zero gets")
    inflated_tolerance: float = option(10.0, "a calibrated tolerance this many dtype floors or "
                                       "more must reject matmul operands rounded to bf16")
    tolerance_margin: float = option(10.0, "calibrated tolerance = max(dtype floor, margin x "
                                     "fp64 noise)")
    max_ablations: int = option(48, "most forward ablations tried per problem")
    inductor: bool | None = option(None, "run the TorchInductor check (default: on CUDA only; a "
                                   "cold CPU compile is ~20 s)")
    inductor_mode: str | None = option(None, "torch.compile mode for the Inductor check")
    cross_process: bool | None = option(None, "check determinism in a second worker (default: on "
                                        "CUDA only)")
    cpu_max_numel: int | None = option(None, "on CPU, shrink problems to at most this many "
                                       "elements per tensor (default: synth.resize's)")
    cpu_budget_s: float = option(60.0, "on CPU, CPU seconds each worker of a problem may use "
                                 "(at its shrunk size); a problem that needs more, or whose "
                                 "shrunk size predicts more, is flagged too_slow_on_cpu; 0: no "
                                 "budget")
    workers_per_gpu: int | None = option(None, "workers sharing each GPU (compiles overlap; "
                                         "timing is exclusive; default: CPU cores per GPU, <= 16)")
    host_memory_gib: float | None = option(None, "host memory the CPU workers may hold together "
                                           "(GiB; default: what is available, MemAvailable or "
                                           "the cgroup's room, less a tenth)", result=False)
    early_exit: bool = option(True, "skip the second worker (Inductor, timing) for a problem "
                              "the first one already failed")
    gating: tuple[str, ...] | None = None  # None: every check except NON_GATING

    @classmethod
    def coerce(cls, config: ValidateConfig | dict | None) -> ValidateConfig:
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(config) - names
        if unknown:
            raise KernelmillError(f"unknown validate setting(s): {', '.join(sorted(unknown))}")
        return cls(**config)

    def thresholds(self) -> dict:
        return {k: getattr(self, k) for k in C.DEFAULT_THRESHOLDS}


def _torch_version() -> str | None:
    try:
        import torch

        return torch.__version__
    except ImportError:  # pragma: no cover
        return None


def _failed(device: str, stage: str, message: str, **extra: Any) -> dict:
    checks = {"runs": C.check(False, None, f"{stage}: {message}" if stage else message)}
    return {"device": device, "torch": _torch_version(), "dtype": None, "checks": checks,
            "passed": False, "flags": ["runs"], "eager_ms": None, "inductor_ms": None,
            "inductor_speedup": None, "flops": None, "bytes": None, "roofline_ms": None,
            "headroom": None, "atol": None, "rtol": None, "difficulty": None, "aten_ops": [],
            "probe_stats": None, "resized": extra.get("resized")}


def _shared_folder(name: str) -> str:
    """A folder shared by all workers of this host (lock files, compile caches)."""
    folder = os.path.join(tempfile.gettempdir(), f"kernelmill-{name}")
    os.makedirs(folder, exist_ok=True)
    return folder


def _lock_path(slot: dict) -> str | None:
    """The GPU's timing lock, the one the grader's windows take (one per physical GPU)."""
    if slot.get("gpu") is None:
        return None
    from .window import gpu_lock_path  # imports torch: only when validating on a GPU

    env = slot.get("env") or {"CUDA_VISIBLE_DEVICES": str(slot["gpu"])}
    return gpu_lock_path(slot.get("device") or "cuda:0", env)


def _writable() -> list[str]:
    """What a (sandboxed) validation worker may write besides its own temp folder."""
    return [_shared_folder("locks"), _shared_folder("cache")]


def _worker_env(slot: dict, device: str) -> dict:
    env = dict(slot.get("env") or {})
    cache = _shared_folder("cache")
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(cache, "inductor"))
    env.setdefault("TRITON_CACHE_DIR", os.path.join(cache, "triton"))
    if not device.startswith("cuda"):
        env.setdefault("OMP_NUM_THREADS", "1")  # CPU slots share the cores
    else:  # several workers share a GPU and the host's cores: one compile thread each
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return env


def _cpu_max_numel(cfg: ValidateConfig) -> int:
    from kernelmill.synth.resize import CPU_MAX_NUMEL

    return cfg.cpu_max_numel or CPU_MAX_NUMEL


def _too_slow_prediction(source: str, cfg: ValidateConfig) -> str | None:
    """Why a shrunk ``source`` cannot finish within the CPU budget, judged before it runs from
    its largest tensor (None: it may, or its size cannot be told statically)."""
    if not cfg.cpu_budget_s:
        return None
    try:
        from kernelmill.synth.resize import largest_numel

        numel = largest_numel(source)
    except Exception:  # noqa: BLE001 — an unreadable size is judged by running it
        return None
    if not numel or numel <= _cpu_max_numel(cfg):  # at the CPU size: judged by running it
        return None
    predicted = CPU_SECONDS_FIXED + CPU_SECONDS_PER_CPU_SIZE * numel / _cpu_max_numel(cfg)
    if predicted <= cfg.cpu_budget_s:
        return None
    return (f"not run: its largest tensor holds {numel:,} elements after shrinking "
            f"({numel / _cpu_max_numel(cfg):.0f}x the CPU size), about {predicted:.0f} CPU-s "
            f"per worker against a budget of {cfg.cpu_budget_s:g} s")


def _out_of_cpu_budget(result, budget: float) -> bool:
    """Did this worker die at its CPU-seconds limit (RLIMIT_CPU: SIGXCPU, then SIGKILL a few
    seconds later should the code have caught SIGXCPU), or run into the wall-clock timeout
    while working (a quarter of the budget used: a busy host, not a hang)?"""
    import signal

    if result.ok:
        return False
    used = result.cpu_s
    if result.timed_out:
        return used is not None and used >= budget / 4
    return result.returncode == -signal.SIGXCPU or (
        result.returncode == -signal.SIGKILL and used is not None and used >= budget)


def _too_slow(device: str, detail: str, resized: float | None, value: float | None = None,
              memory: dict | None = None) -> dict:
    """Cannot finish its checks within the CPU budget: flagged ``too_slow_on_cpu`` (never a
    ``runs`` failure; the problem may be fine on a GPU)."""
    validation = _failed(device, "", detail, resized=resized)
    validation["checks"] = {"runs": C.check(None, None, "not run to the end: too slow on CPU"),
                            "too_slow_on_cpu": C.check(False, value, detail)}
    validation["flags"] = ["too_slow_on_cpu"]
    if memory is not None:
        validation["memory"] = memory
    return validation


def _shrink(source: str, cfg: ValidateConfig) -> tuple[str, float | None, str]:
    try:
        from kernelmill.synth.resize import ResizeError, shrink_for_cpu
    except ImportError:  # pragma: no cover — resize ships with the package
        return source, None, "resize unavailable"
    try:
        result = shrink_for_cpu(source, max_numel=_cpu_max_numel(cfg))
    except ResizeError as exc:
        return source, None, f"not resized ({exc})"
    factor = result.factor if result.factor and result.factor != 1 else None
    return result.source, factor, ""


def _out_of_memory(error: dict | None) -> bool:
    return "out of memory" in str((error or {}).get("message", "")).lower()


def _retry_alone(target: str, payload: dict, cfg: ValidateConfig, device: str, env: dict):
    """Rerun a worker that ran out of GPU memory while holding the GPU exclusively."""
    from .harness import run_in_worker
    from .probe import GpuLock

    lock = payload.get("lock")
    with GpuLock(lock).exclusive():
        return run_in_worker(target, {**payload, "lock": None}, timeout_s=cfg.timeout_s,
                             device=device, env=env, writable=_writable())


def _host_budget(cfg: ValidateConfig):
    gib = cfg.host_memory_gib
    return host_budget(None if gib is None else int(gib * 2**30))


def address_base() -> int:
    """The address space a CPU worker starts with: its zygote's, else a fresh interpreter's
    once it has imported torch, triton and numpy (measured once per process)."""
    from .harness import worker_env
    from .zygote import ZYGOTES

    warm = ZYGOTES.address_space("cpu", worker_env("cpu"))
    return warm if warm is not None else _cold_address_base()


@functools.cache
def _cold_address_base() -> int:
    import subprocess
    import sys

    code = ("import torch, triton, numpy\n"
            "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmSize')][0])")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=300, check=True)
        return int(out.stdout.split()[-1]) * 1024
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return 16 << 30  # cannot tell: the harness's own default limit


def _worker_oom(result) -> bool:
    """Did this worker run out of memory (GPU or, on CPU, its address-space limit)? Also when the
    worker survived it: the fp64 calibration and the Inductor compile record their errors."""
    if not result.ok:
        texts = [(result.error or {}).get("message")]
    else:
        value = result.value or {}
        texts = [(value.get("tolerance") or {}).get("reason"),
                 (value.get("inductor") or {}).get("error")]
    return any(marker in str(t).lower() for t in texts if t
               for marker in ("out of memory", "can't allocate memory", "memoryerror",
                              "bad_alloc"))


def estimate_on_host(source: str, budget, *, seed: int = 0, timeout_s: float = 120.0,
                     sandbox: bool = True, cpu_s: float | None = None) -> dict:
    """``memory.estimate_problem`` of ``source`` in a CPU worker: the problem built on the meta
    device, so CUDA is never touched and nothing real is allocated. It is admitted on the host
    ``budget`` for ``ESTIMATE_BYTES`` and limited to that (a source that allocates real memory
    while being built gets an unknown estimate; so does one that uses more than ``cpu_s`` CPU
    seconds)."""
    from .harness import run_in_worker

    with budget.hold(ESTIMATE_BYTES):
        result = run_in_worker(ESTIMATE, {"source": source, "seed": seed},
                               timeout_s=min(timeout_s, 120.0), device="cpu",
                               env=_worker_env({}, "cpu"), writable=_writable(),
                               sandbox=sandbox,
                               limits={"address_space": address_limit(ESTIMATE_BYTES,
                                                                      address_base()),
                                       **({"cpu_s": cpu_s} if cpu_s else {})})
    return result.value if result.ok else {
        "method": "unknown", "reason": f"estimator: {(result.error or {}).get('message')}"}


# Library errors that memory pressure from other workers can cause without saying "out of
# memory" (a workspace that could not be allocated): rerun alone when they happen while sharing
# (seen on an H100 in a KernelBench audit: DenseNets' forwards failed with cuDNN's internal
# error beside other workers and passed in an earlier run)
_CONTENTION_MARKERS = ("cudnn_status_internal_error", "cudnn_status_alloc_failed",
                       "cudnn_status_execution_failed", "cublas_status_alloc_failed",
                       "cublas_status_not_initialized", "cublas_status_internal_error",
                       "cufft_alloc_failed", "cusolver_status_alloc_failed")


def _worker_contention(result) -> bool:
    if result.ok:
        return False
    text = str((result.error or {}).get("message", "")).lower()
    return any(marker in text for marker in _CONTENTION_MARKERS)


def _estimate_memory(source: str, cfg: ValidateConfig, on_cuda: bool) -> dict:
    """The ``memory`` section's estimate (``estimate_on_host``)."""
    from .memory import CONTEXT_BYTES, HOST_BASE_BYTES, minimum_bytes, probe_bytes, replay_bytes

    start = time.monotonic()
    est = estimate_on_host(source, _host_budget(cfg), seed=cfg.seed, timeout_s=cfg.timeout_s,
                           cpu_s=None if on_cuda else cfg.cpu_budget_s or None)
    base = CONTEXT_BYTES if on_cuda else HOST_BASE_BYTES
    memory = {"method": est.get("method", "unknown"),
              "estimate_bytes": probe_bytes(est, base),
              "replay_bytes": replay_bytes(est, base), "forward_bytes": minimum_bytes(est)}
    memory.update({k: v for k, v in est.items()
                   if k.endswith("_bytes") or k in ("reason", "mutates_inputs")})
    memory["estimate_s"] = round(time.monotonic() - start, 3)
    return memory


def _stage_seconds(worker: str, result) -> dict:
    """Seconds a worker spent in each stage it marked (parent clock), ``{worker}.{stage}``;
    ``{worker}.startup`` is the time to its first mark, ``{worker}.wall`` the whole run."""
    marks = [("startup", 0.0), *result.stages, ("end", result.wall_s)]
    spent: dict[str, float] = {}
    for (stage, at), (_next, until) in zip(marks, marks[1:]):
        key = f"{worker}.{stage}"
        spent[key] = round(spent.get(key, 0.0) + max(0.0, until - at), 3)
    spent[f"{worker}.wall"] = round(result.wall_s, 3)
    return spent


def _eager_timing(timing: dict, replay: dict | None, too_large: str, early: list) -> dict:
    """The eager timing taken in the second worker's window, or why there is none."""
    if replay and replay.get("timing"):
        return {**replay["timing"], **{k: timing.get(k) for k in C.SYNC_KEYS}}
    if early:
        why, skipped = f"not timed: failed {', '.join(early)}", True
    elif too_large:
        why, skipped = f"not timed: {too_large}", True
    else:
        why, skipped = f"not timed: second worker failed ({(replay or {}).get('failed')})", False
    return {**timing, "eager_ms": None, "reason": why, "skipped": skipped}


_RUNNING: dict[Any, threading.BoundedSemaphore] = {}
_RUNNING_LOCK = threading.Lock()


def _running(slot: dict):
    """At most ``slot["running"]`` workers at once on the slot's GPU (taken after memory
    admission). A GPU has twice as many slots as that, so problems waiting for memory (one that
    needs the whole GPU) leave the others running instead of holding every slot."""
    most = slot.get("running")
    if not most:
        return contextlib.nullcontext()
    with _RUNNING_LOCK:
        semaphore = _RUNNING.setdefault((slot.get("gpu"), most), threading.BoundedSemaphore(most))
    return semaphore


def _gib(n: float | None) -> str:
    return "?" if n is None else f"{n / 2**30:.3g} GiB"


def _too_large(device: str, memory: dict, detail: str, resized: float | None) -> dict:
    """Cannot run on an empty device: flagged ``too_large`` (never a ``runs`` failure)."""
    validation = _failed(device, "", detail, resized=resized)
    validation["checks"] = {"runs": C.check(None, None, "not run: too large for the device"),
                            "too_large": C.check(False, memory.get("estimate_bytes"), detail)}
    validation["flags"] = ["too_large"]
    validation["memory"] = memory
    return validation


def validate_source(source: str, slot: dict | None = None,
                    config: ValidateConfig | dict | None = None) -> dict:
    """The ``validation`` section for one problem source (see the module docstring)."""
    with contextlib.ExitStack() as held:  # the problem's GPU grant, given back at the end
        return _validate_source(source, slot, config, held)


def _validate_source(source: str, slot: dict | None, config: ValidateConfig | dict | None,
                     held: contextlib.ExitStack) -> dict:
    from .harness import run_in_worker

    cfg = ValidateConfig.coerce(config)
    slot = slot or {"device": "cpu", "gpu": None, "env": {}}
    device = slot["device"]
    on_cuda = device.startswith("cuda")
    try:
        check_source(source)
    except ProblemError as exc:
        return _failed(device, "static check", exc.reason)

    run_source, resized, resize_note = (source, None, "") if on_cuda else _shrink(source, cfg)
    slow = None if on_cuda else _too_slow_prediction(run_source, cfg)
    if slow:
        return _too_slow(device, slow + (f" ({resize_note})" if resize_note else ""), resized)
    from .ablation import ablations  # libcst: imported when validating, not for --help

    variants = ablations(run_source, cfg.max_ablations)
    cross_process = on_cuda if cfg.cross_process is None else cfg.cross_process
    inductor = on_cuda if cfg.inductor is None else cfg.inductor
    env = _worker_env(slot, device)
    payload = {"source": run_source, "device": device, "seed": cfg.seed, "ablations": variants,
               "config": {"sensitivity_margin": cfg.sensitivity_margin,
                          "tolerance_margin": cfg.tolerance_margin},
               "lock": _lock_path(slot), "resized": resized,
               "rebuild_in_process": not cross_process,
               # a second worker times eager (and Inductor) in one window; else the probe does
               "time": not (cross_process or inductor)}
    # Memory: every problem is estimated first. On a GPU only a certain misfit is refused (one
    # forward larger than the whole GPU): the probe's estimate is an upper bound, and admission
    # runs such a problem alone. On CPU the probe's estimate must fit in the host's budget.
    budget = budget_for(slot) if on_cuda else None
    host = None if on_cuda else _host_budget(cfg)
    memory = _estimate_memory(run_source, cfg, on_cuda)
    estimate = memory["estimate_bytes"]
    if on_cuda and (cross_process or inductor) and estimate and memory["replay_bytes"]:
        # one grant for both workers: a replay that asked for more than its probe queued again
        # behind newer problems (minutes each in a KernelBench audit, 2026-11-26)
        estimate = max(estimate, memory["replay_bytes"])
    if on_cuda:
        room, need = (budget.total, memory["forward_bytes"]) if budget else (None, None)
    else:
        room, need = host.capacity, host.need_for(estimate)
    if room is not None and need and need > room:
        return _too_large(device, memory, f"needs {_gib(need)} ("
                          f"{'one forward' if on_cuda else 'probe estimate'}); the "
                          f"{'GPU has' if on_cuda else 'host memory budget is'} {_gib(room)}",
                          resized)

    cpu_budget = None if on_cuda or not cfg.cpu_budget_s else cfg.cpu_budget_s

    def run(target: str, data: dict, worker_limit: int | None = None):
        limits = {} if worker_limit is None else {"address_space": worker_limit}
        if cpu_budget:
            limits["cpu_s"] = cpu_budget
        limits = limits or None
        with _running(slot):
            return run_in_worker(target, data, timeout_s=cfg.timeout_s, device=device, env=env,
                                 writable=_writable(), limits=limits)

    # the probe's grant carries over to the replay (shrunk to its ask): no second queueing
    tenancy = held.enter_context(Tenancy(budget, caps=True))
    if on_cuda:
        admitted = tenancy.run(estimate, lambda: run(PROBE, {**payload, "memory_cap": tenancy.cap}),
                               _worker_oom, _worker_contention)
    else:
        admitted = run_on_host(host, need, lambda limit: run(PROBE, payload, limit), _worker_oom,
                               address_base())
    first = admitted.result
    if budget is None and on_cuda and _worker_oom(first):  # GPU memory unknown: the file lock
        first = _retry_alone(PROBE, payload, cfg, device, env)
    memory.update(admitted.memory_info())
    profile = {"estimate_s": memory.pop("estimate_s", None), **_stage_seconds("probe", first),
               "probe_admission_wait_s": round(admitted.waited_s, 3)}
    if first.cpu_s is not None:
        profile["probe.cpu_s"] = round(first.cpu_s, 3)
    if cpu_budget and _out_of_cpu_budget(first, cpu_budget):
        err = first.error or {}
        spent = (f"ran out of wall time ({cfg.timeout_s:g} s) after {first.cpu_s:.0f} of its "
                 f"{cpu_budget:g} CPU-s" if first.timed_out else
                 f"used up the CPU budget of {cpu_budget:g} CPU-s")
        return _too_slow(device, f"the checks {spent} (in {err.get('stage', 'probe')}, after "
                         f"{first.wall_s:.0f} s)"
                         + (f"; {resize_note}" if resize_note else ""), resized, cpu_budget,
                         memory)
    if admitted.too_large and first.ok:
        memory["too_large"] = False
        memory["note"] = "fp64 calibration ran out of memory alone (dtype floor used)"
    # An out-of-memory failure here already had its run alone (admission, the file lock, or
    # the whole host budget). A probe that survived it (only the fp64 calibration ran out)
    # keeps its result: calibration falls back to the dtype floor and says why.
    if not first.ok and _worker_oom(first):
        err = first.error or {}
        stage = err.get("stage", "probe")
        return _too_large(device, memory, f"out of memory alone on the GPU ({stage}; estimate "
                          f"{_gib(estimate)})" if on_cuda else
                          f"out of host memory ({stage}): more than the whole host memory "
                          f"budget of {_gib(host.capacity)}, alone (estimate {_gib(estimate)})",
                          resized)
    if not first.ok:
        err = first.error or {}
        return _failed(device, err.get("stage", "worker"), err.get("message", "failed"),
                       resized=resized)
    m = first.value
    m["resized"] = resized
    memory["measured_bytes"] = m.get("peak_bytes")
    memory["measured_allocated_bytes"] = m.get("peak_allocated_bytes")
    tol = m["tolerance"]["tol"]
    # Cheap checks first: a problem the probe already failed gets no second worker (no
    # Inductor compile, no timing window); only checks that need that worker are left unrun.
    early = [f for f in C.summarize(C.judge(m, cfg.thresholds()), cfg.gating)[1]
             if f not in REPLAY_CHECKS] if cfg.early_exit else []
    replay, replay_too_large = None, ""
    if early:
        tenancy.close()  # no second worker: the grant goes back now
    if (cross_process or inductor) and not early:
        second_payload = {**payload, "ablations": None, "inductor": inductor,
                          "copies": bool(m.get("mutated_inputs", True)),
                          "inductor_mode": cfg.inductor_mode, "time": True, "time_eager": True}
        if on_cuda:
            again = tenancy.run(memory["replay_bytes"],
                                lambda: run(REPLAY, {**second_payload, "memory_cap": tenancy.cap}),
                                _worker_oom, _worker_contention)
        else:
            again = run_on_host(host, min(host.need_for(memory["replay_bytes"]), host.capacity),
                                lambda limit: run(REPLAY, second_payload, limit), _worker_oom,
                                address_base())
        second = again.result
        memory["replay"] = again.memory_info()
        if budget is None and on_cuda and _worker_oom(second):
            second = _retry_alone(REPLAY, second_payload, cfg, device, env)
        profile.update(_stage_seconds("replay", second),
                       replay_admission_wait_s=round(again.waited_s, 3))
        if cpu_budget and _out_of_cpu_budget(second, cpu_budget):
            err = second.error or {}
            return _too_slow(device, f"the second worker used up the CPU budget of "
                             f"{cpu_budget:g} CPU-s (in {err.get('stage', 'replay')})",
                             resized, cpu_budget, memory)
        if again.too_large:  # the compile (or rebuild) cannot fit even alone: not judged
            replay_too_large = (f"{(second.error or {}).get('stage', 'inductor compile')}: out of"
                                f" {'memory alone on the GPU' if on_cuda else 'host memory'} "
                                f"(estimate {_gib(memory['replay_bytes'])})")
        if second.ok:
            replay = second.value
            memory["replay"]["measured_bytes"] = replay.get("peak_bytes")
            memory["replay"]["measured_allocated_bytes"] = replay.get("peak_allocated_bytes")
        else:
            err = second.error or {}
            replay = {"failed": f"{err.get('stage')}: {err.get('message')}"}
    if not payload["time"]:  # the eager time comes from the second worker's window
        m["timing"] = _eager_timing(m["timing"], replay, replay_too_large, early)
    checks = C.judge(m, cfg.thresholds())
    leaked = first.leaked_processes  # left running in a session or group of its own
    checks["no_leaked_process"] = C.check(not leaked, leaked, f"{leaked} process(es) the problem "
                                         "started outlived its worker" if leaked else
                                         "no process left behind")
    if resize_note:
        checks["runs"]["detail"] += f"; {resize_note}"
    det = checks["deterministic"]
    if replay_too_large:
        checks["too_large"] = C.check(False, memory["replay_bytes"], replay_too_large)
    if early and cross_process:
        det["detail"] += f"; cross-process check not run (failed {', '.join(early)})"
    elif cross_process and replay_too_large and not (replay and "digest" in replay):
        det["detail"] += "; cross-process check not run (second worker too large)"
    elif cross_process:
        if replay is None or "digest" not in replay:
            det["detail"] += f"; second worker failed ({replay and replay.get('failed')})"
            det["passed"] = False
        else:
            err = C.digest_error(replay["digest"], m["digest"])
            det["detail"] += "; across 2 workers: " + ("bitwise" if err == 0 else
                                                      f"error {err:.3g}")
            if err > tol:
                det["passed"] = False
    else:
        det["detail"] += "; cross-process check folded into an in-process rebuild"
    if inductor and early:
        checks["inductor"] = C.check(None, None, f"not run: failed {', '.join(early)}")
        inductor_ms = None
    elif inductor and replay_too_large:
        checks["inductor"] = C.check(None, None, f"not run: {replay_too_large}")
        inductor_ms = None
    elif inductor:
        ind = (replay or {}).get("inductor") if replay and "failed" not in replay else \
            {"error": (replay or {}).get("failed", "second worker did not run")}
        checks["inductor"] = C.judge_inductor(ind, m["timing"].get("eager_ms"), tol)
        inductor_ms = (ind or {}).get("ms")
    else:
        checks["inductor"] = C.check(None, None, INDUCTOR_OFF_ON_CPU if not on_cuda else
                                     "disabled")
        inductor_ms = None

    eager_ms = m["timing"].get("eager_ms")
    roof = roofline(m["flops"], m["bytes"], dtype=m["dtype"], device_name=m["device_name"],
                    eager_ms=eager_ms) if on_cuda else None
    if roof is None:
        checks["roofline"] = C.check(None, None, "GPU-only check (ran on cpu)")
    else:
        ok = roof["headroom"] is None or roof["headroom"] >= 0.8
        checks["roofline"] = C.check(
            ok, roof["headroom"], f"bound {roof['roofline_ms']:.3g} ms ({roof['bound']}-bound, "
            f"{roof['source']}); headroom {roof['headroom'] or 0:.3g}x" +
            ("" if ok else " (faster than the bound: peak table wrong for this device?)"))

    gating = cfg.gating or tuple(n for n in checks if n not in NON_GATING)
    passed, flags = C.summarize(checks, gating)
    speedup = checks["inductor"]["value"] if inductor else None
    compute = C.compute_ops(m["aten_ops"])
    return {
        "device": "cuda" if on_cuda else "cpu", "device_name": m["device_name"],
        "torch": m["torch"], "dtype": m["dtype"], "checks": checks, "passed": passed,
        "flags": flags, "eager_ms": eager_ms, "inductor_ms": inductor_ms,
        "inductor_speedup": speedup, "flops": m["flops"], "bytes": m["bytes"],
        "roofline_ms": roof["roofline_ms"] if roof else None,
        "headroom": roof["headroom"] if roof else None,
        "atol": tol, "rtol": tol,
        # per grading distribution: finite, float32 noise, supported (grade.policy reads it)
        "distributions": m.get("distributions"),
        "difficulty": difficulty(compute, inductor_speedup=speedup,
                                 headroom=roof["headroom"] if roof else None),
        "aten_ops": m["aten_ops"], "probe_stats": m["probe_stats"], "resized": resized,
        "memory": memory, "profile": profile,
        "timing": {k: m["timing"].get(k) for k in ("method", "reps", "ci_pct", "host_ms",
                                                    "launch_ratio")},
    }


def _finite(value: Any) -> Any:
    """JSON-safe copy: NaN and infinities become null (strict JSON readers reject them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _validate_item(item: tuple[dict, dict], slot: dict) -> dict:
    """Backend task: never raises, so one bad problem cannot stop the run."""
    record, config = item
    start = time.monotonic()
    try:
        validation = validate_source(record["source"], slot, config)
    except Exception as exc:  # noqa: BLE001 — a validator failure is recorded, not fatal
        validation = _failed(slot.get("device", "?"), "validator",
                             f"{type(exc).__name__}: {exc}")
    validation["wall_s"] = round(time.monotonic() - start, 3)
    return _finite(validation)


class _Running:
    """The problems the local backend's slot threads are validating now, for the progress
    line (``einsum_bmm_softshrink 95s``): a slow problem shows by name instead of the line
    standing still."""

    def __init__(self):
        self._lock = threading.Lock()
        self._now: dict[int, tuple[str, float]] = {}

    def validate(self, item: tuple[dict, dict], slot: dict) -> dict:
        key = threading.get_ident()
        record = item[0]
        with self._lock:
            self._now[key] = (str(record.get("name") or record.get("id", "?"))[:60],
                              time.monotonic())
        try:
            return _validate_item(item, slot)
        finally:
            with self._lock:
                self._now.pop(key, None)

    def status(self) -> str:
        now = time.monotonic()
        with self._lock:
            running = sorted(self._now.values(), key=lambda nt: nt[1])
        return ", ".join(f"{name} {now - since:.0f}s" for name, since in running)


def _ray_workers_per_gpu(address: str | None, workers: int | None) -> int:
    """Running workers per GPU on a Ray cluster: ``workers`` spread over its GPUs, else its
    CPU cores per GPU (at most 16), as the local default."""
    from .ray_backend import cluster_resources

    resources = cluster_resources(address)
    gpus = max(1, int(resources.get("GPU", 1)))
    if workers:
        return max(1, workers // gpus)
    return max(1, min(16, int(resources.get("CPU", 2)) // gpus))


def validate_file(in_path, out_path, *, device: str = "auto", workers: int | None = None,
                  backend: str = "local", address: str | None = None,
                  config: ValidateConfig | dict | None = None, progress: bool = True
                  ) -> StageStats:
    """Validate every record of ``in_path`` into ``out_path`` (resumable; all records written)."""
    cfg = ValidateConfig.coerce(config)
    device = resolve_device(device)
    stats = StageStats("validate")
    start = time.monotonic()

    def corrupt(message: str) -> None:
        log.warning(message)
        stats.count("corrupt input")

    if device.startswith("cuda") and backend == "local":  # Ray places work on its own GPUs
        import torch

        if not torch.cuda.is_available():
            raise KernelmillError(f"--device {device}: torch sees no CUDA device "
                                  "(use --device cpu or auto)")
        if workers is None:
            gpus = max(1, torch.cuda.device_count())
            workers = gpus * (cfg.workers_per_gpu or
                              max(1, min(16, (os.cpu_count() or 2) // gpus)))

    with JsonlWriter(out_path) as writer:
        records, seen = [], set()
        for record in read_records(in_path, on_error=corrupt, allow_empty=False):
            if record.id in writer:
                stats.count("already validated")
            elif record.id not in seen:
                seen.add(record.id)
                records.append(record)
        per_gpu = None
        if device.startswith("cuda") and backend == "local":  # memory waits do not hold slots
            per_gpu = max(1, workers // max(1, torch.cuda.device_count()))
            workers *= 2
        elif device.startswith("cuda"):  # Ray: each GPU's host runs the local backend's slots
            per_gpu = cfg.workers_per_gpu or _ray_workers_per_gpu(address, workers)
        runner = get_backend(backend, device=device, workers=workers, address=address,
                             per_gpu=per_gpu and 2 * per_gpu, running=per_gpu)
        if per_gpu and backend == "local":
            for slot in runner.slots:
                slot["running"] = per_gpu
        config_dict = dataclasses.asdict(cfg)
        items = [(r.to_dict(), config_dict) for r in records]
        running = _Running() if backend == "local" else None  # Ray runs items elsewhere
        results = runner.map_unordered(running.validate if running else _validate_item, items)
        if progress:
            results = track(results, total=len(items), description="validate",
                            status=running.status if running else None)
        for (data, _cfg), validation in results:
            record = Record.from_dict(data).replace(validation=validation)
            writer.write(record)
            stats.kept()  # validation enriches every record; the filter step drops failures
            if validation["passed"]:
                stats.count("passed")
            else:
                stats.count(f"failed {validation['flags'][0] if validation['flags'] else 'runs'}")
                for flag in validation["flags"]:
                    stats.count(f"flag: {flag}")
    stats.seconds = time.monotonic() - start
    return stats


__all__ = ["ValidateConfig", "validate_file", "validate_source"]


@dataclass
class ValidateOptions(ValidateConfig):
    """The validate stage's knobs: where it runs, plus every validator setting."""

    device: str = option("auto", "auto, cpu, cuda or cuda:N", build="=")
    workers: int | None = option(None, "parallel problems (default: CUDA workers-per-gpu x GPUs, "
                                 "CPU 2)", build="=", result=False)
    backend: str = option("local", "where problems run: local worker processes, or one Ray host "
                          "per GPU of a cluster", build="=", choices=("local", "ray"),
                          result=False)
    address: str | None = option(None, "Ray cluster address (--backend ray; default: start a "
                                 "local one)", build="=", result=False)

    def settings(self) -> ValidateConfig:
        names = {f.name for f in dataclasses.fields(ValidateConfig)}
        return ValidateConfig(**{k: v for k, v in dataclasses.asdict(self).items() if k in names})


def _run(inputs: list[Path], out: Path, config: ValidateOptions) -> StageStats:
    return validate_file(inputs[0], out, device=config.device, workers=config.workers,
                         backend=config.backend, address=config.address,
                         config=config.settings())


STEP = Step(
    name="validate", title="validate", config=ValidateOptions, run=_run,
    inputs=("problems.jsonl",), output="validated.jsonl", resumable=True,
    input_help="problem records (JSONL)", out_help="validated records (JSONL, appended)",
    requires=lambda config: {"ray": "pip install -e '.[ray]'"}
    if config.backend == "ray" else {},
    build_values=lambda build: {"device": build.device, **build.config.validate},
    help="run every problem on a device and record its checks",
    description="Validate problem records: runs, finite, deterministic, not stochastic, "
                "input/weight sensitive, not near-zero/constant/affine, no dead ops, tolerance "
                "vs fp64, runtime band, launch overhead, TorchInductor, roofline, difficulty. "
                "Every record is written to OUT with its validation section (pass or fail); "
                "rerunning resumes. `kernelmill filter` (or `kernelmill dedup`) drops the "
                "failed ones.")
