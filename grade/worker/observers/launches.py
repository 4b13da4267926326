"""Triton launches: counted once a launch ran a program (``_install_triton_hook``), each in a
witness range named after its kernel, skipped in the ghost call. The launch wrapper's code
(``_LAUNCH_CODES``) is the only code the sealed hook lets open or close a launch. Triton's
compiles, where the task allows it (``COMPILE_ASIDE``), step the worker's GPU work aside for
their host work (``_install_compile_aside``)."""
from __future__ import annotations

import threading
import types

from kernelmill.grade.witness import Witness, dispatch_state
from kernelmill.validate.harness_worker import (
    ASIDE_REPORTS,
    ASIDE_SENDER_EVENT,
    FRAME_EVENT,
    KIND_REPORT,
)

from ..guards.originals import _ORIGINALS, _callable, _getattr_static, _isinstance, _type
from .counts import _audit_event
from .host_memory import _count_foreign
from .optrace import _spans


def _kernel_name(jit_function) -> str:
    """The name Triton compiles a JIT function's kernel under: the JIT function's own
    ``__name__`` (``ASTSource.name``), read without running any candidate code; "" when it is
    not a plain string."""
    name = _getattr_static(jit_function, "__name__", None)
    return name if _type(name) is str else ""


class _GridSeen:
    """A launch's callable grid, called as Triton calls it (once, with its arguments); keeps
    the grid it returned in ``shape``."""
    __slots__ = ("grid", "shape")

    def __init__(self, grid, shape: list):
        self.grid, self.shape = grid, shape

    def __call__(self, meta):
        found = self.grid(meta)
        self.shape.append(found)
        return found


def _exact_int_types() -> frozenset:
    """The types a grid extent may have and be read: Python's and NumPy's own integers (exact
    types, no subclass)."""
    import numpy

    found = {int, bool}
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "intc", "uintc", "int_", "uint", "longlong", "ulonglong"):
        kind = getattr(numpy, name, None)
        if _type(kind) is type:
            found.add(kind)
    return frozenset(found)


_GRID_INTS = _exact_int_types()


def _any_program(shape: list) -> bool:
    """Whether a launch's grid (``shape``: what it was, once known) has a program: False only
    for a grid of integers with a zero (or negative) extent."""
    if not shape:
        return True
    grid = shape[-1]
    grid = grid if _type(grid) in (tuple, list) else (grid,)
    extents = [int(g) if _type(g) in _GRID_INTS else None for g in grid[:3]]
    # an extent that is no integer (a tensor worth 0 launches nothing) is not read: such a
    # launch does not count; nor is one of a subclass of int, whose own
    # comparisons or conversions could answer differently from what Triton's launcher reads
    return bool(extents) and all(g is not None and g > 0 for g in extents)


# Triton's interpreter (CPU) patches triton.language's functions for the length of a launch and
# restores them after: two launches at once from two threads (a submission's own thread beside
# its forward) unpatch each other mid-kernel ("Cannot call @triton.jit'd outside of JIT
# functions") and the run dies in whatever stage it was, losing what it had observed. Interpreted
# launches take turns.
_INTERPRETED = threading.Lock()


