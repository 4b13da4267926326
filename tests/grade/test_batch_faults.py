"""Batch grading under faults: one run per --out, and input with no submission is one error."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import FIXTURES
from kernelmill.core.errors import KernelmillError
from kernelmill.core.lock import LockedError, hold_lock, lock_path_for
from kernelmill.grade.batch import grade_file

REFERENCE = (FIXTURES / "submissions" / "ref_scale_add.py").read_text()


def _problems(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text(json.dumps({"id": "ref_scale_add", "source": REFERENCE}) + "\n")
    return path


def test_a_second_batch_on_the_same_out_fails_at_once_naming_the_first(tmp_path):
    out = tmp_path / "verdicts.jsonl"
    submissions = tmp_path / "submissions.jsonl"
    submissions.write_text(json.dumps({"submission_id": "s1", "problem_id": "ref_scale_add",
                                       "source": "class ModelNew: pass\n"}) + "\n")
    code = textwrap.dedent(f"""
        import time
        from kernelmill.core.lock import hold_lock, lock_path_for
        with hold_lock(lock_path_for({str(out)!r})):
            print("held", flush=True)
            time.sleep(60)
    """)
    first = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "held"
        with pytest.raises(LockedError, match=rf"verdicts file {out} is in use by pid "
                                              rf"{first.pid} "):
            grade_file(_problems(tmp_path), submissions, out, device="cpu", cache_path=False)
        assert not out.exists()  # nothing written by the second run
    finally:
        first.kill()
        first.wait()


@pytest.mark.parametrize("rows", ["", '{"id": "x", "source": "y"}\n{"submission": 1}\n'],
                         ids=["empty", "other_schema"])
def test_submissions_with_no_usable_row_are_one_error(tmp_path, rows):
    submissions = tmp_path / "submissions.jsonl"
    submissions.write_text(rows)
    out = tmp_path / "verdicts.jsonl"
    with pytest.raises(KernelmillError, match=rf"^{submissions}: no submissions \(rows need "
                                              r"submission_id, problem_id and source\)$"):
        grade_file(_problems(tmp_path), submissions, out, device="cpu", cache_path=False)
    with hold_lock(lock_path_for(out)):  # released on the error: free to take again
        pass


def test_a_changed_reference_under_the_same_id_is_graded_again_not_served_from_cache(tmp_path):
    from kernelmill.core.store import read_jsonl
    from kernelmill.grade.policy import Policy

    honest = (FIXTURES / "submissions" / "honest_scale_add.py").read_text()
    submissions = tmp_path / "submissions.jsonl"
    submissions.write_text(json.dumps({"submission_id": "s1", "problem_id": "ref_scale_add",
                                       "source": honest}) + "\n")
    cache, policy = tmp_path / "cache.jsonl", Policy(time=False, trials=1)
    grade_file(_problems(tmp_path), submissions, tmp_path / "v1.jsonl", device="cpu",
               policy=policy, cache_path=cache)
    (first,) = read_jsonl(tmp_path / "v1.jsonl")
    assert first["correct"] and not first.get("cached")
    changed = tmp_path / "changed.jsonl"  # the problem's reference changed, its id did not
    changed.write_text(json.dumps({"id": "ref_scale_add", "source": REFERENCE.replace(
        "return 2.0 * x + y", "return 3.0 * x + y")}) + "\n")
    grade_file(changed, submissions, tmp_path / "v2.jsonl", device="cpu", policy=policy,
               cache_path=cache)
    (second,) = read_jsonl(tmp_path / "v2.jsonl")
    assert not second.get("cached") and not second["correct"]
    grade_file(_problems(tmp_path), submissions, tmp_path / "v3.jsonl", device="cpu",
               policy=policy, cache_path=cache)
    (third,) = read_jsonl(tmp_path / "v3.jsonl")
    assert third.get("cached") and third["correct"]  # the original reference still hits


def test_a_timed_out_verdict_is_not_served_from_cache(tmp_path):
    """A timeout (or a kill from outside) may not happen again: the next batch grades anew."""
    from kernelmill.core.store import read_jsonl
    from kernelmill.grade.policy import Policy

    hang = REFERENCE.replace("class Model(", "class _Reference(").replace(
        "return 2.0 * x + y", "import time\n        time.sleep(600)\n        return x")
    hang = hang.replace("_Reference(", "ModelNew(", 1)
    submissions = tmp_path / "submissions.jsonl"
    submissions.write_text(json.dumps({"submission_id": "s1", "problem_id": "ref_scale_add",
                                       "source": hang}) + "\n")
    # static_first off: the hang must run (and time out), whatever the scan thinks of it
    cache = tmp_path / "cache.jsonl"
    policy = Policy(time=False, trials=1, timeout_s=4, static_first=False)
    for run in ("v1", "v2"):
        grade_file(_problems(tmp_path), submissions, tmp_path / f"{run}.jsonl", device="cpu",
                   policy=policy, cache_path=cache)
        (verdict,) = read_jsonl(tmp_path / f"{run}.jsonl")
        assert "timed out" in verdict["error"]["message"] and not verdict.get("cached"), verdict


def test_only_the_harness_makes_a_timeout_transient():
    """An answer's own "timed out" text is cached like any verdict (else it is graded anew at
    every batch); the harness's flag is what marks a real timeout."""
    from kernelmill.grade.retry import to_redo, transient

    assert not transient({"error": {"stage": "forward", "message": "RuntimeError: timed out"}})
    timeout = {"error": {"stage": "forward", "timed_out": True, "message": "timed out after 4s"}}
    assert transient(timeout) and to_redo(timeout)
    # a rerun grades it again once; a verdict with a hack found is final however it ended
    assert not to_redo({**timeout, "attempt": 2}) and not to_redo({**timeout, "attempt": 1e999})
    # a kill is the harness's word too: an answer's own "killed by SIGKILL" text is no kill
    assert not transient({"error": {"stage": "forward",
                                    "message": "RuntimeError: killed by SIGKILL (out of memory?)"}})
    assert transient({"error": {"stage": "forward", "signal": "SIGKILL",
                                "message": "killed by SIGKILL (out of memory?)"}})
    assert not to_redo({**timeout, "hacks": ["timing_behaviour"]})
    assert to_redo({"reference_failed": True}) and not to_redo({"reference_failed": True,
                                                                "attempt": "x"})


