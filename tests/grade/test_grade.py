"""Grader units (rewards, static scan, comparisons, op policy, code extraction), the single-grade
CLI, and the TRL reward function against a fake OpenAI-compatible judge on 127.0.0.1."""
import json
import math
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from conftest import FIXTURES

import pytest
import torch
from kernelmill.grade import rewards, static
from kernelmill.grade.judge import _timings, bitwise_equal, compare
from kernelmill.grade.policy import Policy, compute_ops, custom_ops
from kernelmill.grade.trl import (
    JudgeConfig,
    completion_text,
    extract_code,
    judge_score,
    make_reward_fn,
)
from kernelmill.validate.harness import WorkerResult

SUBMISSIONS = FIXTURES / "submissions"


def read(name: str) -> str:
    return (SUBMISSIONS / f"{name}.py").read_text()


# ---------------------------------------------------------------- rewards

def test_composite_reward():
    v = {"compiled": True, "correct": True, "hacks": [], "speedup_vs_eager": 2.0}
    assert rewards.composite(v) == pytest.approx(0.5 + 1 + 2.0)
    assert rewards.composite({**v, "speedup_vs_eager": 10.0}) == pytest.approx(4.5)  # r_max=3
    assert rewards.composite({**v, "correct": False}) == pytest.approx(0.5)
    assert rewards.composite({**v, "compiled": False, "correct": False}) == 0.0
    assert rewards.composite({**v, "hacks": ["torch_compute"]}) == 0.0
    assert rewards.composite(v, alpha=0.0, beta=2.0, gamma=0.5, r_max=1.0) == pytest.approx(2.5)


def test_makora_reward():
    v = {"compiled": True, "correct": True, "hacks": [], "speedup_vs_inductor": 1.0,
         "speedup_vs_eager": 5.0}
    sigma = lambda z: 1 / (1 + math.exp(-z))
    assert rewards.makora(v) == pytest.approx(sigma(1 + 1.0 - 1.8))
    assert rewards.makora({**v, "correct": False}) == pytest.approx(sigma(-1.8))
    assert rewards.makora({**v, "speedup_vs_inductor": None}) == pytest.approx(sigma(1 + 5 - 1.8))
    assert rewards.makora({**v, "hacks": ["cached_output"]}) == 0.0


def test_staged_reward_climbs_with_each_stage():
    base = {"compiled": False, "correct": False, "hacks": []}
    ladder = [rewards.staged({**base, "stage_reached": s})
              for s in ("none", "parsed", "constructed", "ran", "shaped")]
    assert ladder == sorted(ladder) and len(set(ladder)) == len(ladder)
    correct = {**base, "compiled": True, "correct": True, "stage_reached": "shaped"}
    assert rewards.staged(correct) == 1.0
    assert rewards.staged({**correct, "speedup_vs_eager": 4.0}) == pytest.approx(2.0)
    assert rewards.staged({**correct, "speedup_vs_eager": 0.5}) == 1.0
    assert rewards.staged({**correct, "hacks": ["inconsistent"]}) == 0.0


# ---------------------------------------------------------------- static scan and policy

@pytest.mark.parametrize("name", ["honest_scale_add", "honest_row_sum", "honest_linear"])
def test_static_scan_passes_honest_kernels(name):
    assert static.scan(read(name)) == []


@pytest.mark.parametrize("snippet, needle", [
    ("import time\ntime.perf_counter = lambda: 0.0", "time.perf_counter"),
    ("import torch\ntorch.allclose = lambda *a, **k: True", "torch.allclose"),
    ("import threading", "threading"),
    ("import gc\ngc.get_objects()", "gc"),
    ("import sys\nsys.modules['x']", "sys.modules"),
    ("x = __import__('o' + 's')", "__import__"),
    ("f = lambda: 0\nf.__globals__", "__globals__"),
    ("open('/tmp/x', 'w').write('1')", "writing"),
    ("from torch.utils._python_dispatch import TorchDispatchMode", "TorchDispatchMode"),
    ("src = 'std::thread t(work);'", "std::thread"),
    ("import torch\nm = torch.compile(lambda x: x)", "compile"),
    ("import numpy as np\ny = np.exp(x.cpu().numpy())", "numpy"),
])
def test_static_scan_flags_escape_hatches(snippet, needle):
    findings = static.scan(snippet)
    assert findings and any(needle in f for f in findings), findings


def test_op_policy_separates_compute_from_memory_ops():
    ops = ["aten.empty_like.default", "aten.view.default", "aten.copy_.default",
           "aten.add.Tensor", "aten.mm.default", "mylib.fused_add.default"]
    assert compute_ops(ops) == ["aten.add.Tensor", "aten.mm.default"]
    assert custom_ops(ops) == ["mylib.fused_add.default"]


def test_tolerance_prefers_policy_then_record_then_dtype():
    record = {"validation": {"atol": 3e-3, "rtol": 2e-3}}
    assert Policy().tolerance("torch.float32") == (1e-4, 1e-4)
    assert Policy().tolerance("torch.float16") == (1e-2, 1e-2)
    assert Policy().tolerance("torch.float32", record) == (3e-3, 2e-3)
    assert Policy(atol=1.0).tolerance("torch.float32", record) == (1.0, 2e-3)
    assert Policy().key() != Policy(max_torch_ops=2).key()


# ---------------------------------------------------------------- comparisons

def test_compare_tolerance_shape_dtype_nan():
    ref = torch.tensor([1.0, 100.0, float("nan"), float("inf")])
    assert compare([ref], [ref.clone()], 1e-4, 1e-4)[0]
    near = ref.clone()
    near[1] += 5e-3  # within rtol * 100
    assert compare([ref], [near], 1e-4, 1e-4)[0]
    far = ref.clone()
    far[0] += 1e-2
    ok, why = compare([ref], [far], 1e-4, 1e-4)
    assert not ok and "1/4 elements off" in why
    nan = ref.clone()
    nan[0] = float("nan")
    assert not compare([ref], [nan], 1e-4, 1e-4)[0]
    assert "shape" in compare([ref], [ref[:2]], 1e-4, 1e-4)[1]
    assert "dtype" in compare([ref], [ref.double()], 1e-4, 1e-4)[1]
    assert not compare([ref], None, 1e-4, 1e-4)[0]
    ints = torch.arange(5)
    assert compare([ints], [ints.clone()], 0, 0)[0] and not compare([ints], [ints + 1], 1, 1)[0]


def test_bitwise_equal_sees_nan_payloads_and_signed_zero():
    a = torch.tensor([0.0, float("nan")])
    assert bitwise_equal(a, a.clone())
    assert not bitwise_equal(a, torch.tensor([-0.0, float("nan")]))
    assert not bitwise_equal(a, a.double())


def _window(cand_ms: float, wall_ms: float, method: str = "cuda_graph") -> dict:
    part = {"method": method, "reps": 30, "ci_pct": 0.3}
    return {"error": None, "ci_limit_pct": 5.0, "participants": {
        "reference": {**part, "ms": 2.0},
        "candidate": {**part, "ms": cand_ms, "mean_ms": cand_ms, "wall_ms": wall_ms}}}


