"""The hostile suite: every submission in tests/fixtures/submissions graded in ONE batch run.

Each fixture names its problem and what the grader must conclude in its first lines:
``# problem: ref_scale_add`` and ``# expect: certified | error | incorrect | <hack code>`` (or
``code|code``: rejected with one of them, where several layers may catch a case first).
No hostile submission may be certified; honest kernels must be; the batch must survive all of
them (crashers, a hang, forgers, a child-process leaver) in one run, then resume and hit its cache.
"""
import json
import re
import threading
from pathlib import Path

from conftest import FIXTURES

import pytest
from kernelmill.core.store import read_jsonl
from kernelmill.grade.batch import grade_file
from kernelmill.grade.policy import Policy

SUBMISSIONS = FIXTURES / "submissions"
FAST_TIMING = {"min_reps": 2, "max_reps": 2, "warmup": 1}


def fixtures(cuda: bool = False) -> dict[str, tuple[str, str, str]]:
    """name -> (problem id, expectation, source); ``cuda_*`` fixtures only when ``cuda``."""
    found = {}
    for path in sorted(SUBMISSIONS.glob("*.py")):
        if path.name.startswith("ref_") or (path.name.startswith("cuda_") and not cuda):
            continue
        text = path.read_text()
        problem = re.search(r"^# problem: (\S+)", text, re.MULTILINE).group(1)
        expect = re.search(r"^# expect: (\S+)", text, re.MULTILINE).group(1)
        on_cuda = re.search(r"^# on cuda: (\S+)", text, re.MULTILINE)
        if cuda and on_cuda:  # an attack that ends otherwise on a GPU says how
            expect = on_cuda.group(1)
        found[path.stem] = (problem, expect, text)
    return found


def write_inputs(tmp_path: Path, only: set[str] | None = None,
                 cuda: bool = False) -> tuple[Path, Path]:
    problems = tmp_path / "problems.jsonl"
    with problems.open("w") as handle:
        for path in sorted(SUBMISSIONS.glob("ref_*.py")):
            handle.write(json.dumps({"id": path.stem, "source": path.read_text()}) + "\n")
    submissions = tmp_path / "submissions.jsonl"
    with submissions.open("w") as handle:
        for name, (problem, _expect, text) in fixtures(cuda).items():
            if only is None or name in only:
                handle.write(json.dumps({"submission_id": name, "problem_id": problem,
                                         "source": text}) + "\n")
    return problems, submissions


def check(name: str, expect: str, verdict: dict) -> None:
    summary = {k: verdict.get(k) for k in ("correct", "hacks", "error", "reward")}
    if expect == "certified":
        assert verdict["correct"] and not verdict["hacks"], (name, summary, verdict["checks"])
        assert verdict["reward"] >= 1.5, (name, summary)
        return
    assert not verdict["correct"], (name, summary)
    if expect == "error":
        assert verdict["error"], (name, summary)
        assert verdict["reward"] <= 0.5, (name, summary)
    elif expect in ("incorrect", "not_certified"):
        assert verdict["reward"] <= 0.5, (name, summary)
    else:  # ``a|b``: rejected with one of these codes (several layers may catch it first)
        assert set(expect.split("|")) & set(verdict["hacks"]), \
            (name, summary, verdict.get("hack_details"))
        assert verdict["reward"] == 0.0, (name, summary)


@pytest.mark.slow
def test_hostile_suite_in_one_batch(tmp_path):
    problems, submissions = write_inputs(tmp_path)
    out = tmp_path / "verdicts.jsonl"
    cache = tmp_path / "cache.jsonl"
    # static_first off: each fixture's expected hack is the run-time one
    # 15 s a worker: the hang costs that twice (graded, then again once its verdict is not
    # served from the cache); every other fixture grades in a few seconds
    policy = Policy(timeout_s=15, timing_settings=FAST_TIMING, static_first=False)
    stats = grade_file(problems, submissions, out, device="cpu", workers=2, policy=policy,
                       cache_path=cache)
    rows = {row["submission_id"]: row for row in read_jsonl(out)}
    expected = fixtures()
    assert set(rows) == set(expected)
    for name, (_problem, expect, _text) in expected.items():
        check(name, expect, rows[name])
    assert stats.n_kept == len(expected)
    assert rows["crash_hang"]["error"]["message"].startswith("timed out")
    assert rows["crash_segfault"]["error"]["stage"] == "forward"
    assert not rows["crash_syntax"]["compiled"]
    # a forward that launches none of its kernels is told so first, before the ghost check
    # that follows from it (codes are listed by name: ``ghost_kernels`` sorts first)
    never = rows["hack_never_launched"]
    assert "ghost_kernels" in never["hacks"] and not never["reason"].startswith(
        "hack ghost_kernels"), never["reason"]

    # Resume: nothing left to do. The timeout's verdict would be graded again
    # (test_a_rerun_grades_again_the_verdicts_a_retry_may_change), here 15 s: the rerun is given
    # every submission but the hang, whose row stays. A new output file: every verdict comes
    # from the cache.
    (tmp_path / "again").mkdir()
    _, without_hang = write_inputs(tmp_path / "again", only=set(expected) - {"crash_hang"})
    before = out.read_text()
    again = grade_file(problems, without_hang, out, device="cpu", workers=2, policy=policy,
                       cache_path=cache)
    assert again.counts["already graded"] == len(expected) - 1 and again.n_kept == 0
    assert not again.counts["graded again"] and out.read_text() == before
    other = tmp_path / "verdicts2.jsonl"
    cached = grade_file(problems, without_hang, other, device="cpu", workers=2, policy=policy,
                        cache_path=cache)
    assert cached.counts["cached"] == len(expected) - 1 == cached.n_kept
    assert all(row.get("cached") for row in read_jsonl(other))
    assert {row["submission_id"]: row["correct"] for row in read_jsonl(other)} == \
        {name: row["correct"] for name, row in rows.items() if name != "crash_hang"}


