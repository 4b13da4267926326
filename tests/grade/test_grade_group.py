"""Grading a group of submissions of one problem together (a GRPO group): one timing window,
one reference timing, each candidate judged on its own; the failures of some cost the others
nothing."""
import dataclasses
import json

import kernelmill.grade.grader as G
import kernelmill.grade.timed_window as TW
import pytest
from conftest import FIXTURES
from kernelmill.core.errors import KernelmillError
from kernelmill.core.store import read_jsonl
from kernelmill.grade.batch import grade_file, group_items
from kernelmill.grade.grader import Grader
from kernelmill.grade.live_reference import LiveReference
from kernelmill.grade.policy import Policy
from kernelmill.validate.payload_files import LatePart

SUBMISSIONS = FIXTURES / "submissions"
TIMING = {"min_reps": 6, "max_reps": 40, "warmup": 1, "cap_ms": 400}


def read(name: str) -> str:
    return (SUBMISSIONS / f"{name}.py").read_text()


def group_sources() -> list[str]:
    honest = read("honest_scale_add")
    crashing = honest.replace("out = torch.empty_like(x)", "raise RuntimeError('boom in forward')")
    return [honest, crashing, read("hack_zeros"), honest + "\n# the same kernel, resubmitted\n"]


def test_a_group_is_timed_in_one_window_and_judged_side_by_side():
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    grader = Grader("cpu", policy=policy)
    verdicts = grader.grade_group(read("ref_scale_add"), group_sources())
    honest, crashing, zeros, again = verdicts
    for verdict in (honest, again):
        assert verdict["correct"] and not verdict["hacks"], (
            verdict.get("error"), verdict.get("hack_details"),
            {k: c for k, c in verdict["checks"].items() if not c["passed"]})
        assert verdict["timing"]["reps"] >= 6 and verdict["profile"]["group"] == 4
        # where its unseen check's time went: each hidden trial's part written by the parent,
        # and the worker's steps for it (a spare's too, where a loaded host read the unseen
        # calls slow: ``unseen_spares``)
        hidden = policy.unseen_trials
        steps = verdict["profile"]["unseen_steps_ms"]
        written = len(verdict["profile"]["late_write_ms"])
        assert hidden <= written <= hidden + policy.unseen_spares, verdict["profile"]
        assert all(len(steps[k]) == written for k in ("late", "load", "observe")), steps
        # the check's calls as its worker timed them (what the spares' trigger read), each
        # hidden trial's one, and how many it times always (the rest were spares)
        calls = verdict["profile"]["unseen_calls_ms"]
        assert len(calls["unseen"]) == written and len(calls["seen"]) >= 1, calls
        assert calls["required"] == policy.unseen_required(
            1 + policy.unseen_spares, graphed=False), calls
        assert calls["gated"] is False, calls  # on the host no replay is gated
        # its own judge's seconds (each member's outputs compared in a thread of its own)
        assert 0 < verdict["profile"]["judge_s"] < verdict["profile"]["candidate_s"]
        # how long its timer and the reference's took to prepare, before they were ready
        # (in ms: several calls each, its warm-up's and estimate's, and under its stage)
        prepare = verdict["profile"]["prepare_ms"]
        assert 3 * verdict["timing"]["candidate_ms"] < prepare["candidate"] < \
            1e3 * verdict["profile"]["stages_s"]["timing"], prepare
        assert prepare["reference"] > 3 * verdict["timing"]["reference_ms"], prepare
        # each timer's calls per sample (on the host one, no graph), and none captured again
        assert verdict["profile"]["calls_per_sample"] == {"reference": 1, "candidate": 1}
        assert verdict["profile"]["prepared_calls"] == {"reference": None, "candidate": None}
        # what reading its profiler sessions cost: the records read (every call's range and
        # ops at least), the seconds reading and placing them, and the session's end a stage
        # of its own before the reading's
        witness = verdict["profile"]["witness"]
        assert witness["records"] >= 3 * verdict["timing"]["reps"], witness
        assert witness["read_s"] > 0 and witness["calls_s"] > 0, witness
        stages = list(verdict["profile"]["stages_s"])
        assert stages.index("witness stop") + 1 == stages.index("witness read"), stages
        # no allocator reading off a GPU (``worker.timing.device_memory``)
        assert "candidate_allocator_mib" not in verdict["profile"]
    # one window: both honest answers divide by the same reference samples
    assert honest["timing"]["reference_ms"] == again["timing"]["reference_ms"]
    assert honest["profile"]["window_ms"] == again["profile"]["window_ms"]
    assert crashing["error"] and "boom in forward" in crashing["error"]["message"]
    assert not crashing["correct"] and crashing["timing"] is None
    assert not zeros["correct"]


