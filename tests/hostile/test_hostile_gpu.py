"""The hostile suite on CUDA (``scripts/gpu_check.sh hostile``): every case of tests/hostile plus
the CUDA fixtures (a ``load_inline`` CUDA kernel, a side-stream launch), graded in one batch on
the GPU; and the policy presets judged by what ran on the device."""
import json
import re
import os
import signal
import subprocess
from pathlib import Path

from conftest import FIXTURES

import pytest
import torch
from kernelmill.core.store import read_jsonl
from kernelmill.grade.batch import grade_file
from kernelmill.grade.policy import Policy
from test_hostile import CANARY, _grade_under, cases, check, references, write_jsonl

pytestmark = pytest.mark.gpu
# KERNELMILL_HOSTILE_TIMING: timing settings (a JSON object) over these, for an A/B of one
GPU_TIMING = {"cap_ms": 200.0, "min_reps": 5, "max_reps": 50, "warmup": 2,
              **json.loads(os.environ.get("KERNELMILL_HOSTILE_TIMING") or "{}")}
CUDA_FIXTURES = ("cuda_scale_add", "cuda_row_sum", "cuda_side_stream", "cuda_ext_cublas_hidden",
                 "cuda_autotune_scale_add", "cuda_graph_in_triton_grid",
                 "cuda_ext_decoy_globals_graph", "cuda_ext_decoy_globals_blas",
                 "cuda_graph_copy_capture_id")


@pytest.fixture(autouse=True)
def _needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


@pytest.mark.parametrize("preset, hybrid_certified",
                         [("strict", False), ("library", True), ("kernelbench", True)])
def test_policy_presets_on_cuda(tmp_path, preset, hybrid_certified):
    verdicts = _grade_under(preset, ["preset_conv_hybrid", "preset_conv_reference_ops"],
                            tmp_path, device="cuda")
    hybrid, reuse = verdicts["preset_conv_hybrid"], verdicts["preset_conv_reference_ops"]
    print(preset, {k: (v["correct"], v["hacks"], v.get("hack_details")) for k, v in
                   verdicts.items()})
    assert (hybrid["correct"] and not hybrid["hacks"]) is hybrid_certified, \
        hybrid.get("hack_details")
    assert not reuse["correct"] and reuse["hacks"], reuse.get("hack_details")


def _on_cuda(text: str) -> str | None:
    found = re.search(r"^# on cuda: (\S+)", text, re.MULTILINE)
    return found.group(1) if found else None


def _cuda_limit(text: str) -> int:
    """A case's own limit on CUDA (``# cuda timeout_s: N``), for one whose honest work is slow
    there; the suite's 60 s otherwise."""
    found = re.search(r"^# cuda timeout_s: (\d+)", text, re.MULTILINE)
    return int(found.group(1)) if found else 60


def test_hostile_suite_on_cuda(tmp_path):
    # A case whose attack uses CPU-only APIs (Tensor.map_, mkldnn/mkl ops) fails in forward on
    # CUDA; it says so with "# on cuda: EXPECTATION" and is held to that there.
    everything = {name: (problem, _on_cuda(text) or expect, text)
                  for name, (problem, expect, text) in cases().items()}
    for name in CUDA_FIXTURES:
        text = (FIXTURES / "submissions" / f"{name}.py").read_text()
        problem = next(line.split()[-1] for line in text.splitlines()
                       if line.startswith("# problem:"))
        expect = next(line.split()[-1] for line in text.splitlines()
                      if line.startswith("# expect:"))
        everything[name] = (problem, expect, text)
    only = os.environ.get("KERNELMILL_HOSTILE_CASES")
    if only:  # a partial run: the named cases (those a run cut short did not reach)
        named = set(re.split(r"[,\s]+", only.strip())) - {""}
        unknown = sorted(named - set(everything))
        assert not unknown, f"KERNELMILL_HOSTILE_CASES names no case {unknown}"
        # (the primers too: a case they prime is not exercised without them)
        everything = {k: v for k, v in everything.items() if k in named or k.endswith("_primer")}
    problems = write_jsonl(tmp_path / "problems.jsonl",
                           [{"id": k, "source": v} for k, v in references().items()])
    primers = {k: v for k, v in everything.items() if k.endswith("_primer")}
    slow = {k: v for k, v in everything.items() if k not in primers and _cuda_limit(v[2]) > 60}
    main = {k: v for k, v in everything.items() if k not in primers and k not in slow}
    # Verdicts go straight to $OUT when the device tool runs this: a run cut short still
    # brings back every verdict written so far.
    folder = Path(os.environ["OUT"]) if os.environ.get("OUT") else tmp_path
    canary = subprocess.Popen(["sleep", "600"], env={**os.environ, CANARY: "1"})
    rows = {}
    try:
        for batch, chosen in (("primers", primers), ("main", main), ("slow", slow)):
            if not chosen:
                continue
            # 60 s per worker: a case that hangs (raw per-byte reads of device memory) costs no
            # more (static_first off: the run-time mechanisms are what this suite exercises)
            limit = max([60] + [_cuda_limit(text) for _p, _e, text in chosen.values()])
            policy = Policy(timeout_s=limit, timing_settings=GPU_TIMING, static_first=False)
            submissions = write_jsonl(tmp_path / f"{batch}.jsonl", [
                {"submission_id": k, "problem_id": p, "source": s}
                for k, (p, _e, s) in chosen.items()])
            out = folder / f"hostile-{batch}-verdicts.jsonl"
            # KERNELMILL_HOSTILE_GROUP=N grades up to N cases of one problem as a group
            # KERNELMILL_HOSTILE_WORKERS=N grades N at once (default 4)
            workers = int(os.environ.get("KERNELMILL_HOSTILE_WORKERS", "4"))
            grade_file(problems, submissions, out, device="cuda", workers=workers, policy=policy,
                       cache_path=tmp_path / "cache.jsonl", extensions_root=str(tmp_path / "ext"),
                       group=int(os.environ.get("KERNELMILL_HOSTILE_GROUP", "1")))
            rows.update({row["submission_id"]: row for row in read_jsonl(out)})
    finally:
        os.kill(canary.pid, signal.SIGKILL)
        canary.wait()
    summary = {k: {f: v.get(f) for f in ("correct", "hacks", "error", "downgrades")}
               for k, v in rows.items()}
    print(json.dumps(summary, indent=1, default=str))
    assert set(rows) == set(everything)
    failures = [f for name, (_p, expect, _s) in everything.items()
                if (f := check(name, expect, rows[name]))]
    if failures:  # the list alone: no traceback (its source is re-parsed, which has failed
        # the whole session with the interpreter's AST recursion check once on a loaded host)
        pytest.fail("\n".join(failures), pytrace=False)


def test_an_autotuned_kernel_is_certified_under_kernelbench(tmp_path):
    """The autotuner's first call benchmarks every config and fills a cache-clearing buffer
    between runs: those fills are not library compute beside the candidate's kernels."""
    from kernelmill.grade.grader import Grader

    grader = Grader("cuda", policy=Policy(preset="kernelbench", timeout_s=150,
                                          timing_settings=GPU_TIMING),
                    cache_root=str(tmp_path))
    answer = (FIXTURES / "submissions" / "cuda_autotune_scale_add.py").read_text()
    verdict = grader.grade(references()["ref_scale_add"], answer)
    print(verdict.get("device_work"))
    assert verdict["correct"] and not verdict["hacks"], verdict.get("hack_details")
    assert verdict["device_work"]["candidate_share"] > 0.5, verdict["device_work"]