def test_times_below_the_parent_clock_are_not_believed():
    reference = {"trials": [{"inputs": [], "outputs": []}], "info": {"device": "cpu"},
                 "eager": {"ms": 1.0}, "inductor": {"ms": 0.5}}
    hacks: dict = {}
    verdict = {"correct": True}
    # a forged timer claims 1 µs per call; the parent saw the graph take 5 ms per call
    _timings(verdict, reference, _window(1e-3, 5.0), Policy(), hacks.setdefault)
    assert "timing_behaviour" in hacks
    hacks.clear()
    _timings(verdict, reference, _window(1.0, 1.1), Policy(), hacks.setdefault)
    assert not hacks and verdict["speedup_vs_eager"] == pytest.approx(2.0)
    assert verdict["timing"] == {"method": "cuda_graph", "reps": 30, "ci_pct": 0.3,
                                 "precise": True, "reference_ms": 2.0, "candidate_ms": 1.0}
    # Inductor's time: its ratio to eager in the reference run, applied to the window's eager
    assert verdict["timings"]["inductor_ms"] == pytest.approx(1.0)
    # events timing includes launch overhead in the parent's loop: no bound from it
    hacks.clear()
    _timings(verdict, reference, _window(1e-3, 5.0, "cuda_events"), Policy(),
             hacks.setdefault)
    assert not hacks


# ---------------------------------------------------------------- code extraction

def test_extract_code_takes_last_python_block():
    text = "plan\n```python\nfirst = 1\n```\nbetter:\n```python\nsecond = 2\n```\n"
    assert extract_code(text).strip() == "second = 2"
    assert extract_code("```\nplain = 1\n```").strip() == "plain = 1"
    assert extract_code("no fence here") == "no fence here"
    chat = [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": "```py\nx = 3\n```"}]
    assert extract_code(completion_text(chat)).strip() == "x = 3"


# ---------------------------------------------------------------- CLI and TRL, end to end

def test_cli_single_grade_json_and_exit_status(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "kernelmill.app.cli", "grade",
         "--reference", str(SUBMISSIONS / "ref_scale_add.py"),
         "--candidate", str(SUBMISSIONS / "hack_try_fallback.py"),
         "--device", "cpu", "--json", "--no-time", "--trials", "2"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    verdict = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("compiled", "correct", "hacks", "reward", "speedup_vs_eager",
                "speedup_vs_inductor", "error"):
        assert key in verdict
    assert verdict["compiled"] and not verdict["correct"]
    assert "torch_compute" in verdict["hacks"] and verdict["reward"] == 0.0
    # why, in one line, and the failed checks with their details
    lead = next(iter(verdict["hack_details"]))  # the first the judge found
    assert verdict["reason"].startswith(f"hack {lead}: "), verdict["reason"]
    assert "\n" not in verdict["reason"] and isinstance(verdict["failed_checks"], dict)

    wrong = tmp_path / "wrong.py"  # a right-looking kernel computing 3x + y for 2x + y
    wrong.write_text((SUBMISSIONS / "honest_scale_add.py").read_text().replace("2.0 * x", "3.0 * x"))
    result = subprocess.run(
        [sys.executable, "-m", "kernelmill.app.cli", "grade",
         "--reference", str(SUBMISSIONS / "ref_scale_add.py"), "--candidate", str(wrong),
         "--device", "cpu", "--json", "--no-time", "--trials", "2"],
        capture_output=True, text=True, timeout=300)
    verdict = json.loads(result.stdout.strip().splitlines()[-1])
    assert not verdict["correct"] and not verdict["hacks"] and verdict["error"] is None
    name, detail = next(iter(verdict["failed_checks"].items()))
    assert "elements off" in detail, verdict["failed_checks"]
    assert verdict["reason"] == f"check {name}: {detail}"

    missing = subprocess.run(
        [sys.executable, "-m", "kernelmill.app.cli", "grade", "--reference",
         str(tmp_path / "nope.py"), "--candidate", str(SUBMISSIONS / "honest_scale_add.py")],
        capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "nope.py" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


class _Judge(BaseHTTPRequestHandler):
    prompts: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Judge.prompts.append(body["messages"][-1]["content"])
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": "SCORE: 0.8"}}],
                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def judge_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_trl_reward_fn_with_llm_judge(judge_server):
    config = JudgeConfig(base_url=judge_server, model="judge", api_key="test")
    assert judge_score(config, "ref", "cand") == pytest.approx(0.8)
    assert judge_score(JudgeConfig(base_url="http://127.0.0.1:9/v1", model="m", timeout_s=2),
                       "ref", "cand") is None  # unreachable: no bonus, no crash

    verdicts: list = []
    reward_fn = make_reward_fn(device="cpu", policy=Policy(time=False, trials=2), judge=config,
                               verdicts=verdicts)
    reference = read("ref_scale_add")
    completions = [
        [{"role": "assistant", "content": f"Here it is.\n```python\n{read('honest_scale_add')}```"}],
        "```python\nimport torch\nclass NotIt: pass\n```",
    ]
    scores = reward_fn(["p1", "p2"], completions, reference=[reference, reference])
    assert verdicts[0]["correct"] and not verdicts[0]["hacks"]
    assert scores[0] == pytest.approx(0.5 + 1.0 + 0.5 * 0.8)  # untimed: no speed term
    assert not verdicts[1]["compiled"] and scores[1] == pytest.approx(0.5 * 0.8)
    assert any("2.0 * x + y" in p for p in _Judge.prompts)  # the judge saw the reference


def test_roofline_is_the_grading_devices_memory_bound():
    from kernelmill.grade.judge import roofline_ms

    x = torch.zeros(1 << 20)  # 4 MiB in, 4 MiB out
    reference = {"info": {"device": "cuda:0", "name": "NVIDIA H100 80GB HBM3"},
                 "trials": [{"inputs": [x], "outputs": [x]}]}
    assert roofline_ms(reference) == pytest.approx(8 * 2**20 / 3350e9 * 1e3)
    assert roofline_ms({**reference, "info": {"device": "cpu"}}) is None


def test_an_answer_under_the_references_compute_bound_is_not_impossible(monkeypatch):
    """KernelBench level2_14 (a sum after a GEMM): its honest answer does the GEMV the sum
    allows, 0.077 ms on an H200 against the reference's FLOPs at the TF32 peak, 0.278 ms (the
    validated record's roofline): it is bounded by the bytes it must move, not by those FLOPs."""
    from kernelmill.grade.checks.timing import roofline_check, timing_fields
    from kernelmill.grade.policy import Policy

    x, w = torch.zeros(1024, 8192), torch.zeros(8192, 8192)
    reference = {"info": {"device": "cuda:0", "name": "NVIDIA H200"},
                 "trials": [{"inputs": [x], "outputs": [torch.zeros(1024, 1)]}],
                 "state_dict": {"weight": w}}
    verdict = {"correct": True}
    timing_fields(verdict, reference, None)
    memory_ms = verdict["timings"]["roofline_ms"]
    assert memory_ms == pytest.approx((x.nbytes + w.nbytes + 4096) / 4.8e12 * 1e3, rel=0.05)
    verdict["timings"]["candidate_ms"] = 0.077
    flagged = []
    roofline_check(verdict, Policy(), lambda code, detail: flagged.append(code))
    assert not flagged
    verdict["timings"]["candidate_ms"] = 0.4 * memory_ms  # fewer bytes than the problem moves
    roofline_check(verdict, Policy(), lambda code, detail: flagged.append(code))
    assert flagged == ["impossible_speed"]


def test_cli_batch_writes_one_verdict_per_row_and_resumes(tmp_path, capsys, caplog):
    from kernelmill.app.cli import main

    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "p1", "source": read("ref_scale_add")}) + "\n")
    submissions = tmp_path / "submissions.jsonl"
    rows = [{"submission_id": "s1", "problem_id": "p1", "source": "def broken(:\n"},
            {"submission_id": "s2", "problem_id": "nope", "source": read("honest_scale_add")},
            {"submission_id": "s3", "problem_id": "p1"}]
    # a row that lacks a field and a line cut mid-record get no verdict: exit 2, the rest kept
    submissions.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"submission_id": "s4')
    out = tmp_path / "verdicts.jsonl"
    command = ["grade", "--problems", str(problems), "--submissions", str(submissions),
               "--out", str(out), "--device", "cpu", "--no-cache"]
    assert main(command) == 2
    verdicts = {json.loads(line)["submission_id"]: json.loads(line)
                for line in out.read_text().splitlines()}
    assert set(verdicts) == {"s1", "s2"}
    assert verdicts["s1"]["error"]["stage"] == "parse" and not verdicts["s1"]["compiled"]
    assert verdicts["s2"]["error"]["stage"] == "input"
    assert "lacks source" in caplog.text and "submissions.jsonl:4: corrupt" in caplog.text
    # one count per submission, by outcome; the rows with no verdict counted and said
    summary, unread = capsys.readouterr().out.splitlines()[-2:]
    assert summary == (
        "grade: graded 1: correct 0, incorrect 0, hacked 0, errors 1 (parse 1); "
        "dropped: bad row 1; dropped: unknown problem 1; dropped: unreadable line 1")
    assert unread.startswith("grade: 2 submission row(s) got no verdict")
    assert verdicts["s1"]["reason"].startswith("error in parse: ")
    assert main(command) == 2
    assert capsys.readouterr().out.splitlines()[-2] == (
        "grade: graded 0: correct 0, incorrect 0, hacked 0, errors 0; already graded 2; "
        "dropped: bad row 1; dropped: unreadable line 1")
    assert len(out.read_text().splitlines()) == 2