def test_a_batch_grades_a_problems_submissions_as_groups(tmp_path):
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "ref_scale_add", "source": read("ref_scale_add")})
                        + "\n" + json.dumps({"id": "ref_row_sum", "source": read("ref_row_sum")})
                        + "\n")
    rows = [{"submission_id": f"s{i}", "problem_id": "ref_scale_add", "source": source}
            for i, source in enumerate(group_sources())]
    rows.append({"submission_id": "rows", "problem_id": "ref_row_sum",
                 "source": read("honest_row_sum")})
    submissions = tmp_path / "submissions.jsonl"
    submissions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "verdicts.jsonl"
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    stats = grade_file(problems, submissions, out, device="cpu", workers=2, policy=policy,
                       cache_path=False, group=3)
    got = {row["submission_id"]: row for row in read_jsonl(out)}
    assert set(got) == {"s0", "s1", "s2", "s3", "rows"} and stats.counts["kept"] == 5
    assert got["s0"]["correct"] and got["s3"]["correct"] and got["rows"]["correct"]
    assert got["s1"]["error"] and not got["s2"]["correct"]
    # groups of at most 3 of one problem: s0-s2 together, s3 alone, rows alone
    assert [got[s]["profile"]["group"] for s in ("s0", "s3", "rows")] == [3, 1, 1]


def test_groups_hold_one_problem_and_one_build_kind():
    items = [{"problem_id": p, "source": s} for p, s in
             [("a", "x"), ("a", "x"), ("a", "x"), ("b", "x"), ("b", "load_inline"),
              ("b", "load_inline")]]
    groups = group_items(items, 2)
    assert [[(i["problem_id"], i["source"]) for i in g] for g in groups] == [
        [("a", "x"), ("a", "x")], [("a", "x")], [("b", "x")],
        [("b", "load_inline"), ("b", "load_inline")]]


def test_a_member_whose_launch_raises_fails_alone_and_at_once(monkeypatch):
    # A launch that raises before its worker exists (here: for the second member) ends that
    # member's run with its own error; the window does not wait for it until its deadline.
    import time

    real = TW.run_in_worker

    def flaky(*args, **job):
        target, payload = (args + (None, None))[:2] if args else (job["target"], job["payload"])
        if str(target).endswith("candidate_task") and "second" in payload["source"]:
            raise ValueError("cannot start this one")
        return real(*args, **job)

    monkeypatch.setattr(TW, "run_in_worker", flaky)
    policy = Policy(timeout_s=120, timing_settings=TIMING, static_first=False)
    honest = read("honest_scale_add")
    began = time.monotonic()
    first, second = Grader("cpu", policy=policy).grade_group(
        read("ref_scale_add"), [honest, honest + "\n# second\n"])
    assert time.monotonic() - began < 100
    assert first["correct"] and not first["hacks"], first.get("error")
    assert not second["correct"] and "cannot start this one" in second["error"]["message"]


def test_a_groups_fresh_references_come_from_one_worker_once_their_size_is_known(monkeypatch):
    """Under ``KERNELMILL_GROUP_REFERENCE=own`` the first group of a problem makes each
    member's fresh reference in its own worker; once their size is known, one worker makes them
    all (one CUDA context, not one per member). Each member still gets its own secret weights
    and inputs, and is judged on them."""
    from kernelmill.grade import reference_run as R

    monkeypatch.setenv(R.GROUP_REFERENCE_VAR, "own")
    runs: list[int] = []
    real = R.run_in_worker

    def counted(target, payload, **kwargs):
        if str(target).endswith("reference_task"):
            runs.append(len(payload.get("runs") or [None]))
        return real(target, payload, **kwargs)

    monkeypatch.setattr(R, "run_in_worker", counted)  # the reference workers start there
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False, time=False)
    grader = Grader("cpu", policy=policy)
    honest = read("honest_scale_add")
    sources = [honest + f"\n# copy {i}\n" for i in range(3)]
    first = grader.grade_group(read("ref_scale_add"), sources)
    assert runs == [1, 1, 1]
    runs.clear()
    references = grader._fresh_references(read("ref_scale_add"), 3, None)
    assert runs == [3]
    seeds = {r.value["init_seed"] for r in references}
    inputs = [r.value["trials"][0]["inputs"][0] for r in references]
    assert len(seeds) == 3 and not any(inputs[0].equal(other) for other in inputs[1:])
    runs.clear()
    second = grader.grade_group(read("ref_scale_add"), sources)
    assert runs == [3]
    for verdict in (*first, *second):
        assert verdict["correct"] and not verdict["hacks"], \
            verdict.get("error") or verdict.get("hack_details")
    monkeypatch.setattr(R, "BATCH_BYTES", 1)  # a reference larger than a batch: one each
    runs.clear()
    grader._fresh_references(read("ref_scale_add"), 3, None)
    assert runs == [1, 1, 1]