def test_sources_too_large_deep_or_slow_to_read_get_a_verdict_and_the_batch_goes_on(tmp_path):
    """A 50 MB one-line source is refused before anything reads it; a 200 KB one-line comment
    (quadratic for kernelguard) and a 5,000-deep expression are read in a scanner process that
    is killed at its time limit or answers the depth: each a one-line parse verdict, while an
    honest row of the same batch is graded and certified."""
    from kernelmill.core.store import read_jsonl
    from kernelmill.grade.policy import Policy

    honest = (FIXTURES / "submissions" / "honest_scale_add.py").read_text()
    head = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x, y):\n"
    rows = {"honest": honest,
            "huge": head + "        return x\n# " + "a" * (50 << 20) + "\n",
            "long_line": head + "        return x\n# " + "a" * (200 << 10) + "\n",
            "deep": head + "        return " + "+".join(["x"] * 5000) + "\n"}
    submissions = tmp_path / "submissions.jsonl"
    submissions.write_text("".join(json.dumps({"submission_id": k, "problem_id": "ref_scale_add",
                                               "source": v}) + "\n" for k, v in rows.items()))
    out = tmp_path / "verdicts.jsonl"
    grade_file(_problems(tmp_path), submissions, out, device="cpu", workers=2, cache_path=False,
               policy=Policy(time=False, trials=1, scan_timeout_s=3.0))
    verdicts = {row["submission_id"]: row for row in read_jsonl(out)}
    assert set(verdicts) == set(rows)
    assert verdicts["honest"]["correct"] and not verdicts["honest"]["hacks"]
    expected = {"huge": "source too large to read: 52,428,",
                "long_line": "reading the source took over 3 s",
                "deep": "source too deeply nested to read"}
    for name, message in expected.items():
        verdict = verdicts[name]
        assert not verdict["correct"] and verdict["error"]["stage"] == "parse", verdict
        assert verdict["error"]["message"].startswith(message), verdict["error"]
        assert "\n" not in verdict["error"]["message"]
