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


def test_each_running_workers_device_memory_is_read_once_its_gpu_work_is_done():
    """After every member said its GPU work is done (or ended), NVML's per-process reading
    gives each worker still running its device memory; one NVML does not list (ended, or its
    reading withheld) has none, and without NVML nothing is read."""
    import threading

    from kernelmill.grade.side_by_side import _gpu_work_done
    from kernelmill.validate.gpus import process_device_bytes
    from kernelmill.validate.worker_control import Control

    controls = {name: Control() for name in ("candidate 0", "candidate 1", "reference")}
    for pid, control in zip((101, 102, 103), controls.values()):
        control.pid = pid
    controls["reference"].ended = True  # it timed the reference and ended
    reads = []

    def read():
        reads.append({n: c.reports for n, c in controls.items()})
        # 103, the reference's pid, is another process's now: an ended worker is not read
        return {101: 1536 << 20, 102: 700 << 20, 103: 5 << 30, 999: 1 << 30}

    # each candidate reports its GPU work done a little later: the reading waits for both
    for delay, name in ((0.05, "candidate 0"), (0.15, "candidate 1")):
        threading.Timer(delay, controls[name]._deliver, [{"gpu_done": True}]).start()
    found = _gpu_work_done(controls, 5.0, read)
    assert found == {"candidate 0": 1536, "candidate 1": 700} and len(reads) == 1
    assert [c.device_mib for c in controls.values()] == [1536, 700, None]  # kept for the views
    # read after both said so, not before
    assert all(reads[0][name] for name in ("candidate 0", "candidate 1"))
    for control in controls.values():
        control.ended = True
    assert _gpu_work_done(controls, 5.0) == {}  # nothing read where no reading is asked for
    assert process_device_bytes("cpu") is None