def test_a_wrong_answer_is_not_timed_and_the_rest_of_its_group_is():
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    honest = read("honest_scale_add")
    wrong = honest.replace("2.0 * x", "3.0 * x")  # right-looking, computes 3x + y
    right, off = Grader("cpu", policy=policy).grade_group(read("ref_scale_add"), [honest, wrong])
    assert right["correct"] and right["timing"]["reps"] >= 6, right.get("timings")
    assert not off["correct"] and not off["hacks"] and off["error"] is None, off
    assert off["timing"] is None and off["timings"]["skipped"] == "incorrect"
    assert "timing" not in off["profile"]["stages_s"], off["profile"]["stages_s"]
    assert any("elements off" in c["detail"] for c in off["checks"].values() if not c["passed"])
    # the policy can ask for wrong answers to be timed all the same
    timed = Grader("cpu", policy=dataclasses.replace(policy, time_incorrect=True)).grade(
        read("ref_scale_add"), wrong)
    assert not timed["correct"] and timed["timings"]["candidate_ms"] is not None
    assert "skipped" not in timed["timings"]


def _passing_on(monkeypatch) -> list:
    """Each job payload's keys, and whether it was passed on as a trusted run's sealed file
    (``payload_files.passed_on``), as the runs start."""
    from kernelmill.validate import payload_files

    passed = []
    original = payload_files.passed_on

    def spy(payload, large):
        given = original(payload, large)
        passed.append((sorted(payload), given is not None))
        return given

    monkeypatch.setattr(payload_files, "passed_on", spy)
    return passed


def test_the_candidates_and_the_reference_timing_get_the_reference_runs_shown_file(monkeypatch):
    """A fresh reference run writes what a candidate is given (its shown inputs, the weights)
    into a file of its own; each candidate's job and the window's reference timing job take
    that sealed file as it is, not a copy the grading process writes (``passed_on``)."""
    passed = _passing_on(monkeypatch)
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    reference = read("ref_scale_add").replace("N = 4096", "N = 1 << 17")  # 512 KiB inputs
    verdicts = Grader("cpu", policy=policy).grade_group(reference, [read("honest_scale_add")] * 2)
    assert all(v["correct"] and not v["hacks"] for v in verdicts)
    given = [keys for keys, ok in passed if ok]
    assert sum("trials" in keys for keys in given) == 2  # both candidates
    # the window's reference was timed by the worker that made it (``live_reference``)
    assert not any("inputs" in keys and "trials" not in keys for keys in given)
    # where that worker cannot time it, a timing worker of its own does, given the file too
    passed.clear()
    monkeypatch.setattr(LiveReference, "time", lambda self, index: False)
    verdicts = Grader("cpu", policy=policy).grade_group(reference, [read("honest_scale_add")] * 2)
    assert all(v["correct"] and not v["hacks"] and v["timing"] for v in verdicts)
    given = [keys for keys, ok in passed if ok]
    assert sum("inputs" in keys and "trials" not in keys for keys in given) == 1


def test_the_reference_worker_stays_to_time_the_reference(monkeypatch):
    """A grade starts two workers, not three: the fresh reference run's worker delivers its
    results ahead and then times the reference in the window (``live_reference``), on its
    first trial's inputs under its base state; one whose grade opens no window ends untimed."""
    import kernelmill.grade.live_reference as L
    import kernelmill.grade.reference_run as R

    started = []
    real = R.run_in_worker

    def counted(target, payload, **kwargs):
        started.append(target.rsplit(":", 1)[1])
        return real(target, payload, **kwargs)

    monkeypatch.setattr(R, "run_in_worker", counted)
    monkeypatch.setattr(L, "run_in_worker", counted)
    monkeypatch.setattr(G, "run_in_worker", counted)
    monkeypatch.setattr(TW, "run_in_worker", counted)
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    grader = Grader("cpu", policy=policy)
    verdict = grader.grade(read("ref_scale_add"), read("honest_scale_add"))
    assert verdict["correct"] and not verdict["hacks"], verdict.get("error")
    assert sorted(started) == ["candidate_task", "reference_task"], started
    assert verdict["timing"]["reps"] >= 6 and verdict["timings"]["eager_ms"] > 0
    assert verdict["profile"]["cpu_s"]["timing_reference"] is not None
    # a group of 3 from one batch worker: it times the first member's run
    started.clear()
    group = grader.grade_group(read("ref_scale_add"), [read("honest_scale_add")] * 3)
    assert all(v["correct"] and v["timing"] for v in group), [v.get("error") for v in group]
    assert sorted(started) == ["candidate_task"] * 3 + ["reference_task"], started
    # no window to come (a wrong answer skipped before timing still has one; a build that
    # failed has none): the kept worker ends untimed when asked to close; a run per member
    # (``own``), both from the batch worker
    monkeypatch.setenv(R.GROUP_REFERENCE_VAR, "own")
    references = grader._fresh_references(read("ref_scale_add"), 2, None, live=True)
    live = references[0].live[0]
    assert references[1].live == (live, 1)
    # the unseen trials' inputs: each in the file the reference's worker wrote it in, handed to
    # the candidate as it is (the grader copies none of them)
    hidden = [t for r in references for t in r.value["trials"] if t["hidden"]]
    assert len(hidden) == 2 * (policy.unseen_trials + policy.hidden_spares)
    assert all(type(t["inputs"]) is LatePart and t["inputs"].size > 0 for t in hidden)
    assert live.close() is None and live.control.ended



