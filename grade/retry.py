"""Which verdicts a rerun of a batch grades again: those a retry may change (a timeout, a kill
from outside, a failed timing window or reference run), with no hack found, at most
``MAX_ATTEMPTS`` gradings of one submission. A verdict a retry may change is never stored in
the verdict cache. A run out of memory while its grade shared the GPU is graded again alone
within its grade already (``admitted.admitted_grade``): what it says then is final."""
from __future__ import annotations

# What PyTorch and the CUDA libraries say when the device's memory ran out (a worker killed by
# the host's out-of-memory killer is another matter: ``transient``)
DEVICE_SHORT = ("cuda out of memory", "outofmemoryerror", "cuda error: out of memory",
                "cudaerrormemoryallocation", "cublas_status_alloc_failed")


def device_short(text) -> bool:
    """Whether ``text`` says the device's memory ran out, in torch's or CUDA's words."""
    return bool(text) and any(mark in str(text).lower() for mark in DEVICE_SHORT)


def transient(verdict: dict) -> bool:
    """A verdict that may come out differently on a retry: graded again next time rather than
    served from the cache. Only the harness's own words count, never text an answer can
    raise: a timeout (``error.timed_out``), a worker killed by SIGKILL with no word of its own
    (``error.signal``: the kernel's out-of-memory killer, or the answer killing itself: it
    gets one retry, no better than an honest one's), a timing window that failed
    (``timings.error``)."""
    error = verdict.get("error") or {}
    return (error.get("timed_out") is True or error.get("signal") == "SIGKILL"
            or bool((verdict.get("timings") or {}).get("error")))


# Gradings of one submission a rerun may make at most (the first and one retry): a verdict that
# comes out the same way again (a kernel that hangs, words an answer raises) is then final.
MAX_ATTEMPTS = 2


def to_redo(row: dict) -> bool:
    """A verdict row a rerun grades again rather than skips: one ``transient`` or whose
    reference failed (neither is cached either), in which no hack was found, not yet graded
    ``MAX_ATTEMPTS`` times (its ``attempt``, 1 when absent)."""
    if row.get("hacks") or attempt_of(row) >= MAX_ATTEMPTS:
        return False
    return bool(row.get("reference_failed")) or transient(row)


def attempt_of(row: dict) -> int:
    """Which grading of its submission a verdict row is (``attempt``; 1 when absent), one more
    where its grade graded it again alone (``profile.rerun_alone``: that was its retry)."""
    again = bool((row.get("profile") or {}).get("rerun_alone")) \
        if isinstance(row.get("profile"), dict) else False
    try:
        return max(1, int(row.get("attempt", 1))) + again
    except (TypeError, ValueError, OverflowError):
        return MAX_ATTEMPTS  # unreadable: not redone
