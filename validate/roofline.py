"""Roofline lower bound: the fastest a problem could run on a device, from its flops and bytes.

``bound_ms = max(flops / peak_flops, bytes / peak_bandwidth)`` where ``bytes`` is the minimum
traffic (inputs + parameters + outputs, each read or written once) and the peaks are the device's
dense datasheet rates. The bound must hold for any kernel that passes the grader, so the compute
peak is the fastest path such a kernel may take: TF32 tensor cores for float32 (eager cuDNN
convolutions use TF32 already, and the calibrated tolerance then admits it), fp16/bf16 tensor
cores for half types, FP64 tensor cores for float64. ``headroom = eager_ms / bound_ms`` says how
far PyTorch eager is from the bound (>= 1 unless the table is wrong for the device).

Devices are matched by name; an unknown device falls back to ``GENERIC`` (rates of a recent
data-center GPU) and says so in ``source``.
"""
from __future__ import annotations

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