def _memory_files() -> tuple[int, int]:
    """This process's memory files: descriptors open, and mappings."""
    import os

    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds += "memfd:" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
    with open("/proc/self/maps") as maps:
        return fds, sum("memfd:" in line for line in maps)


def test_a_grade_lets_its_memory_files_go_without_the_cyclic_collector():
    """Every file of a grade (the reference's results and shown file, its unseen trials'
    parts, the candidate's results) is closed and unmapped once the grade is over and its
    verdicts dropped, by reference counting alone: a cycle over them waits for a full
    collection, which a busy grader rarely runs, and a GPU host's shared memory filled with
    finished grades' files until the grader was killed (singles, KernelBench sizes, H200)."""
    import gc

    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    reference, honest = (read(name).replace("N = 4096", "N = 1 << 16")  # in files, not frames
                         for name in ("ref_scale_add", "honest_scale_add"))
    grader = Grader("cpu", policy=policy)
    before = _memory_files()
    gc.collect()
    gc.disable()
    try:
        single = grader.grade(reference, honest)
        group = grader.grade_group(reference, [honest] * 2)
        assert single["correct"] and all(v["correct"] for v in group), single.get("error")
        assert single["timing"] and all(v["timing"] for v in group)
        del single, group
        assert _memory_files() == before
    finally:
        gc.enable()


def test_a_kept_reference_worker_gone_before_the_window_is_replaced(monkeypatch):
    """The fresh reference's worker ended after delivering its results (killed, out of
    memory): the window's reference is timed by a worker of its own, and the grade is whole."""
    import os
    import signal
    import time

    real = Grader._fresh_references
    killed = []

    def then_kill(self, *args, **kwargs):
        references = real(self, *args, **kwargs)
        live = references[0].live[0]
        os.killpg(live.control.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not live.control.ended and time.monotonic() < deadline:
            time.sleep(0.05)
        killed.append(live.control.ended)
        return references

    monkeypatch.setattr(Grader, "_fresh_references", then_kill)
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    verdict = Grader("cpu", policy=policy).grade(read("ref_scale_add"), read("honest_scale_add"))
    assert killed == [True]
    assert verdict["correct"] and not verdict["hacks"] and verdict["timing"]["reps"] >= 6, \
        verdict.get("error")


def test_the_reference_outputs_scales_come_from_its_worker():
    """The reference's worker computes each output's scales (RMS, spread: what the judge's
    absolute tolerance follows) where it makes the output; the grader keeps them for those
    tensors and computes none of its own (on CPU they are the very numbers it would)."""
    from kernelmill.grade import compare

    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False, time=False)
    reference = read("ref_scale_add").replace("N = 4096", "N = 1 << 17")  # sampled spread
    run = Grader("cpu", policy=policy).fresh_reference(reference)
    outputs = [o for t in run.value["trials"] for o in t["outputs"]]
    assert outputs and not any("scales" in t for t in run.value["trials"])
    for out in outputs:
        kept = compare._SCALES.get(id(out))
        assert kept is not None and kept[0]() is out
        assert kept[2] == compare.output_scales(out)
    compare.remember_scales(outputs[:1], [[float("nan"), 1.0]])  # malformed: not kept
    assert compare._SCALES[id(outputs[0])][2] == compare.output_scales(outputs[0])


def test_a_window_that_fails_to_open_does_not_hold_the_grade_on_its_kept_worker(monkeypatch):
    """The kept reference worker, asked to time, is ended with its window however the window
    ends (here it raises before opening): the grade fails at once, not at the worker's limit."""
    import time

    import pytest

    def broken(*args, **kwargs):
        raise RuntimeError("the GPU's lock file cannot be opened")

    monkeypatch.setattr(TW, "run_window", broken)
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="lock file"):
        Grader("cpu", policy=policy).grade(read("ref_scale_add"), read("honest_scale_add"))
    assert time.monotonic() - began < 40  # its limit: 2 x 60 s, then 60 more for the timing