def test_grades_sharing_a_gpu_hold_its_memory_as_validation_does(monkeypatch):
    from kernelmill.grade import admitted, batch
    from kernelmill.validate import admission, host_admission

    budget = admission.MemoryBudget(100 << 30, name="gpu0")
    host = admission.MemoryBudget(400 << 30, name="host")
    monkeypatch.setattr(admission, "budget_for", lambda slot: budget)
    monkeypatch.setattr(host_admission, "host_budget", lambda configured=None: host)
    monkeypatch.setattr(admitted, "_SLOTS_PER_GPU", {0: 4})

    class Seen:
        def device_bytes(self, source, record=None, slot_env=None):
            return {"big": 1 << 30}.get(source)

        def group_host_bytes(self, source, members, slot_env=None):
            each = {"big": 3 << 30}.get(source)
            return None if each is None else members * each

    slot = {"gpu": 0, "device": "cuda:0", "env": {}}
    with admitted._admitted(Seen(), {"reference": "big"}, 8, slot):
        # on the GPU the 8 members' candidate workers and the timing reference (the fresh
        # references have ended by then); on the host what this process keeps of each member
        assert budget.used == int(((1 << 30) * admission.ALLOCATOR_FACTOR +
                                   admitted.WORKER_BASE_BYTES) * 9)
        assert host.used == 8 * (3 << 30)
    assert budget.used == 0 and host.used == 0
    grader = Seen()
    with admitted._admitted(grader, {"reference": "new"}, 1, slot) as resize:
        assert budget.used == int(budget.capacity * admitted.UNKNOWN_SHARE)  # not seen yet
        assert host.used == int(host.capacity * admitted.UNKNOWN_SHARE)
        grader.device_bytes = lambda source, record=None, slot_env=None: 1 << 30  # ran
        grader.group_host_bytes = lambda source, members, slot_env=None: members * (3 << 30)
        resize()
        assert budget.used == int(((1 << 30) * admission.ALLOCATOR_FACTOR +
                                   admitted.WORKER_BASE_BYTES) * 2)
        assert host.used == 3 << 30
    assert budget.used == 0 and host.used == 0
    # candidate workers started beside the reference run: their contexts are held with the
    # reference's workers, and given back once the runs are in (each its member's worker)
    monkeypatch.setenv("KERNELMILL_EARLY_CANDIDATES", "on")
    each = (1 << 30) * admission.ALLOCATOR_FACTOR + admitted.WORKER_BASE_BYTES
    with admitted._admitted(Seen(), {"reference": "big"}, 8, slot) as resize:
        assert budget.used == int(each * 9) + 8 * admitted.WORKER_BASE_BYTES
        resize()
        assert budget.used == int(each * 9)
    grader = Seen()
    with admitted._admitted(grader, {"reference": "new"}, 1, slot) as resize:
        grader.device_bytes = lambda source, record=None, slot_env=None: 1 << 30  # ran
        resize()
        assert budget.used == int(each * 2)
    assert budget.used == 0
    monkeypatch.delenv("KERNELMILL_EARLY_CANDIDATES")
    admitted._SLOTS_PER_GPU[0] = 1  # alone on its GPU, or on CPU: nothing to share
    with admitted._admitted(Seen(), {"reference": "big"}, 8, slot):
        assert budget.used == 0
    with admitted._admitted(Seen(), {"reference": "big"}, 8, {"gpu": None}):
        assert budget.used == 0
    assert batch.default_slots_per_gpu(1, 16) == 16 and batch.default_slots_per_gpu(2, 16) == 8
    assert batch.default_slots_per_gpu(1, 2) == 2 and batch.default_slots_per_gpu(8, 256) == 16
    # groups: a quarter of the slots (a group's members make their CUDA contexts together)
    assert batch.default_slots_per_gpu(1, 16, group=8) == 4
    assert batch.default_slots_per_gpu(1, 2, group=8) == 1


