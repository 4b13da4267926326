"""A grade's candidate workers started beside its reference run (``KERNELMILL_EARLY_CANDIDATES``):
the same verdicts, each member's worker waiting for its payload; a job that needs another start
gets one; a reference that fails withdraws them, none left running."""
import kernelmill.grade.early_candidates as E
import kernelmill.grade.grader as G
import pytest
from conftest import FIXTURES
from kernelmill.core.errors import KernelmillError
from kernelmill.grade.batch import refuse_unknown_switches
from kernelmill.grade.grader import Grader, ReferenceError
from kernelmill.grade.policy import Policy

SUBMISSIONS = FIXTURES / "submissions"
TIMING = {"min_reps": 6, "max_reps": 40, "warmup": 1, "cap_ms": 400}


def read(name: str) -> str:
    return (SUBMISSIONS / f"{name}.py").read_text()


def made(monkeypatch) -> list:
    """Every ``EarlyWorkers`` the grades make, as they make them."""
    sets, real = [], E.EarlyWorkers

    def record(*args, **kwargs):
        sets.append(real(*args, **kwargs))
        return sets[-1]

    monkeypatch.setattr(G, "EarlyWorkers", record)
    return sets


def preparing(monkeypatch, change) -> None:
    """Each member's job as ``change(source, job)`` makes it from ``Grader._prepare``'s."""
    real = Grader._prepare

    def prepare(self, reference, source, record, slot_env):
        return change(source, real(self, reference, source, record, slot_env))

    monkeypatch.setattr(Grader, "_prepare", prepare)


def test_early_candidates_wait_for_their_payloads_and_grade_as_before(monkeypatch):
    monkeypatch.setenv(E.EARLY_VAR, "on")
    sets = made(monkeypatch)
    # one member's job needs a start of its own (here: another environment, as an extension
    # build's folder gives it): its early worker is withdrawn and it runs all the same
    preparing(monkeypatch, lambda source, job: {
        **job, "env": {**job["env"], "KERNELMILL_TEST_OWN_START": "1"}}
        if "# a start of its own" in source else job)
    honest = read("honest_scale_add")
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    verdicts = Grader("cpu", policy=policy).grade_group(
        read("ref_scale_add"), [honest, read("hack_zeros"), honest + "\n# a start of its own\n"])
    first, zeros, own = verdicts
    for verdict in (first, own):
        assert verdict["correct"] and not verdict["hacks"], (verdict.get("error"),
                                                             verdict.get("hack_details"))
        assert verdict["timing"]["reps"] >= 6
        # its unseen inputs reached it as late parts, as for a worker started with its job
        assert len(verdict["profile"]["late_write_ms"]) >= policy.unseen_trials
    assert not zeros["correct"]
    # the early workers waited for their payloads; the one withdrawn ran nothing
    assert "payload wait" in first["profile"]["stages_s"], first["profile"]["stages_s"]
    assert "payload wait" in zeros["profile"]["stages_s"]
    assert "payload wait" not in own["profile"]["stages_s"]
    [early] = sets
    withdrawn = early.workers[2]
    assert withdrawn.deferred.cancelled and not withdrawn.result.ok
    assert withdrawn.result.error["stage"] == "payload wait", withdrawn.result.error
    assert first["timing"]["reference_ms"] == own["timing"]["reference_ms"]  # one window


def test_a_failed_reference_withdraws_its_grades_early_candidates(monkeypatch):
    monkeypatch.setenv(E.EARLY_VAR, "on")
    sets = made(monkeypatch)
    broken = read("ref_scale_add").replace("def forward(self, x, y):",
                                           "def forward(self, x, y):\n        raise ValueError('no')")
    assert broken != read("ref_scale_add")
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    with pytest.raises(ReferenceError):
        Grader("cpu", policy=policy).grade_group(broken, [read("honest_scale_add")] * 2)
    [early] = sets
    for worker in early.workers:  # ended at their wait, none left running, none timed out
        assert not worker._thread.is_alive()
        assert worker.deferred.cancelled and not worker.result.ok
        assert worker.result.error["stage"] == "payload wait", worker.result.error
        assert not worker.result.timed_out and not worker.result.leaked_processes


def test_the_early_candidates_switch_refuses_an_unknown_value(monkeypatch):
    monkeypatch.setenv(E.EARLY_VAR, "sometimes")
    with pytest.raises(KernelmillError, match="on"):
        refuse_unknown_switches()
    monkeypatch.setenv(E.EARLY_VAR, "off")
    refuse_unknown_switches()
    assert not E.early_candidates()


def test_an_untimed_grades_early_candidate_runs_its_checks(monkeypatch):
    # without a window (``Policy(time=False)``) the member's early worker is given its job
    # where its worker would have started, and checks as one started then
    monkeypatch.setenv(E.EARLY_VAR, "on")
    sets = made(monkeypatch)
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False, time=False)
    verdict = Grader("cpu", policy=policy).grade(read("ref_scale_add"),
                                                read("honest_scale_add"))
    assert verdict["correct"] and not verdict["hacks"], verdict.get("error")
    assert verdict["timing"] is None
    [[worker]] = [early.workers for early in sets]
    assert not worker.deferred.cancelled and worker.result.ok, worker.result.error
    stages = [stage for stage, _ in worker.result.stages]
    assert stages.index("payload wait") < stages.index("run target"), stages


def test_early_candidates_count_on_the_device_only_the_members_that_run(monkeypatch):
    # The device-work check's floor reads how many GPU workers ran beside a member: an early
    # worker that waits, or is withdrawn (its member decided before it ran, here as a failed
    # extension build decides one in ``_prepare``), is not counted; the members that run are
    monkeypatch.setenv(E.EARLY_VAR, "on")
    sets = made(monkeypatch)
    preparing(monkeypatch, lambda source, job:
              {"decided": True} if "# decided before it runs" in source else job)
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    grader = Grader("cpu", policy=policy)
    counted, real_held = [], grader._beside.held

    def held(key, workers):
        counted.append(workers)
        return real_held(key, workers)

    monkeypatch.setattr(grader._beside, "held", held)
    honest = read("honest_scale_add")
    verdicts = grader.grade_group(read("ref_scale_add"),
                                  [honest] + [honest + f"\n# decided before it runs {i}\n"
                                              for i in range(3)])
    assert verdicts[0]["correct"], verdicts[0].get("error")
    assert all(v.get("decided") for v in verdicts[1:]), verdicts[1:]
    [early] = sets
    assert [w.deferred.cancelled for w in early.workers] == [False, True, True, True]
    # the reference phase's four workers (a problem's first group: a run each), then the one
    # member that runs; never the early workers themselves
    assert counted == [4, 1], counted
    assert verdicts[0]["profile"]["workers_beside"] <= 2, verdicts[0]["profile"]
