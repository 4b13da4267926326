"""The profile's account of where a grade's workers were stopped for other grades' windows, by
their own stages (``grade.side_by_side.stepped_by_stage``)."""
from kernelmill.grade.side_by_side import stage_seconds, stepped_by_stage


def test_steps_aside_are_split_over_the_stages_they_fall_in():
    # a run that started at t=100: setup from 0.5 s, forward from 2 s, timing from 9 s, ended
    # at 12 s; stopped 3-5 s (forward), 8.5-9.5 s (across forward and timing) and 11-13 s (past
    # its end: counted to its end only)
    stages = [("setup", 0.5), ("forward", 2.0), ("timing", 9.0)]
    spans = [(103.0, 105.0), (108.5, 109.5), (111.0, 113.0)]
    by_stage = stepped_by_stage(spans, 100.0, stages, 12.0)
    assert by_stage == {"forward": 2.5, "timing": 1.5}
    seconds = stage_seconds(stages, 12.0)
    assert all(by_stage[k] <= seconds[k] for k in by_stage)
    # before the first mark: ``start``, as ``stage_seconds`` names it; unknown start, no stages
    # or no steps: nothing
    assert stepped_by_stage([(100.1, 100.3)], 100.0, stages, 12.0) == {"start": 0.2}
    assert stepped_by_stage(spans, None, stages, 12.0) == {}
    assert stepped_by_stage(spans, 100.0, [], 12.0) == {}
    assert stepped_by_stage([], 100.0, stages, 12.0) == {}


def test_cpu_by_stage_counts_from_each_mark_to_the_next():
    from kernelmill.grade.side_by_side import stage_cpu_seconds

    marks = [("setup", 0.4), ("forward", 0.9), ("timing", 3.0)]
    assert stage_cpu_seconds(marks, 3.5) == {"start": 0.4, "setup": 0.5, "forward": 2.1,
                                             "timing": 0.5}
    # the run's whole CPU unknown: the last stage is not counted; a reading that goes back (a
    # forged mark) counts nothing; no marks, nothing
    assert "timing" not in stage_cpu_seconds(marks, None)
    assert stage_cpu_seconds([("a", 2.0), ("b", 1.0)], 1.5)["a"] == 0.0
    assert stage_cpu_seconds([], 2.0) == {}


def test_a_workers_stage_marks_carry_its_cpu_seconds():
    """Each stage mark says the worker's CPU so far, its reaped children's included: a stage
    that spins 0.6 s of CPU reads it, one whose child spins as long too, one that sleeps as
    long reads next to none."""
    from kernelmill.grade.side_by_side import stage_cpu_seconds
    from kernelmill.validate.harness import run_in_worker

    body = ("import subprocess, sys, time\n"
            "from kernelmill.validate.harness_worker import mark_stage\n"
            "def main():\n"
            "    mark_stage('spin')\n"
            "    end = time.process_time() + 0.6\n"
            "    while time.process_time() < end:\n        pass\n"
            "    mark_stage('child')\n"
            "    subprocess.run([sys.executable, '-c', 'import time\\nend = time.process_time()"
            " + 0.6\\nwhile time.process_time() < end:\\n    pass'], check=True)\n"
            "    mark_stage('sleep')\n"
            "    time.sleep(0.6)\n"
            "    mark_stage('done')\n"
            "    return {}\n")
    result = run_in_worker("kernelmill.validate.harness:run_source", {"source": body},
                           timeout_s=30, device="cpu")
    assert result.ok, result.error
    # (the worker's own last mark: its result's frame and its exit)
    assert [name for name, _ in result.stage_cpu][-5:] == ["spin", "child", "sleep", "done",
                                                           "send"]
    cpu = stage_cpu_seconds(result.stage_cpu, result.cpu_s)
    # a child the stage ran and reaped counts in that stage
    assert 0.55 <= cpu["spin"] < 1.5 and 0.55 <= cpu["child"] < 1.5 and cpu["sleep"] < 0.2, cpu
