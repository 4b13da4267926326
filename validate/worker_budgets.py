"""What the validator's workers get and how their runs are judged for resources: their
environment, writable folders and GPU timing lock; the CPU budget (a size's predicted CPU
seconds, a worker that used them up, ``too_slow_on_cpu``) and the CPU shrink; the memory
estimate on the host (``estimate_on_host``, ``address_base``); out-of-memory and contention
failures, rerun alone; the per-GPU cap on running workers; ``too_large``. Split out of
``validate.runner``, which re-exports these names.
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from typing import Any

from . import checks as C
from .bytecode import bytecode_folder
from .harness_worker import BYTECODE_VAR
from .host_admission import address_limit, host_budget
from .settings import (
    CPU_SECONDS_FIXED,
    CPU_SECONDS_PER_CPU_SIZE,
    ESTIMATE,
    ESTIMATE_BYTES,
    ValidateConfig,
    _failed,
)


def _shared_folder(name: str) -> str:
    """A folder shared by all validation workers of this host (lock files, compile caches:
    ``harness.VALIDATION_FOLDERS``, hidden from every other confined worker)."""
    from .harness import validation_folder

    folder = validation_folder(name)
    os.makedirs(folder, exist_ok=True)
    return folder


def _lock_path(slot: dict) -> str | None:
    """The GPU's timing lock, the one the grader's windows take (one per physical GPU)."""
    if slot.get("gpu") is None:
        return None
    from .gpus import gpu_lock_path

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
    folder = bytecode_folder()
    if folder:  # the libraries' bytecode, read only (``validate.bytecode``)
        env.setdefault(BYTECODE_VAR, folder)
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
        # the probe's readings of host syncs; the replay's own ``device_work`` (a launch-bound
        # reading checked) stands where the probe read none
        return {**replay["timing"], **{k: timing.get(k) for k in C.SYNC_KEYS
                                       if timing.get(k) is not None or k not in replay["timing"]}}
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
