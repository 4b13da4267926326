"""Devices: which device a piece of work may use (slots), and what a device can do (peaks).

A slot is ``{"device": "cuda:0", "gpu": 3, "env": {"CUDA_VISIBLE_DEVICES": "3"}}``: the device as
the worker sees it, the physical GPU index, and the environment that pins a worker process to it.
Every backend hands one slot to each task; nothing here starts work.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

Slot = dict[str, Any]
TaskFn = Callable[[Any, Slot], Any]


def resolve_device(device: str = "auto") -> str:
    """``auto`` picks cuda when torch sees a GPU, else cpu."""
    if device != "auto":
        return device
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def _pinned(index: int) -> Slot:
    """The slot of the ``index``-th GPU this process sees. Under a ``CUDA_VISIBLE_DEVICES`` of
    its own, that is the list's ``index``-th entry (an index or a UUID), not the host's
    ``index``-th GPU: a run started on GPU 1 alone has its workers on GPU 1."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
               if v.strip()]
    name = visible[index] if index < len(visible) else str(index)
    return {"device": "cuda:0", "gpu": int(name) if name.isdigit() else name,
            "env": {"CUDA_VISIBLE_DEVICES": name}}


def device_slots(device: str, workers: int | None = None) -> list[Slot]:
    """One slot per visible GPU (pinned with CUDA_VISIBLE_DEVICES), or ``workers`` CPU slots."""
    device = resolve_device(device)
    if device.startswith("cuda"):
        import torch

        if ":" in device:
            indices = [int(device.split(":")[1])]
        else:
            indices = list(range(torch.cuda.device_count())) or [0]
        if workers:
            indices = indices[:workers] if workers <= len(indices) else \
                [indices[i % len(indices)] for i in range(workers)]
        return [_pinned(i) for i in indices]
    n = workers or max(1, min(2, usable_cores()))
    return [{"device": "cpu", "gpu": None, "env": {}} for _ in range(n)]


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (a container's cpuset, `taskset`),
    not the host's count, and no more than its cgroup's CPU quota allows (a container given
    ``--cpus 4`` on a 64-core host), so slots follow the share a job was given."""
    try:
        cores = len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity on this platform
        cores = os.cpu_count() or 1
    quota = cgroup_cpus()
    return max(1, min(cores, quota)) if quota else cores


def cgroup_cpus(root: str = "/sys/fs/cgroup", membership: str = "/proc/self/cgroup") -> int | None:
    """The CPUs this process's cgroup quota allows (rounded up), None without a quota: cgroup
    v2's ``cpu.max`` (``"QUOTA PERIOD"`` or ``"max PERIOD"``), else v1's ``cpu.cfs_quota_us``
    over ``cpu.cfs_period_us`` (-1: none), in the process's own cgroup, else at the root."""
    own_v2, own_v1 = "", ""
    try:
        for line in Path(membership).read_text().splitlines():
            _id, controllers, path = (line.split(":", 2) + ["", ""])[:3]
            if _id == "0" and controllers == "":
                own_v2 = path
            elif "cpu" in controllers.split(","):
                own_v1 = path
    except OSError:
        pass
    for folder in dict.fromkeys((Path(root + own_v2), Path(root))):
        try:
            quota, period = (folder / "cpu.max").read_text().split()[:2]
        except (OSError, ValueError):
            continue
        return _cpus(quota, period)
    for base in (Path(root) / "cpu", Path(root) / "cpu,cpuacct"):
        for folder in dict.fromkeys((Path(str(base) + own_v1), base)):
            try:
                quota = (folder / "cpu.cfs_quota_us").read_text().strip()
                period = (folder / "cpu.cfs_period_us").read_text().strip()
            except OSError:
                continue
            return _cpus(quota, period)
    return None


def _cpus(quota: str, period: str) -> int | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:  # "max": no quota
        return None
    return -(-q // p) if q > 0 and p > 0 else None


# -- peak rates ---------------------------------------------------------------------------------

# name substring -> peak rates (dense, no sparsity): FLOP/s by dtype class and bytes/s
# (the most specific name first: "H100 PCIe" before "H100")
PEAKS: list[tuple[str, dict[str, float]]] = [
    ("GH200", {"fp32": 67e12, "tf32": 494e12, "fp16": 989e12, "fp64": 67e12,
               "bandwidth": 4.0e12}),
    ("H200", {"fp32": 67e12, "tf32": 494e12, "fp16": 989e12, "fp64": 67e12,
              "bandwidth": 4.8e12}),
    ("H100 PCIe", {"fp32": 51e12, "tf32": 378e12, "fp16": 756e12, "fp64": 51e12,
                   "bandwidth": 2.0e12}),
    ("H100 NVL", {"fp32": 60e12, "tf32": 417e12, "fp16": 835e12, "fp64": 60e12,
                  "bandwidth": 3.9e12}),
    ("H100", {"fp32": 67e12, "tf32": 494e12, "fp16": 989e12, "fp64": 67e12,
              "bandwidth": 3.35e12}),
    ("H800", {"fp32": 67e12, "tf32": 494e12, "fp16": 989e12, "fp64": 1e12,
              "bandwidth": 3.35e12}),
    ("GB200", {"fp32": 80e12, "tf32": 1250e12, "fp16": 2500e12, "fp64": 45e12,
               "bandwidth": 8.0e12}),
    ("B200", {"fp32": 80e12, "tf32": 1100e12, "fp16": 2250e12, "fp64": 40e12,
              "bandwidth": 8.0e12}),
    ("A100-SXM4-80GB", {"fp32": 19.5e12, "tf32": 156e12, "fp16": 312e12, "fp64": 19.5e12,
                        "bandwidth": 2.04e12}),
    ("A100", {"fp32": 19.5e12, "tf32": 156e12, "fp16": 312e12, "fp64": 19.5e12,
              "bandwidth": 1.56e12}),
    ("L40S", {"fp32": 91.6e12, "tf32": 183e12, "fp16": 362e12, "fp64": 1.4e12,
              "bandwidth": 0.864e12}),
    ("A10G", {"fp32": 31.2e12, "tf32": 62.5e12, "fp16": 125e12, "fp64": 1.0e12,
              "bandwidth": 0.6e12}),
    ("L4", {"fp32": 30.3e12, "tf32": 60e12, "fp16": 121e12, "fp64": 0.5e12,
            "bandwidth": 0.3e12}),
    ("MI300", {"fp32": 163e12, "tf32": 654e12, "fp16": 1307e12, "fp64": 163e12,
               "bandwidth": 5.3e12}),
    ("V100", {"fp32": 15.7e12, "tf32": 15.7e12, "fp16": 125e12, "fp64": 7.8e12,
              "bandwidth": 0.9e12}),
    ("T4", {"fp32": 8.1e12, "tf32": 8.1e12, "fp16": 65e12, "fp64": 0.25e12,
            "bandwidth": 0.32e12}),
    ("RTX 4090", {"fp32": 82.6e12, "tf32": 82.6e12, "fp16": 165e12, "fp64": 1.3e12,
                  "bandwidth": 1.0e12}),
]
GENERIC = {"fp32": 20e12, "tf32": 150e12, "fp16": 300e12, "fp64": 10e12, "bandwidth": 1.5e12}


def device_peaks(name: str | None) -> tuple[dict[str, float], str]:
    """(peaks, source) for a device name such as ``NVIDIA H100 80GB HBM3``."""
    for key, peaks in PEAKS:
        if name and key.lower() in name.lower():
            return peaks, f"table:{key}"
    return GENERIC, "fallback:generic"
