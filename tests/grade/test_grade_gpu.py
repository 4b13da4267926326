"""The grader on CUDA: the hostile suite, a side-stream launch, a load_inline CUDA kernel, and
timing fidelity. Run on the GPU machine: ``python -m pytest -m gpu tests/grade/test_grade_gpu.py``."""
import statistics
from pathlib import Path

from conftest import FIXTURES

import pytest
import torch
from kernelmill.core.store import read_jsonl
from kernelmill.grade.batch import grade_file
from kernelmill.grade.grader import Grader
from kernelmill.grade.policy import Policy
from test_grade_batch import check, fixtures, write_inputs

pytestmark = pytest.mark.gpu
SUBMISSIONS = FIXTURES / "submissions"
LARGE = 1 << 24  # 64 MiB per vector: long enough to time reliably


@pytest.fixture(autouse=True)
def _needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


def read(name: str) -> str:
    return (SUBMISSIONS / f"{name}.py").read_text()


def large_reference() -> str:
    return read("ref_scale_add").replace("N = 4096", f"N = {LARGE}")


def test_hostile_suite_on_cuda(tmp_path):
    problems, submissions = write_inputs(tmp_path, cuda=True)
    out = tmp_path / "verdicts.jsonl"
    # static_first off: each fixture's expected hack is the run-time one (as on CPU)
    policy = Policy(timeout_s=90, timing_settings={"min_reps": 5, "max_reps": 20},
                    static_first=False)
    stats = grade_file(problems, submissions, out, device="cuda", policy=policy,
                       cache_path=tmp_path / "cache.jsonl",
                       extensions_root=str(tmp_path / "ext"))
    rows = {row["submission_id"]: row for row in read_jsonl(out)}
    expected = fixtures(cuda=True)
    assert set(rows) == set(expected), stats.summary()
    failures = []
    for name, (_problem, expect, _text) in expected.items():
        try:
            check(name, expect, rows[name])
        except AssertionError as exc:
            failures.append(str(exc)[:400])
    assert not failures, "\n".join(failures)


def test_side_stream_work_is_timed(tmp_path):
    grader = Grader("cuda", policy=Policy(), cache_root=str(tmp_path))
    reference = large_reference()
    honest = grader.grade(reference, read("honest_scale_add"))
    side = grader.grade(reference, read("cuda_side_stream"))
    assert honest["correct"] and side["correct"], (honest["hack_details"], side["hack_details"],
                                                   side["timings"], side["timing"])
    honest_ms = honest["timings"]["candidate_ms"]
    side_ms = side["timings"]["candidate_ms"]
    # Without a device-wide synchronize the side stream's kernel would look ~free.
    assert side_ms > 0.5 * honest_ms, (side_ms, honest_ms)
    roof = honest["timings"]["roofline_ms"]
    assert roof and side_ms > roof * 0.5


def test_load_inline_cuda_kernel_is_certified(tmp_path):
    grader = Grader("cuda", policy=Policy(), cache_root=str(tmp_path))
    verdict = grader.grade(large_reference(), read("cuda_scale_add"))
    assert verdict["compiled"] and verdict["correct"], verdict
    assert verdict["hacks"] == [] and verdict["speedup_vs_eager"] > 0.5


def test_timing_fidelity_same_kernel_twice(tmp_path):
    grader = Grader("cuda", policy=Policy(), cache_root=str(tmp_path))
    reference = large_reference()
    speedups = [grader.grade(reference, read("honest_scale_add"))["speedup_vs_eager"]
                for _ in range(2)]
    assert all(s is not None for s in speedups)
    spread = abs(speedups[0] - speedups[1]) / statistics.mean(speedups)
    assert spread < 0.02, speedups