def _install_triton_hook() -> bool:
    """Count launches (not warm-ups) of Triton kernels, compiled or interpreted."""
    try:
        from triton.runtime import jit
    except Exception:  # noqa: BLE001 — no Triton: extensions are the only custom kernels
        return False
    classes = [jit.JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except Exception:  # noqa: BLE001
        pass
    for cls in classes:
        original = cls.run
        serial = _INTERPRETED if cls is not jit.JITFunction else None

        def run(self, *args, grid, warmup, _original=original, _serial=serial, **kwargs):
            seen: list = []
            shape: list = []  # the grid Triton launched (a callable grid's result, once)
            if _callable(grid):
                grid = _GridSeen(grid, shape)
            else:
                shape.append(grid)
            if not warmup:
                _count_foreign([*args, *kwargs.values()])
                _audit_event("kernelmill.launch", "launches", _spans([*args, *kwargs.values()]),
                             dispatch_state(), seen)
                if "skip" in seen:  # the ghost call: skipped, counted as ghosted
                    return None
            _audit_event("kernelmill.in_launch", 1)
            try:
                with Witness.launch(_kernel_name(self)):
                    if _serial is None:
                        launched = _original(self, *args, grid=grid, warmup=warmup, **kwargs)
                    else:
                        with _serial:
                            launched = _original(self, *args, grid=grid, warmup=warmup,
                                                 **kwargs)
            finally:
                _audit_event("kernelmill.in_launch", -1)
            # counted once it ran: a pre-run hook of the submission's can make a launch raise
            # before any program runs, and its forward catch the error ("1 launch" a call, no
            # Triton program ever run); and only if it ran a program: an empty grid launches
            # nothing (one launch a call kept that way while a cached answer is served)
            if "active" in seen and _any_program(shape):
                _audit_event("kernelmill.launched", 1)
            return launched

        cls.run = run
        _ORIGINALS[f"{cls.__name__}.run"] = (cls, "run", run)
    return True


# The launch wrapper's code (the only code that may open a launch in the sealed hook)
_LAUNCH_CODES = frozenset(const for const in _install_triton_hook.__code__.co_consts
                          if _isinstance(const, types.CodeType) and const.co_name == "run")


# Set by the candidate task while its first calls run under a shared hold that may step aside
# for other grades' windows (before its own window), else None: {"receive": the control pipe's
# reader, "stopped": [False], "depth": [0]}. Read by the compile wrapper alone.
COMPILE_ASIDE: dict = {"on": None}
_ASIDE, _BETWEEN = ASIDE_REPORTS


def _install_compile_aside(synchronize, capturing, clock) -> bool:
    """Wrap Triton's compile of a kernel not in its cache (``JITFunction._do_compile``): while
    ``COMPILE_ASIDE`` is on, the worker reports that it is aside (the parent counts it as
    kept: another grade's window may take the GPU while the compile, host work, runs: the
    first call's compiles held the GPU shared for 1.2-2.2 s, and a window asked meanwhile waited
    for them), compiles, and reports the point after the compile, where it waits for the
    parent's ``go`` before the launch (``stop`` there: the window was called off; the task
    checks and is not timed). The channel's writer sends the two reports only from this
    wrapper's code, in turn, each after it synchronised the device itself (``synchronize``),
    and keeps when each aside began and ended by ``clock``: the witness holds the worker's
    kernels to those spans (``Witness.aside_spans_ns``), whatever a submission did to this
    wrapper (its closure is within a submission's reach). Not while the stream captures a
    graph (``capturing``: a synchronize there fails the capture), nor within an aside. Called
    before the candidate's import, and only for a run that steps compiles aside."""
    try:
        from triton.runtime import jit
    except Exception:  # noqa: BLE001 — no Triton: no compile to step aside for
        return False
    original = _getattr_static(jit.JITFunction, "_do_compile", None)
    if not _callable(original):
        return False
    state_box, send, event, kind = COMPILE_ASIDE, _audit_event, FRAME_EVENT, KIND_REPORT
    aside, between = _ASIDE, _BETWEEN

    def _do_compile(self, *args, **kwargs):
        state = state_box["on"]
        if state is None or state["stopped"][0] or state["depth"][0] or capturing():
            return original(self, *args, **kwargs)
        send(event, kind, aside)
        state["depth"][0] += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            state["depth"][0] -= 1
            send(event, kind, between)
            if state["receive"]().strip() != "go":
                state["stopped"][0] = True  # "stop", or the parent gone: checked, not timed

    # a code object of its own, made now: the one registered is this process's wrapper alone,
    # not the same code of a wrapper made later from this module
    wrapper = types.FunctionType(_do_compile.__code__.replace(), _do_compile.__globals__,
                                 _do_compile.__name__, None, _do_compile.__closure__)
    _audit_event(ASIDE_SENDER_EVENT, wrapper.__code__, synchronize, clock)
    jit.JITFunction._do_compile = wrapper
    _ORIGINALS["JITFunction._do_compile"] = (jit.JITFunction, "_do_compile", wrapper)
    return True