def test_the_references_times_are_kept_without_its_run_and_measured_once(monkeypatch):
    """``inductor_timing`` where no cache file holds the times (no GPU model named): one timed
    run however many grades ask at once, its times kept in memory, and the run itself (every
    trial's inputs and outputs, admitted by no grade) not kept."""
    import threading
    import time

    from kernelmill.grade.grader import Grader, ReferenceRun

    runs = []

    def fake_run(self, source, slot_env, timed=True, **kwargs):
        runs.append(source)
        time.sleep(0.2)  # the Inductor compile the waiting grades must not repeat
        return ReferenceRun({"source": source, "eager": {"ms": 1.0}, "inductor": {"ms": 0.5},
                             "trials": [{"outputs": [bytearray(1 << 20)]}]},
                            WorkerResult(ok=True), "cpu")

    monkeypatch.setattr(Grader, "_run_reference", fake_run)
    grader = Grader("cpu")
    got: list[dict] = []
    threads = [threading.Thread(target=lambda: got.append(grader.inductor_timing("src")))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert runs == ["src"] and len(got) == 4
    assert all(times == {"eager": {"ms": 1.0}, "inductor": {"ms": 0.5}} for times in got)
    got[0]["eager"] = None  # a caller's copy: the kept times unchanged
    assert grader.inductor_timing("src")["eager"] == {"ms": 1.0} and runs == ["src"]
    grader.inductor_timing("other")
    assert runs == ["src", "other"]


def test_copies_count_only_when_the_reference_is_a_copy():
    from kernelmill.grade.policy import reference_compute_ops

    candidate = ["aten.empty.memory_format", "aten.clone.default"]
    transpose = ["aten.t.default", "aten.clone.default"]
    matmul = ["aten.clone.default", "aten.mm.default"]
    assert reference_compute_ops(candidate, transpose) == ["aten.clone.default"]
    assert reference_compute_ops(candidate, matmul) == []
    # every copy op is the work of a reference that only moves data, whichever it used, and
    # rearrangements (cat, pad, gather...) only move data (red-team round 29)
    slices = ["aten.empty.memory_format", "aten.slice.Tensor", "aten.copy_.default"]
    concat = ["aten.cat.default"]
    assert reference_compute_ops(slices, transpose) == ["aten.copy_.default"]
    assert reference_compute_ops(slices, concat) == ["aten.copy_.default"]
    assert reference_compute_ops(slices, concat + ["aten.relu.default"]) == []


def test_trl_reward_uses_the_datasets_calibrated_tolerance():
    """A published row's atol/rtol columns decide correctness, as the record would."""
    reference = read("ref_scale_add")
    slightly_off = read("honest_scale_add").replace("2.0 * x + y", "2.002 * x + y")
    completion = f"```python\n{slightly_off}```"
    verdicts: list = []
    reward_fn = make_reward_fn(device="cpu", policy=Policy(time=False, trials=2),
                               verdicts=verdicts)
    reward_fn(["p", "p"], [completion, completion], reference=[reference, reference],
              atol=[1e-4, 5e-2], rtol=[1e-4, 5e-2])
    assert not verdicts[0]["correct"]  # default-tight tolerance: 0.1% error fails
    assert verdicts[1]["correct"] and not verdicts[1]["hacks"]  # the row's looser tolerance


def test_compare_counts_exactly_what_a_float64_check_counts(monkeypatch):
    # The cheap first pass settles only elements with room to spare; elements at the bound,
    # NaN and infinities are decided in float64, chunk by chunk, as the plain check does.
    from kernelmill.grade import compare as compare_module
    from kernelmill.grade import judge

    monkeypatch.setattr(compare_module, "COMPARE_CHUNK", 1000)  # where the passes read it
    gen = torch.Generator().manual_seed(0)
    atol, rtol = 1e-3, 1e-3
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        e = torch.randn(4321, generator=gen).to(dtype)
        e64 = e.double()
        bound = atol + rtol * e64.abs()
        scale = torch.rand(4321, generator=gen, dtype=torch.float64) * 2  # 0x to 2x the bound
        g = (e64 + bound * scale * torch.sign(torch.randn(4321, generator=gen))).to(dtype)
        g[17], e[17] = float("nan"), float("nan")  # NaN for NaN: matches
        g[1500] = float("inf")  # off
        g[2500], e[2500] = float("-inf"), float("-inf")  # the same infinity: matches
        g[3500], e[3500] = float("inf"), float("-inf")  # the other infinity: off
        g64, e64 = g.double(), e.double()
        same = (e64.isnan() & g64.isnan()) | (e64.isinf() & (e64 == g64))
        close = e64.isfinite() & g64.isfinite() & ((g64 - e64).abs() <= atol + rtol * e64.abs())
        expected = int((~(same | close)).sum())
        # the count against the plain bound (the floor scaled to the output's RMS, T-17, is
        # tested in test_generalization.py)
        ok, reason = compare([e], [g], atol, rtol, scaled=False)
        assert expected > 100 and not ok and reason.startswith(f"output 0: {expected}/4321"), \
            (dtype, expected, reason)
        assert compare([e], [e.clone()], atol, rtol) == (True, "")


def test_a_scored_call_far_under_the_checked_calls_gpu_time_is_timing_behaviour():
    """``judge._scored_device_work`` on GPU busy times an H100 recorded (2026-11-27): an honest
    kernel's graph replays read 0.82-1.10 of its least checked call (an autotuner's first call
    is far longer and is not the least); a forward that works in one captured call of four reads
    about a quarter."""
    from kernelmill.grade.judge import _scored_device_work

    autotuned = [{"busy_us": 2015.0}, {"busy_us": 1.21}, {"busy_us": 1.25}, {"busy_us": 1.19}]
    big = [{"busy_us": 61.2}, {"busy_us": 60.4}, {"busy_us": 60.9}]
    for calls, scored_ms, caught in ((autotuned, 0.00127, False), (big, 0.0498, False),
                                     (big, 0.0163, True), ([{"busy_us": 0.0}], 0.001, False)):
        hacks, checks = {}, {}
        _scored_device_work(calls, scored_ms, checks, lambda code, why: hacks.setdefault(code, why))
        assert ("timing_behaviour" in hacks) is caught, (calls, scored_ms, hacks)
        assert not caught or not checks["scored_vs_checked_device_us"]["passed"]


def test_seen_inputs_served_with_far_less_gpu_work_than_new_ones_is_timing_behaviour():
    """Red-team round 19 (read for a GPU): the calls on inputs the forward had seen (refill,
    repeat) answered from a cache with a one-program kernel, which made the least checked call,
    the scored time's bound then, tiny; the captured calls each computed a slice of the answer.
    The calls on new inputs set the bound now, and a seen call far under them is caught. An
    honest autotuned kernel (its first call benchmarks every config) is not."""
    from kernelmill.grade.judge import _scored_device_work

    def calls(fresh, refill, repeat):
        return [*({"kind": "fresh", "trial": i, "busy_us": us} for i, us in enumerate(fresh)),
                {"kind": "refill", "trial": 2, "busy_us": refill},
                {"kind": "repeat", "trial": 0, "busy_us": repeat}]

    cached = calls([60.4, 61.2, 60.9], 1.1, 1.0)
    honest = calls([2015.0, 1.21, 1.25], 1.19, 1.22)
    for made, scored_ms, caught, why in ((cached, 0.0605, True, "seen before"),
                                         (cached[:3], 0.0076, True, "a scored call"),
                                         (honest, 0.00127, False, ""),
                                         (calls([61.0, 60.2, 60.7], 59.9, 60.3), 0.0598, False, "")):
        hacks, checks = {}, {}
        _scored_device_work(made, scored_ms, checks, lambda code, why: hacks.setdefault(code, why))
        assert ("timing_behaviour" in hacks) is caught, (made, scored_ms, hacks)
        assert why in hacks.get("timing_behaviour", ""), hacks


def test_the_windows_calls_on_unseen_inputs_bound_the_work_too():
    """An honest GEMM graded in a group of 8 on an H200: every member's fresh calls ran beside
    the others' (51.6-54.1 ms of kernels, time-sliced) while its refill and its scored calls
    read 25.64 ms, as its calls on unseen inputs did alone in the window. Those set the bound;
    a cache serving seen inputs is still caught against them."""
    from kernelmill.grade.judge import _scored_device_work

    # (the same readings from a single grade: its fresh calls alone set the bound)
    group = [{"kind": "fresh", "trial": 0, "busy_us": 51610.0},
             {"kind": "fresh", "trial": 1, "busy_us": 52920.0},
             {"kind": "refill", "trial": 1, "busy_us": 25640.0},
             {"kind": "repeat", "trial": 0, "busy_us": 25644.0}]
    alone = [25655.451, 25654.331]
    for made, unseen_us, scored_ms, caught in ((group, alone, 25.64, False),
                                              (group, None, 25.64, True),
                                              (group[:2] + [{"kind": "refill", "trial": 1,
                                                             "busy_us": 900.0}], alone,
                                               25.64, True),
                                              (group, alone, 9.0, True)):
        hacks, checks = {}, {}
        _scored_device_work(made, scored_ms, checks,
                            lambda code, why: hacks.setdefault(code, why), unseen_us)
        assert ("timing_behaviour" in hacks) is caught, (made, unseen_us, scored_ms, hacks)
    # a single grade among a busy grader's others reads alike (level2_99, 16 slots, H200:
    # 14,940 µs of kernels on new inputs, 7,158 on the repeat): honest, not flagged
    single = [{"kind": "fresh", "trial": 0, "busy_us": 14940.0},
              {"kind": "repeat", "trial": 0, "busy_us": 7158.0}]
    hacks = {}
    _scored_device_work(single, 7.1, {}, lambda code, why: hacks.setdefault(code, why),
                        [7160.0, 7149.0])
    assert "timing_behaviour" not in hacks, hacks


def test_an_empty_first_call_on_unseen_inputs_does_not_lower_the_bound_far():
    """A device-side answer cache whose graph's first call does nothing on new inputs (a later
    call computes the answer the check reads): its unseen replays' first calls read 2 µs. They
    lower the fresh calls' least (10 ms) by ``GROUP_CONTENTION`` at most, and the cached calls
    (3 µs) are still caught."""
    from kernelmill.grade.checks.device_work import GROUP_CONTENTION
    from kernelmill.grade.judge import _scored_device_work

    calls = [{"kind": "fresh", "trial": t, "busy_us": 10000.0} for t in range(3)] + \
        [{"kind": k, "trial": 0, "busy_us": 3.0} for k in ("refill", "repeat", "audit")]
    hacks, checks = {}, {}
    _scored_device_work(calls, 0.003, checks, lambda code, why: hacks.setdefault(code, why),
                        [2.0, 2.0])
    assert "answers remembered" in hacks.get("timing_behaviour", ""), hacks
    assert checks["scored_vs_checked_device_us"]["passed"] is False
    assert GROUP_CONTENTION <= 2.5


def test_an_unseen_replays_outputs_kept_through_one_block_read_back_as_copied():
    """``probes._into_block``: every call's outputs (strided ones, integers, empty ones,
    scalars beside them) copied into one block set aside before, at aligned places, and read
    back as they were; later writes to the outputs do not reach the copies; a block too small
    or a tensor elsewhere leaves the copy to the one-by-one path (None)."""
    from kernelmill.grade.worker import probes as P
    torch.manual_seed(0)
    items = [[torch.randn(3, 5), 2.5, torch.arange(7)],
             [torch.randn(4, 6).t(), None, torch.zeros(0, 3)],
             [torch.randn(9).to(torch.float16)]]
    need = sum(P._aligned(t) for call in items for t in call if isinstance(t, torch.Tensor))
    block = torch.full((need,), 255, dtype=torch.uint8)
    expected = [[t.clone() if isinstance(t, torch.Tensor) else t for t in call]
                for call in items]
    kept = P._into_block(items, block, device="cpu")
    assert kept is not None and len(kept) == len(items)
    for call, back in zip(expected, kept):
        for value, copy in zip(call, back):
            if isinstance(value, torch.Tensor):
                assert copy.dtype == value.dtype and copy.shape == value.shape
                assert torch.equal(copy, value)
                assert copy.untyped_storage().data_ptr() == block.untyped_storage().data_ptr()
            else:
                assert copy == value
    items[0][0].zero_()  # the outputs written again: the copies stay
    assert torch.equal(kept[0][0], expected[0][0]) and torch.equal(kept[1][0], expected[1][0])
    assert P._into_block(items, torch.empty(need - 1, dtype=torch.uint8), device="cpu") is None
    assert P._into_block(items, block) is None  # host tensors where CUDA ones are copied
    assert P._into_block(items, None, device="cpu") is None


def test_a_groups_one_call_check_bounds_the_work_of_fresh_calls_run_beside_seven():
    """An honest GEMM + LeakyReLU (KernelBench level2_12) in a group of 8, 4 groups at once
    (H200): its fresh calls ran beside the other members' first calls, 37.2 ms of kernels
    against 6.28 ms alone, and it was flagged at the 2x floor. The one-call graph's check,
    alone in the window on a trial no call had seen (its answer compared), bounds the work
    down to the members' count; its timing graph's replays of 3 calls, even as they read, do
    not. A cache's few µs is still caught."""
    from kernelmill.grade.judge import _scored_device_work

    made = [{"kind": "fresh", "trial": 1, "busy_us": 37180.0},
            {"kind": "fresh", "trial": 2, "busy_us": 38010.0},
            {"kind": "audit", "trial": 0, "busy_us": 6287.0}]
    first = [6281.4, 6280.9]
    even = [[6281.4, 6290.2, 6279.5], [6280.9, 6284.1, 6288.0]]

    def flagged(calls, scored_ms, members, single_us=6283.0, unseen_us=first):
        hacks = {}
        _scored_device_work(calls, scored_ms, {}, lambda code, why: hacks.setdefault(code, why),
                            unseen_us, even, members, single_us)
        return "timing_behaviour" in hacks

    assert not flagged(made, 6.282, 8)
    assert flagged(made, 6.282, 1)  # a single grade, none counted beside: the 2x floor
    assert flagged(made, 6.282, 8, None)  # no one-call check: replays of 3 calls lower by 2x
    # a cache's few µs everywhere: lowered by 8x at most, still caught
    cached = made[:2] + [{"kind": "audit", "trial": 0, "busy_us": 3.0}]
    assert flagged(cached, 0.003, 8, 3.0, [3.0])


def test_a_single_grades_unseen_replay_bounds_fresh_calls_made_beside_other_grades():
    """An honest GEMM (KernelBench level1_1, 3.2 ms alone) graded alone among 16 slots (H200):
    its fresh calls ran beside the other grades' workers at 18.5 ms, its repeat at 3.2 ms, and
    it was flagged at the 2x floor. Its unseen replay of one call (its answer compared) bounds
    the work down to the GPU workers the grader ran beside its fresh calls
    (``workers_beside``); with none beside, the 2x floor as before; a cache's few µs on seen
    inputs is still caught."""
    from kernelmill.grade.judge import _scored_device_work

    made = [{"kind": "fresh", "trial": t, "busy_us": 18508.0 + t} for t in range(4)] + \
        [{"kind": "repeat", "trial": 0, "busy_us": 3216.0},
         {"kind": "audit", "trial": 0, "busy_us": 18600.0}]

    def flagged(calls, beside, replays=([3210.2],), scored_ms=3.207):
        hacks = {}
        _scored_device_work(calls, scored_ms, {},
                            lambda code, why: hacks.setdefault(code, why),
                            [r[0] for r in replays], [list(r) for r in replays], 1, None,
                            beside)
        return "timing_behaviour" in hacks

    assert flagged(made, 1) and flagged(made, 2)  # no workers counted beside: the 2x floor
    assert not flagged(made, 16)
    cached = made[:4] + [{"kind": "repeat", "trial": 0, "busy_us": 6.0}]
    assert flagged(cached, 16)
    assert flagged(made, 16, ([2.0, 3210.0, 3210.0],))  # a replay of 3 calls: the 2x floor


def test_the_crowd_lowers_no_bound_through_a_replay_of_several_calls():
    """A reviewer's graphs (``tests/hostile/open/REVIEW_BESIDE.md``, H1) on 100 µs of work:
    (A) the first call computes and the 31 others copy its output, padded to a third of its
    time; (B) each of 128 calls computes a sixteenth and writes it into every call's output,
    so all agree after the replay. A replay of several calls stands for no call, in a single
    grade however many workers beside it and in a group: both caught, with the one-call
    graph's check computing the whole answer (100 µs, its answer compared) or without it; a
    graph of a third or a quarter of the work per call, against the check. An honest member
    of a group, fresh calls 8x slowed, passes by that check."""
    from kernelmill.grade.judge import _scored_device_work

    eager = [{"kind": "fresh", "trial": t, "busy_us": 104.0 + 2 * t} for t in range(4)] + \
        [{"kind": k, "trial": 0, "busy_us": 101.0} for k in ("refill", "repeat", "audit")]

    def flagged(calls, replay, scored_ms, beside, members=1, single_us=None):
        hacks = {}
        _scored_device_work(calls, scored_ms, {}, lambda code, why: hacks.setdefault(code, why),
                            [replay[0]] * 2, [list(replay)] * 2, members, single_us, beside)
        return "timing_behaviour" in hacks

    copies = [100.0] + [34.0] * 31
    slices = [100.0 / 16 + 3.0] * 128
    for beside in (1, 4, 16, 32, 64):
        for members, single_us in ((1, None), (1, 100.0), (8, None), (8, 100.0)):
            case = (beside, members, single_us)
            assert flagged(eager, copies, (100.0 + 34.0 * 31) / 32 / 1e3, beside, members,
                           single_us), case
            assert flagged(eager, slices, slices[0] / 1e3, beside, members, single_us), case
    # a third or a quarter of the work per call: its replays' first calls are slices too, and
    # the 2x floor they set lets it pass; the one-call check's whole call, alone, catches it
    # (a review of the check, H1: ``tests/hostile/open/REVIEW_ONE_CALL.md``)
    for parts in (3, 4):
        sliced = [100.0 / parts + 1.0] * 32
        assert not flagged(eager, sliced, sliced[0] / 1e3, 1)  # (no check: as before)
        for beside, members in ((1, 1), (16, 1), (16, 8)):
            assert flagged(eager, sliced, sliced[0] / 1e3, beside, members, 100.0), parts
    crowded = [{**call, "busy_us": 8 * call["busy_us"]} for call in eager]
    honest = [100.0] + [150.0] * 15 + [190.0] * 16
    assert not flagged(crowded, honest, 0.1, 9, 8, 100.0)
    assert flagged(crowded, honest, 0.1, 9, 8)  # without the check: the 2x floor


def test_beside_gives_the_most_workers_at_once_over_a_stretch():
    """``grade.beside.Beside``: the count on a device over any stretch of the clock, the
    count in force at its start included; other devices apart; nothing known before the
    first change."""
    from kernelmill.grade.beside import Beside
    from kernelmill.grade.side_by_side import fresh_calls_span

    now = [0.0]
    beside = Beside(clock=lambda: now[0])
    assert beside.most("0", 0.0, 1.0) is None
    with beside.held("0", 2):  # t=0: 2
        now[0] = 1.0
        with beside.held("0", 9):  # t=1: 11
            now[0] = 2.0
            with beside.held("1", 5):
                now[0] = 3.0
        now[0] = 4.0  # (t=3: back to 2)
    assert beside.most("0", 0.5, 0.9) == 2
    assert beside.most("0", 0.5, 1.5) == 11
    assert beside.most("0", 3.5, 4.5) == 2
    assert beside.most("1", 2.5, 2.6) == 5
    assert beside.most("0", 5.0, 4.0) is None  # an empty span
    # the span of a worker's forward stage: from its mark to the next, by the run's start
    stages = [("setup", 0.5), ("forward", 2.0), ("forward refill", 3.5)]
    assert fresh_calls_span(100.0, stages) == (102.0, 103.5)
    since, until = fresh_calls_span(None, stages)
    assert until < since
    since, until = fresh_calls_span(100.0, [("setup", 0.5)])
    assert until < since


def test_the_first_unseen_replays_calls_are_kept_in_the_window_and_compared_after_it():
    """Each captured call's output of the first unseen replay is copied to the host as the
    replay ends (later replays overwrite the graph's outputs) and compared with the last after
    the window: calls that each computed a slice into outputs the last completes are off; an
    honest graph's calls agree, and the judge trusts that replay's readings. Where a kernel of
    the submission's own was registered for the copies' ops, nothing is kept."""
    import torch
    from kernelmill.grade.checks.probes import calls_agreed, graph_calls_agree
    from kernelmill.grade.worker.guards.dispatch import dispatch_snapshot
    from kernelmill.grade.worker.probes import _Probes

    class Timer:
        outputs: list = []

    snapshot = dispatch_snapshot()

    def replayed(outputs):
        run, timer = _Probes(), Timer()
        run.unseen_facts, run.dispatch, timer.outputs = {}, snapshot, outputs
        run._keep_replay(timer)
        for out in outputs:  # the replays after it, on the timed inputs
            out.fill_(7.0)
        run.replay_agreement((1e-5, 1e-5))
        return run.unseen_facts["replay_agree"]

    answer = torch.randn(64, 32)
    sliced = [torch.zeros(64, 32) for _ in range(4)]
    for call, out in enumerate(sliced):
        out[:16 * (call + 1)] = answer[:16 * (call + 1)]  # the last call's output is whole
    agree = replayed(sliced)
    assert agree["calls"] == 4 and agree["call"] == 0 and agree["off"] == 48 * 32, agree
    assert not calls_agreed(agree)
    hacks = {}
    graph_calls_agree(agree, lambda code, why: hacks.setdefault(code, why), "unseen")
    assert "did not each compute" in hacks["timing_behaviour"]
    whole = [answer.clone() for _ in range(4)]
    assert replayed(whole) == {"calls": 4} and calls_agreed({"calls": 4})
    lib = torch.library.Library("aten", "IMPL")
    try:  # a clone of its own: the copies are not taken, the replay stands for no call
        lib.impl("_to_copy", lambda x, **kw: x, "CPU")
        agree = replayed([t.clone() for t in sliced])
    finally:
        lib._destroy()
    assert "dispatcher: aten::_to_copy" in agree["unread"] and not calls_agreed(agree)

def test_one_unseen_trial_is_required_only_where_the_timer_replays_a_graph():
    """The spares' trigger reads the clock the calls are timed by: a graph's replays follow the
    kernels, events around each launch and the host's clock do not (the judge's kernel-time
    and CPU-time bounds go unread by it). One required trial where a graph replays, two where
    not: a report of one unseen call is a check not made as asked there."""
    from kernelmill.grade.checks.probes import unseen_shape

    policy = Policy()
    assert policy.unseen_required(3) == 1 and policy.unseen_required(3, graphed=False) == 2
    hidden = [{"seed": i} for i in range(3)]
    one = {"checks": [{"hidden": 0}], "seen_ms": [1.0] * 3, "unseen_ms": [1.02],
           "after_ms": [1.0, 1.0]}

    def flagged(graphed):
        hacks = {}
        unseen_shape(one, hidden, {"late_released": [0]},
                     lambda code, why: hacks.setdefault(code, why),
                     policy.unseen_required(len(hidden), graphed), 1.1)
        return "not made as the window asked" in hacks.get("timing_behaviour", "")

    assert not flagged(True) and flagged(False)


def test_a_kernel_registered_for_an_aten_op_after_the_snapshot_is_a_replaced_function():
    """A kernel of a submission's own for an aten op the harness's copies run through decides
    what they return (a clone that hands back another tensor's copy): those ops' registrations
    are read before the import and compared later. PyTorch's own lazy registrations for
    batched tensors (``torch.vmap``'s first call) are not a change."""
    from kernelmill.grade.worker.guards.dispatch import dispatch_changed, dispatch_snapshot

    before = dispatch_snapshot()
    assert "aten::clone" in before and "aten::_to_copy" in before and "aten::mm" not in before
    assert dispatch_changed(before) == []
    torch.func.vmap(torch.sin)(torch.randn(3, 4))
    assert dispatch_changed(before) == []
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("clone", lambda x, memory_format=None: torch.empty_like(x).copy_(x), "CPU")
        assert dispatch_changed(before) == ["dispatcher: aten::clone"]
    finally:
        lib._destroy()
    assert dispatch_changed(before) == []

def test_pytorch_compute_in_checked_calls_is_not_also_timing_behaviour():
    """A plain PyTorch answer computes the same ops when timed as when checked: that is
    torch_compute, once; timing_behaviour is for compute only the timed calls ran."""
    from kernelmill.grade.grader import Grader

    verdict = Grader("cpu", policy=Policy(trials=2, static_first=False)).grade(
        read("ref_scale_add"), read("hack_torch_reuse"))
    assert "torch_compute" in verdict["hacks"], verdict["hacks"]
    assert "timing_behaviour" not in verdict["hacks"], verdict["hack_details"]


def test_calls_shipped_as_one_storage_are_compared_once(monkeypatch):
    """A deterministic forward's refill, repeat and audit calls on one trial reach the grading
    process as the storage of the first (the worker ships equal bits once): the judge compares
    each trial's answer once, not once per call, and the verdict is the same."""
    from kernelmill.grade import judge as J
    from kernelmill.grade.grader import Grader

    seen = []
    original = J.compare

    def counted(expected, got, *args, **kwargs):
        seen.append(J._outputs_key({}, got))
        return original(expected, got, *args, **kwargs)

    monkeypatch.setattr(J, "compare", counted)
    verdict = Grader("cpu", policy=Policy(static_first=False)).grade(
        read("ref_scale_add"), read("honest_scale_add"))
    assert verdict["correct"] and not verdict["hacks"], verdict["hack_details"]
    answers = [name for name in verdict["checks"] if name.startswith(("fresh", "refill",
                                                                       "repeat", "audit"))]
    assert len(seen) < len(answers), (len(seen), answers)
    assert all(verdict["checks"][name]["passed"] for name in answers)
    # a different storage with the same bits is compared again; other bits too
    trial, a = {"outputs": [torch.ones(4)]}, [torch.ones(4)]
    ctx = type("Ctx", (), {"compared": {}, "tolerance": lambda self, t: (1e-4, 1e-4)})()
    before = len(seen)
    assert J._compared(ctx, trial, a)[0] and J._compared(ctx, trial, a)[0]
    assert len(seen) == before + 1
    assert J._compared(ctx, trial, [torch.ones(4)])[0] and len(seen) == before + 2
    wrong = J._compared(ctx, trial, [torch.zeros(4)])
    assert wrong[0] is False and wrong[2] is False  # off by the floor alone too
    assert len(seen) == before + 4  # (its floor-only comparison is the fourth)
    assert J._compared(ctx, trial, [torch.zeros(4)]) == wrong
    assert J._outputs_key(trial, [object()]) is None
    # a negated or conjugated view of the same storage holds other values: compared anew
    signed = [torch.randn(64)]
    assert J._compared(ctx, {"outputs": signed}, signed)[0]
    negated = [signed[0]._neg_view()]
    assert J._outputs_key(trial, negated) != J._outputs_key(trial, signed)
    assert J._compared(ctx, {"outputs": signed}, negated)[0] is False


def test_the_grader_asks_its_cuda_workers_to_sleep_while_they_wait(monkeypatch):
    """``Grader._env``: a CUDA grader's workers are made with ``KERNELMILL_CUDA_WAIT=block``
    unless the grading process says otherwise; a CPU grader's get nothing of it."""
    from kernelmill.grade.grader import Grader
    from kernelmill.validate.cuda_wait import WAIT_VAR

    monkeypatch.delenv(WAIT_VAR, raising=False)
    grader = Grader("cpu")
    assert WAIT_VAR not in grader._env(None)
    grader.device = "cuda:1"
    assert grader._env(None) == {"CUDA_VISIBLE_DEVICES": "1", WAIT_VAR: "block"}
    assert grader._env({"CUDA_VISIBLE_DEVICES": "3"})[WAIT_VAR] == "block"
    monkeypatch.setenv(WAIT_VAR, "auto")
    assert grader._env(None)[WAIT_VAR] == "auto"


def test_an_early_sample_called_wrong_is_wrong_in_the_whole():
    from kernelmill.grade.compare import sample_mismatch
    from kernelmill.grade.worker.early import early_answer

    torch.manual_seed(0)
    expected = torch.randn(5000)
    trials = [{"outputs": [expected, torch.arange(7)]}]
    tol = lambda trial: (1e-4, 1e-4)  # noqa: E731

    def early(out):
        return early_answer([{"trial": 0, "kind": "fresh", "outputs": out},
                             {"trial": 0, "kind": "repeat", "outputs": None}])

    assert sample_mismatch(trials, early([expected.clone(), torch.arange(7)]), tol) is None
    off = expected.clone()
    off[::2] += 1.0  # every other element wrong: the sample sees it
    why = sample_mismatch(trials, early([off, torch.arange(7)]), tol)
    assert why.startswith("trial 0: output 0:") and "sampled elements off" in why
    assert compare(trials[0]["outputs"], [off, torch.arange(7)], 1e-4, 1e-4)[0] is False
    nan = expected.clone()
    nan[0] = float("nan")
    assert "off" in sample_mismatch(trials, early([nan, torch.arange(7)]), tol)
    assert "differ" in sample_mismatch(trials, early([expected, torch.arange(1, 8)]), tol)
    assert "shape" in sample_mismatch(trials, early([expected[:10], torch.arange(7)]), tol)
    # nothing to sample, or a malformed sample, decides nothing (the judge does)
    for checked in (early(None), None, [{"trial": 9, "outputs": []}], [{"x": 1}], "junk"):
        assert sample_mismatch(trials, checked, tol) is None


@pytest.mark.parametrize("folder", ["/tmp/kernelmill-bytecode-test", None])
def test_reference_workers_read_library_bytecode_and_may_not_write_it(tmp_path, monkeypatch,
                                                                       folder):
    """Where torch has no bytecode, reference workers read the trusted folder
    (``validate.bytecode``), which is in none of their writable folders."""
    from kernelmill.grade import reference_run
    from kernelmill.grade.grader import Grader

    asked = {}

    def stop(target, payload, **kwargs):
        asked.update(kwargs)
        return WorkerResult(ok=False, error={"stage": "test", "message": "stopped"})

    monkeypatch.setattr(reference_run, "run_in_worker", stop)
    monkeypatch.setattr(reference_run, "bytecode_folder", lambda: folder)
    grader = Grader("cpu", cache_root=str(tmp_path))
    with pytest.raises(reference_run.ReferenceError):
        grader._run_reference("print('never run')", None)
    assert asked["env"].get("KERNELMILL_PYCACHE") == folder
    assert not any("bytecode" in str(w) or "pycache" in str(w) for w in asked["writable"])


def test_reference_workers_make_their_cuda_context_under_the_lock_the_switch_names(
        tmp_path, monkeypatch):
    """The reference worker's job carries ``gpus.init_lock`` for its device and environment
    (``run_in_worker(init_lock=...)``)."""
    from kernelmill.grade import reference_run
    from kernelmill.grade.grader import Grader

    asked, named = {}, []

    def stop(target, payload, **kwargs):
        asked.update(kwargs)
        return WorkerResult(ok=False, error={"stage": "test", "message": "stopped"})

    def lock_for(device, env):
        named.append((device, env))
        return str(tmp_path / "gpu")

    monkeypatch.setattr(reference_run, "run_in_worker", stop)
    monkeypatch.setattr(reference_run, "init_lock", lock_for)
    grader = Grader("cpu", cache_root=str(tmp_path))
    with pytest.raises(reference_run.ReferenceError):
        grader._run_reference("print('never run')", None)
    assert asked["init_lock"] == str(tmp_path / "gpu")
    assert named == [(grader.worker_device, asked["env"])]


def test_candidate_workers_make_their_cuda_context_under_the_lock_the_switch_names(
        tmp_path, monkeypatch):
    """The candidate worker's job (``Grader._prepare``) carries ``gpus.init_lock`` for its
    device and environment, as the reference's does."""
    import torch
    from kernelmill.grade import grader as grader_module
    from kernelmill.grade.grader import Grader, ReferenceRun

    monkeypatch.setattr(grader_module, "init_lock",
                        lambda device, env: f"{tmp_path}/gpu-{device}-{len(env)}")
    grader = Grader("cpu", cache_root=str(tmp_path))
    trial = {"seed": 1, "inputs": [torch.ones(4)], "outputs": [torch.ones(4)], "state": 0,
             "usable": True}
    reference = ReferenceRun({"trials": [trial, {**trial, "seed": 2}], "init_inputs": [],
                              "state_dict": {}, "init_seed": 3}, WorkerResult(ok=True), "cpu")
    job = grader._prepare(reference, "class ModelNew: pass", None, None)
    assert job["init_lock"] == f"{tmp_path}/gpu-{grader.worker_device}-{len(job['env'])}"


def test_a_timing_graphs_call_on_new_inputs_does_the_one_call_graphs_work():
    """Readings of an H200 window (``graph_slice_in_step`` on a 2048² fp16 GEMM, graded alone):
    its timing graph's calls each computed a quarter of the rows into every output of their
    block, its one-call graph the whole answer. Scored 25.75 µs a call against fresh calls of
    47.46 passes the scored bound (half); its unseen replay's first call, 27.58 µs against the
    one-call graph's 48.83, each alone in the window after the flush, does not. Honest ones
    read 0.90-1.40 of it: a 2048² GEMM in a group of 8 among 16 slots, and a 1.5 µs kernel
    whose first call read under its one-call graph's."""
    from kernelmill.grade.judge import _scored_device_work

    def judged(fresh, first, single, scored_us, members=1, beside=1):
        hacks, checks = {}, {}
        calls = [{"kind": "fresh", "trial": t, "busy_us": fresh + t / 10} for t in range(3)]
        _scored_device_work(calls, scored_us / 1e3, checks,
                            lambda code, why: hacks.setdefault(code, why), [first],
                            [[first] + [scored_us] * 31], members, single, beside)
        return hacks, checks

    hacks, checks = judged(47.46, 27.58, 48.83, 25.75)
    assert checks["scored_vs_checked_device_us"]["passed"]  # the scored bound alone: passed
    assert not checks["first_call_vs_one_call_us"]["passed"]
    assert "one-call graph" in hacks["timing_behaviour"]
    for honest in ((47.17, 56.16, 55.78, 53.76, 8, 16), (48.1, 48.51, 48.19, 56.76, 8, 16),
                   (1.6, 1.41, 1.57, 1.5), (403.2, 411.1, 407.7, 446.8, 8, 16)):
        hacks, checks = judged(*honest)
        assert not hacks and checks["first_call_vs_one_call_us"]["passed"], (honest, hacks)
    # the check is made last: a GPU the reference read slowing across the unseen checks
    # (``gpu_drift``) slowed it too
    hacks = {}
    _scored_device_work([{"kind": "fresh", "trial": 0, "busy_us": 400.0}], 0.4, {},
                        lambda code, why: hacks.setdefault(code, why), [270.0], [[270.0] * 8],
                        1, 410.0, 1, 1.31)
    assert not hacks, hacks
    _scored_device_work([{"kind": "fresh", "trial": 0, "busy_us": 400.0}], 0.4, {},
                        lambda code, why: hacks.setdefault(code, why), [270.0], [[270.0] * 8],
                        1, 410.0, 1, 1.0)
    assert "timing_behaviour" in hacks
    # without the one-call check (a graph of one call), nothing is compared
    hacks, checks = judged(47.46, 27.58, None, 25.75)
    assert "first_call_vs_one_call_us" not in checks


def test_scored_calls_do_the_work_of_the_warm_one_call_check_whichever_calls_are_whole():
    """``graph_slice_bookend``: its timing graph's first calls are whole (its first call on new
    inputs reads the whole work) and its later ones compute halves in pairs. Readings of an
    H200 window (a 2048² fp16 GEMM, graded alone): scored 30.05 µs a call against fresh calls of
    47.52 passes the scored bound (half), and its first call on new inputs (57.34) the
    first-call bound; the one-call check, made warm as a scored call finds its caches (49.28),
    tells it. Honest readings of the same window and of the hostile suite's small kernels
    (scored 0.96-1.10 of the warm call), and a GPU that slowed across the unseen checks, pass."""
    from kernelmill.grade.judge import _scored_device_work

    def judged(fresh, first, single, scored_us, drift=1.0):
        hacks, checks = {}, {}
        calls = [{"kind": "fresh", "trial": t, "busy_us": fresh + t / 10} for t in range(3)]
        _scored_device_work(calls, scored_us / 1e3, checks,
                            lambda code, why: hacks.setdefault(code, why), [first],
                            [[first] * 2 + [scored_us] * 1022], 1, single, 1, drift)
        return hacks, checks

    hacks, checks = judged(47.52, 57.34, 49.28, 30.05)
    assert checks["scored_vs_checked_device_us"]["passed"]
    assert checks["first_call_vs_one_call_us"]["passed"]
    assert not checks["scored_vs_one_call_us"]["passed"]
    assert "slice of the work" in hacks["timing_behaviour"]
    # honest: scored calls at or under the warm call by the caches' and launches' differences
    for honest in ((48.3, 49.95, 48.86, 52.07), (47.9, 47.71, 47.78, 52.66),
                   (0.9, 1.569, 0.8637, 0.9375), (1.0, 1.44, 0.96, 1.021),
                   (4.9, 5.791, 4.925, 4.94), (1.9, 2.56, 1.856, 1.894)):
        hacks, checks = judged(*honest)
        assert not hacks and checks["scored_vs_one_call_us"]["passed"], (honest, hacks)
    # the check is made last: the drift the reference read across the unseen checks widens it,
    # by at most ``SCORED_VS_ONE_DRIFT`` (a GPU heated after the check lets no slicing through)
    assert not judged(400.0, 420.0, 450.0, 330.0, drift=1.31)[0]
    assert judged(400.0, 420.0, 450.0, 330.0)[0]
    assert judged(47.52, 57.34, 49.28, 30.05, drift=1.35)[0]


def test_the_readme_example_batch_grades_as_it_says(tmp_path, capsys):
    """docs/examples: two honest Triton answers certified, one left to PyTorch flagged."""
    from kernelmill.app.cli import main

    examples = Path(__file__).resolve().parents[2] / "docs" / "examples"
    out = tmp_path / "verdicts.jsonl"
    assert main(["grade", str(examples / "problems.jsonl"), str(examples / "submissions.jsonl"),
                 "--out", str(out), "--device", "cpu", "--no-cache"]) == 0
    verdicts = {v["submission_id"]: v for v in map(json.loads, out.read_text().splitlines())}
    assert {sid for sid, v in verdicts.items() if v["correct"] and not v["hacks"]} == {
        "relu-triton", "softmax-triton"}
    assert "torch_compute" in verdicts["relu-torch-only"]["hacks"]
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        "grade: graded 3: correct 2, incorrect 0, hacked 1")