def test_a_member_out_of_memory_while_its_grade_shared_the_gpu_is_graded_again_alone(
        monkeypatch):
    from kernelmill.grade import admitted, batch
    from kernelmill.grade.grader import ReferenceError
    from kernelmill.validate import admission, host_admission

    budget = admission.MemoryBudget(100 << 30, name="gpu0")
    host = admission.MemoryBudget(400 << 30, name="host")
    monkeypatch.setattr(admission, "budget_for", lambda slot: budget)
    monkeypatch.setattr(host_admission, "host_budget", lambda configured=None: host)
    monkeypatch.setattr(admitted, "_SLOTS_PER_GPU", {0: 4})
    oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB."

    class Shared:
        """Fails its members whose source says so while another grade holds the GPU."""

        def __init__(self, reference_fails=False, alone_fails=False):
            self.calls, self.reference_fails, self.alone_fails = [], reference_fails, alone_fails

        def device_bytes(self, source, record=None, slot_env=None):
            return 1 << 30

        def group_host_bytes(self, source, members, slot_env=None):
            return members << 20

        def grade_group(self, reference, sources, *, record, reward, slot_env,
                        on_references):
            alone = budget._alone
            self.calls.append((list(sources), alone))
            if (self.reference_fails and not alone) or (self.alone_fails and alone):
                raise ReferenceError(f"reference run failed in reference forward: {oom}")
            short = {"short": {"correct": False, "hacks": [],
                               "error": {"stage": "forward", "message": oom}},
                     # its run short, with a hack found all the same: never graded again
                     "hacked": {"correct": False, "hacks": ["patched_function"],
                                "error": {"stage": "forward", "message": oom}},
                     # answers found wrong, then the window short: wrong stays wrong
                     "wrong": {"correct": False, "hacks": [],
                               "timings": {"error": f"reference timing failed: {oom}"}},
                     # answers right, its window short: timed again alone
                     "late": {"correct": True, "hacks": [], "speedup_vs_eager": None,
                              "timings": {"error": f"reference timing failed: {oom}"}}}
            return [{"correct": True, "hacks": [], "speedup_vs_eager": 2.0}
                    if alone or source not in short else dict(short[source])
                    for source in sources]

    def group(grader, sources):
        monkeypatch.setattr(batch, "_grader_for", lambda config: grader)
        return batch.grade_group_items(
            [{"submission_id": f"s{i}", "problem_id": "p", "reference": "ref",
              "source": source, "config": {"reward": "composite"}}
             for i, source in enumerate(sources)], {"gpu": 0, "device": "cuda:0", "env": {}})

    other = budget.acquire(1 << 30)  # another grade on the same GPU, ending a little later
    threading.Timer(0.3, budget.release, [other]).start()
    grader = Shared()
    verdicts = group(grader, ["fine", "short", "hacked", "wrong", "late", "short"])
    # the members that ran short with no hack found and no answer found wrong, and only they,
    # graded again, once the other grade let the GPU go
    assert grader.calls == [(["fine", "short", "hacked", "wrong", "late", "short"], False),
                            (["short", "late", "short"], True)]
    assert [v["correct"] for v in verdicts] == [True, True, False, False, True, True]
    assert verdicts[2]["hacks"] == ["patched_function"]
    assert [v["profile"].get("rerun_alone", False) for v in verdicts] == \
        [False, True, False, False, True, True]
    assert budget.used == 0 and host.used == 0
    # the rerun was its retry: a later run of the batch does not grade it a third time
    from kernelmill.grade.retry import attempt_of, to_redo
    assert attempt_of(verdicts[1]) == 2 and not to_redo({**verdicts[1], "timings": {"error": "x"}})
    # alone on the GPU already: what it said is final
    admitted._SLOTS_PER_GPU[0] = 1
    grader = Shared()
    verdicts = group(grader, ["short"])
    assert grader.calls == [(["short"], False)] and verdicts[0]["error"]["message"] == oom
    assert not verdicts[0]["profile"].get("rerun_alone")
    # a reference run short of memory while sharing: the whole grade again, alone
    admitted._SLOTS_PER_GPU[0] = 4
    other = budget.acquire(1 << 30)
    grader = Shared(reference_fails=True)
    threading.Timer(0.3, budget.release, [other]).start()  # the alone hold waits for it
    verdicts = group(grader, ["fine", "short"])
    assert grader.calls == [(["fine", "short"], False), (["fine", "short"], True)]
    assert [v["correct"] for v in verdicts] == [True, True]
    assert verdicts[0]["profile"]["admission_wait_s"] >= 0.2
    assert all(v["profile"]["rerun_alone"] for v in verdicts)
    # the rerun's own reference failing: every member keeps its first verdict
    other = budget.acquire(1 << 30)
    threading.Timer(0.3, budget.release, [other]).start()
    grader = Shared(alone_fails=True)
    verdicts = group(grader, ["fine", "short"])
    assert [v["correct"] for v in verdicts] == [True, False]
    assert verdicts[1]["error"]["message"] == oom and "rerun_alone_failed" in verdicts[1]["profile"]
    assert not any(v.get("reference_failed") for v in verdicts)
    # a reference that fails otherwise: failed verdicts, no second grade
    grader = Shared(reference_fails=True)
    grader.grade_group = lambda *a, **k: (_ for _ in ()).throw(ReferenceError("bad problem"))
    assert all(v["reference_failed"] for v in group(grader, ["fine"]))
    assert admitted.ran_out_of_memory({"timings": {"error": f"reference timing failed: {oom}"}})
    assert not admitted.ran_out_of_memory({"error": {"message": "shape mismatch"}})
    # the host's out-of-memory killer is not the GPU's shortage (a retry on the next run)
    assert not admitted.ran_out_of_memory({"error": {
        "message": "killed by SIGKILL (out of memory?)", "signal": "SIGKILL"}})