def test_a_group_may_share_one_reference_run(monkeypatch):
    """Under ``KERNELMILL_GROUP_REFERENCE=shared`` (the default) a group's members are judged
    against ONE fresh reference run's weights and shown trials (its files handed to every
    member as they are), each against unseen trials of its own: the honest ones pass (each was
    handed the unseen inputs its own reference outputs answer), a wrong one is caught, each is
    charged a share of the run's CPU, and the grading process asks the host for the shared
    part once. Where one
    worker's files would not hold every member's unseen trials, workers of their own make some
    members' beside it, under the same weights and states. A problem whose outputs' size is not
    known yet gets a run per member."""
    from kernelmill.grade import reference_run as R

    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    grader = Grader("cpu", policy=policy)
    runs: list[list] = []  # each grade's fresh reference runs, one per member

    real = grader._fresh_references

    def kept(source, count, *args, **kwargs):
        made = real(source, count, *args, **kwargs)
        runs.append(made)
        return made

    monkeypatch.setattr(grader, "_fresh_references", kept)
    monkeypatch.setenv(R.GROUP_REFERENCE_VAR, "shared")
    honest = read("honest_scale_add")
    wrong = honest.replace("2.0 * x", "3.0 * x")
    reference = read("ref_scale_add")
    assert grader.members_per_run(reference, 3) == 1  # its size not known yet
    grader.grade_group(reference, [honest, honest + "\n# first\n"])
    assert len({run.value["init_seed"] for run in runs.pop()}) == 2
    assert grader.members_per_run(reference, 3) == 3

    def seeds(run, hidden):
        return [t["seed"] for t in run.value["trials"] if bool(t.get("hidden")) is hidden]

    def graded(reference, sources, workers):
        verdicts = grader.grade_group(reference, sources)
        made = runs.pop()
        assert len({run.value["init_seed"] for run in made}) == 1  # one run for all
        assert all(seeds(run, False) == seeds(made[0], False) and seeds(run, False)
                   for run in made)
        unseen = [seeds(run, True) for run in made]
        assert all(unseen) and len({s for each in unseen for s in each}) == \
            sum(map(len, unseen))
        assert grader.members_per_worker(reference, len(sources)) == workers
        return verdicts

    right, off, again = graded(reference, [honest, wrong, honest + "\n# again\n"], 3)
    for verdict in (right, again):
        assert verdict["correct"] and not verdict["hacks"], \
            verdict.get("error") or verdict.get("hack_details")
        assert verdict["profile"]["reference_shared_by"] == 3
    assert not off["correct"] and off["timings"]["skipped"] == "incorrect"
    assert right["timing"]["reference_ms"] == again["timing"]["reference_ms"]
    shares = {v["profile"]["cpu_s"]["reference"] for v in (right, off, again)}
    assert len(shares) == 1 and shares.pop() > 0
    # the host's ask: every member's own part, the run's shared part once
    sizes = grader._sizes(reference, None)
    each, tensors = grader.host_bytes(reference), sizes["tensor_bytes"]
    assert 0 < sizes["unseen_bytes"] < tensors < each
    assert grader.group_host_bytes(reference, 3) == \
        3 * each - 2 * (tensors - sizes["unseen_bytes"])
    # one worker's results file holds the shown trials and one member's unseen ones: the
    # others' are made by workers of their own, under the same weights and states (a problem
    # with weights: a member judged against unseen outputs made under others would fail)
    linear, lin = read("ref_linear"), read("honest_linear")
    grader.grade_group(linear, [lin, lin + "\n# first\n"])  # its size: a run each
    runs.pop()
    sizes = grader._sizes(linear, None)
    private_runs = []
    real_private = grader._private_trials

    def counted(*args, **kwargs):
        private_runs.append(args[3])
        return real_private(*args, **kwargs)

    monkeypatch.setattr(grader, "_private_trials", counted)
    monkeypatch.setattr("kernelmill.grade.reference_sizes.WORKER_FILE_BYTES",
                        2 * sizes["output_bytes"] * (policy.trials + 1 + policy.unseen_trials
                                                     + policy.hidden_spares))
    verdicts = graded(linear, [lin, lin + "\n# b\n", lin + "\n# c\n"], 1)
    assert len(private_runs) == 2 and all(
        {spec["member"] for spec in trials} == {index + 1}
        for index, trials in enumerate(private_runs))
    for verdict in verdicts:
        assert verdict["correct"] and not verdict["hacks"], \
            verdict.get("error") or verdict.get("hack_details")
        assert verdict["profile"]["reference_shared_by"] == 3
    # own: a run per member
    monkeypatch.setenv(R.GROUP_REFERENCE_VAR, "own")
    assert grader.group_host_bytes(reference, 3) == 3 * grader.host_bytes(reference)
    own = grader.grade_group(reference, [honest, honest + "\n# again\n"])
    assert len({run.value["init_seed"] for run in runs.pop()}) == 2
    assert all(v["profile"]["reference_shared_by"] == 1 for v in own)
    monkeypatch.setenv(R.GROUP_REFERENCE_VAR, "one")
    with pytest.raises(KernelmillError, match="shared, own"):
        grade_file("problems.jsonl", "subs.jsonl", "out.jsonl")


