"""Which verdicts a rerun of a batch grades again: those a retry may change (a timeout, a kill
from outside, a failed timing window or reference run), with no hack found, at most
``MAX_ATTEMPTS`` gradings of one submission; none of them is served from the verdict cache."""
from __future__ import annotations

_TRANSIENT = ("SIGKILL", "out of memory", "zygote")


def transient(verdict: dict) -> bool:
    """A verdict that may come out differently on a retry (a timeout, a kill from outside, a
    timing window that failed): graded again next time rather than served from the cache. A
    timeout is the harness's flag (``error.timed_out``), not words an answer can raise."""
    error = verdict.get("error") or {}
    message = str(error.get("message", ""))
    return (error.get("timed_out") is True or any(marker in message for marker in _TRANSIENT)
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
    """Which grading of its submission a verdict row is (``attempt``; 1 when absent)."""
    try:
        return max(1, int(row.get("attempt", 1)))
    except (TypeError, ValueError):
        return MAX_ATTEMPTS  # unreadable: not redone
