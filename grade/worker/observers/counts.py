"""The observers' counts, read out of the sealed audit hook.

What the observers count lives in the installed audit hook (``guards.audit._observe``), out of
every module's reach: the hooks report what they see as audit events (``kernelmill.*``) and the
harness reads copies (``_observed``). A flag a hook reads is a flag a submission that reaches the
hook's module can write (a call-in-progress flag cleared before computing on the host, the
hook's own reentrancy flag set to switch it off), so the installed hook reads its flags and
counts from its private namespace only.
"""
from __future__ import annotations

import sys

from kernelmill.grade.witness import dispatch_state

_audit_event = sys.audit
_COUNTED = ("launches", "ext_calls", "thread_starts", "dispatch_state", "host_access", "ghosted",
            "host_alias", "host_view", "foreign_memory", "threads_started")


def _observed() -> dict:
    """A copy of the sealed hook's counts (``_COUNTED``), its refusals and whether it is armed;
    zeros before it is installed."""
    box: list = []
    _audit_event("kernelmill.read", box)
    return box[0] if box else {**dict.fromkeys(_COUNTED, 0), "refused": [], "armed": False}


def _check_dispatch_state() -> None:
    """At every point we get control inside a call (a launch, an extension call, the end of
    forward) the thread's dispatch-key sets must be what they were when the call began: a
    guard that excludes the Python key (or any other) is how work is hidden from a trace."""
    _audit_event("kernelmill.state", dispatch_state())