def _counting_reference_workers(monkeypatch, grader) -> tuple[list, list]:
    """The workers ``grader`` counts on the device (``Beside.held``'s counts, in order) and
    whether each worker it starts from here on is a reference worker."""
    import kernelmill.grade.live_reference as L
    from kernelmill.grade import reference_run as R

    counted, started = [], []
    real_held, real_run = grader._beside.held, R.run_in_worker

    def held(key, workers):
        counted.append(workers)
        return real_held(key, workers)

    def run(target, payload, **kwargs):
        started.append(str(target).endswith("reference_task"))
        return real_run(target, payload, **kwargs)

    monkeypatch.setattr(grader._beside, "held", held)
    monkeypatch.setattr(R, "run_in_worker", run)  # the other workers
    monkeypatch.setattr(L, "run_in_worker", run)  # the first, kept to time the reference
    return counted, started


@pytest.mark.parametrize("mode, workers", [("shared", 2), ("own", 1)])
def test_a_groups_reference_workers_counted_on_the_device_are_those_it_starts(monkeypatch, mode,
                                                                               workers):
    """The reference workers a grade counts on the device (``Beside``, whose count the
    device-work check's floor reads) are the workers it starts. ``shared``: a grade reads once
    how many members each worker of its shared run makes, even where the problem's sizes say
    otherwise by the time they start (another grade's run replaced them). ``own``: the runs
    are batched into as few workers as their sizes allow (``BATCH_BYTES``), not one per
    member."""
    monkeypatch.setenv("KERNELMILL_GROUP_REFERENCE", mode)
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    grader = Grader("cpu", policy=policy)
    reference, honest = read("ref_scale_add"), read("honest_scale_add")
    grader.grade_group(reference, [honest] * 2)  # the problem's sizes known
    if mode == "shared":
        reads = iter([2] + [1] * 10)  # the grade's read: 2 a worker; any later one: 1
        monkeypatch.setattr(grader, "members_per_worker", lambda *args, **kwargs: next(reads))
    counted, started = _counting_reference_workers(monkeypatch, grader)
    verdicts = grader.grade_group(reference, [honest + f"\n# copy {i}\n" for i in range(4)])
    for verdict in verdicts:
        assert verdict["correct"] and not verdict["hacks"], \
            verdict.get("error") or verdict.get("hack_details")
        assert verdict["profile"]["reference_shared_by"] == (4 if mode == "shared" else 1)
    assert counted[0] == workers == sum(started), (counted, started)


