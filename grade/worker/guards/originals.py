"""The functions the worker relies on, bound at import, before any candidate code runs.

The worker calls these bindings (``_perf_counter``, ``_tensor_copy``, ``_set_grad_enabled``, ...),
never a name looked up on torch or the standard library at call time, which a submission can
rebind. ``_GUARDED`` lists (owner, attribute) pairs whose object must still be the original after
the candidate ran, and ``_ORIGINALS`` holds them (and every hook the observers install, added as
they install it) for ``patches.patched_functions``.
"""
from __future__ import annotations

import builtins
import gc
import inspect
import os
import statistics
import sys
import threading
import time
import weakref

import torch
from kernelmill.validate import measure as M

# ---------------------------------------------------------------- originals, bound at import

_perf_counter = time.perf_counter
_enumerate_threads = threading.enumerate
_getrefcount = sys.getrefcount
_Tensor = torch.Tensor
_tensor_to = torch.Tensor.to
_tensor_detach = torch.Tensor.detach
_tensor_copy = torch.Tensor.copy_
_tensor_clone = torch.Tensor.clone
_tensor_storage = torch.Tensor.untyped_storage
_tensor_reshape = torch.Tensor.reshape
_tensor_view = torch.Tensor.view
_tensor_narrow = torch.Tensor.narrow
_no_torch_function = torch._C.DisableTorchFunction  # no subclass's or mode's handler
_generator_seed = torch._C.Generator.manual_seed
_cpu_generator = torch.default_generator
_Generator = torch._C.Generator
_cuda_seed_all = torch.cuda.manual_seed_all
_set_versions = getattr(torch._C._autograd, "_unsafe_set_version_counter", lambda *_: None)
_is_capturing = torch.cuda.is_current_stream_capturing
_empty = torch.empty
_zero = torch.Tensor.zero_
_no_grad = torch.no_grad  # looked up by every call: a submission replaced it (object.__setattr__)
_is_grad_enabled = torch._C.is_grad_enabled
_set_grad_enabled = torch._C._set_grad_enabled
_full = torch.full
_tensor_set = torch.Tensor.set_
_tensor_fill = torch.Tensor.fill_
_median = statistics.median
_listdir = os.listdir
_type = type
_callable = callable
_isinstance = isinstance
_getattr_static = inspect.getattr_static
_weak_ref = weakref.ref
_gc_disable, _gc_enable, _gc_isenabled = gc.disable, gc.enable, gc.isenabled

_GUARDED = (  # (owner, attribute): timing, synchronisation, comparison and copy functions
    (time, "perf_counter"), (time, "perf_counter_ns"), (time, "monotonic"), (time, "time"),
    (time, "process_time"), (threading, "enumerate"), (os, "listdir"), (os, "getpid"),
    (torch, "allclose"), (torch, "equal"), (torch, "isclose"), (torch, "manual_seed"),
    (torch, "empty"), (torch, "save"), (torch.testing, "assert_close"),
    (torch.cuda, "synchronize"), (torch.cuda, "Event"), (torch.cuda, "current_stream"),
    (torch.cuda.Event, "elapsed_time"), (torch.cuda.Event, "record"),
    (torch.cuda.Event, "synchronize"), (torch.Tensor, "to"), (torch.Tensor, "cpu"),
    (torch.Tensor, "clone"), (torch.Tensor, "copy_"), (torch.Tensor, "detach"),
    (torch.Tensor, "data_ptr"), (torch.Tensor, "untyped_storage"), (torch.Tensor, "__eq__"),
    (torch.Tensor, "__torch_function__"), (torch.Tensor, "__reduce_ex__"),
    (torch.nn.Module, "__call__"), (torch.nn.Module, "_call_impl"), (torch.Tensor, "zero_"),
    (statistics, "median"), *M.GUARDED,
    *((builtins, name) for name in ("min", "max", "len", "sorted", "float", "int", "isinstance",
                                    "type", "zip", "any", "all", "range", "sum", "open",
                                    "getattr", "setattr", "print", "bool", "str")),
)


def _raw(owner, name, _getattr=getattr):
    """The attribute as stored (a class's own dict entry, not a fresh bound method)."""
    if _isinstance(owner, type):
        for klass in owner.__mro__:
            if name in klass.__dict__:
                return klass.__dict__[name]
        return None
    return _getattr(owner, name, None)


_ORIGINALS = {f"{getattr(owner, '__name__', owner)}.{name}": (owner, name, _raw(owner, name))
              for owner, name in _GUARDED}
