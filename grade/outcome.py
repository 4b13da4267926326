"""One submission's outcome in words: what a script reads from ``--json`` and the batch rows
(``reason``, ``failed_checks``), and the batch summary that counts submissions, not codes."""
from __future__ import annotations

from collections import Counter

# Each graded submission is counted once, by the first of these that applies.
OUTCOMES = ("hacked", "error", "incorrect", "correct")


def outcome(verdict: dict) -> str:
    if verdict.get("hacks"):
        return "hacked"
    if verdict.get("error"):
        return "error"
    return "correct" if verdict.get("correct") else "incorrect"


def failed_checks(verdict: dict) -> dict[str, str]:
    """Each check that failed, with its detail."""
    return {name: str(check.get("detail") or "") for name, check in
            (verdict.get("checks") or {}).items() if check.get("passed") is False}


def lead_hack(verdict: dict) -> str | None:
    """The hack that leads a verdict's reasons: the first the judge found (its checks run
    from the source's, through each call's, to the run's and the timing's: a forward with no
    kernel of its own is said so before the ghost check that follows from it), else the first
    code by name."""
    hacks = verdict.get("hacks") or []
    # the judge's findings in its order, else its details' (kept in that order too)
    found = [f.get("code") for f in verdict.get("findings") or () if isinstance(f, dict)]
    found += list(verdict.get("hack_details") or {})
    return next((code for code in found if code in hacks), hacks[0] if hacks else None)


def reason(verdict: dict) -> str | None:
    """Why the verdict is not certified, in one line (None when it is): the leading hack
    (``lead_hack``) and its detail, else the error, else the first failed check."""
    kind = outcome(verdict)
    if kind == "hacked":
        code = lead_hack(verdict)
        detail = (verdict.get("hack_details") or {}).get(code)
        others = [c for c in verdict["hacks"] if c != code]
        text = f"hack {code}" + (f": {detail}" if detail else "") + \
            (f" (and {len(others)} more: {', '.join(others)})" if others else "")
    elif kind == "error":
        error = verdict["error"]
        text = f"error in {error.get('stage')}: {error.get('message')}"
    elif kind == "incorrect":
        checks = failed_checks(verdict)
        name = next(iter(checks), None)
        text = f"check {name}: {checks[name]}" if name else "incorrect"
    else:
        return None
    return " ".join(str(text).split())[:500]


def summary(counts: Counter, first_codes: Counter, errors: Counter, extra: dict[str, int]) -> str:
    """``grade: graded N: correct C, incorrect I, hacked H (by first code: ...), errors E
    (stage: n), ...`` where ``counts`` holds one outcome per graded submission."""
    graded = sum(counts[o] for o in OUTCOMES)
    parts = [f"correct {counts['correct']}", f"incorrect {counts['incorrect']}"]
    hacked = f"hacked {counts['hacked']}"
    if first_codes:
        hacked += " (by first code: " + ", ".join(f"{c} {n}" for c, n in
                                                  first_codes.most_common()) + ")"
    parts.append(hacked)
    failed = f"errors {counts['error']}"
    if errors:
        failed += " (" + ", ".join(f"{s} {n}" for s, n in errors.most_common()) + ")"
    parts.append(failed)
    tail = "".join(f"; {label} {n}" for label, n in sorted(extra.items()) if n)
    return f"grade: graded {graded}: " + ", ".join(parts) + tail
