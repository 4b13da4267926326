"""Roofline lower bound: the fastest a problem could run on a device, from its flops and bytes.

``bound_ms = max(flops / peak_flops, bytes / peak_bandwidth)`` where ``bytes`` is the minimum
traffic (inputs + parameters + outputs, each read or written once) and the peaks are the device's
dense datasheet rates. The bound must hold for any kernel that passes the grader, so the compute
peak is the fastest path such a kernel may take: TF32 tensor cores for float32 (workers compute
fp32 as IEEE fp32, but a TF32 kernel passes where its error fits the problem's tolerance), fp16/bf16 tensor
cores for half types, FP64 tensor cores for float64. ``headroom = eager_ms / bound_ms`` says how
far PyTorch eager is from the bound (>= 1 unless the table is wrong for the device).

The peaks come from the one device table, ``kernelmill.core.devices.PEAKS``; an unknown device
falls back to generic rates of a recent data-center GPU and says so in ``source``.
"""
from __future__ import annotations

from kernelmill.core.devices import device_peaks


def _dtype_class(dtype: str | None) -> str:
    if dtype in ("float16", "bfloat16", "half"):
        return "fp16"
    if dtype == "float64":
        return "fp64"
    return "tf32"


def roofline(flops: int | None, nbytes: int | None, *, dtype: str | None, device_name: str | None,
             eager_ms: float | None = None) -> dict:
    """The lower-bound time (ms), which side bounds it, and eager's headroom over it."""
    peaks, source = device_peaks(device_name)
    compute_ms = (flops or 0) / peaks[_dtype_class(dtype)] * 1e3
    memory_ms = (nbytes or 0) / peaks["bandwidth"] * 1e3
    bound_ms = max(compute_ms, memory_ms)
    headroom = (eager_ms / bound_ms) if eager_ms and bound_ms > 0 else None
    return {"roofline_ms": bound_ms if bound_ms > 0 else None, "compute_ms": compute_ms,
            "memory_ms": memory_ms, "bound": "compute" if compute_ms >= memory_ms else "memory",
            "intensity": (flops or 0) / nbytes if nbytes else None, "headroom": headroom,
            "source": source}