def test_a_trials_inputs_are_drawn_on_the_gpu_unless_get_inputs_needs_the_host():
    """The reference draws a trial's tensors on the device (the host's cores are what every
    grade on the GPU shares); the same seed draws the same tensors, and a ``get_inputs`` that
    needs host tensors (``.numpy()``) gets them."""
    from kernelmill.grade.worker import draw_inputs
    from kernelmill.validate.measure import load_namespace

    plain = load_namespace(large_reference(), "reference")
    first, again = draw_inputs(plain, "cuda", 7), draw_inputs(plain, "cuda", 7)
    assert all(t.is_cuda for t in first) and all(map(torch.equal, first, again))
    assert not torch.equal(first[0], draw_inputs(plain, "cuda", 8)[0])
    host = load_namespace(large_reference().replace(
        "def get_inputs():", "def get_inputs():\n    torch.zeros(1).numpy()"), "reference")
    drawn = draw_inputs(host, "cuda", 7)
    assert not drawn[0].is_cuda and drawn[0].numel() == LARGE


def test_the_unseen_checks_timed_inputs_wait_on_the_device_or_page_locked():
    """``_Probes._on_device``: trial 0's inputs, which the unseen check loads before each of
    its calls on them inside the window, are copied before it: to the device up to
    ``PRISTINE_BYTES``, into page-locked host memory up to ``PINNED_PRISTINE_BYTES`` (the copy
    engine reads those at full speed), left where they are beyond that; off CUDA, as given."""
    from types import SimpleNamespace

    from kernelmill.grade.worker import probes

    def placed(nbytes: int, device: str = "cuda") -> list:
        inputs = [torch.ones(nbytes // 4), 3]
        run = SimpleNamespace(device=device)
        return probes._Probes._on_device(run, {"inputs": inputs, "seed": 1})["inputs"]

    small = placed(64 << 20)
    assert small[0].is_cuda and small[1] == 3 and float(small[0][-1]) == 1.0
    middle = placed(probes.PRISTINE_BYTES + (64 << 20))[0]
    assert middle.device.type == "cpu" and middle.is_pinned() and float(middle[-1]) == 1.0
    large = placed(probes.PINNED_PRISTINE_BYTES + (4 << 20))[0]
    assert large.device.type == "cpu" and not large.is_pinned()
    assert not placed(64 << 20, "cpu")[0].is_cuda


def test_a_group_makes_the_one_call_check_and_catches_slices_written_into_every_output(
        tmp_path):
    """A group of an fp16 GEMM (2048²): four honest answers and four of
    ``graph_slice_every_output`` (each captured call computes an eighth of the rows and stores
    it into every output of its block of 8 calls: every replay's outputs whole, its calls even).
    Each member's window ends with the one-call graph's check on a trial none of its calls had
    seen: its answer compared (``unseen_single:N``) and its kernels' busy time read. The honest
    members are certified; the slicing ones are not."""
    import re

    reference = (FIXTURES / "honest" / "ref_matmul_fp16.py").read_text().replace(
        "SIZE = 256", "SIZE = 2048")
    honest = (FIXTURES / "honest" / "matmul_fp16.py").read_text()
    attack = (Path(__file__).parents[1] / "hostile" / "graph_slice_every_output.py").read_text()
    # (static_first off: the attack's clock read is a forbidden API; its run is what is tested)
    grader = Grader("cuda", policy=Policy(timeout_s=150, static_first=False),
                    cache_root=str(tmp_path))
    verdicts = grader.grade_group(reference, [honest] * 4 + [attack] * 4)
    for verdict in verdicts[:4]:
        assert verdict["correct"] and not verdict["hacks"], verdict.get("hack_details")
        single = [k for k in verdict["checks"] if re.fullmatch(r"unseen_single:\d+", k)]
        assert single and all(verdict["checks"][k]["passed"] for k in single), verdict["checks"]
    for verdict in verdicts[4:]:
        certified = verdict["correct"] and not verdict["hacks"]
        assert not certified and "timing_behaviour" in verdict["hacks"], (
            verdict["hacks"], verdict.get("hack_details"), verdict.get("error"))
        print("slicing member:", verdict["hack_details"]["timing_behaviour"][:300],
              verdict["checks"].get("scored_vs_checked_device_us"))


@pytest.mark.parametrize("warm", [False, True], ids=["", "single_warm"])
@pytest.mark.parametrize("case,check", [("graph_slice_in_step", "first_call_vs_one_call_us"),
                                        ("graph_slice_bookend", "scored_vs_one_call_us")])
def test_slices_kept_in_step_with_the_captures_are_caught_against_the_one_call_check(
        tmp_path, case, check, warm):
    """``graph_slice_in_step``: honest in the timer's one-call graph and its probe, a quarter of
    the rows per call (stored into every output of its block of 4) in the timing graph, every
    block whole. Its answers all pass, and its scored calls (about half the work: a quarter of
    the rows at a quarter of the GPU's occupancy) pass the scored bound; a call of its timing
    graph on new inputs against the one-call check's, each alone in the window
    (``first_call_vs_one_call_us``), tells it, alone and in a group beside honest members
    (which stay certified). ``graph_slice_bookend`` leaves the timing graph's first calls whole
    and computes halves in pairs after them: its scored calls against the one-call check, made
    warm (``scored_vs_one_call_us``), tell it; with ``single_warm`` too, the scored bound then
    taking the faster of that check and a second on inputs read into the L2 cache first."""
    import re

    reference = (FIXTURES / "honest" / "ref_matmul_fp16.py").read_text().replace(
        "SIZE = 256", "SIZE = 2048")
    honest = (FIXTURES / "honest" / "matmul_fp16.py").read_text()
    attack = (Path(__file__).parents[1] / "hostile" / f"{case}.py").read_text()
    # (``single_warm`` is on by default: the first arm turns it off)
    grader = Grader("cuda", policy=Policy(timeout_s=150, static_first=False, timing_settings={
        "single_warm": warm}), cache_root=str(tmp_path))
    alone = grader.grade(reference, attack)
    verdicts = grader.grade_group(reference, [honest] * 2 + [attack] * 2)
    for verdict in verdicts[:2]:
        assert verdict["correct"] and not verdict["hacks"], verdict.get("hack_details")
        print("honest member:", verdict["checks"].get("scored_vs_one_call_us"),
              verdict["checks"].get("first_call_vs_one_call_us"))
    for verdict in [alone, *verdicts[2:]]:
        checks = verdict["checks"]
        print(f"{case} member:", verdict["hacks"], verdict.get("hack_details"),
              checks.get("scored_vs_checked_device_us"), checks.get("scored_vs_one_call_us"),
              checks.get("first_call_vs_one_call_us"),
              sorted(k for k, v in checks.items() if isinstance(v, dict) and
                     v.get("passed") is False))
        assert "timing_behaviour" in verdict["hacks"], (verdict["hacks"], verdict.get("error"))
        assert checks[check]["passed"] is False, checks
        # its answers were right everywhere, the one-call check's included
        answers = [k for k in checks if re.fullmatch(r"unseen(_single|_single_warm)?:\d+", k)]
        assert any(k.startswith("unseen_single:") for k in answers), checks
        assert any(k.startswith("unseen_single_warm:") for k in answers) is warm, checks
        assert all(checks[k]["passed"] for k in answers), checks


def test_an_honest_memory_bound_kernel_whose_inputs_fit_the_cache_is_certified_warm(tmp_path):
    """A 1M-element scale-add (12 MiB of inputs, in the L2 cache where its scored calls read
    them): its one-call check on inputs just copied in read 5.2-5.5 µs against 2.8 scored
    (H100), under the scored bound. With ``single_warm`` the second check, its inputs read into
    the cache first, is the one that bound takes: certified, both checks' answers compared."""
    import re

    reference = read("ref_scale_add").replace("N = 4096", f"N = {1 << 20}")
    grader = Grader("cuda", policy=Policy(timing_settings={"single_warm": True}),
                    cache_root=str(tmp_path))
    for verdict in [grader.grade(reference, read("honest_scale_add")),
                    *grader.grade_group(reference, [read("honest_scale_add")] * 4)]:
        checks = verdict["checks"]
        print("scale-add:", checks.get("scored_vs_one_call_us"))
        assert verdict["correct"] and not verdict["hacks"], verdict.get("hack_details")
        warm = [k for k in checks if re.fullmatch(r"unseen_single_warm:\d+", k)]
        assert warm and all(checks[k]["passed"] for k in warm), checks
        assert "read into the L2 cache" in checks["scored_vs_one_call_us"]["detail"], checks
