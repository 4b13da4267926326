"""The TRL reward on CPU: None where the reference cannot run, metrics through log_metric, a
correct kernel whose timing timed out told apart from a hang, and grading on another process
through the HTTP grading server."""
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import FIXTURES
from kernelmill.grade.policy import Policy
from kernelmill.grade.serve import make_server
from kernelmill.grade.trl import batch_metrics, local_grader, make_reward_fn

SUBMISSIONS = FIXTURES / "submissions"
BROKEN_REFERENCE = '''"""A reference whose forward fails.

category: elementwise
level: 1
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        raise RuntimeError("this reference is broken")


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
'''


def read(name: str) -> str:
    return (SUBMISSIONS / f"{name}.py").read_text()


def fenced(code: str) -> list[dict]:
    return [{"role": "assistant", "content": f"Here it is.\n```python\n{code}```"}]


def test_reward_is_none_where_the_reference_cannot_run_and_metrics_reach_log_metric():
    logged: dict[str, list[float]] = defaultdict(list)
    reward_fn = make_reward_fn(device="cpu", policy=Policy(time=False, trials=2))
    honest = fenced(read("honest_scale_add"))
    scores = reward_fn(prompts=["p"] * 3, completions=[honest, honest, fenced("not python (")],
                       reference=[read("ref_scale_add"), BROKEN_REFERENCE, read("ref_scale_add")],
                       completion_ids=[[1], [2], [3]], trainer_state=None,
                       log_metric=lambda name, value: logged[name].append(value))
    assert scores[0] == pytest.approx(1.5)  # compiled + correct, untimed
    assert scores[1] is None  # not applicable: TRL leaves it out of the sum
    assert scores[2] == 0.0
    assert logged["kernelmill/correct"] == [pytest.approx(1 / 3)]
    assert logged["kernelmill/not_applicable"] == [pytest.approx(1 / 3)]
    assert logged["kernelmill/compiled"] == [pytest.approx(1 / 3)]
    assert logged["kernelmill/hacked"] == [0.0]
    assert "kernelmill/speedup_vs_eager" not in logged  # nothing was timed


@pytest.mark.slow
def test_timing_timeout_keeps_correct_and_a_hang_stays_wrong():
    # A warm-up of ten million calls cannot finish: the timing loop times out after the checks.
    grade = local_grader("cpu", Policy(trials=2, timeout_s=12,
                                       timing_settings={"warmup": 10**7}))
    # the two at once (a grader serves threads, as a batch's slots do): 12 s, not 24
    with ThreadPoolExecutor(2) as pool:
        slow, hang = pool.map(lambda pair: grade(read(pair[0]), read(pair[1])),
                              [("ref_scale_add", "honest_scale_add"), ("ref_row_sum", "crash_hang")])
    assert slow["correct"] and slow["timing_timed_out"] and slow["timing"] is None
    assert slow["timing_error"]["stage"] == "timing" and slow["speedup_vs_eager"] is None
    assert not hang["correct"] and not hang.get("timing_timed_out")
    assert hang["error"]["stage"] == "forward" and "timed out" in hang["error"]["message"]


def test_an_answer_that_raises_timed_out_is_not_taken_for_a_timeout():
    """Only the harness says a run timed out: an answer that raises "timed out" once its timed
    calls begin would otherwise be graded again untimed (no window, no unseen-input check)."""
    fake = read("honest_scale_add").replace(
        "        out = torch.empty_like(x)\n",
        "        self.calls = getattr(self, 'calls', 0) + 1\n"
        "        if self.calls > 40:\n"
        "            raise RuntimeError('timed out')\n"
        "        out = torch.empty_like(x)\n")
    verdict = local_grader("cpu", Policy(trials=2, timeout_s=60))(read("ref_scale_add"), fake)
    assert "timed out" in verdict["error"]["message"], verdict["error"]
    assert not verdict["error"].get("timed_out") and not verdict.get("timing_timed_out")
    assert verdict["speedup_vs_eager"] is None


@pytest.fixture
def grading_server():
    server = make_server("127.0.0.1", 0, device="cpu", policy=Policy(time=False, trials=2))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()


def test_reward_grades_through_a_grading_server(grading_server):
    verdicts: list = []
    reward_fn = make_reward_fn(grader=grading_server, verdicts=verdicts)
    wrong = read("honest_scale_add").replace("2.0 * x + y", "3.0 * x + y")
    scores = reward_fn(["p"] * 3, [fenced(read("honest_scale_add")), fenced(wrong),
                                   fenced(read("honest_scale_add"))],
                       reference=[read("ref_scale_add"), read("ref_scale_add"), BROKEN_REFERENCE])
    assert scores[0] == pytest.approx(1.5) and verdicts[0]["correct"]
    assert scores[1] == pytest.approx(0.5) and not verdicts[1]["correct"]
    assert scores[2] is None and verdicts[2]["reference_failed"]
    assert verdicts[0]["device"] == "cpu"


def test_unreachable_grading_server_gives_none():
    reward_fn = make_reward_fn(grader="http://127.0.0.1:9/")  # discard port: nothing listens
    assert reward_fn(["p"], [fenced(read("honest_scale_add"))],
                     reference=[read("ref_scale_add")]) == [None]


