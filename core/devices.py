"""Devices and slots: which device a piece of work may use.

A slot is ``{"device": "cuda:0", "gpu": 3, "env": {"CUDA_VISIBLE_DEVICES": "3"}}``: the device as
the worker sees it, the physical GPU index, and the environment that pins a worker process to it.
Every backend hands one slot to each task; nothing here starts work.
"""
from __future__ import annotations

import os
from collections.abc import Callable
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
        return [{"device": "cuda:0", "gpu": i, "env": {"CUDA_VISIBLE_DEVICES": str(i)}}
                for i in indices]
    n = workers or max(1, min(2, os.cpu_count() or 1))
    return [{"device": "cpu", "gpu": None, "env": {}} for _ in range(n)]
