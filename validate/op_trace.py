"""The aten ops a forward runs, recorded in the probe's worker (its trace stage and ablations).

``_OpRecorder`` records the ops in order and which non-affine ones act on data derived from the
inputs; ``_trace`` runs one forward under it and the flop counter; ``_compute_ops`` gives the
compute ops alone (data movement left out), which tell an ablation that removed work from one
that removed nothing.

Imports only torch, the standard library, ``checks``, ``measure`` and ``forwards``.
"""
from __future__ import annotations

from . import checks as C
from . import measure as M
from .forwards import _clone


class _OpRecorder:
    """TorchDispatchMode that records the aten ops forward runs, in order, and which non-affine
    ops act on data derived from the inputs (taint tracking: an op's outputs are tainted when
    any tensor argument is). ``x * sigmoid(w)`` is affine in ``x``; ``relu(x)`` is not."""

    def __new__(cls, inputs: list):
        import weakref

        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        class Recorder(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.ops: list[str] = []
                self.input_nonaffine: list[str] = []
                self._tainted: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
                for t in inputs:
                    if isinstance(t, torch.Tensor):
                        self._tainted[id(t)] = t

            def _is_tainted(self, t) -> bool:
                return self._tainted.get(id(t)) is t

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = str(func.overloadpacket)
                self.ops.append(name)
                out = func(*args, **(kwargs or {}))
                tensors = [t for t in tree_leaves((args, kwargs or {}))
                           if isinstance(t, torch.Tensor)]
                tainted = sum(self._is_tainted(t) for t in tensors)
                if tainted:
                    for t in tree_leaves(out):
                        if isinstance(t, torch.Tensor):
                            self._tainted[id(t)] = t
                    if C.compute_ops([name]) and (
                            not C.affine_by_construction([name])
                            or (tainted > 1 and C.op_base(name).rstrip("_") in ("mul", "div"))):
                        self.input_nonaffine.append(name)
                return out

        return Recorder()


def _trace(model, inputs: list, device: str,
           copies: bool = True) -> tuple[list[str], int | None, list[str]]:
    """(aten ops in order, flops, non-affine ops applied to input-derived data)."""
    import torch

    flops = None
    args = _clone(inputs) if copies else inputs
    recorder = _OpRecorder(args)
    try:
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter, recorder:
            model(*args)
        flops = int(counter.get_total_flops())
    except Exception:  # noqa: BLE001 — flops are best effort; the trace alone still helps
        args = _clone(inputs) if copies else inputs
        recorder = _OpRecorder(args)
        with torch.no_grad(), recorder:
            model(*args)
    M.synchronize(device)
    return recorder.ops[:2000], flops, sorted(set(recorder.input_nonaffine))


def _compute_ops(model, inputs: list, copies: bool) -> list[str] | None:
    """The compute ops (data movement left out) one forward runs, in order; None when they
    cannot be recorded."""
    import torch

    try:
        recorder = _OpRecorder(_clone(inputs) if copies else inputs)
        with torch.no_grad(), recorder:
            model(*(_clone(inputs) if copies else inputs))
    except Exception:  # noqa: BLE001 — unrecorded: the ablation is judged on its output alone
        return None
    return C.compute_ops(recorder.ops)
