"""A trial's inputs: drawn from the problem's ``get_inputs`` under the parent's seed, transformed
by the trial's distribution, moved between the host and the device."""
from __future__ import annotations

import torch
from kernelmill.validate.distributions import DISTRIBUTIONS

from .guards.originals import _Tensor, _tensor_detach, _tensor_to, _type
from .seeding import _manual_seed

# ---------------------------------------------------------------- building sources

def to_device(values: list, device: str) -> list:
    return [_tensor_to(v, device, copy=True) if _type(v) is _Tensor else v for v in values]


def to_cpu(value):
    return _tensor_to(_tensor_detach(value), "cpu", copy=True)


# Input distributions beyond the problem's own draws (T-19): the table the validator measured
# each problem under (``validate.distributions``). A trial whose reference is not finite is left
# out (``tasks._reference_trials``).
def transform(values: list, dist: str) -> list:
    """A trial's inputs under distribution ``dist`` (``DISTRIBUTIONS``)."""
    scale, shift = DISTRIBUTIONS[dist]
    if dist == "natural":
        return values
    out = []
    for value in values:
        if _type(value) is _Tensor and value.is_floating_point():
            value = value * scale + shift if shift else value * scale
        out.append(value)
    return out


def draw_inputs(ns: dict, device: str, seed: int) -> list:
    """A trial's inputs: the problem's ``get_inputs()`` under ``seed``, its tensors made on
    the device the trial runs on (the same distributions; a GPU draws 16 M normal values in
    microseconds where the host took 0.15 s, times every tensor, trial and group member, all
    grades of a GPU sharing its host's cores). A ``get_inputs`` that needs host tensors (it
    calls ``.numpy()``, say) draws them on the host."""
    _manual_seed(seed)
    if device.startswith("cuda"):
        try:
            with torch.device(device):
                return list(ns["get_inputs"]())
        except Exception:  # noqa: BLE001 — drawn on the host below, as written
            _manual_seed(seed)
    return list(ns["get_inputs"]())
