"""The op trace (``_OpTrace``): every PyTorch op a call dispatched, the copies an output may be made
by, reads on the host of the inputs' values (and of anything computed from them), vendor work
(FLOPs, GEMMs with an empty or unit inner dimension), and which of the candidate's registered ops
are Python wrappers rather than kernels (``_python_only``)."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any

import torch
from kernelmill.core.taxonomy import GEMM_INNER_OPERAND
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry as _torch_flop_registry

from ..guards.originals import _getattr_static, _Tensor, _tensor_storage, _type, _weak_ref
from .counts import _observed
from .host_memory import _count_foreign

# The trace's tables, immutable, and bound into the functions that read them as keyword defaults
# (the worker's guarded pattern: a table read from a module's globals could be emptied in place
# or rebound by a submission, T-09, T-11). In the candidate's run the dispatch method is the
# private copy's own function, not torch's Dynamo wrapper around this module's
# (``guards.private``).
# torch's FLOP formulas (GEMMs, convolutions, attention), taken before any submission's import
_FLOP_FORMULAS = MappingProxyType(dict(_torch_flop_registry))
# GEMM-class ops, each with the index of the operand whose last dimension is the inner one
_GEMM_INNER = MappingProxyType(dict(GEMM_INNER_OPERAND))
# the copies an output may be made by (``output_by_copy``): every ATen copy the op taxonomy
# allows (``lift_fresh_copy`` included)
_COPY_OPS = frozenset({"copy_", "clone", "_to_copy", "_copy_from", "_copy_from_and_resize",
                       "copy", "lift_fresh_copy"})


# Dynamo's frame hook, bound at import (a builtin: nothing looked up in ``torch._dynamo``'s
# modules, whose names a submission could rebind); None on a torch without it
_SET_EVAL_FRAME = getattr(getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None),
                          "set_eval_frame", None)


class _OpTrace(TorchDispatchMode):
    def __init__(self, watched: list | None = None):
        super().__init__()
        self.ops: list[str] = []

        self.copy_spans: list[tuple[int, int]] = []
        # the memory of the call's floating-point inputs of more than one element: an element
        # of one read on the host (``.item()``, ``float(x[i])``, a comparison's truth) is a key
        # to the inputs' values (an answer cache keyed by a few such values)
        self.watched = list(watched or [])
        # and what any op wrote from that memory, while its storage is alive: a value of
        # the inputs carried anywhere (a copy, a fill, a view, an arithmetic op) is as good a
        # key (``clone``, ``fill_.Tensor``, ``lift_fresh_copy``)
        self.derived: list[tuple[int, int, Any]] = []
        self.input_reads = 0
        # vendor work: FLOPs by torch's formulas, and GEMMs whose inner dimension is 0 or 1
        # (an elementwise op in a GEMM's name: a ReLU run as ``_addmm_activation`` over an
        # empty inner dimension)
        self.flops = 0
        self.thin_gemms: list[str] = []

    def _touches_watched(self, tensor) -> bool:
        spans = _spans([tensor]) if _type(tensor) is _Tensor else _storage_spans(tensor)
        return any(lo < b and a < hi for lo, hi in spans for a, b in self.watched) or \
            any(lo < b and a < hi and ref() is not None  # the latest first: most ops read
                for lo, hi in spans for a, b, ref in reversed(self.derived))  # the op before's

    def _taint(self, func, args, kwargs, out) -> None:
        """Whatever an op returned or wrote (by its schema) is watched once any tensor or
        storage it was given touches watched memory."""
        given = _op_operands(args, kwargs)
        if not given or not any(self._touches_watched(value) for value in given):
            return
        written = [value for value in _op_outputs(out) if _type(value) is _Tensor]
        written.extend(_written_arguments(func, args, kwargs))
        for tensor in written:
            for lo, hi in _spans([tensor]):
                # alive while any tensor holds that memory (torch keeps one Python object per
                # storage while it lives): a temporary view's end does not end the watch
                self.derived.append((lo, hi, _weak_ref(_tensor_storage(tensor))))

    def _count_work(self, func, base: str, args, kwargs: dict, out, *,
                    _formulas=_FLOP_FORMULAS, _gemm_inner=_GEMM_INNER) -> None:
        formula = _formulas.get(getattr(func, "_overloadpacket", None))
        inner = _gemm_inner.get(base)
        if formula is not None:
            try:
                self.flops += int(formula(*args, **kwargs, out_val=out))
            except Exception:  # noqa: BLE001 — an operand the formula cannot read: not counted
                pass
        elif inner is not None and len(args) > inner + 1 and _type(args[inner]) is _Tensor \
                and _type(args[inner + 1]) is _Tensor:
            # a GEMM torch's formulas leave out (``addbmm``, ``addmv``, ``mv``, ``dot``: an
            # identity GEMM there cost nothing under the vendor-work cap, T-09): 2 x the inner
            # operand's elements x the other operand's last dimension (1 for a vector)
            other = args[inner + 1]
            width = 1 if other.dim() < 2 else other.shape[0] if base == "linear" else \
                other.shape[-1]
            self.flops += 2 * args[inner].numel() * width
        if inner is not None and len(args) > inner and _type(args[inner]) is _Tensor and \
                args[inner].dim() >= 1 and args[inner].shape[-1] <= 1:
            self.thin_gemms.append(str(func))

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None, *,
                           _eval_frame=_SET_EVAL_FRAME):
        """Each op traced with Dynamo's frame hook off (as torch's own wrapper, which the
        private copy does without, would): a forward that runs a ``torch.compile``d function
        would otherwise have Dynamo compile this method's frame with the submission's backend,
        its code run here while the op's mode is popped, untraced."""
        prior = _eval_frame(None) if _eval_frame is not None else None
        try:
            return self._traced(func, args, kwargs)
        finally:
            if _eval_frame is not None:
                _eval_frame(prior)

    def _traced(self, func, args, kwargs, *, _copy_ops=_COPY_OPS):
        name = str(func)
        self.ops.append(name)
        if self.watched and "_local_scalar_dense" in name and args and \
                _type(args[0]) is _Tensor:
            if self._touches_watched(args[0]):
                self.input_reads += 1
        out = func(*args, **(kwargs or {}))
        base = name.split(".")[1] if "." in name else ""  # aten.copy_.default: copy_
        self._count_work(func, base, args, kwargs or {}, out)
        if self.watched:
            self._taint(func, args, kwargs or {}, out)
        if base in _copy_ops and not _observed().get("in_launch"):
            target = args[0] if base == "copy_" and args else out
            self.copy_spans.extend(_spans([target]))
            _count_foreign([*args, out])
        return out


