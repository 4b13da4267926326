"""KernelBench's own eval beside kernelmill's (benchmarks/kernelbench_eval.py): the child runs
the evaluations in one process and a fresh one follows a crash, a timeout or a lost CUDA
context, the table shows both tools and their spreads, a folder without KernelBench's eval is a
one-line error, and only modules that fail to import are stubbed. A fake KernelBench checkout
stands in for the real one (its eval needs CUDA); with ``KERNELBENCH_CHECKOUT`` set, the real
one's import is checked too."""
import os
import subprocess
import sys
import tempfile

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import kernelbench_eval
import kernelbench_eval_child

FAKE_EVAL = '''
import os
import sys
import time
import types
from dataclasses import dataclass, field

CALLS = []


@dataclass
class KernelExecResult:  # KernelBench's fields
    compiled: bool = False
    correctness: bool = False
    metadata: dict = field(default_factory=dict)
    runtime: float = -1.0
    ref_runtime: float = -1.0


def eval_kernel_against_ref(original_model_src, custom_model_src, **kwargs):
    print("KernelBench prints to stdout too")
    if "CRASH" in custom_model_src:
        os._exit(3)
    if "HANG" in custom_model_src:
        time.sleep(60)
    if "RAISE" in custom_model_src:
        raise ValueError("bad kernel\\nsecond line")
    if "POISON" in custom_model_src:  # a sticky CUDA error: this process's context is gone
        def synchronize():
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                     synchronize=synchronize)
        sys.modules["torch"] = types.SimpleNamespace(cuda=cuda)
        return KernelExecResult(compiled=True, metadata={"runtime_error": "illegal memory"})
    CALLS.append(kwargs)
    return KernelExecResult(compiled=True, correctness=True, runtime=100.0 * len(CALLS),
                            ref_runtime=200.0, metadata={"pid": os.getpid(), "calls": len(CALLS),
                                                         "kwargs": kwargs,
                                                         "not_json": ValueError("kept as text")})
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A fake KernelBench checkout and a way to make answers to its one problem; the eval's
    work folder (its children's log) goes under tmp_path."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    package = tmp_path / "kb" / "src" / "kernelbench"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "eval.py").write_text(FAKE_EVAL)
    problem = tmp_path / "level1" / "1_Problem.py"
    problem.parent.mkdir()
    problem.write_text("class Model: pass\n")

    def answer(name: str, body: str = "class ModelNew: pass\n"):
        path = tmp_path / f"{name}.py"
        path.write_text(body)
        return path, problem
    return tmp_path / "kb", answer


def test_one_process_and_a_fresh_one_after_a_crash(fake, tmp_path, capsys):
    checkout, answer = fake
    pairs = [answer("ok"), answer("crash", "# CRASH\n"), answer("cuda", "load_inline(...)\n"),
             answer("raises", "# RAISE\n")]
    rows = kernelbench_eval.run_kernelbench_eval(checkout, pairs, repeats=2, timeout_s=60)
    assert [(r["answer"], r["repeat"]) for r in rows] == [
        (a, rep) for rep in (0, 1) for a in ("ok", "crash", "cuda", "raises")]
    ok0, crash0, cuda0, raises0, ok1 = rows[:5]
    assert ok0["compiled"] and ok0["correctness"] and ok0["runtime_ms"] == 100.0
    assert ok0["ref_runtime_ms"] == 200.0 and ok0["speedup"] == 2.0
    assert ok0["metadata"]["kwargs"] == {**kernelbench_eval.EVAL_KWARGS, "backend": "triton",
                                         "build_dir": ok0["metadata"]["kwargs"]["build_dir"]}
    assert ok0["metadata"]["not_json"] == "kept as text"
    # the crash is its own row's error; the next answer runs in a fresh process
    assert crash0["error"].startswith("child died (exit 3)") and "compiled" not in crash0
    assert cuda0["restarted"] and cuda0["metadata"]["pid"] != ok0["metadata"]["pid"]
    assert cuda0["metadata"]["kwargs"]["backend"] == "cuda"
    assert cuda0["metadata"]["calls"] == 1
    # a raise is the row's error (first line) and the process goes on: in-process, as KernelBench
    assert raises0["error"] == "ValueError: bad kernel" and not raises0["restarted"]
    assert ok1["metadata"]["pid"] == cuda0["metadata"]["pid"] and ok1["metadata"]["calls"] == 2
    assert ok1["speedup"] == 1.0
    assert all(r["seconds"] >= 0 for r in rows)
    assert kernelbench_eval.per_minute(rows) > 0
    # the eval's own prints went to the log, not into the rows' stream
    assert "children's output is in" in capsys.readouterr().out
    log = next(tmp_path.glob("kernelmill-kbeval-*/child.log")).read_text()
    assert log.count("KernelBench prints to stdout too") == 8


def test_a_timeout_kills_the_child_and_the_next_answer_runs(fake):
    checkout, answer = fake
    rows = kernelbench_eval.run_kernelbench_eval(
        checkout, [answer("hang", "# HANG\n"), answer("ok")], repeats=1, timeout_s=3)
    assert rows[0]["error"] == "timed out after 3 s (child killed)"
    assert rows[0]["seconds"] < 30
    assert rows[1]["correctness"] and rows[1]["restarted"]


def test_a_lost_cuda_context_ends_the_child_after_its_row(fake):
    checkout, answer = fake
    rows = kernelbench_eval.run_kernelbench_eval(
        checkout, [answer("ok"), answer("poison", "# POISON\n"), answer("after")], repeats=1,
        timeout_s=60)
    ok, poison, after = rows
    assert poison["compiled"] and not poison["correctness"] and "error" not in poison
    assert poison["context_lost"] == "CUDA error: an illegal memory access was encountered"
    assert after["correctness"] and after["restarted"]
    assert after["metadata"]["pid"] != ok["metadata"]["pid"]
    table = kernelbench_eval.side_by_side_table([], rows)
    assert "CUDA context lost after it: CUDA error: an illegal memory" in table


def test_table_shows_both_tools_and_their_spreads():
    ours = [{"submission_id": "a", "correct": True, "hacks": [], "speedup_vs_eager": 1.50},
            {"submission_id": "a#1", "correct": True, "hacks": [], "speedup_vs_eager": 1.52},
            {"submission_id": "b", "correct": False, "hacks": ["timing_stream"],
             "speedup_vs_eager": None},
            {"submission_id": "c", "correct": False, "hacks": [],
             "error": {"message": "compile failed\nmore"}}]
    kb = [{"answer": "a", "compiled": True, "correctness": True, "runtime_ms": 10.0,
           "ref_runtime_ms": 20.0, "speedup": 2.0, "seconds": 1.0},
          {"answer": "a", "compiled": True, "correctness": True, "runtime_ms": 8.7,
           "ref_runtime_ms": 20.0, "speedup": 2.3, "seconds": 1.0},
          {"answer": "b", "error": "child died (exit 3): illegal memory access", "seconds": 1.0}]
    table = kernelbench_eval.side_by_side_table(ours, kb, ours_per_minute=240.0)
    lines = table.splitlines()
    assert "kernelmill" in lines[0] and "KernelBench" in lines[0]
    assert "runtime ms" in lines[0] and "ref ms" in lines[0] and "spread%" in lines[0]
    a = next(line for line in lines if line.startswith("a "))
    assert "certified" in a and "1.510" in a and "1.32" in a  # ours: (1.52 - 1.50) / 1.51
    assert "2/2" in a and "2.150" in a and "13.95" in a  # KernelBench: (2.3 - 2.0) / 2.15
    b = next(line for line in lines if line.startswith("b "))
    assert "hacked: timing_stream" in b and "0/1" in b and "illegal memory access" in b
    c = next(line for line in lines if line.startswith("c "))
    assert "error: compile failed" in c and "more" not in c
    assert "kernelmill 240.0; KernelBench 60.0 (3 evaluations in 3 s" in table


def test_a_folder_without_kernelbench_eval_is_a_one_line_error(tmp_path):
    with pytest.raises(SystemExit) as stop:
        kernelbench_eval.run_kernelbench_eval(tmp_path, [], repeats=1, timeout_s=1)
    assert "no src/kernelbench/eval.py" in str(stop.value)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "grade_throughput.py"),
                           "--sets", "kernelbench", "--kernelbench-eval", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        (f"--kernelbench-eval {tmp_path}: no src/kernelbench/eval.py there "
         f"(pass a ScalingIntelligence/KernelBench checkout)")]


def test_only_modules_that_fail_to_import_are_stubbed():
    missing = "kernelmill_test_no_such_client"
    try:
        stubbed = kernelbench_eval_child.stub_missing(("json", missing))
        assert stubbed == [missing]
        import json

        assert sys.modules["json"] is json and hasattr(json, "dumps")
        from kernelmill_test_no_such_client import completion, load_dotenv

        assert load_dotenv() is False  # kernelbench.utils calls it at import
        with pytest.raises(RuntimeError, match="stub"):
            completion(model="x")
        assert not hasattr(sys.modules[missing], "__path__")  # not a package
    finally:
        sys.modules.pop(missing, None)


@pytest.mark.skipif(not os.environ.get("KERNELBENCH_CHECKOUT"),
                    reason="KERNELBENCH_CHECKOUT (a KernelBench checkout) not set")
def test_real_kernelbench_imports_with_stubs(fake):
    """KernelBench's own package imports in the child (its LLM clients stubbed where missing);
    without CUDA its eval's assertion is the row's error, not a crash."""
    import torch

    _checkout, answer = fake
    rows = kernelbench_eval.run_kernelbench_eval(os.environ["KERNELBENCH_CHECKOUT"],
                                                 [answer("ok")], repeats=1, timeout_s=120)
    if torch.cuda.is_available():
        assert "import kernelbench.eval" not in (rows[0].get("error") or "")
    else:
        assert rows[0]["error"] == "AssertionError: CUDA is not available, cannot run Eval"
