"""On CPU, grading workers are admitted on the host's memory like validation's (issue: two large
problems must not take down a small machine), and each gets an address-space limit matching its
admission, so a submission that allocates far past its problem's size fails alone."""
from __future__ import annotations

from conftest import FIXTURES

from kernelmill.grade.grader import Grader
from kernelmill.grade.policy import Policy
from kernelmill.validate.host_admission import host_budget

REFERENCE = (FIXTURES / "submissions" / "ref_scale_add.py").read_text()
HONEST = (FIXTURES / "submissions" / "honest_scale_add.py").read_text()
# 12 GiB that the problem never needs (refused at once under the limit: nothing is touched)
GREEDY = HONEST.replace("    def forward(self, x, y):",
                        "    def forward(self, x, y):\n"
                        "        torch.ones(3 << 30, dtype=torch.float32).sum()")
BUDGET = 6 << 30


def test_a_grade_on_cpu_holds_its_estimate_and_limits_each_worker(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELMILL_HOST_LEDGER", str(tmp_path / "ledger"))
    assert GREEDY != HONEST
    grader = Grader("cpu", policy=Policy(time=False, timeout_s=120), cache_root=str(tmp_path),
                    host_memory_bytes=BUDGET)
    honest = grader.grade(REFERENCE, HONEST)
    assert honest["correct"] and not honest["hacks"], honest.get("error")
    [need] = grader._host_needs.values()  # one problem, estimated once
    assert (512 << 20) <= need < 2 << 30  # a small problem: the worker's own memory dominates
    greedy = grader.grade(REFERENCE, GREEDY)
    assert not greedy["correct"]
    message = str((greedy.get("error") or {}).get("message", "")).lower()
    assert any(m in message for m in ("memory", "alloc")), greedy.get("error")
    assert host_budget(BUDGET).used == 0  # every hold was given back
