"""A trial's inputs: drawn from the problem's ``get_inputs`` under the parent's seed, transformed
by the trial's distribution, moved between the host and the device."""
from __future__ import annotations

import torch
from kernelmill.validate.distributions import DISTRIBUTIONS

from .guards.originals import (
    _empty,
    _Tensor,
    _tensor_clone,
    _tensor_copy,
    _tensor_detach,
    _tensor_to,
    _type,
)
from .seeding import _manual_seed

# ---------------------------------------------------------------- building sources

def to_device(values: list, device: str) -> list:
    return [_tensor_to(v, device, copy=True) if _type(v) is _Tensor else v for v in values]


def to_cpu(value):
    return _tensor_to(_tensor_detach(value), "cpu", copy=True)


class Staging:
    """One page-locked host buffer per worker that device tensors are copied into to be read on
    the host (``look``): the GPU's copy engine writes it directly, where a copy to new pageable
    memory is the driver's staged copy plus the CPU's page faults and memcpy (34% of a
    candidate worker's CPU, sampled with py-spy at KernelBench sizes on an H200 host: its
    inputs copied after every call to be compared with those sent, and outputs that are the
    same bits as one already shipped). Defined here, in the package the candidate's run calls
    private copies of (``guards.private``)."""

    MAX_BYTES = 256 << 20  # the largest buffer

    def __init__(self) -> None:
        self.buffer = None

    def reserve(self, nbytes: int) -> None:
        """The buffer, for tensors of up to ``nbytes`` (at most ``MAX_BYTES``), allocated and
        copied into once now: the first page-locked allocation or copy starts a runtime
        thread, so a worker that watches for new threads reserves it before its snapshot of
        them, once (made at the first look, it read as the candidate's thread in the next
        call: every honest answer flagged, H200)."""
        if self.buffer is None and nbytes > 0 and torch.cuda.is_initialized():
            self.buffer = _empty(min(nbytes, self.MAX_BYTES), dtype=torch.uint8,
                                 pin_memory=True)
            probe = _empty(min(nbytes, self.MAX_BYTES, 1 << 16), dtype=torch.uint8,
                           device="cuda")
            self.look(probe)
            torch.cuda.synchronize()

    def look(self, value):
        """A host tensor with ``value``'s bytes, valid until the next ``look``: a view of the
        buffer for a contiguous CUDA tensor that fits it, else its own copy (``to_cpu``)."""
        nbytes = value.numel() * value.element_size()
        if self.buffer is None or value.device.type != "cuda" or not nbytes or \
                nbytes > self.buffer.numel() or not value.is_contiguous():
            return to_cpu(value)
        try:
            view = self.buffer[:nbytes].view(value.dtype).view(value.shape)
        except RuntimeError:  # a dtype bytes do not view as
            return to_cpu(value)
        _tensor_copy(view, _tensor_detach(value))
        return view

    def keep(self, looked):
        """A host tensor of its own for what ``look`` returned (kept past the next look)."""
        if self.buffer is not None and looked.untyped_storage().data_ptr() == \
                self.buffer.untyped_storage().data_ptr():
            return _tensor_clone(looked)
        return looked


STAGING = Staging()


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