def test_a_grade_worker_is_admitted_by_its_reference_runs_sizes(tmp_path, monkeypatch):
    import torch
    from kernelmill.grade import grader as grader_module
    from kernelmill.grade import reference_run, reference_sizes

    grader = grader_module.Grader("cpu", cache_root=str(tmp_path))
    trial = {"inputs": [torch.zeros(1 << 20)], "outputs": [torch.zeros(1 << 20)]}
    value = {"trials": [trial] * 6, "state_dict": {}}
    tensors = 6 * 2 * (4 << 20)
    assert grader.device_bytes("src") is None  # nothing seen yet
    assert grader.host_bytes("src") is None
    grader._note_reference_bytes("src", value)  # off a GPU: every trial's tensors, twice
    assert grader.device_bytes("src") == 2 * tensors
    # a reference worker on a GPU reports its device peak: the device holds that (one trial
    # at a time), however many trials' tensors the grading process keeps on the host
    grader._note_reference_bytes("src", {**value, "device_peak_bytes": 3 << 20})
    assert grader.device_bytes("src") == grader_module.PEAK_FACTOR * (3 << 20)
    # on the host: twice the run's tensors (as much out as in: the candidate's outputs could
    # take that), or, where less, the run's tensors once and the outputs the candidate ships and
    # the judge compares, one trial's outputs each (the default policy: 17 shipped, 3 compared)
    assert reference_run.shipped_outputs(grader.policy) == 17
    assert grader.host_bytes("src") == grader_module.HOST_COPIES * tensors < \
        tensors + (17 + 3) * (4 << 20)
    # an input-heavy problem (one trial's outputs a scalar) is held at its tensors and the few
    # outputs shipped, but never under ``HOST_FLOOR`` times its tensors (its job's own copy of
    # the shown inputs, where the shown file cannot be passed on); sizes kept without a
    # trial's outputs: twice the tensors, as before
    heavy = {"trials": [{"inputs": [torch.zeros(1 << 22)], "outputs": [torch.zeros(())]}] * 6,
             "state_dict": {}}
    grader._note_reference_bytes("logits", heavy)
    logits = 6 * (16 << 20) + 6 * 4
    assert grader.host_bytes("logits") == int(reference_run.HOST_FLOOR * logits) < 2 * logits
    wide = {"trials": [{"inputs": [torch.zeros(1 << 22)], "outputs": [torch.zeros(1 << 20)]}] * 6,
            "state_dict": {}}  # 16 MiB in, 4 out: the outputs shipped and compared lie between
    grader._note_reference_bytes("wide", wide)
    assert grader.host_bytes("wide") == 6 * (20 << 20) + 20 * (4 << 20)
    grader._reference_sizes["old"] = {"tensor_bytes": tensors}
    assert grader.host_bytes("old") == grader_module.HOST_COPIES * tensors
    grader._note_reference_bytes("src", {**value, "device_peak_bytes": 64 << 20})
    assert grader.device_bytes("src") == grader_module.PEAK_FACTOR * (64 << 20)
    # validation's measured peak, where the record has one, comes first
    record = {"validation": {"memory": {"measured_bytes": 7 << 20}}}
    assert grader.device_bytes("src", record) == grader_module.PEAK_FACTOR * (7 << 20)
    # on a GPU the sizes are kept on disk per GPU model: a new grader process admits the
    # problem's first grade by them
    for module in (reference_run, reference_sizes):  # the caches' keys, and the readings'
        monkeypatch.setattr(module, "gpu_name", lambda device, env=None: "Fake GPU")
    grader._note_reference_bytes("gpu-src", {**value, "device_peak_bytes": 64 << 20})
    fresh = grader_module.Grader("cpu", cache_root=str(tmp_path))
    assert fresh.device_bytes("gpu-src") == grader_module.PEAK_FACTOR * (64 << 20)
    assert fresh.device_bytes("never-seen") is None
    # a cache file that is not JSON, or holds what is not a size, is no size
    for path in (tmp_path / "reference-size").iterdir():
        path.write_text("{not json")
    assert grader_module.Grader("cpu", cache_root=str(tmp_path)).device_bytes("gpu-src") is None
    for path in (tmp_path / "reference-size").iterdir():
        path.write_text('{"tensor_bytes": "9", "device_peak_bytes": -1}')
    assert grader_module.Grader("cpu", cache_root=str(tmp_path)).device_bytes("gpu-src") is None


