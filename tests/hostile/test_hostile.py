"""The hostile suite of issue 12: every case in tests/hostile graded on CPU, in batches (the whole
suite slow-marked; a fixed fifth of it, by a hash of each name, in the default run).

Each case names its family in its docstring and, in comment lines, its problem and what the
grader must conclude: ``# problem: ref_scale_add`` and ``# expect: certified | not_certified |
incorrect | neutralized | fair_timing | <hack code>`` (``neutralized``: the signal the case keys on no longer
exists, so it behaves honestly; it may be certified only without any hack; ``fair_timing``: no
speedup against a reference whose timing graph failed for want of device memory). No hostile case may be certified; the honest kernels (Triton
elementwise, row reduction, ``tl.dot`` matmul, an elementwise kernel whose answer holds -inf)
must be. Cases named ``*_primer`` are graded first, into the same verdict cache, so that a later
case can try to ride on their cached verdict. On CUDA (``test_hostile_gpu``) a case may expect
otherwise (``# on cuda: EXPECTATION``) and take longer than the suite's 60 s per grade
(``# cuda timeout_s: N``: graded in a batch of its own with that limit).
"""
import glob
import json
import os
import re
import signal
import subprocess
import zlib
from pathlib import Path

import pytest
from conftest import FIXTURES
from kernelmill.core.store import read_jsonl
from kernelmill.grade import static
from kernelmill.grade.batch import grade_file
from kernelmill.grade.grader import needs_extension_build
from kernelmill.grade.policy import Policy
from kernelmill.validate.sandbox import abi_version

HOSTILE = Path(__file__).resolve().parent
# Short timing windows (validate.window.WindowSettings, validate.timer.Timer): the suite is
# about verdicts, not speed.
FAST_TIMING = {"cap_ms": 30.0, "round_ms": 2.0, "warm_ms": 0.0, "min_reps": 3, "max_reps": 6,
               "loop_ms": 5.0, "warmup": 1, "sample_ms": 0.5}
# Problems whose source is another's under a second id (cases that look for shared inputs).
ALIASES = {"ref_scale_add_again": "ref_scale_add"}
CANARY = "KMHOSTILE_CANARY_SECRET"


def cases() -> dict[str, tuple[str, str, str]]:
    """name -> (problem id, expectation, source)."""
    found = {}
    for path in sorted(HOSTILE.glob("*.py")):
        if path.name.startswith(("ref_", "test_")):
            continue
        text = path.read_text()
        family = re.search(r'^"""family: (.+)', text, re.MULTILINE)
        assert family, f"{path.name} names no family"
        problem = re.search(r"^# problem: (\S+)", text, re.MULTILINE).group(1)
        expect = re.search(r"^# expect: (\S+)", text, re.MULTILINE).group(1)
        # a case Landlock stops, on a kernel without it: what is caught there (its header
        # says why)
        bare = re.search(r"^# without landlock: (\S+)", text, re.MULTILINE)
        if bare and abi_version() <= 0:
            expect = bare.group(1)
        found[path.stem] = (problem, expect, text)
    return found


def references() -> dict[str, str]:
    sources = {p.stem: p.read_text() for folder in (FIXTURES / "honest", FIXTURES / "submissions",
                                                    HOSTILE)
               for p in sorted(folder.glob("ref_*.py"))}
    return {**sources, **{alias: sources[real] for alias, real in ALIASES.items()}}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def check(name: str, expect: str, verdict: dict) -> str | None:
    """What is wrong with this verdict for this case, or None."""
    summary = {k: verdict.get(k) for k in ("correct", "hacks", "error", "reward")}
    certified = bool(verdict["correct"]) and not verdict["hacks"]
    if expect == "certified":
        return None if certified and verdict["reward"] >= 1.5 else f"{name}: not certified {summary}"
    if expect == "fair_timing":
        # no speedup against a reference whose timing graph failed for want of device memory
        # while the candidate's was captured (``checks/timing.reference_starved``)
        from kernelmill.grade.retry import device_short

        timing = verdict.get("timing") or {}
        starved = device_short(timing.get("reference_capture_error")) and \
            str(timing.get("method")).endswith("cuda_graph")
        return None if verdict["hacks"] or not (starved and verdict.get("speedup_vs_eager")) \
            else f"{name}: a speedup against a starved reference {summary} {timing}"
    if expect == "neutralized":
        # The signal this case keys on is gone (every call is instrumented and seeded alike),
        # so its cheat branch never runs: it may pass, but only as the honest kernel it became.
        same = not verdict["hacks"] and all(c["passed"] for c in verdict["checks"].values())
        return None if same or not verdict["correct"] else f"{name}: {summary}"
    if certified or verdict["correct"]:
        return f"{name}: CERTIFIED {summary}"
    if expect not in ("not_certified", "incorrect") and \
            not set(expect.split("|")) & set(verdict["hacks"]):  # ``a|b``: one of these codes
        return f"{name}: expected hack {expect}, got {summary} {verdict.get('hack_details')}"
    return None