_UntypedStorage = torch.UntypedStorage
_TypedStorage = getattr(torch, "TypedStorage", None)
_ustorage_ptr = torch.UntypedStorage.data_ptr
_ustorage_nbytes = torch.UntypedStorage.nbytes


def _storage_spans(value) -> list[tuple[int, int]]:
    """The memory behind a storage handed to an op (exact storage types only)."""
    if _type(value) is _TypedStorage:
        value = _getattr_static(value, "_untyped_storage", None)
    if _type(value) is not _UntypedStorage or not _ustorage_nbytes(value):
        return []
    return [(_ustorage_ptr(value), _ustorage_ptr(value) + _ustorage_nbytes(value))]


def _op_operands(args, kwargs: dict) -> list:
    """The tensors and storages an op was given, one list or tuple deep."""
    found = []
    for value in (*args, *kwargs.values()):
        items = value if _type(value) in (list, tuple) else (value,)
        found.extend(item for item in items
                     if _type(item) in (_Tensor, _UntypedStorage, _TypedStorage))
    return found


def _op_outputs(out) -> list:
    return list(out) if _type(out) in (list, tuple) else [out]


def _written_arguments(func, args, kwargs: dict) -> list:
    """The tensors an op writes in place or as ``out=``, by its schema's alias annotations."""
    try:
        schema = func._schema.arguments
    except Exception:  # noqa: BLE001 — no schema: what it returned only
        return []
    written = []
    for index, argument in enumerate(schema):
        alias = argument.alias_info
        if alias is None or not alias.is_write:
            continue
        value = args[index] if index < len(args) else kwargs.get(argument.name)
        items = value if _type(value) in (list, tuple) else (value,)
        written.extend(item for item in items if _type(item) is _Tensor)
    return written


# TorchDispatchMode wraps __torch_dispatch__ in a lazy torch._dynamo.disable, whose first call
# imports torch._dynamo (seconds per worker). The method turns Dynamo's frame hook off itself:
# call it directly.
_inner = getattr(_OpTrace.__dict__["__torch_dispatch__"], "__wrapped__", None)
if _inner is not None:
    _inner.__dynamo_disable = _inner


_dispatch_dump = torch._C._dispatch_dump


def _python_only(op: str) -> bool:
    """An op the candidate registered whose every kernel is a Python function (``torch.library``'s
    ``impl`` or ``custom_op``: the dispatcher holds them boxed, with no native signature): it is a
    wrapper, not a kernel, and stands for none (such a body can compute the answer on the host,
    with no launch at all)."""
    parts = op.replace("::", ".", 1).split(".")
    if len(parts) < 2:
        return False
    name = f"{parts[0]}::{parts[1]}" + (f".{parts[2]}" if len(parts) > 2 and
                                         parts[2] != "default" else "")
    try:
        dump = _dispatch_dump(name)
    except Exception:  # noqa: BLE001 — not an op the dispatcher knows
        return False
    kernels = [line for line in dump.splitlines()
               if ": registered at " in line and not line.startswith("debug:")]
    return bool(kernels) and not any("unboxed" in line for line in kernels)


def _spans(values: list) -> list[tuple[int, int]]:
    return [span for value in values if _type(value) is _Tensor
            for span in _storage_spans(_tensor_storage(value))]


# bound at import, before any candidate code runs: ``torch._C``'s names can be rebound
_function_modes, _dispatch_modes = torch._C._len_torch_function_stack, \
    torch._C._len_torch_dispatch_stack


def active_modes() -> int:
    """Torch function/dispatch modes pushed by someone else (we push ours only while tracing)."""
    return int(_function_modes()) + int(_dispatch_modes())
