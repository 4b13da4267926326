"""Which physical GPU a device names, without a CUDA context: ``nvidia-smi``'s table (index,
UUID, model name), the GPU's free memory, and the path of the timing lock of each physical GPU
(``gpu_lock_path``: one per UUID in a per-user runtime folder, so every grader and validator of
this user on the host shares it, whatever ``CUDA_VISIBLE_DEVICES`` each was started with),
the lock its workers make their CUDA contexts under (``init_lock``), what the GPU was doing
just now (``gpu_activity``) and what each process holds on it (``process_device_bytes``), from
NVML (``nvidia-ml-py``, a dependency on Linux, and the driver's library; no reading without
them).

Imports only the standard library (and ``pynvml``, inside ``gpu_activity`` and
``process_device_bytes``; ``core.errors`` inside ``init_lock``).
"""
from __future__ import annotations

import os
import subprocess
import time

_GPUS: dict[str, tuple[str, str]] = {}  # nvidia-smi index -> (uuid, name)


def _gpu_table() -> dict[str, tuple[str, str]]:
    if not _GPUS:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        for line in out.splitlines():
            index, uuid, name = ([p.strip() for p in line.split(",", 2)] + ["", ""])[:3]
            if uuid:
                _GPUS[index] = (uuid, name)
        _GPUS.setdefault("", ("", ""))  # looked once
    return _GPUS


def _gpu_uuid(physical: str) -> str | None:
    """The full UUID of the GPU an index or a UUID names. CUDA takes a UUID's unique prefix
    too: it is completed from ``nvidia-smi``'s table, so every way of naming one GPU keys
    the same lock file."""
    if physical.startswith(("GPU-", "MIG-")):
        full = [uuid for uuid, _name in _gpu_table().values() if uuid.startswith(physical)]
        return full[0] if len(full) == 1 else physical
    return _gpu_table().get(physical, ("", ""))[0] or None