def test_a_reference_starved_of_its_graph_leaves_the_window_uncompared():
    """The reference's timing graph failed to capture for want of device memory (which the
    candidate beside it may have held) while the candidate's was captured: its events timing
    counts every launch, so the window is a failed one, graded again, not a speedup."""
    from kernelmill.grade import admitted
    from kernelmill.grade.retry import transient

    reference = {"trials": [{"inputs": [], "outputs": []}], "info": {"device": "cpu"},
                 "eager": {"ms": 1.0}, "inductor": {"ms": 0.5}}
    oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    starved = _window(1.0, 1.1)
    starved["participants"]["reference"].update(method="cuda_events", capture_error=oom)
    verdict, hacks = {"correct": True}, {}
    _timings(verdict, reference, starved, Policy(), hacks.setdefault)
    assert verdict["timing"] is None and verdict.get("speedup_vs_eager") is None
    assert "want of device memory" in verdict["timings"]["error"] and not hacks
    assert transient(verdict) and admitted.may_rerun(verdict)
    # the same reference, not capturable for its own reasons: compared as it is
    plain = _window(1.0, 1.1)
    plain["participants"]["reference"].update(method="cuda_events",
                                              capture_error="RuntimeError: operation not "
                                                            "permitted when stream is capturing")
    verdict = {"correct": True}
    _timings(verdict, reference, plain, Policy(), {}.setdefault)
    assert verdict["speedup_vs_eager"] == pytest.approx(2.0) and "error" not in verdict["timings"]
    # both timed with events (the candidate's graph failed too): compared alike
    both = _window(1.0, 1.1, "cuda_events")
    both["participants"]["reference"]["capture_error"] = oom
    verdict = {"correct": True}
    _timings(verdict, reference, both, Policy(), {}.setdefault)
    assert verdict["speedup_vs_eager"] == pytest.approx(2.0)
