"""The checks every synthesized source passes before it is kept, with the reason when it fails.

1. ``check_source``: KernelBench format, parses, arities agree (curate/problem.py).
2. A full-size meta-device trace (synth/trace.py): it constructs and runs, shapes and dtypes agree.
3. The degeneracy rules (synth/degeneracy.py) over that trace.

``Rejected.label`` is a short, countable reason ("degenerate: identity_clamp", "trace: forward");
``Rejected.detail`` the full one-line message.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from kernelmill.core.errors import ProblemError
from kernelmill.core.problem import Problem, check_source

if TYPE_CHECKING:
    from .trace import Trace


class Rejected(Exception):
    def __init__(self, label: str, detail: str):
        super().__init__(f"{label}: {detail}")
        self.label = label
        self.detail = detail


def vet_source(source: str, *, trace: bool = True, name: str | None = None,
               strict: bool = False) -> tuple[Problem, Trace | None]:
    """Check ``source``; return its ``Problem`` (and trace) or raise ``Rejected``.

    ``strict``: a source that meta tensors cannot follow (data-dependent code) is rejected rather
    than passed on unverified (used for mutants, whose semantics a rewrite may have broken)."""
    try:
        problem = check_source(source, name=name)
    except ProblemError as exc:
        raise Rejected("static check", exc.reason) from None
    except (ValueError, RecursionError) as exc:
        raise Rejected("static check", str(exc)) from None
    if not trace:
        return problem, None
    # torch loads here, on the first trace: every CLI command imports this module, and a
    # command's help or its refusal of a bad input needs no torch (1.7 s of each start)
    from .degeneracy import check_trace
    from .trace import TraceError, trace_source
    try:
        traced = trace_source(source)
    except TraceError as exc:
        if exc.unsupported and not strict:  # meta tensors cannot follow data-dependent code
            return problem, None
        raise Rejected(f"trace: {exc.stage}", exc.message) from None
    violations = check_trace(traced)
    if violations:
        first = violations[0]
        raise Rejected(f"degenerate: {first.rule}", first.reason)
    return problem, traced