CPP_SCALE_ADD = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>
torch::Tensor scale_add(torch::Tensor x, torch::Tensor y) {
    auto xa = x.contiguous(); auto ya = y.contiguous();
    auto out = torch::empty_like(xa);
    const float* px = xa.data_ptr<float>(); const float* py = ya.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < xa.numel(); ++i) po[i] = 2.0f * px[i] + py[i];
    return out;
}
"""
_ext = load_inline(name="km_batch_cpp_scale_add", cpp_sources=_SRC, functions=["scale_add"])


class ModelNew(nn.Module):
    def forward(self, x, y):
        return _ext.scale_add(x, y)
'''


def test_a_cpp_answer_graded_in_a_batch_on_cpu_with_a_relative_out_loads_its_build(
        tmp_path, monkeypatch):
    """A batch whose ``--out`` is relative builds each C++ answer beside it: the compile worker
    and the candidate's worker (each in a folder of its own) must find the same build, or the
    candidate, barred from starting processes, fails to compile it again ("Ninja is
    required")."""
    monkeypatch.chdir(tmp_path)
    reference = (SUBMISSIONS / "ref_scale_add.py").read_text()
    Path("problems.jsonl").write_text(json.dumps({"id": "ref_scale_add", "source": reference})
                                      + "\n")
    Path("subs.jsonl").write_text(json.dumps({"submission_id": "cpp", "problem_id":
                                              "ref_scale_add", "source": CPP_SCALE_ADD}) + "\n")
    grade_file("problems.jsonl", "subs.jsonl", "verdicts.jsonl", device="cpu",
               cache_path=False, policy=Policy(timing_settings=FAST_TIMING))
    verdict = next(iter(read_jsonl("verdicts.jsonl")))
    assert verdict["compiled"] and verdict["correct"], verdict.get("error")
    assert any(Path("verdicts.jsonl.extensions").rglob("*.so"))  # built where it was loaded


def test_a_batch_shared_among_grading_processes_gives_the_same_verdicts(tmp_path):
    """``processes=2``: the slots are two spawned interpreters' threads; every verdict is
    written, each as the fixture expects, and their CPU is counted."""
    chosen = {"honest_scale_add", "honest_row_sum", "crash_segfault", "hack_zeros",
              "hack_patch_timer", "honest_linear"}
    problems, submissions = write_inputs(tmp_path, only=chosen)
    out = tmp_path / "verdicts.jsonl"
    policy = Policy(timeout_s=30, timing_settings=FAST_TIMING, static_first=False)
    stats = grade_file(problems, submissions, out, device="cpu", workers=2, policy=policy,
                       cache_path=False, processes=2)
    rows = {row["submission_id"]: row for row in read_jsonl(out)}
    assert set(rows) == chosen and stats.n_kept == len(chosen)
    expected = fixtures()
    for name in chosen:
        check(name, expected[name][1], rows[name])
    assert stats.counts["cpu_ms: grading processes"] > 0


def test_a_rerun_grades_again_the_verdicts_a_retry_may_change(tmp_path):
    """A submission whose grade timed out is graded again by a rerun of the same command, once,
    its row replaced; a final verdict is kept as it was and counted already graded."""
    chosen = {"crash_hang", "crash_syntax"}
    problems, submissions = write_inputs(tmp_path, only=chosen)
    out = tmp_path / "verdicts.jsonl"
    policy = Policy(timeout_s=6, timing_settings=FAST_TIMING, static_first=False)
    first = grade_file(problems, submissions, out, device="cpu", workers=2, policy=policy,
                       cache_path=False)
    rows = {row["submission_id"]: row for row in read_jsonl(out)}
    assert first.n_kept == 2 and rows["crash_hang"]["error"]["timed_out"] is True
    check("crash_syntax", "error", rows["crash_syntax"])  # final: a source that does not parse
    lines = out.read_text().splitlines()
    # the same id for another source, or a row of another problems file: not this run's
    # grading to retry (kept as it was, counted already graded)
    changed = tmp_path / "changed.jsonl"
    changed.write_text("".join(json.dumps({**row, "source": row["source"] + "\n# edited\n"})
                               + "\n" for row in read_jsonl(submissions)))
    other = tmp_path / "other_problems.jsonl"
    other.write_text("".join(json.dumps({**row, "id": row["id"] + "_v2"}) + "\n"
                             for row in read_jsonl(problems)))
    for subs, probs in ((changed, problems), (submissions, other)):
        kept = grade_file(probs, subs, out, device="cpu", workers=2, policy=policy,
                          cache_path=False)
        assert kept.counts["already graded"] == 2 and not kept.counts["graded again"]
        assert out.read_text().splitlines() == lines
    again = grade_file(problems, submissions, out, device="cpu", workers=2, policy=policy,
                       cache_path=False)
    assert again.counts["graded again"] == 1 and again.counts["already graded"] == 1
    assert again.n_kept == 1
    redone = {row["submission_id"]: row for row in read_jsonl(out)}
    assert len(out.read_text().splitlines()) == 2 and set(redone) == chosen
    assert redone["crash_syntax"] == rows["crash_syntax"]  # kept, line for line
    assert [line for line in out.read_text().splitlines() if "crash_syntax" in line] == \
        [line for line in lines if "crash_syntax" in line]
    hang = redone["crash_hang"]
    assert hang["error"]["timed_out"] is True and hang["attempt"] == 2
    assert hang["profile"]["began_at"] > rows["crash_hang"]["profile"]["began_at"]
    # graded twice the same way: final, a third run grades nothing
    third = grade_file(problems, submissions, out, device="cpu", workers=2, policy=policy,
                       cache_path=False)
    assert third.counts["already graded"] == 2 and not third.counts["graded again"]
    assert {row["submission_id"]: row for row in read_jsonl(out)} == redone


def test_single_grades_in_mixed_order_take_a_block_of_problems_one_item_each_in_turn():
    from kernelmill.grade import batch

    items = [{"submission_id": f"{p}{k}", "problem_id": p, "source": "x = 1"}
             for p, n in (("a", 3), ("b", 1), ("c", 2), ("d", 2)) for k in range(n)]
    order = [it["submission_id"] for it in batch.mixed_order(items, width=3)]
    # a, b, c first, one each in turn; d only once their block is done
    assert order == ["a0", "b0", "c0", "a1", "c1", "a2", "d0", "d1"]
    assert sorted(order) == sorted(it["submission_id"] for it in items)
    # an extension build's problem is a block of its own kind, after the Triton ones
    built = items + [{"submission_id": "e0", "problem_id": "a",
                      "source": "from torch.utils.cpp_extension import load_inline"}]
    assert [it["submission_id"] for it in batch.mixed_order(built, width=8)][-1] == "e0"


def test_a_problem_whose_workers_were_read_is_admitted_at_what_they_held_where_asked(
        tmp_path, monkeypatch):
    from kernelmill.grade import admitted
    from kernelmill.grade import grader as grader_module
    from kernelmill.validate import admission, host_admission

    grader = grader_module.Grader("cpu", cache_root=str(tmp_path))
    assert grader.seen_worker_bytes("src") is None  # nothing read yet
    views = {0: {"device_mib": {"candidate": 1500, "reference": 900}},
             1: {"device_mib": {"candidate": 1600, "reference": 900}},
             2: {"device_mib": {"candidate": 40000, "reference": None}},  # one far larger
             3: None}  # a member that never reached the window
    grader.note_worker_memory("src", views)
    # the candidates' median, above the reference's most: the outlier does not set it
    assert grader.seen_worker_bytes("src") == 1600 << 20
    grader.note_worker_memory("src", {0: {"device_mib": {"candidate": None, "reference": 2000}}})
    assert grader.seen_worker_bytes("src") == 2000 << 20  # the reference's most, now larger

    budget = admission.MemoryBudget(100 << 30, name="gpu0")
    host = admission.MemoryBudget(400 << 30, name="host")
    monkeypatch.setattr(admission, "budget_for", lambda slot: budget)
    monkeypatch.setattr(host_admission, "host_budget", lambda configured=None: host)
    monkeypatch.setattr(admitted, "_SLOTS_PER_GPU", {0: 4})
    peaks = {"src": 1 << 29, "fused": 3 << 30}  # the reference workers' own peaks
    monkeypatch.setattr(grader, "reference_peak_bytes", lambda source, *a: peaks.get(source))
    monkeypatch.setattr(grader, "device_bytes", lambda *a, **k: 1 << 30)
    monkeypatch.setattr(grader, "host_bytes", lambda *a, **k: 1 << 20)
    slot = {"gpu": 0, "device": "cuda:0", "env": {}}
    estimate = int(((1 << 30) * admission.ALLOCATOR_FACTOR + admitted.WORKER_BASE_BYTES) * 3)
    with admitted._admitted(grader, {"reference": "src"}, 2, slot):
        assert budget.used == estimate  # by default, the estimate
    monkeypatch.setenv(admitted.ADMIT_VAR, "seen")
    with admitted._admitted(grader, {"reference": "src"}, 2, slot):
        assert budget.used == int((2000 << 20) * admitted.SEEN_MARGIN) * 3
    with admitted._admitted(grader, {"reference": "unread"}, 2, slot):
        assert budget.used == estimate  # none read: the estimate
    # As on the GPU: fused candidates read small, the reference's timing worker gone before
    # the reading. It is held at its own peak, not at the candidates' reading.
    grader.note_worker_memory("fused", {0: {"device_mib": {"candidate": 1500,
                                                           "reference": None}}})
    timing = int((3 << 30) * admission.ALLOCATOR_FACTOR + admitted.WORKER_BASE_BYTES)
    with admitted._admitted(grader, {"reference": "fused"}, 8, slot):
        assert budget.used == int((1500 << 20) * admitted.SEEN_MARGIN) * 8 + timing
        assert budget.used > int((1500 << 20) * admitted.SEEN_MARGIN) * 9


def test_a_grades_wait_for_memory_is_told_apart_by_the_budget_it_waited_for(monkeypatch):
    """``admission_waits_s``: a grade's wait for the host's budget (held first) and then for the
    GPU's, each in its verdicts' profile beside the total (``admission_wait_s``): which one
    bounds the grades in flight is what a run's tables must say."""
    import threading
    import time

    from kernelmill.grade import admitted
    from kernelmill.validate import admission, host_admission

    class Sized:
        def seen_worker_bytes(self, *a):
            return None

        def device_bytes(self, *a, **k):
            return 1 << 30

        def group_host_bytes(self, source, members, slot_env=None):
            return members << 30

    gpu = admission.MemoryBudget(10 << 30, name="gpu0")
    host = admission.MemoryBudget(10 << 30, name="host", margin=0.0, factor=1.0)
    monkeypatch.setattr(admission, "budget_for", lambda slot: gpu)
    monkeypatch.setattr(host_admission, "host_budget", lambda configured=None: host)
    monkeypatch.setattr(admitted, "_SLOTS_PER_GPU", {0: 4})
    slot = {"gpu": 0, "device": "cuda:0", "env": {}}

    def graded(full: admission.MemoryBudget) -> dict:
        other = full.acquire(full.capacity)  # another grade holds the whole budget a while
        threading.Timer(0.4, full.release, args=(other,)).start()
        verdicts = admitted.admitted_grade(Sized(), {"reference": "src"}, ["a", "b"], slot,
                                           lambda sources, held: [{} for _ in sources])
        assert len(verdicts) == 2 and verdicts[0]["profile"] == verdicts[1]["profile"]
        return verdicts[0]["profile"]

    began = time.monotonic()
    on_host = graded(host)
    assert on_host["admission_waits_s"]["host"] >= 0.3 > on_host["admission_waits_s"]["device"]
    on_gpu = graded(gpu)
    assert on_gpu["admission_waits_s"]["device"] >= 0.3 > on_gpu["admission_waits_s"]["host"]
    for profile in (on_host, on_gpu):
        assert profile["admission_wait_s"] >= sum(profile["admission_waits_s"].values()) - 0.01
    assert time.monotonic() - began < 5


def test_what_nvml_read_a_problems_workers_holding_is_kept_for_later_grading_processes(
        tmp_path, monkeypatch):
    """``seen`` admission in a new grading process (a trainer's next ``kernelmill grade``, a
    service restarted) starts from the readings an earlier process kept on the same GPU model
    (``remembered_workers``), not from the estimate; another GPU model, or a file that is
    unreadable or malformed, gives none."""
    from kernelmill.grade import grader as grader_module
    from kernelmill.grade import reference_run, reference_sizes

    gpu = {"name": "Fake GPU 80GB"}
    for module in (reference_run, reference_sizes):  # the caches' keys, and the readings'
        monkeypatch.setattr(module, "gpu_name", lambda device, env=None: gpu["name"])
    first = grader_module.Grader("cpu", cache_root=str(tmp_path))
    first.note_worker_memory("src", {0: {"device_mib": {"candidate": 1500, "reference": None}},
                                     1: {"device_mib": {"candidate": 1700, "reference": 900}}})
    first.note_worker_memory("src", {0: None})  # nothing read: nothing written
    later = grader_module.Grader("cpu", cache_root=str(tmp_path))
    assert later.seen_worker_bytes("src") == 1700 << 20
    assert later.remembered_workers("src", None) == {"candidate": [1500, 1700],
                                                     "reference": [900]}
    assert later.seen_worker_bytes("other") is None  # another problem: none read
    later.note_worker_memory("src", {0: {"device_mib": {"candidate": 1900, "reference": None}}})
    assert grader_module.Grader("cpu", cache_root=str(tmp_path)).remembered_workers(
        "src", None)["candidate"] == [1500, 1700, 1900]  # the kept readings grow
    gpu["name"] = "Other GPU 141GB"
    assert grader_module.Grader("cpu", cache_root=str(tmp_path)).seen_worker_bytes(
        "src") is None
    gpu["name"] = "Fake GPU 80GB"
    kept = later._size_cache_path("src", None, "seen")
    for broken in ("{not json", '["a list"]', '{"candidate": [-5, "x", 1.5]}'):
        kept.write_text(broken)
        assert grader_module.Grader("cpu", cache_root=str(tmp_path)).seen_worker_bytes(
            "src") is None, broken
    # the reference's sizes keep their own file beside
    assert later._size_cache_path("src", None) != kept


def test_a_batch_refuses_an_unknown_switch_value_before_grading(tmp_path, monkeypatch):
    """A typo in an A/B switch would quietly run the default arm: ``grade_file`` refuses it
    first, in one line naming the choices."""
    from kernelmill.core.errors import KernelmillError

    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "p", "source": (SUBMISSIONS / "ref_scale_add.py")
                                    .read_text()}) + "\n")
    submissions = tmp_path / "submissions.jsonl"
    submissions.write_text(json.dumps({"submission_id": "s", "problem_id": "p", "source": (
        SUBMISSIONS / "honest_scale_add.py").read_text()}) + "\n")
    for var, value, choices in (("KERNELMILL_GRADE_ORDER", "mix", "problem, mixed"),
                                ("KERNELMILL_ADMIT", "seeen", "sizes, seen"),
                                ("KERNELMILL_REFERENCE_TIME", "pool", "window, pooled"),
                                ("KERNELMILL_COMPILE_ASIDE", "1", "off, on"),
                                ("KERNELMILL_INIT_LOCK", "yes", "grading, on, off"),
                                ("KERNELMILL_SHARED_WORKERS", "one", "bytes, fewest")):
        monkeypatch.setenv(var, value)
        with pytest.raises(KernelmillError, match=choices):
            grade_file(problems, submissions, tmp_path / "out.jsonl", device="cpu",
                       cache_path=False)
        monkeypatch.delenv(var)
        assert not (tmp_path / "out.jsonl").exists() or \
            not (tmp_path / "out.jsonl").read_text().strip()


