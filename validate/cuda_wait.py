"""How a worker's CPU thread waits for its GPU work: the CUDA context's scheduling flag.

The driver's default (``auto``) spins a thread that waits for the device (a synchronize, a copy
to the host, an ``.item()``) wherever the process has fewer contexts than the host has cores,
which is every worker here: a worker waiting its turn on a GPU shared with other workers burns
a core for as long as it waits, and the cores it burns are the ones the other workers, the
grading process and the timing window's host need. ``KERNELMILL_CUDA_WAIT`` in a worker's
environment picks the flag its context is made with: ``block`` (the thread sleeps until the
device is done; woken within tens of µs), ``yield`` (spins, giving way to other threads),
``spin``; unset or anything else leaves the driver's choice. A timing window spins whatever
was asked (``spinning``): an event recorded after a synchronize would time a sleeper's
wake-up, so ``block`` is asked only of a driver that can change a live context's flag.

Worker-side: the standard library and torch only (``ctypes`` on the driver's library).
"""
from __future__ import annotations

import contextlib
import ctypes
import os

WAIT_VAR = "KERNELMILL_CUDA_WAIT"
# CU_CTX_SCHED_* (cuda.h): the low three bits of a context's flags
SCHED_FLAGS = {"auto": 0x0, "spin": 0x1, "yield": 0x2, "block": 0x4}
SCHED_MASK = 0x7


_DRIVER: list = []  # the driver's library, loaded once (None: none here)


def _driver():
    if not _DRIVER:
        try:
            _DRIVER.append(ctypes.CDLL("libcuda.so.1"))
        except OSError:
            _DRIVER.append(None)
    return _DRIVER[0]


def own_function(restype, argtypes: tuple, *names: str):
    """The first of the driver's functions ``names`` it has, as a function pointer of the
    caller's own (``CFUNCTYPE`` over its address): no attribute of the shared library object
    (``errcheck``, a rebound name) is read when it is called; None where the driver has none."""
    driver = _driver()
    found = next((f for f in (getattr(driver, n, None) for n in names) if f is not None),
                 None) if driver is not None else None
    if found is None:
        return None
    return ctypes.CFUNCTYPE(restype, *argtypes)(ctypes.cast(found, ctypes.c_void_p).value)


def _can_change_live(driver) -> bool:
    """The driver has ``cuCtxGetFlags`` and ``cuCtxSetFlags`` (CUDA 12.1 on)."""
    try:
        return bool(driver.cuCtxGetFlags and driver.cuCtxSetFlags)
    except AttributeError:
        return False


def wanted() -> str | None:
    """The wait asked for in this process's environment (None: the driver's choice)."""
    mode = os.environ.get(WAIT_VAR, "").strip().lower()
    return mode if mode in SCHED_FLAGS and mode != "auto" else None


def _set_primary_flags(driver, flags: int) -> None:
    """Every visible device's primary context to be made with ``flags`` (before it is)."""
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return
    for ordinal in range(count.value):
        device = ctypes.c_int(0)
        if driver.cuDeviceGet(ctypes.byref(device), ordinal) == 0:
            driver.cuDevicePrimaryCtxSetFlags_v2(device, ctypes.c_uint(flags))


def current() -> str | None:
    """The scheduling flag of the calling thread's current context (None: no context, or the
    driver could not say)."""
    driver = _driver()
    flags = ctypes.c_uint(0)
    if driver is None or driver.cuCtxGetFlags(ctypes.byref(flags)) != 0:
        return None
    sched = flags.value & SCHED_MASK
    return next((name for name, value in SCHED_FLAGS.items() if value == sched), None)


def init_cuda(torch) -> None:
    """``torch``'s CUDA context made current on this thread with the wait this process's
    environment asks for. A context made before (a spare worker's, under another setting) has
    its flag changed in place (``cuCtxSetFlags``, drivers of CUDA 12.1 on). A driver that
    refuses leaves its default: the wait is a cost, never a verdict."""
    mode = wanted()
    driver = _driver() if mode else None
    if driver is not None and not _can_change_live(driver):
        driver = None  # no window could spin again: the driver's choice stays
    if driver is not None:
        try:
            _set_primary_flags(driver, SCHED_FLAGS[mode])
        except (AttributeError, OSError):
            driver = None
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    if driver is not None:
        try:
            flags = ctypes.c_uint(0)
            if driver.cuCtxGetFlags(ctypes.byref(flags)) == 0 and \
                    flags.value & SCHED_MASK != SCHED_FLAGS[mode]:
                driver.cuCtxSetFlags(ctypes.c_uint((flags.value & ~SCHED_MASK)
                                                   | SCHED_FLAGS[mode]))
        except (AttributeError, OSError):
            pass


@contextlib.contextmanager
def spinning():
    """The calling thread's CUDA context spins while it waits for the device for the span (a
    timing window: ``Timer``'s CUDA-event samples record their end after a synchronize, which
    would count a sleeping waiter's wake-up), its flag put back after. Nothing where the
    context already spins, or where the driver cannot change a live context's flag."""
    driver, before = _driver(), ctypes.c_uint(0)
    changed = False
    try:
        if driver is not None and _can_change_live(driver) and \
                driver.cuCtxGetFlags(ctypes.byref(before)) == 0 and \
                before.value & SCHED_MASK not in (SCHED_FLAGS["spin"],):
            changed = driver.cuCtxSetFlags(ctypes.c_uint(
                (before.value & ~SCHED_MASK) | SCHED_FLAGS["spin"])) == 0
    except (AttributeError, OSError):
        changed = False
    try:
        yield
    finally:
        if changed:
            driver.cuCtxSetFlags(before)