def _clean_shm() -> None:
    for path in glob.glob("/dev/shm/kmhostile-*"):
        os.remove(path)


def _cpu_limit(text: str) -> int:
    """A case's own worker limit on a CPU (``# cpu timeout_s: N``); the suite's 80 s otherwise."""
    found = re.search(r"^# cpu timeout_s: (\d+)", text, re.MULTILINE)
    return int(found.group(1)) if found else 80


@pytest.mark.slow
def test_hostile_suite_on_cpu(tmp_path):
    _grade_suite(tmp_path, cases())


# One case in this many (by a stable hash of its name), never an extension build nor a primer:
# the suite's sample that the default test run grades (73 s of 2 cores against the whole
# suite's 257-283 s). The whole suite is slow-marked: ``pytest -m slow``, and on CUDA.
SAMPLE_ONE_IN = 5


def test_a_sample_of_the_hostile_suite_on_cpu(tmp_path):
    chosen = {k: v for k, v in cases().items()
              if zlib.crc32(k.encode()) % SAMPLE_ONE_IN == 0 and not k.endswith("_primer")
              and not needs_extension_build(v[2])}
    assert any(v[1] == "certified" for v in chosen.values())  # honest kernels among them
    assert sum(v[1] != "certified" for v in chosen.values()) >= 20, sorted(chosen)
    _grade_suite(tmp_path, chosen)


