"""Batch grading under faults: one run per --out, and input with no submission is one error."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import FIXTURES
from kernelmill.core.errors import KernelmillError
from kernelmill.core.lock import LockedError, lock_path_for
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


@pytest.mark.parametrize("rows", ["", '{"id": "x", "source": "y"}\n{"submission": 1}\n'])
def test_submissions_with_no_usable_row_are_one_error(tmp_path, rows):
    submissions = tmp_path / "submissions.jsonl"
    submissions.write_text(rows)
    out = tmp_path / "verdicts.jsonl"
    with pytest.raises(KernelmillError, match=rf"^{submissions}: no submissions \(rows need "
                                              r"submission_id, problem_id and source\)$"):
        grade_file(_problems(tmp_path), submissions, out, device="cpu", cache_path=False)
    assert not lock_path_for(out).exists()  # released on the error
