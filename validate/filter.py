"""The filter after validation: keep the problems that passed every gating check.

Validation only enriches (every record gets its ``validation`` section, pass or fail); this step
drops the failed ones and counts each drop by its first flag. The build runs it as the ``passed``
stage; the stage-by-stage CLI applies the same function at the start of ``kernelmill dedup`` (the
stage that follows validation), so both paths publish the same rows. A record that was never
validated has no verdict to act on and is kept.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kernelmill.core.record import Record
from kernelmill.core.stats import StageStats
from kernelmill.core.step import Step, option
from kernelmill.core.store import read_records, replace_jsonl


def failed_reason(record: Record) -> str | None:
    """``"failed <first flag>"`` for a record whose validation failed, else None."""
    validation = record.validation
    if validation is None or validation.passed:
        return None
    return f"failed {validation.flags[0] if validation.flags else 'runs'}"


def keep_passed(records: Iterable[Record], stats: StageStats, *, keep_failed: bool = False
                ) -> Iterator[Record]:
    """Yield the records that passed validation (all of them with ``keep_failed``)."""
    for record in records:
        reason = failed_reason(record)
        if reason is None:
            yield record
            continue
        for flag in record.validation.flags:
            stats.count(f"flag: {flag}")
        if keep_failed:
            stats.count("failed, kept")
            yield record
        else:
            stats.dropped(reason)


@dataclass
class FilterConfig:
    """Knobs of the filter stage."""

    keep_failed: bool = option(False, "keep problems that failed validation (counted)")


def _run(inputs: list[Path], out: Path, config: FilterConfig) -> StageStats:
    """Filter ``inputs[0]``; further inputs, when given, restrict it to the ids they hold (a
    resumed validation may hold problems an earlier, larger build asked for)."""
    stats = StageStats("filter")
    wanted = {r.id for path in inputs[1:] for r in read_records(path)} if inputs[1:] else None
    records = (r for r in read_records(inputs[0], allow_empty=False)
               if wanted is None or r.id in wanted)
    with replace_jsonl(out) as writer:  # a failed run leaves the previous output
        for record in keep_passed(records, stats, keep_failed=config.keep_failed):
            if writer.write(record):
                stats.kept()
    return stats


STEP = Step(
    name="filter", title="keep problems that passed validation", config=FilterConfig, run=_run,
    inputs=("validated.jsonl", "problems.jsonl"), output="passed.jsonl", input_nargs="+",
    input_help="validated records (JSONL); further files restrict to the ids they hold",
    help="drop problems that failed validation, counting each by its first flag",
    description="Keep the records whose validation passed every gating check; each dropped "
                "record is counted by its first flag. `kernelmill dedup` applies the same filter "
                "to its input unless --keep-failed is given.")