def _grade_suite(tmp_path: Path, everything: dict) -> None:
    """Grade ``everything`` (name -> case) as the suite does and fail on any verdict not as
    the case expects."""
    _clean_shm()
    problems = write_jsonl(tmp_path / "problems.jsonl",
                           [{"id": k, "source": v} for k, v in references().items()])
    primers = {k: v for k, v in everything.items() if k.endswith("_primer")}
    # a case that is slow on its own (a host loop over every element) says how long it may
    # take on a CPU (``# cpu timeout_s: N``): timed out there, it is not certified all the same
    short = {k: v for k, v in everything.items() if k not in primers and _cpu_limit(v[2]) < 80}
    # The policy presets' two cases are graded under every preset by test_policy_presets_on_cpu
    # (the default preset among them). A case that builds a C++ extension (30-70 s of a CPU
    # each, most of the suite's time) and that the static scan already rejects is decided by the
    # scan here; the CUDA suite (test_hostile_gpu) still builds and runs every one of them.
    everything = {k: v for k, v in everything.items() if not k.startswith("preset_")}
    # A case whose extension build is long and whose mechanism has a CPU test of its own says
    # so (``# cpu: cuda suite only``): the CUDA suite builds and runs it.
    everything = {k: v for k, v in everything.items()
                  if not re.search(r"^# cpu: cuda suite only", v[2], re.MULTILINE)}
    # (decided: a finding other than a vendor call's, which the policy weighs at run time; a
    # case with vendor findings alone is built and run, in the main batch beside the others)
    scanned = {k: v for k, v in everything.items()
               if k not in primers and k not in short and needs_extension_build(v[2])
               and any(static.VENDOR_PREFIX not in f for f in static.scan(v[2]))}
    # the extension builds (30-80 s each) first: none is left to run alone at the end
    main = dict(sorted(((k, v) for k, v in everything.items()
                        if k not in primers and k not in short and k not in scanned),
                       key=lambda item: not needs_extension_build(item[1][2])))
    cache = tmp_path / "cache.jsonl"
    # The suite exercises the run-time mechanisms too: a source the scan flags is run anyway
    # (test_mechanisms checks the static verdict that spares it the run by default).
    # 80 s per worker: an honest case grades in 7-8 s alone on a 2-core host; the four cases
    # that hang on their own (a blocked import, a FIFO daemon, slowed clocks, per-element host
    # reads) cost no more
    # A process of this user holding a secret in its environment, as the grader's would.
    canary = subprocess.Popen(["sleep", "600"], env={**os.environ, CANARY: "1"})
    rows = {}
    try:
        for batch, chosen in (("short", short), ("scanned", scanned), ("primers", primers),
                              ("main", main)):
            if not chosen:
                continue
            limit = max(_cpu_limit(text) for _p, _e, text in chosen.values())
            policy = Policy(timeout_s=limit, timing_settings=FAST_TIMING,
                            static_first=batch == "scanned")
            submissions = write_jsonl(tmp_path / f"{batch}.jsonl", [
                {"submission_id": k, "problem_id": p, "source": s}
                for k, (p, _e, s) in chosen.items()])
            out = tmp_path / f"{batch}-verdicts.jsonl"
            # KERNELMILL_HOSTILE_GROUP=N grades up to N cases of one problem as a group
            grade_file(problems, submissions, out, device="cpu", workers=2, policy=policy,
                       cache_path=cache, extensions_root=str(tmp_path / "ext"),
                       group=int(os.environ.get("KERNELMILL_HOSTILE_GROUP", "1")))
            rows.update({row["submission_id"]: row for row in read_jsonl(out)})
    finally:
        os.kill(canary.pid, signal.SIGKILL)
        canary.wait()
        leftovers = glob.glob("/dev/shm/kmhostile-*")
        _clean_shm()
    (tmp_path / "summary.json").write_text(json.dumps(rows, default=str, indent=1))
    assert set(rows) == set(everything)
    failures = [f for name, (_p, expect, _s) in everything.items()
                if (f := check(name, expect, rows[name]))]
    if failures:  # the list alone: no traceback (its source is re-parsed, which has failed
        # the whole session with the interpreter's AST recursion check once on a loaded host)
        pytest.fail("\n".join(failures), pytrace=False)
    assert not leftovers, f"files left outside the run's folder: {leftovers}"


def _grade_under(preset: str, names: list[str], tmp_path: Path, device: str = "cpu",
                 cache_root: Path | None = None) -> dict:
    from kernelmill.grade.grader import Grader

    grader = Grader(device, policy=Policy(preset=preset, timeout_s=150,
                                          timing_settings=FAST_TIMING),
                    cache_root=str(cache_root or tmp_path / preset))
    found, sources = cases(), references()
    return {name: grader.grade(sources[found[name][0]], found[name][2]) for name in names}


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    """One grader cache for the presets' grades: the reference's runs do not depend on it."""
    return tmp_path_factory.mktemp("preset-cache")


@pytest.mark.slow
@pytest.mark.parametrize("preset, hybrid_certified", [("strict", False), ("library", True),
                                                      ("kernelbench", True)])
def test_policy_presets_on_cpu(tmp_path, shared_cache, preset, hybrid_certified):
    """Convolution left to the library with bias, ReLU and residual add fused in Triton:
    certified under ``library`` and ``kernelbench``, rejected under ``strict``; the reference's own ops beside a copy kernel:
    rejected under all three (under kernelbench because PyTorch ran every computing op of the
    reference, whatever share of the time the copy takes)."""
    verdicts = _grade_under(preset, ["preset_conv_hybrid", "preset_conv_reference_ops"],
                            tmp_path, cache_root=shared_cache)
    hybrid, reuse = verdicts["preset_conv_hybrid"], verdicts["preset_conv_reference_ops"]
    certified = hybrid["correct"] and not hybrid["hacks"]
    assert certified is hybrid_certified, (hybrid["hacks"], hybrid.get("hack_details"))
    if not hybrid_certified:
        assert "torch_compute" in hybrid["hacks"]
    assert not reuse["correct"] and "torch_compute" in reuse["hacks"], reuse.get("hack_details")