def test_a_shared_runs_workers_are_bounded_by_bytes_or_only_by_their_results_files(
        monkeypatch):
    """``members_per_worker``: by default a worker of a shared run makes as many members'
    unseen trials as keep it within a member's own run or ``BATCH_BYTES``; under
    ``KERNELMILL_SHARED_WORKERS=fewest`` as many as its results file (half a worker's file
    limit) holds the outputs of; a small problem's members all go in one worker either way."""
    from kernelmill.grade import reference_sizes as S

    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    grader = Grader("cpu", policy=policy)
    private = policy.unseen_trials + policy.hidden_spares
    mib = 1 << 20
    # KernelBench's square GEMM: a 3 GiB run, 1.2 GiB of it a member's own, 64 MiB outputs
    grader._reference_sizes["gemm"] = {"tensor_bytes": 3072 * mib, "unseen_bytes": 1229 * mib,
                                       "output_bytes": 64 * mib}
    grader._reference_sizes["small"] = {"tensor_bytes": 40 * mib, "unseen_bytes": 16 * mib,
                                        "output_bytes": mib}
    room = (S.WORKER_FILE_BYTES // 2 // (64 * mib) - policy.trials - 1) // private
    assert 1 < room < 8
    monkeypatch.delenv(S.SHARED_WORKERS_VAR, raising=False)
    assert grader.members_per_worker("gemm", 8) == 1
    assert grader.members_per_worker("small", 8) == 8
    monkeypatch.setenv(S.SHARED_WORKERS_VAR, "fewest")
    assert grader.members_per_worker("gemm", 8) == room
    assert grader.members_per_worker("small", 8) == 8
    assert grader.shared_per_worker("gemm", 8) == room


def test_a_build_folder_that_would_hide_the_libraries_is_refused(tmp_path):
    """The folders hidden from submissions may not hold the Python installation or kernelmill
    itself (every worker would fail to import what it runs): a clear error names it."""
    import os
    import sys

    for root in (os.path.dirname(sys.prefix), os.path.dirname(os.path.dirname(G.__file__))):
        with pytest.raises(KernelmillError, match="may not hold"):
            Grader("cpu", extensions_root=root, cache_root=str(tmp_path))
    Grader("cpu", extensions_root=str(tmp_path / "builds"), cache_root=str(tmp_path))


def test_a_submission_cannot_read_the_graders_caches_or_another_submissions_build(tmp_path,
                                                                                   monkeypatch):
    """A candidate's worker may not read the grader's caches (the reference's compiled Inductor
    and Triton kernels, its timings) nor another submission's extension build: another's
    sources are not its to read, nor a place two members running at once could pass answers
    through. What lies beside them stays readable. The submission answers wrong (scaled by 3)
    unless exactly that holds, so a grader that hides too little or too much fails it."""
    from kernelmill.validate.sandbox import abi_version

    if abi_version() <= 0:
        pytest.skip("kernel without Landlock")
    cache, builds = tmp_path / "cache", tmp_path / "builds"
    (cache / "inductor").mkdir(parents=True)
    (cache / "inductor" / "kernel.py").write_text("the reference's compiled kernel")
    (builds / "0123456789abcdef").mkdir(parents=True)
    (builds / "0123456789abcdef" / "main.cu").write_text("another submission's source")
    beside = tmp_path / "beside.txt"
    beside.write_text("readable")
    # (the scan refuses a kernel that opens files: reached as the hostile cases do)
    probe = (f"\nimport enum\n\n\ndef _scale():\n"
             f"    b = enum.bltns\n"
             f"    def opens(path):\n"
             f"        try:\n"
             f"            with b.getattr(b, 'op' + 'en')(path) as f:\n"
             f"                return bool(f.read())\n"
             f"        except OSError:\n"
             f"            return False\n"
             f"    hidden = [{str(cache / 'inductor' / 'kernel.py')!r},\n"
             f"              {str(builds / '0123456789abcdef' / 'main.cu')!r}]\n"
             f"    right = opens({str(beside)!r}) and not any(opens(p) for p in hidden)\n"
             f"    return 2.0 if right else 3.0\n")
    source = read("honest_scale_add").replace("2.0 * x + y", "scale * x + y").replace(
        "x_ptr, y_ptr, out_ptr, n, BLOCK", "x_ptr, y_ptr, out_ptr, n, scale, BLOCK").replace(
        "(x, y, out, n, BLOCK=1024)", "(x, y, out, n, _scale(), BLOCK=1024)") + probe
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    monkeypatch.chdir(tmp_path)
    # named as given, and relative to where the grader runs (workers run in folders of their own)
    for roots in ((str(cache), str(builds)), ("cache", "builds")):
        grader = Grader("cpu", policy=policy, cache_root=roots[0], extensions_root=roots[1])
        verdict = grader.grade(read("ref_scale_add"), source)
        assert verdict["correct"] and not verdict["hacks"], \
            (roots, verdict.get("error") or verdict.get("hack_details"))


OVERFLOWING = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Finite under its constructor's weight (0), not under a re-drawn one (N(0, 0.2))."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return x * torch.exp(self.w.abs() * 1e6)


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
'''

SCALED_BY_EXP = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def exp_scale_kernel(x_ptr, w_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    scale = tl.exp(tl.abs(tl.load(w_ptr)) * 1e6)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        exp_scale_kernel[(triton.cdiv(n, 1024),)](x, self.w, out, n, BLOCK=1024)
        return out
'''


def test_a_shared_runs_other_workers_take_the_base_state_its_first_settled_on(monkeypatch):
    """Where a problem's draws overflow under the re-drawn base state, a reference run falls
    back to the constructor's. The workers making other members' unseen trials of a shared run
    make them again under the state the first worker settled on: a member's unseen outputs
    under another state would fail an honest kernel."""
    from kernelmill.grade import reference_run as R

    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    grader = Grader("cpu", policy=policy)
    monkeypatch.setenv(R.GROUP_REFERENCE_VAR, "shared")
    first = grader.grade_group(OVERFLOWING, [SCALED_BY_EXP])[0]  # its size: a run of its own
    assert first["correct"] and not first["hacks"], first.get("error") or first.get("hack_details")
    made = []
    real = grader._private_trials

    def counted(*args, **kwargs):
        made.append(kwargs.get("constructor", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(grader, "_private_trials", counted)
    monkeypatch.setattr(grader, "members_per_worker", lambda *a, **k: 1)
    verdicts = grader.grade_group(OVERFLOWING, [SCALED_BY_EXP, SCALED_BY_EXP + "\n# b\n"])
    for verdict in verdicts:
        assert verdict["correct"] and not verdict["hacks"], \
            verdict.get("error") or verdict.get("hack_details")
        assert verdict["profile"]["reference_shared_by"] == 2
    assert made == [False, True]  # made under the re-drawn state, then again under the base


def test_a_shared_run_whose_other_workers_draws_overflow_gives_each_member_a_run(monkeypatch):
    """A worker making other members' unseen trials keeps the base state the first worker
    settled on; where its own draws overflow under it (a member's run of its own would have
    fallen back to the constructor's), the group is graded against a run per member, as
    under ``own``: no member is judged against outputs that are not finite."""
    from kernelmill.grade import reference_run as R

    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    grader = Grader("cpu", policy=policy)
    monkeypatch.setenv(R.GROUP_REFERENCE_VAR, "shared")
    linear, lin = read("ref_linear"), read("honest_linear")
    grader.grade_group(linear, [lin])  # its size: a run of its own
    monkeypatch.setattr(grader, "members_per_worker", lambda *a, **k: 1)
    real, overflowed = grader._private_trials, []

    def overflowing(*args, **kwargs):
        result = real(*args, **kwargs)
        assert result.value["natural_finite"] is True  # as the worker reads its draws
        if not overflowed:  # the first other worker's draws, as if they had overflowed
            overflowed.append(True)
            result.value["natural_finite"] = False
        return result

    monkeypatch.setattr(grader, "_private_trials", overflowing)
    runs = []
    real_references = grader._fresh_references

    def kept(source, count, *args, **kwargs):
        runs.append(real_references(source, count, *args, **kwargs))
        return runs[-1]

    monkeypatch.setattr(grader, "_fresh_references", kept)
    verdicts = grader.grade_group(linear, [lin, lin + "\n# b\n", lin + "\n# c\n"])
    assert overflowed and len({run.value["init_seed"] for run in runs[-1]}) == 3
    for verdict in verdicts:
        assert verdict["correct"] and not verdict["hacks"], \
            verdict.get("error") or verdict.get("hack_details")
        assert verdict["profile"]["reference_shared_by"] == 1


UNSEEDED_WEIGHTS = '''import numpy as np
import torch
import torch.nn as nn


class Model(nn.Module):
    """Its weight drawn from a generator the grader's seed does not reach (NumPy's, seeded by
    the OS in each process)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.full((64,), float(np.random.default_rng().uniform(0.5, 1.5))))

    def forward(self, x):
        return x * self.w


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
'''

ROW_SCALE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_scale_kernel(x_ptr, w_ptr, out_ptr, n, cols, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    w = tl.load(w_ptr + offsets % cols, mask=mask)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(64))

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        row_scale_kernel[(triton.cdiv(n, 1024),)](x, self.w, out, n, 64, BLOCK=1024)
        return out
'''


def test_a_shared_run_whose_workers_built_other_weights_gives_each_member_a_run(monkeypatch):
    """The workers of a shared run build the model from the same seeds; a constructor that
    draws from a generator the seed does not reach (NumPy's, unseeded) builds other weights
    in each. Their base states are told apart (``state_digest``) and the group is graded
    against a run per member: an honest member judged against unseen outputs made under
    weights it was not given would be wrong."""
    from kernelmill.grade import reference_run as R

    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    grader = Grader("cpu", policy=policy)
    monkeypatch.setenv(R.GROUP_REFERENCE_VAR, "shared")
    first = grader.grade_group(UNSEEDED_WEIGHTS, [ROW_SCALE])[0]  # its size: its own run
    assert first["correct"] and not first["hacks"], first.get("error") or first.get("hack_details")
    monkeypatch.setattr(grader, "members_per_worker", lambda *a, **k: 1)
    runs = []
    real = grader._fresh_references

    def kept(source, count, *args, **kwargs):
        runs.append(real(source, count, *args, **kwargs))
        return runs[-1]

    monkeypatch.setattr(grader, "_fresh_references", kept)
    verdicts = grader.grade_group(UNSEEDED_WEIGHTS, [ROW_SCALE, ROW_SCALE + "\n# b\n"])
    for verdict in verdicts:
        assert verdict["correct"] and not verdict["hacks"], \
            verdict.get("error") or verdict.get("hack_details")
    assert all(verdict["profile"]["reference_shared_by"] == 1 for verdict in verdicts)
    assert len({run.value["init_seed"] for run in runs[-1]}) == 2  # a run each
    # and the problem's later groups make a run per member at once, not a shared one first
    assert grader.members_per_run(UNSEEDED_WEIGHTS, 2) == 1
    grader._reference_sizes["another"] = {"tensor_bytes": 4096, "output_bytes": 512,
                                          "unseen_bytes": 1024}
    assert grader.members_per_run("another", 2) == 2  # other problems still share


def _with_constructor_argument(source: str) -> str:
    """``source`` (the scale-add problem, or an answer to it) whose model takes a constructor
    argument; the problem's is a tensor of 256 KiB, too large to travel pickled."""
    source = source.replace("def __init__(self):", "def __init__(self, size):")
    return source.replace("def get_init_inputs():\n    return []",
                          "def get_init_inputs():\n    return [torch.linspace(0, 1, 1 << 16)]")


def test_a_large_constructor_argument_travels_in_the_shown_file(monkeypatch):
    """A constructor argument a candidate is given (a tensor of 64 KiB or more) is written
    into the reference run's shown file with its inputs and weights: each member's payload is
    that file as it is, not a copy of the whole payload per member (``passed_on``)."""
    passed = _passing_on(monkeypatch)
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    reference = _with_constructor_argument(read("ref_scale_add"))
    assert "linspace" in reference
    verdicts = Grader("cpu", policy=policy).grade_group(
        reference, [_with_constructor_argument(read("honest_scale_add"))] * 2)
    assert all(v["correct"] and not v["hacks"] for v in verdicts), \
        [v.get("error") or v.get("hacks") for v in verdicts]
    candidates = [ok for keys, ok in passed if "graph_check_trial" in keys]
    assert candidates == [True, True], passed