def test_a_prompts_completions_are_graded_as_one_group_in_batch_order():
    # GRPO passes each prompt's generations together: they are timed in one window (the same
    # reference time), scores come back in the batch's order, other problems apart.
    timing = {"min_reps": 6, "max_reps": 30, "warmup": 1, "cap_ms": 300}
    verdicts: list = []
    reward_fn = make_reward_fn(device="cpu", policy=Policy(timeout_s=60, timing_settings=timing),
                               verdicts=verdicts, group=3, workers=2)
    honest, rows = fenced(read("honest_scale_add")), fenced(read("honest_row_sum"))
    scores = reward_fn(prompts=["a", "b", "a", "a"],
                       completions=[honest, rows, fenced("not python ("), honest],
                       reference=[read("ref_scale_add"), read("ref_row_sum"),
                                  read("ref_scale_add"), read("ref_scale_add")])
    assert scores[2] == 0.0 and all(s >= 1.5 for s in (scores[0], scores[1], scores[3])), scores
    first, other, _broken, last = verdicts
    assert first["profile"]["group"] == 2 and other["profile"]["group"] == 1
    assert first["timing"]["reference_ms"] == last["timing"]["reference_ms"]
    assert first["timing"]["reference_ms"] != other["timing"]["reference_ms"]


def test_on_a_gpu_the_reward_grades_in_the_batchs_slots_each_holding_its_memory(monkeypatch):
    """On a GPU, a batch's completions are graded as many at once as the batch grader runs per
    GPU (one at a time left the GPU idle through each grade's reference run and checks), each
    grade holding its GPU's and the host's memory while it runs (``admitted._admitted``)."""
    import contextlib

    from kernelmill.grade import admitted as admission
    from kernelmill.grade import batch, trl

    gpu_slot = {"device": "cuda:0", "gpu": 0, "env": {"CUDA_VISIBLE_DEVICES": "0"}}
    monkeypatch.setattr(trl, "device_slots", lambda device, workers=None: [dict(gpu_slot)])
    at_once, most, admitted, lock = [0], [0], [], threading.Lock()

    class FakeGrader:
        policy = Policy()
        device = "cuda"

        def __init__(self, *args, **kwargs):
            pass

        def grade_group(self, reference, codes, *, record=None, reward="composite",
                        slot_env=None, on_references=None):
            with lock:
                at_once[0] += 1
                most[0] = max(most[0], at_once[0])
            threading.Event().wait(0.1)
            with lock:
                at_once[0] -= 1
            return [{"reward": 1.0, "compiled": True, "correct": True, "hacks": []}
                    for _ in codes]

    @contextlib.contextmanager
    def held(grader, item, members, slot, alone=False):
        admitted.append((slot.get("gpu"), members, item["reference"]))
        yield None

    monkeypatch.setattr(trl, "Grader", FakeGrader)
    monkeypatch.setattr(admission, "_admitted", held)
    for group, per_gpu in ((None, batch.default_slots_per_gpu(1)),
                           (4, batch.default_slots_per_gpu(1, group=4))):
        at_once[0], most[0] = 0, 0
        admitted.clear()
        reward_fn = make_reward_fn(device="cuda", group=group)
        n = 2 * per_gpu * (group or 1)
        scores = reward_fn(prompts=["p"] * n, completions=[fenced(f"x = {i}") for i in range(n)],
                           reference=[f"ref {i // (group or 1)}" for i in range(n)])
        assert scores == [1.0] * n
        assert most[0] == per_gpu, (group, most[0], per_gpu)
        assert len(admitted) == n // (group or 1)
        assert all(gpu == 0 and members == (group or 1) for gpu, members, _r in admitted)


def test_batch_metrics_count_the_timed_kernels_whose_timing_was_not_precise():
    timed = {"compiled": True, "correct": True, "speedup_vs_eager": 2.0,
             "timing": {"precise": True}}
    wide = {**timed, "speedup_vs_eager": 4.0, "timing": {"precise": False}}
    unknown = {**timed, "timing": {"precise": None}}  # no interval read: not counted as wide
    wrong = {"compiled": True, "correct": False, "speedup_vs_eager": None,
             "timing": {"precise": False}}
    metrics = batch_metrics([timed, wide, unknown, wrong])
    assert metrics["speedup_vs_eager"] == pytest.approx(8.0 / 3)
    assert metrics["timing_imprecise"] == pytest.approx(1 / 3)
    assert "timing_imprecise" not in batch_metrics([wrong])


def test_a_reward_or_a_service_refuses_an_unknown_switch_value_before_any_grade(monkeypatch):
    """``local_grader`` (which ``make_reward_fn`` and the grading service's actors start with)
    refuses a grading switch's unknown value at once, naming the choices, as ``grade_file``
    does: one that only a problem's second group reads would otherwise fail a training run's
    grades partway."""
    from kernelmill.core.errors import KernelmillError

    monkeypatch.setenv("KERNELMILL_SHARED_WORKERS", "one")
    with pytest.raises(KernelmillError, match="bytes, fewest"):
        local_grader("cpu")
    with pytest.raises(KernelmillError, match="bytes, fewest"):
        make_reward_fn(device="cpu")
    monkeypatch.setenv("KERNELMILL_SHARED_WORKERS", "fewest")
    assert callable(local_grader("cpu"))