def _physical(device: str, env: dict | None) -> str:
    index = int(device.split(":")[1]) if ":" in device else 0
    visible = (env or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    entries = [e.strip() for e in visible.split(",")] if visible else []
    return entries[index] if index < len(entries) else str(index)


def gpu_memory(device: str, env: dict | None = None) -> tuple[int, int] | None:
    """(free, total) bytes of the whole GPU behind ``device`` as a worker with ``env`` sees it,
    from ``nvidia-smi`` (no CUDA context, no torch: a tenth of a second where a worker that
    imports torch took 10-12 s while a grading run started); None on CPU, for a MIG instance
    or without ``nvidia-smi``."""
    if not device.startswith("cuda"):
        return None
    physical = _physical(device, env)
    uuid = _gpu_uuid(physical)
    if not uuid or uuid.startswith("MIG-"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "-i", uuid, "--query-gpu=memory.free,memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=30).stdout
        free, total = (int(v) * 2**20 for v in out.strip().split(","))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return (free, total) if 0 <= free <= total and total > 0 else None


def gpu_name(device: str, env: dict | None = None) -> str | None:
    """The model name of the GPU behind ``device`` as a worker with ``env`` sees it (without
    initialising CUDA here); None on CPU or without ``nvidia-smi``."""
    if not device.startswith("cuda"):
        return None
    physical = _physical(device, env)  # an index, or a UUID from CUDA_VISIBLE_DEVICES
    uuid_named = _gpu_uuid(physical)
    for index, (uuid, name) in _gpu_table().items():
        if (physical == index or (uuid and uuid == uuid_named)) and name:
            return name
    return None


def runtime_folder() -> str:
    """A per-user folder for lock files (``$XDG_RUNTIME_DIR/kernelmill`` or ``/tmp``)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    folder = os.path.join(base, "kernelmill") if base and os.path.isdir(base) else \
        os.path.join("/tmp", f"kernelmill-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return folder


def gpu_lock_path(device: str, env: dict | None = None) -> str | None:
    """The lock path of the physical GPU behind ``device`` ("cuda", "cuda:1") as a worker with
    ``env`` sees it; None on CPU."""
    if not device.startswith("cuda"):
        return None
    physical = _physical(device, env)
    key = _gpu_uuid(physical) or f"gpu{physical}"
    path = os.path.join(runtime_folder(), key)
    for suffix in (".turn", ".main", ".windows"):  # exist before a confined worker opens them
        if not os.path.exists(path + suffix):
            open(path + suffix, "a").close()
    return path


# Each CUDA worker makes its CUDA context under the GPU's lock held shared
# (``harness.run_in_worker(init_lock=...)``), so no context is made while a timing window holds
# the GPU alone: ``grading`` (the default) for a grade's workers (H100, KernelBench singles:
# timings not precise 6 of 62 without it, every one in a window beside another worker's CUDA
# init, 0 of 61 with it, at the same rate), ``on`` for validation's too (its rate under the
# lock unmeasured), ``off`` for none
INIT_LOCK_VAR = "KERNELMILL_INIT_LOCK"
INIT_LOCK_MODES = ("grading", "on", "off")


def init_lock(device: str, env: dict | None = None, validation: bool = False) -> str | None:
    """The lock path a worker on ``device`` (with ``env``) makes its CUDA context under: the
    GPU's (``gpu_lock_path``) where ``INIT_LOCK_VAR`` covers the worker (``validation``: one of
    validation's), else None (an unknown value is an error)."""
    from kernelmill.core.errors import env_choice

    mode = env_choice(INIT_LOCK_VAR, INIT_LOCK_MODES)
    if mode == "off" or (validation and mode != "on"):
        return None
    return gpu_lock_path(device, env)


# UUID -> (NVML handle or None where NVML did not answer for it, when that was found)
_NVML: dict[str, tuple[object, float]] = {}
NVML_RETRY_S = 60.0  # a GPU NVML did not answer for is asked again after this long


def _nvml_handle(uuid: str):
    handle, at = _NVML.get(uuid, (None, None))
    if handle is None and (at is None or time.monotonic() - at > NVML_RETRY_S):
        try:
            import pynvml  # nvidia-ml-py (a dependency on Linux): read by the trusted parent

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid.encode())
        except Exception:  # noqa: BLE001 — no library, no driver, an unknown GPU: no reading
            handle = None
        _NVML[uuid] = (handle, time.monotonic())
    return handle


def _whole_gpu_handle(device: str, env: dict | None):
    """NVML's handle of the whole GPU behind ``device`` (as a worker with ``env`` sees it);
    None on CPU, for a MIG instance, or without NVML."""
    if not device.startswith("cuda"):
        return None
    uuid = _gpu_uuid(_physical(device, env))
    if not uuid or uuid.startswith("MIG-"):
        return None
    return _nvml_handle(uuid)


def gpu_activity(device: str, env: dict | None = None) -> dict | None:
    """What the GPU behind ``device`` (as a worker with ``env`` sees it) was doing just now,
    from NVML, with no CUDA context: ``busy_pct``, the share of NVML's last sample period in
    which any kernel of any process ran, ``sm_mhz`` (its SM clock now) against ``max_sm_mhz``,
    and ``held_ns`` where the GPU keeps it (``_held_ns``). None on CPU, for a MIG instance, or
    without NVML (the ``nvidia-ml-py`` package and the driver's library; asked again after
    ``NVML_RETRY_S``). The SM clock is the
    driver's reading now: a worker raises it only by running kernels, which is what it stands
    for; the busy share covers NVML's last sample period (1/6 s to 1 s), past work included.
    The first call in a process loads NVML: callers that read it at a critical moment call it
    once before."""
    handle = _whole_gpu_handle(device, env)
    if handle is None:
        return None
    try:
        import pynvml

        read = {"busy_pct": int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                "sm_mhz": int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                "max_sm_mhz": int(pynvml.nvmlDeviceGetMaxClockInfo(handle,
                                                                    pynvml.NVML_CLOCK_SM))}
    except Exception:  # noqa: BLE001 — a reading the driver refused is no reading
        return None
    held = _held_ns(handle)
    if held is not None:
        read["held_ns"] = held
    return read


def process_device_bytes(device: str, env: dict | None = None) -> dict[int, int] | None:
    """Each process's device memory on the GPU behind ``device`` (as a worker with ``env``
    sees it), by pid, from NVML with no CUDA context: its context, libraries and allocator
    cache as well as its tensors. None on CPU, for a MIG instance, or without NVML; a process
    whose reading NVML withholds is left out."""
    handle = _whole_gpu_handle(device, env)
    if handle is None:
        return None
    try:
        import pynvml

        running = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:  # noqa: BLE001 — a reading the driver refused is no reading
        return None
    # (a driver and a binding whose structures differ scramble the fields: such readings out)
    return {int(p.pid): int(p.usedGpuMemory) for p in running
            if isinstance(getattr(p, "usedGpuMemory", None), int) and int(p.pid) > 0
            and 0 < p.usedGpuMemory < 1 << 40}


def _held_ns(handle) -> int | None:
    """How long (ns, since the driver loaded) the power and thermal policies have held the
    GPU's clocks below those asked for: NVML's violation counters, summed. None where either
    cannot be read (not every GPU keeps them)."""
    try:
        import pynvml

        return sum(int(pynvml.nvmlDeviceGetViolationStatus(handle, policy).violationTime)
                   for policy in (pynvml.NVML_PERF_POLICY_POWER,
                                  pynvml.NVML_PERF_POLICY_THERMAL))
    except Exception:  # noqa: BLE001 — no counter: no reading
        return None