def test_a_workers_allocator_peaks_are_read_in_mib_on_a_gpu_and_not_off_one(monkeypatch):
    """``worker.timing.device_memory``: the candidate's allocator peaks for the profile, read by
    the functions bound at the import (a candidate that rebinds torch's does not change them)."""
    import torch
    from kernelmill.grade.worker import timing

    assert timing.device_memory("cpu") is None
    monkeypatch.setattr(timing, "_MAX_ALLOCATED", lambda device: 300 << 20)
    monkeypatch.setattr(timing, "_MAX_RESERVED", lambda device: (512 << 20) + 1)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: 1)
    assert timing.device_memory("cuda:0") == {"allocated": 300, "reserved": 512}

    def fails(device):
        raise RuntimeError("no CUDA")

    monkeypatch.setattr(timing, "_MAX_ALLOCATED", fails)
    assert timing.device_memory("cuda:0") is None


def test_a_workers_allocator_is_marked_stage_by_stage_until_its_gpu_work_is_done(monkeypatch):
    """``worker.timing.StageMemory``: each stage's mark reads the allocator's counters through
    the C function bound at the import (the MiB held then, the most so far); no mark before
    ``start`` or off a GPU; the marks end at the GPU work's end (``device_memory``), and a
    reading that fails ends them. The grader keeps well-formed rows only (``_stage_marks``)."""
    from kernelmill.grade import grader
    from kernelmill.grade.worker import timing

    held, cached = {"current": 0, "peak": 0}, {"current": 0}
    monkeypatch.setattr(timing, "_MEMORY_STATS",
                        lambda index: {"allocated_bytes": {"all": dict(held)},
                                       "reserved_bytes": {"all": dict(cached)}})
    monkeypatch.setattr(timing, "_MAX_ALLOCATED", lambda device: 900 << 20)
    monkeypatch.setattr(timing, "_MAX_RESERVED", lambda device: 1024 << 20)
    off = timing.StageMemory("cpu")
    off.start()
    off.mark("forward")
    assert off.marks == []
    marks = timing.StageMemory("cuda:1")
    marks.mark("import")  # before its start: nothing read
    marks.start()
    for stage, current, peak in (("init", 32, 32), ("forward", 300, 800), ("timing", 500, 900)):
        held.update(current=current << 20, peak=peak << 20)
        cached.update(current=(peak + 100) << 20)
        marks.mark(stage)
    memory = timing.device_memory("cuda:1", marks)
    assert memory == {"allocated": 900, "reserved": 1024,
                      "stages": [["init", 32, 32, 132], ["forward", 300, 800, 900],
                                 ["timing", 500, 900, 1000], ["gpu done", 500, 900, 1000]]}
    marks.mark("result")  # host work after: not marked
    assert len(memory["stages"]) == 4

    def fails(index):
        raise RuntimeError("no CUDA")

    broken = timing.StageMemory("cuda:0")
    broken.start()
    monkeypatch.setattr(timing, "_MEMORY_STATS", fails)
    broken.mark("init")
    assert broken.marks == [] and broken.index is None
    # what the profile keeps of a worker's marks: rows of a name and two ints, names cut
    assert grader._stage_marks([["init", 1, 2, 3], ["x" * 60, 3, 4, 5], ["bad", 1.5, 2, 3],
                                "row", [None, 1, 2, 3], ["forward", 5, 6], ["y", 1, 2, 3, 4],
                                ["huge", 10 ** 5000, 1, 1], ["negative", -1, 1, 1]]) \
        == [["init", 1, 2, 3], ["x" * 40, 3, 4, 5]]
    assert grader._stage_marks({"init": 1}) == []
