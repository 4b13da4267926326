"""Grading throughput: submissions per minute, cold, with references cached, and cache hits.

    python benchmarks/grade_throughput.py [--device cuda] [--workers N]
                                          [--sets triton mix kernelbench] [--kernelbench PATH]
                                          [--phases cold refs-cached cache-hits] [--json OUT]
                                          [--kernelbench-eval CHECKOUT]
                                          [--kernelbench-eval-repeats N]
                                          [--window KEY=VALUE ...] [--match REGEX]

Sets: ``triton`` is the fidelity set (12 honest Triton answers at varied sizes, several under
0.1 ms); ``kernelbench`` is benchmarks/kernelbench_set (our honest Triton and CUDA answers to
KernelBench level 1-3 problems, graded at KernelBench's own sizes against the problem files read
from ``--kernelbench``; on ``--device cpu`` the sizes are shrunk and the CUDA answers left out);
``mix`` mixes Triton kernels (block-size / warp-count variants of two problems), CUDA
``load_inline`` kernels (built by the CPU compile pool while GPUs grade Triton) and the hostile
fixtures of tests/fixtures/submissions (minus the hang). Phases: ``cold`` (empty caches, in a
fresh ``KERNELMILL_CACHE_DIR``), ``refs-cached`` (every submission graded again; the references'
Inductor timings come from disk), ``cache-hits`` (the verdict cache answers). Each row also
gives the median seconds a submission spent in its reference run and in its candidate run.
``--kernelbench-eval`` also runs KernelBench's own eval (``eval_kernel_against_ref``, from a
ScalingIntelligence/KernelBench checkout) on the kernelbench set's answers after the phases,
each ``--kernelbench-eval-repeats`` times, and prints both tools side by side
(benchmarks/kernelbench_eval.py). ``--window settle_ms=20`` sets a timing setting of the
grading policy (an A/B of the window's knobs); the cached Inductor timings still apply for the
window's own settings and ``cover``, not for the other timer settings (``sample_ms``, ...).
"""
from __future__ import annotations

import argparse
import itertools
import json
import re
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = ROOT / "tests" / "fixtures" / "submissions"
KERNELBENCH_SET = ROOT / "benchmarks" / "kernelbench_set"

TRITON_SCALE_ADD = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        scale_add_kernel[(triton.cdiv(n, {block}),)](x, y, out, n, BLOCK={block},
                                                     num_warps={warps})
        return out
'''

TRITON_ROW_SUM = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    values = tl.load(x_ptr + row * stride + offsets, mask=offsets < cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(values, axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty(rows, device=x.device, dtype=x.dtype)
        row_sum_kernel[(rows,)](x, out, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols),
                                num_warps={warps})
        return out
'''


def build_inputs(folder: Path) -> tuple[Path, Path, int]:
    problems = []
    for path in sorted(SUBMISSIONS.glob("ref_*.py")):
        problems.append({"id": path.stem, "source": path.read_text()})
    big_add = (SUBMISSIONS / "ref_scale_add.py").read_text().replace("N = 4096", "N = 1 << 24")
    big_sum = (SUBMISSIONS / "ref_row_sum.py").read_text().replace(
        "ROWS = 64", "ROWS = 16384").replace("COLS = 96", "COLS = 1024")
    problems += [{"id": "scale_add_large", "source": big_add},
                 {"id": "row_sum_large", "source": big_sum}]
    rows = []
    for block in (256, 512, 1024, 2048, 4096):
        for warps in (2, 4, 8):
            rows.append({"submission_id": f"triton_add_b{block}_w{warps}",
                         "problem_id": "scale_add_large",
                         "source": TRITON_SCALE_ADD.format(block=block, warps=warps)})
    for warps in (1, 2, 4, 8):
        rows.append({"submission_id": f"triton_rowsum_w{warps}", "problem_id": "row_sum_large",
                     "source": TRITON_ROW_SUM.format(warps=warps)})
    cuda = (SUBMISSIONS / "cuda_scale_add.py").read_text()
    for threads in (128, 256, 512, 1024):
        source = cuda.replace('replace("BLOCK_THREADS", "256")',
                              f'replace("BLOCK_THREADS", "{threads}")').replace(
            "km_scale_add_256", f"km_scale_add_{threads}")
        rows.append({"submission_id": f"cuda_add_t{threads}", "problem_id": "scale_add_large",
                     "source": source})
    for path in sorted(SUBMISSIONS.glob("*.py")):
        if path.name.startswith(("ref_", "cuda_")) or path.stem == "crash_hang":
            continue
        text = path.read_text()
        problem = re.search(r"^# problem: (\S+)", text, re.MULTILINE).group(1)
        rows.append({"submission_id": path.stem, "problem_id": problem, "source": text})
    p_path, s_path = folder / "problems.jsonl", folder / "submissions.jsonl"
    p_path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    s_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p_path, s_path, len(rows)


def build_triton_set(folder: Path, device: str, copies: int = 1) -> tuple[Path, Path, int]:
    """The fidelity set (12 honest Triton answers at varied sizes, several under 0.1 ms),
    ``copies`` times over (each copy a submission of its own, as in a GRPO group)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from grade_fidelity import CPU_SIZES, SET, problem_source

    problems, rows = [], []
    for name, answer, sizes in SET:
        sizes = CPU_SIZES.get(name, sizes) if device == "cpu" else sizes
        problems.append({"id": name, "source": problem_source(answer, sizes)})
        rows += [{"submission_id": f"{name}#{copy}" if copy else name, "problem_id": name,
                  "source": answer.read_text()} for copy in range(copies)]
    p_path, s_path = folder / "triton_problems.jsonl", folder / "triton_submissions.jsonl"
    p_path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    s_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p_path, s_path, len(rows)


def find_kernelbench(path: str | None = None) -> Path:
    """The KernelBench problems folder (level1/, level2/, ...): ``path``, else
    ../shared/benchmarks/kernelbench beside the checkout, else shared/benchmarks/kernelbench
    inside it."""
    candidates = [Path(path)] if path else [ROOT.parent / "shared" / "benchmarks" / "kernelbench",
                                            ROOT / "shared" / "benchmarks" / "kernelbench"]
    for candidate in candidates:
        if (candidate / "level1").is_dir():
            return candidate
    raise SystemExit(f"no KernelBench problems folder (level1/, ...) at "
                     f"{' or '.join(map(str, candidates))}: pass --kernelbench PATH")


def kernelbench_answers(kernelbench: Path) -> list[tuple[Path, Path]]:
    """(answer, problem file) for every answer in benchmarks/kernelbench_set, from its
    ``# problem: levelN/FILE.py`` line; an answer naming a missing problem is an error."""
    pairs = []
    for answer in sorted(KERNELBENCH_SET.glob("level*_*.py")):
        named = re.search(r"^# problem: (\S+)", answer.read_text(), re.MULTILINE)
        if not named or not (kernelbench / named.group(1)).is_file():
            raise SystemExit(f"{answer}: its '# problem:' line names no file under {kernelbench}")
        pairs.append((answer, kernelbench / named.group(1)))
    return pairs


def validated_records(paths: list[str] | None) -> dict[str, dict]:
    """Validated records (``kernelmill validate`` or ``kernelbench_audit.py --out``) by the
    SHA-256 of their source: a problem graded with one is judged at its calibrated tolerance, as
    a published dataset's problems are (without one, the dtype's default: fp32's 1e-4)."""
    import hashlib

    found: dict[str, dict] = {}
    for path in paths or ():
        if not Path(path).exists():
            raise SystemExit(f"--records {path}: no such file")
        for line in read_lines(Path(path)):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a truncated line (a run cut short): left out
                continue
            if isinstance(record, dict) and record.get("source") and record.get("validation"):
                found[hashlib.sha256(record["source"].encode()).hexdigest()] = record
    return found


def build_kernelbench_set(folder: Path, kernelbench: Path, device: str,
                          copies: int = 1, records: dict | None = None) -> tuple[Path, Path, int]:
    """The KernelBench set: each answer graded against its problem file, ``copies`` times over,
    with the problem's validation where ``records`` (``validated_records``) hold it. On CPU the
    problems' sizes are shrunk (check_cpu.shrink) and the CUDA answers left out."""
    import hashlib

    shrink = None
    if device == "cpu":
        sys.path.insert(0, str(KERNELBENCH_SET))
        from check_cpu import OVERRIDES, shrink
    problems, rows = [], []
    for answer, problem in kernelbench_answers(kernelbench):
        text = answer.read_text()
        if shrink and "load_inline" in text:
            continue
        source = problem.read_text()
        record = (records or {}).get(hashlib.sha256(source.encode()).hexdigest())
        problems.append({"id": answer.stem, "source": shrink(source, OVERRIDES.get(
            f"{problem.parent.name}/{problem.name}")) if shrink else source,
            **({"validation": record["validation"]} if record and not shrink else {})})
        rows += [{"submission_id": f"{answer.stem}#{copy}" if copy else answer.stem,
                  "problem_id": answer.stem, "source": text} for copy in range(copies)]
    p_path, s_path = folder / "kb_problems.jsonl", folder / "kb_submissions.jsonl"
    p_path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    s_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p_path, s_path, len(rows)


def summarize(out: Path) -> dict:
    counts: Counter = Counter()
    reference_s, candidate_s, warm = [], [], 0
    waits: dict[str, list[float]] = {"shared_wait_ms": [], "exclusive_wait_ms": [],
                                     "exclusive_queue_ms": [], "exclusive_drain_ms": [],
                                     "window_ms": [], "exclusive_held_ms": [],
                                     "exclusive_setup_ms": []}
    aside: list[float] = []  # each grade's seconds with its workers stopped for other windows
    stages: dict[str, list[float]] = {}
    ref_stages: dict[str, list[float]] = {}
    stage_cpu: dict[str, list[float]] = {}  # the candidate worker's CPU seconds by stage
    ref_stage_cpu: dict[str, list[float]] = {}
    phases: dict[str, list[float]] = {}
    turn: dict[str, list[float]] = {}
    rounds: list[float] = []
    admission: list[float] = []
    windows: set = set()
    warm_by: Counter = Counter()  # windows by their first participant's warm-up
    sm_share: list[float] = []  # NVML's SM clock at a window's start, of its highest
    for line in out.read_text().splitlines():
        row = json.loads(line)
        counts["correct" if row["correct"] else "hacked" if row["hacks"] else
               "error" if row.get("error") else "incorrect"] += 1
        profile = row.get("profile") or {}
        for stage, seconds in (profile.get("stages_s") or {}).items():
            stages.setdefault(stage, []).append(seconds)
        for stage, seconds in (profile.get("reference_stages_s") or {}).items():
            ref_stages.setdefault(stage, []).append(seconds)
        for key, into in (("stages_cpu_s", stage_cpu), ("reference_stages_cpu_s", ref_stage_cpu)):
            for stage, seconds in (profile.get(key) or {}).items():
                into.setdefault(stage, []).append(seconds)
        if profile.get("admission_wait_s") is not None:
            admission.append(profile["admission_wait_s"])
        if isinstance((profile.get("stepped_aside") or {}).get("s"), (int, float)):
            aside.append(profile["stepped_aside"]["s"])
        if "reference_s" in profile:
            reference_s.append(profile["reference_s"])
            candidate_s.append(profile["candidate_s"])
            warm += bool(profile.get("warm"))
        window = tuple(profile.get(k) for k in ("window_ms", "exclusive_wait_ms"))
        if window in windows:  # a group's members share one window: count it once
            continue
        windows.add(window)
        for phase, ms in (profile.get("phases_ms") or {}).items():
            phases.setdefault(phase, []).append(ms)
        timing = row.get("timing") or {}
        if profile.get("phases_ms"):  # how its first participant warmed (``window_rounds``)
            warm_by[("hot" if timing.get("clocks_hot_s") is not None else "clocks up"
                     if timing.get("clocks_up") else "full")] += 1
        clocks = profile.get("clocks") or {}
        if isinstance(clocks.get("sm_mhz"), int) and clocks.get("max_sm_mhz"):
            sm_share.append(clocks["sm_mhz"] / clocks["max_sm_mhz"])
        for part, ms in (profile.get("turn_ms") or {}).items():
            turn.setdefault(part, []).append(ms)
        if profile.get("rounds") is not None:
            rounds.append(profile["rounds"])
        for key, values in waits.items():
            if profile.get(key) is not None:
                values.append(profile[key])
    median = lambda v: round(statistics.median(v), 2) if v else None
    speedups: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        for worker, seconds in ((row.get("profile") or {}).get("cpu_s") or {}).items():
            if isinstance(seconds, (int, float)):
                cpu.setdefault(worker, []).append(seconds)
        if row.get("speedup_vs_eager"):
            speedups.setdefault(row["submission_id"].split("#")[0], []).append(
                row["speedup_vs_eager"])
    return {**counts,
            # each answer's median speedup over its copies: what 8 slots report against 1
            "median_speedup": {k: round(statistics.median(v), 4) for k, v in speedups.items()},
            # CPU seconds per submission, by worker (its share of a shared one), medians
            "worker_cpu_s": {k: median(v) for k, v in cpu.items()},
            "reference_s": median(reference_s), "candidate_s": median(candidate_s),
            "warm": f"{warm}/{len(reference_s)}",
            **{f"median_{k}": median(v) for k, v in waits.items()},
            "window_s_total": round(sum(waits["window_ms"]) / 1e3, 1),
            # the GPU held alone: each window's whole exclusive hold where known
            "held_s_total": round(sum(waits["exclusive_held_ms"]) / 1e3, 1),
            "median_stepped_aside_s": median(aside),
            "windows": len(waits["window_ms"]),
            "candidate_stages_s": {k: median(v) for k, v in stages.items()},
            "reference_stages_s": {k: median(v) for k, v in ref_stages.items()},
            "candidate_stages_cpu_s": {k: median(v) for k, v in stage_cpu.items()},
            "reference_stages_cpu_s": {k: median(v) for k, v in ref_stage_cpu.items()},
            "window_phases_ms": {k: median(v) for k, v in phases.items()},
            # windows that captured a member's graph again (``window_rounds``: its phase
            # ``resize``, the median above over those alone)
            "windows_resized": len(phases.get("resize") or []),
            "turn_ms": {k: median(v) for k, v in turn.items()},
            "median_rounds": median(rounds),
            "warm_by": dict(warm_by),
            "sm_clock_share": [round(min(sm_share), 3), round(max(sm_share), 3)]
            if sm_share else None,
            "median_admission_wait_s": median(admission)}


def build_set(name: str, folder: Path, args: argparse.Namespace) -> tuple[Path, Path, int]:
    """The problems and submissions files of the set ``name`` (only the problems whose id
    ``--match`` finds, where given), and the submissions' count."""
    if name == "triton":
        made = build_triton_set(folder, args.device, args.copies)
    elif name == "kernelbench":
        records = validated_records(args.records)
        made = build_kernelbench_set(folder, find_kernelbench(args.kernelbench), args.device,
                                     args.copies, records)
        if args.records:
            report_validation(made[0])
    else:
        made = build_inputs(folder)
    return only_matching(made, getattr(args, "match", None))


def only_matching(made: tuple[Path, Path, int], pattern: str | None) -> tuple[Path, Path, int]:
    """The set cut to the problems whose id ``pattern`` (a regular expression) finds, and their
    submissions: the same submissions graded to the end in each of two runs compare their CPU
    and time per submission, where runs cut by ``--deadline`` grade different mixes."""
    if not pattern:
        return made
    import re

    problems_path, subs_path, _count = made
    problems = [p for p in map(json.loads, read_lines(problems_path))
                if re.search(pattern, p["id"])]
    kept = {p["id"] for p in problems}
    subs = [r for r in map(json.loads, read_lines(subs_path)) if r["problem_id"] in kept]
    problems_path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    subs_path.write_text("".join(json.dumps(r) + "\n" for r in subs))
    return problems_path, subs_path, len(subs)


def report_validation(problems: Path) -> None:
    """How many of the set's problems carry a validation, and those the validator rejected
    (an honest answer's verdict there says little: the problem is defective)."""
    rows = [json.loads(line) for line in read_lines(problems)]
    validated = [r for r in rows if r.get("validation")]

    def failed(validation: dict) -> str:
        checks = validation.get("checks") or {}
        return ", ".join(sorted(k for k, c in checks.items()
                                if isinstance(c, dict) and c.get("passed") is False)) or "failed"

    rejected = [f"{r['id']} ({failed(r['validation'])})" for r in validated
                if r["validation"].get("passed") is False]
    print(f"{len(validated)} of {len(rows)} problems graded at their validated tolerance; "
          f"rejected by the validator: {', '.join(rejected) or 'none'}", flush=True)


PHASES = (  # (name, verdict cache, what it shows)
    ("cold", False, "empty caches: Inductor compiled and timed per problem"),
    ("refs-cached", False, "reference Inductor timings on disk; every submission graded"),
    ("cache-hits", True, "the same submissions again: every verdict from the verdict cache"),
)


def _first_line_watch(out: Path, start: float) -> dict:
    """Note (``{"s": seconds after start}``) when ``out`` gets its first verdict: a run's
    rate after it leaves the grading process's start-up out (what a long-lived grader sees);
    and when each later one came (``arrivals``, for ``_middle_rate``)."""
    import threading

    seen: dict = {"arrivals": []}  # (seconds after start, verdicts written by then)

    def watch() -> None:
        size = 0
        while "stop" not in seen:
            if out.exists() and out.stat().st_size != size:
                # counted on a change only, as bytes: no parse in the grading process's time
                data = out.read_bytes()
                size, lines = len(data), data.count(b"\n")
                if lines and "s" not in seen:
                    seen["s"] = time.monotonic() - start
                    # a group's members end together: all of them are the start-up's
                    seen["lines"] = lines
                if lines and (not seen["arrivals"] or seen["arrivals"][-1][1] != lines):
                    seen["arrivals"].append((time.monotonic() - start, lines))
            time.sleep(0.25)

    threading.Thread(target=watch, daemon=True).start()
    return seen


class _InterpreterLag:
    """How late a thread of the grading process wakes from a 5 ms sleep while the phase runs:
    the wait for the interpreter lock and the host's cores that every thread of this process
    (the windows' turns, the result readers, the judging) pays the same way."""

    NAP_S = 0.005

    def __init__(self) -> None:
        import threading

        self.late_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.perf_counter()
            time.sleep(self.NAP_S)
            self.late_ms.append((time.perf_counter() - began - self.NAP_S) * 1e3)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(timeout=1)
        late = sorted(self.late_ms)
        if not late:
            return {}

        def at(q: float) -> float:
            return round(late[min(len(late) - 1, int(q * len(late)))], 2)

        naps = len(late) * self.NAP_S * 1e3
        return {"interpreter_lag_ms": {"p50": at(0.5), "p99": at(0.99), "max": round(late[-1], 1),
                                       "share": round(sum(late) / (naps + sum(late)), 3)}}


def _after_first(first: dict, done: int, seconds: float) -> dict:
    first["stop"] = True
    at, counted = first.get("s"), first.get("lines") or 1
    if at is None or done <= counted or seconds <= at:
        return {}
    return {"first_verdict_s": round(at, 1),
            "per_minute_after_first": round((done - counted) / (seconds - at) * 60, 1),
            **_middle_rate(first.get("arrivals") or [], done)}


def _middle_rate(arrivals: list[tuple[float, int]], done: int) -> dict:
    """Verdicts per minute between the times a quarter and three quarters of them were in: the
    steady rate, which neither the start-up nor a cut's last grades (long ones, or a mix of
    problems the cut happened to leave) move. Polled every 0.25 s."""
    if done < 8 or len(arrivals) < 3:
        return {}
    first = next(((t, n) for t, n in arrivals if n >= done / 4), None)
    last = next(((t, n) for t, n in arrivals if n >= 3 * done / 4), None)
    if first is None or last is None or last[0] <= first[0]:
        return {}
    return {"per_minute_middle": round((last[1] - first[1]) / (last[0] - first[0]) * 60, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--processes", type=int, help="grading processes the slots are shared "
                        "among (grade_file's processes; default one)")
    parser.add_argument("--backend", choices=("local", "ray"), default="local",
                        help="ray: one host actor per GPU, each grading its share")
    parser.add_argument("--sets", nargs="*", default=["triton", "mix"],
                        help="triton: 12 honest Triton answers; kernelbench: answers to "
                             "KernelBench problems at their sizes; mix: Triton, CUDA and hostile")
    parser.add_argument("--kernelbench", help="KernelBench problems folder for --sets kernelbench "
                                              "(default: ../shared/benchmarks/kernelbench beside "
                                              "the checkout, or shared/benchmarks/kernelbench)")
    parser.add_argument("--phases", nargs="*", default=[p[0] for p in PHASES])
    parser.add_argument("--json", help="write the numbers here too")
    parser.add_argument("--cache-dir", help="reference timing cache to use (default: a new one)")
    parser.add_argument("--deadline", type=float,
                        help="stop after this many seconds and report what finished")
    parser.add_argument("--records", nargs="*", metavar="JSONL",
                        help="validated records (kernelmill validate, kernelbench_audit --out): "
                             "the kernelbench set's problems graded at their calibrated tolerance")
    parser.add_argument("--primed", action="store_true",
                        help="--cache-dir already holds every problem's reference timing: "
                             "refs-cached starts without a priming pass")
    parser.add_argument("--match", metavar="REGEX",
                        help="only the set's problems whose id this finds (and their answers)")
    parser.add_argument("--copies", type=int, default=1,
                        help="grade each triton or kernelbench answer this many times per phase")
    parser.add_argument("--group", type=int,
                        help="submissions of one problem graded together, in one window "
                             "(default 1)")
    parser.add_argument("--kernelbench-eval", metavar="CHECKOUT",
                        help="a KernelBench checkout: after the phases, run its own eval on the "
                             "kernelbench set's answers and print both tools side by side")
    parser.add_argument("--kernelbench-eval-repeats", type=int, default=3,
                        help="KernelBench evaluations of each answer, for its speedup spread")
    parser.add_argument("--window", action="append", default=[], metavar="KEY=VALUE",
                        help="a timing setting of the grading policy (Policy.timing_settings: "
                             "the window's, validate.window.WindowSettings, or the timer's), "
                             "e.g. settle_ms=20; repeatable")
    parser.add_argument("--policy", action="append", default=[], metavar="KEY=VALUE",
                        help="a field of the grading policy (grade.policy.Policy), e.g. "
                             "unseen_trials=2; repeatable")
    parser.add_argument("--keep-verdicts", metavar="DIR",
                        help="copy each phase's verdicts (gzipped JSONL) into this folder")
    args = parser.parse_args()
    check_kernelbench_eval(args)
    def settings(option: str, items: list[str]) -> dict:
        found = {}
        for item in items:
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                parser.error(f"--{option} {item}: expected KEY=VALUE")
            try:
                found[key.strip()] = json.loads(value)
            except json.JSONDecodeError:  # a bare word: that string
                found[key.strip()] = value
        return found

    timing_settings = settings("window", args.window)
    policy_fields = settings("policy", args.policy)

    import os

    folder = Path(tempfile.mkdtemp(prefix="kernelmill-grade-bench-"))
    # cold means cold; --cache-dir shares reference timings between runs of this script
    os.environ["KERNELMILL_CACHE_DIR"] = args.cache_dir or str(folder / "cache")
    from kernelmill.grade.batch import grade_file
    from kernelmill.grade.policy import Policy

    known = set(Policy.__dataclass_fields__) - {"timing_settings"}
    if set(policy_fields) - known:
        parser.error(f"--policy: no such field {sorted(set(policy_fields) - known)}")
    policy = Policy(**{"timeout_s": 180, **policy_fields}, timing_settings=timing_settings)
    if timing_settings:
        print(f"timing settings: {json.dumps(timing_settings, sort_keys=True)}", flush=True)
    if policy_fields:
        print(f"policy: {json.dumps(policy_fields, sort_keys=True)}", flush=True)
    results = {}
    stopped = False
    # a time limit's SIGTERM stops the phase under way; what it finished is still reported
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGALRM, _deadline)
    if args.deadline:
        signal.setitimer(signal.ITIMER_REAL, args.deadline)
    for name in args.sets:
        if stopped:
            break
        problems, submissions, n = build_set(name, folder, args)
        if not n:  # --match left none of this set (or the device none: CUDA answers on CPU)
            print(f"{name}: no submissions to grade here", flush=True)
            continue
        cache = folder / f"{name}-verdicts.jsonl"
        if "refs-cached" in args.phases and "cold" not in args.phases and not args.primed:
            # refs-cached means every problem's Inductor timing is on disk: put it there first
            # (one submission per problem, untimed)
            firsts = {json.loads(line)["problem_id"]: line
                      for line in submissions.read_text().splitlines()}
            primer = folder / f"{name}-primer.jsonl"
            primer.write_text("".join(line + "\n" for line in firsts.values()))
            try:
                grade_file(problems, primer, folder / f"{name}-primed.jsonl",
                           device=args.device, workers=args.workers, backend=args.backend,
                           policy=policy,
                           extensions_root=str(folder / "extensions"))
            except KeyboardInterrupt:
                print(f"{name}: stopped while priming the references' cache", flush=True)
                break
        for phase, use_cache, _why in PHASES:
            if phase not in args.phases:
                continue
            out = folder / f"{name}-{phase}.jsonl"
            start, parent_cpu = time.monotonic(), _own_cpu_s()
            first = _first_line_watch(out, start)
            lag = _InterpreterLag()
            try:
                stats = grade_file(problems, submissions, out, device=args.device,
                                   workers=args.workers, backend=args.backend, policy=policy,
                                   cache_path=cache if use_cache else None,
                                   extensions_root=str(folder / "extensions"), group=args.group,
                                   processes=args.processes)
            except KeyboardInterrupt:  # stopped (SIGTERM: a time limit): report what finished
                done = len(read_lines(out))
                print(f"{name} {phase}: stopped after {time.monotonic() - start:.0f} s with "
                      f"{done} of {n} graded; the tables below count those", flush=True)
                seconds = time.monotonic() - start
                results[f"{name} {phase} (cut)"] = {
                    "submissions": done, "seconds": round(seconds, 1),
                    "parent_cpu_s": round((_own_cpu_s() - parent_cpu) / max(done, 1), 3),
                    "per_minute": round(done / seconds * 60, 1), "cached": 0,
                    **_after_first(first, done, seconds), **lag.stop(), **summarize(out)}
                keep_verdicts(out, args.keep_verdicts)
                if done:
                    report_uncertified(out)  # names any honest answer that was not certified
                    report_spread(out)
                    report_per_problem(out)
                    report_slowest_and_median(out)
                    report_in_flight(out, n, args.group)
                stopped = True
                break
            keep_verdicts(out, args.keep_verdicts)
            report_uncertified(out)  # names any honest answer that was not certified
            report_spread(out)
            report_per_problem(out)
            report_slowest_and_median(out)
            report_in_flight(out, n, args.group)
            if phase == "cache-hits":  # the first pass filled the cache; time the hits
                out2 = folder / f"{name}-{phase}-2.jsonl"
                lag.stop()
                lag = _InterpreterLag()  # the pass it reports: the cache hits'
                start, parent_cpu = time.monotonic(), _own_cpu_s()
                stats = grade_file(problems, submissions, out2, device=args.device,
                                   workers=args.workers, backend=args.backend, policy=policy,
                                   cache_path=cache,
                                   extensions_root=str(folder / "extensions"), group=args.group,
                                   processes=args.processes)
                out = out2
            seconds = time.monotonic() - start
            results[f"{name} {phase}"] = {
                "submissions": n, "seconds": round(seconds, 1),
                # (with --processes, the grading processes' CPU too)
                "parent_cpu_s": round((_own_cpu_s() - parent_cpu + stats.counts.get(
                    "cpu_ms: grading processes", 0) / 1e3) / max(n, 1), 3),
                "per_minute": round(n / seconds * 60, 1), **lag.stop(),
                **({} if phase == "cache-hits" else _after_first(first, n, seconds)),
                "cached": stats.counts.get("cached", 0), **summarize(out)}
    header = (f"{'set / phase':22} {'subs':>5} {'seconds':>8} {'subs/min':>9} {'cached':>7} "
              f"{'correct':>8} {'hacked':>7} {'error':>6} {'ref s':>6} {'cand s':>7} "
              f"{'warm':>6}")
    print(header)
    for phase, r in results.items():
        print(f"{phase:22} {r['submissions']:>5} {r['seconds']:>8} {r['per_minute']:>9} "
              f"{r['cached']:>7} {r.get('correct', 0):>8} {r.get('hacked', 0):>7} "
              f"{r.get('error', 0):>6} {r['reference_s'] or '-':>6} {r['candidate_s'] or '-':>7} "
              f"{r['warm']:>6}")
    for phase, r in results.items():
        if r.get("interpreter_lag_ms"):
            lag = r["interpreter_lag_ms"]
            print(f"{phase}: the grading process's threads woke from a 5 ms sleep {lag['p50']} ms "
                  f"late at the median, {lag['p99']} at the 99th percentile, {lag['max']} at "
                  f"most ({lag['share']:.0%} of the time waiting for the interpreter or a core)")
    for phase, r in results.items():
        if r.get("first_verdict_s") is not None:
            middle = r.get("per_minute_middle")
            print(f"{phase}: first verdict after {r['first_verdict_s']} s (the grading "
                  f"process's start-up); {r['per_minute_after_first']} per minute after it" +
                  (f"; {middle} per minute between its first and third quarters of verdicts"
                   if middle is not None else ""))
    print(f"{'set / phase':22} {'shared wait ms':>15} {'exclusive wait ms':>18} "
          f"{'queued / drain ms':>18} {'window ms':>10} {'held ms':>8} {'GPU held alone':>15}"
          f" {'stepped aside s':>16}")
    for phase, r in results.items():
        alone = r.get("held_s_total") or r["window_s_total"]
        held = alone / r["seconds"] * 100 if r["seconds"] else 0
        cell = lambda key: "-" if r.get(key) is None else r[key]  # noqa: E731
        parts = f"{cell('median_exclusive_queue_ms')} / {cell('median_exclusive_drain_ms')}"
        print(f"{phase:22} {cell('median_shared_wait_ms'):>15} "
              f"{cell('median_exclusive_wait_ms'):>18} {parts:>18} "
              f"{cell('median_window_ms'):>10} {cell('median_exclusive_held_ms'):>8} "
              f"{held:>14.0f}% {cell('median_stepped_aside_s'):>16}")
    print("queued / drain: a window's wait behind the windows before it, then for the shared "
          "holders to step aside or end; held ms: the window's whole exclusive hold (its "
          "parts, what came before them and the hand-back), which 'GPU held alone' sums where "
          "known; stepped aside: each grade's seconds with its workers stopped for other "
          "grades' windows (median)")
    from kernelmill.core.devices import usable_cores

    cores = usable_cores()
    for phase, r in results.items():
        workers = r.get("worker_cpu_s") or {}
        if workers:
            total = r["parent_cpu_s"] + sum(v for v in workers.values() if v)
            print(f"{phase}: CPU seconds per submission: " +
                  " ".join(f"{k}={v}" for k, v in workers.items()) +
                  f" parent={r['parent_cpu_s']} total={total:.2f} (the host's {cores} cores "
                  f"allow {cores * 60 / total:.0f} per minute at that cost)")
        if r.get("window_phases_ms"):
            print(f"{phase}: a window's parts, median ms: " +
                  " ".join(f"{k}={v}" for k, v in r["window_phases_ms"].items()) +
                  f"; rounds {r.get('median_rounds')}; a graph captured again in "
                  f"{r.get('windows_resized', 0)} of {r.get('windows')} windows")
        if r.get("warm_by"):
            share = r.get("sm_clock_share")
            print(f"{phase}: windows by their warm-up: " +
                  " ".join(f"{k}={v}" for k, v in r["warm_by"].items()) +
                  (f"; NVML's SM clock at their start {share[0]:.0%}-{share[1]:.0%} of its "
                   "highest" if share else ""))
        if r.get("turn_ms"):
            print(f"{phase}: a turn's parts (the windows' medians), ms: " +
                  " ".join(f"{k}={v}" for k, v in r["turn_ms"].items()))
        if r["candidate_stages_s"]:
            print(f"{phase}: {r['windows']} windows; candidate worker stages, median s: " +
                  " ".join(f"{k}={v}" for k, v in r["candidate_stages_s"].items()))
        if r.get("reference_stages_s"):
            print(f"{phase}: reference worker stages, median s: " +
                  " ".join(f"{k}={v}" for k, v in r["reference_stages_s"].items()) +
                  f"; GPU memory admission wait, median s: {r['median_admission_wait_s']}")
        for who in ("candidate", "reference"):
            if r.get(f"{who}_stages_cpu_s"):
                print(f"{phase}: {who} worker CPU seconds by stage, median: " +
                      " ".join(f"{k}={v}" for k, v in r[f"{who}_stages_cpu_s"].items()))
    print("ref s / cand s: median seconds per submission in the reference run and in the "
          "candidate run with its timing window; warm: workers forked from a zygote; waits: "
          "median ms a grade waited for the GPU's lock shared (checks) and exclusive (its "
          "window); GPU held alone: the share of the phase's wall time held by timing windows; "
          "turn+ms: a round's turn's wall time past the device work it reports (median)")
    signal.setitimer(signal.ITIMER_REAL, 0)  # the deadline bounds the grading phases alone
    kernelbench = None if stopped else compare_with_kernelbench(args, folder, results)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {**results, **({"kernelbench-eval": kernelbench} if kernelbench else {})}, indent=2))
    if stopped:  # grades still in flight on the slots' threads: leave without waiting for them
        sys.stdout.flush()
        os._exit(0 if _DEADLINE_REACHED else 1)  # a SIGTERM from outside is no success
    return 0


def check_kernelbench_eval(args: argparse.Namespace) -> None:
    """With ``--kernelbench-eval``, before any grading: the checkout holds KernelBench's eval,
    and the kernelbench set is graded (the answers both tools see)."""
    from kernelbench_eval import check_checkout

    if not args.kernelbench_eval:
        return
    check_checkout(args.kernelbench_eval)
    if "kernelbench" not in args.sets:
        raise SystemExit("--kernelbench-eval compares on the kernelbench set: add it to --sets")


def compare_with_kernelbench(args: argparse.Namespace, folder: Path,
                             results: dict) -> dict | None:
    """With ``--kernelbench-eval``: KernelBench's own eval on the kernelbench set's answers
    (those graded: on CPU, the Triton ones), ``--kernelbench-eval-repeats`` times each, printed
    beside kernelmill's verdicts from its last full grading phase: {"repeats", "seconds",
    "per_minute", "rows"}."""
    from kernelbench_eval import per_minute, run_kernelbench_eval, side_by_side_table

    if not args.kernelbench_eval:
        return None
    pairs = [(answer, problem) for answer, problem in
             kernelbench_answers(find_kernelbench(args.kernelbench))
             if args.device != "cpu" or "load_inline" not in answer.read_text()]
    graded = [p for p in ("refs-cached", "cold", "cache-hits") if f"kernelbench {p}" in results]
    out = folder / f"kernelbench-{graded[0]}.jsonl" if graded else None
    ours = [json.loads(line) for line in read_lines(out)] if out else []
    print(f"KernelBench eval: {len(pairs)} answers x {args.kernelbench_eval_repeats}, one "
          f"process, from {args.kernelbench_eval}", flush=True)
    rows = run_kernelbench_eval(args.kernelbench_eval, pairs, args.kernelbench_eval_repeats,
                                timeout_s=300)
    print(f"kernelmill ({graded[0] if graded else 'not graded'}) against KernelBench's "
          f"eval_kernel_against_ref:")
    print(side_by_side_table(ours, rows, results[f"kernelbench {graded[0]}"]["per_minute"]
                             if graded else None))
    return {"repeats": args.kernelbench_eval_repeats,
            "seconds": round(sum(r["seconds"] for r in rows), 1),
            "per_minute": per_minute(rows), "rows": rows}


def _interrupt(*_args) -> None:
    raise KeyboardInterrupt


_DEADLINE_REACHED = False


def _deadline(*_args) -> None:
    global _DEADLINE_REACHED
    _DEADLINE_REACHED = True
    raise KeyboardInterrupt


def keep_verdicts(out: Path, folder: str | None) -> None:
    """The phase's verdicts, gzipped, into ``folder`` (each carries its ``profile``: when its
    grade began, where its time and CPU went)."""
    if not folder or not out.exists():
        return
    import gzip
    import shutil

    Path(folder).mkdir(parents=True, exist_ok=True)
    with out.open("rb") as src, gzip.open(Path(folder) / f"{out.name}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)


def read_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()] \
        if path.exists() else []


def _own_cpu_s() -> float:
    """This process's CPU seconds, user and system (its threads: the batch's judging)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def report_uncertified(out: Path) -> None:
    """The speedup range, and every honest answer (not a hack_/crash_/bad_ fixture) that was
    not certified, with why."""
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    speed = [r["speedup_vs_eager"] for r in rows if r.get("speedup_vs_eager")]
    if speed:
        print(f"speedup vs eager over correct kernels: min {min(speed):.2f}  "
              f"max {max(speed):.2f}")
    for r in rows:
        honest = not r["submission_id"].startswith(("hack_", "crash_", "bad_"))
        if honest and not (r["correct"] and not r["hacks"]):
            print(f"  NOT CERTIFIED {r['submission_id']}: {r['hacks']} "
                  f"{str(r.get('hack_details') or '')[:200]} "
                  f"{(r.get('error') or {}).get('message', '')[:160]}")
            for name, check in (r.get("checks") or {}).items():  # the evidence, for a fix
                if check.get("passed") is False or name.startswith("unseen_time"):
                    print(f"      {name}: {str(check.get('detail'))[:300]}")



def report_per_problem(out: Path) -> None:
    """Where a phase's time went, one line per problem: its submissions, the longest wall time
    of one (a group's members end together), its window, the median reference and candidate run
    seconds and the candidate run's three longest stages."""
    rows: dict[str, list[dict]] = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        rows.setdefault(row.get("problem_id") or row["submission_id"].split("#")[0], []).append(row)
    print(f"{'problem':24} {'subs':>4} {'wall s':>7} {'window ms':>10} {'rounds':>6} "
          f"{'turn+ms':>7} "
          f"{'warm/resize/rounds/clock/unseen/witness ms':>43} {'ref s':>6} "
          f"{'cand s':>7}  longest candidate stages (median s)")
    for problem, group in sorted(rows.items()):
        profiles = [r.get("profile") or {} for r in group]
        walls = [r["wall_s"] for r in group if r.get("wall_s") is not None]
        med = lambda key: statistics.median(v) if (v := [p[key] for p in profiles  # noqa: E731
                                                          if p.get(key) is not None]) else None
        stages: dict[str, list[float]] = {}
        for profile in profiles:
            for stage, seconds in (profile.get("stages_s") or {}).items():
                stages.setdefault(stage, []).append(seconds)
        longest = sorted(((statistics.median(v), k) for k, v in stages.items()), reverse=True)[:3]
        fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
        phases = [statistics.median(v) if (v := [p["phases_ms"][k] for p in profiles
                                                 if k in (p.get("phases_ms") or {})]) else None
                  for k in ("warm", "resize", "rounds", "clock", "unseen", "witness")]
        print(f"{problem[:24]:24} {len(group):>4} {fmt(max(walls) if walls else None, '.1f'):>7} "
              f"{fmt(med('window_ms'), '.0f'):>10} {fmt(med('rounds'), '.0f'):>6} "
              f"{fmt(med('turn_overhead_ms'), '.1f'):>7} "
              f"{'/'.join(fmt(v, '.0f') for v in phases):>43} {fmt(med('reference_s'), '.1f'):>6} "
              f"{fmt(med('candidate_s'), '.1f'):>7}  "
              + " ".join(f"{k}={v:.2f}" for v, k in longest))


def _spans(rows: list[dict]) -> list[tuple[str, float, float]]:
    """Each verdict's stages as (stage, began, ended) on the grading host's clock, laid end to
    end from its ``began_at`` (``in_flight`` says which stages)."""
    spans: list[tuple[str, float, float]] = []
    for row in rows:
        profile = row.get("profile") or {}
        began = profile.get("began_at")
        if not isinstance(began, (int, float)) or profile.get("candidate_s") is None:
            continue
        at = began
        parts = profile.get("reference_forward_s") or {}
        for stage, seconds in (profile.get("reference_stages_s") or {}).items():
            if stage == "reference forward" and parts:  # its parts, one after another
                measured = {k: max(0.0, v) for k, v in parts.items()
                            if isinstance(v, (int, float))}
                fit = min(1.0, seconds / sum(measured.values())) if sum(measured.values()) \
                    else 0.0
                for part, part_s in measured.items():
                    spans.append((f"reference: forward {part}", at, at + part_s * fit))
                    at += part_s * fit
                seconds -= sum(measured.values()) * fit
            spans.append((f"reference: {stage}", at, at + seconds))
            at += seconds
        at = began + (profile.get("reference_s") or 0.0)
        end = at + profile["candidate_s"]
        aside = profile.get("stepped_aside_by_stage") or {}
        for stage, seconds in (profile.get("stages_s") or {}).items():
            if stage == "timing":  # the window's own parts of it, the rest its preparation
                for part, part_s in _timing_parts(profile, seconds).items():
                    spans.append((f"candidate: timing {part}", at, at + part_s))
                    at += part_s
                continue
            # stopped for other grades' windows in this stage, where the verdict says
            stopped = min(seconds, aside.get(stage) or 0.0) if isinstance(
                aside.get(stage), (int, float)) else 0.0
            if stopped:
                spans.append(("candidate: stepped aside", at, at + stopped))
                at += stopped
            spans.append((f"candidate: {stage}", at, at + seconds - stopped))
            at += seconds - stopped
        judge = min(max(0.0, end - at), profile.get("judge_s") or 0.0)
        spans.append(("parent judge", end - judge, end))
        spans.append(("parent other", at, end - judge))
    return spans


def in_flight(rows: list[dict], share: tuple[float, float] = (0.3, 0.9)) -> tuple[float, dict]:
    """Where the grades in flight were, on average, between ``share`` of a phase's span (its
    steady part: the start's wave and the cut's tail left out): each verdict's reference
    stages (its forward's parts where it gives them: stepped aside for other grades' windows,
    files written, the rest), then its candidate worker's (its timing stage's parts:
    ``_timing_parts``; of the others, the seconds its workers were stopped for other grades'
    windows, ``stepped aside``), then the grading process's own time
    around that
    worker (``parent judge``: the judge's seconds; ``parent other``: admission, the job's
    preparation, a group's wait for its slowest member). Returns the span's seconds and the
    mean number of grades in each stage (Little's law: the stages that hold the most grades
    are those a faster stage of the same work would free slots from)."""
    spans = _spans(rows)
    if not spans:
        return 0.0, {}
    lo, hi = _steady([a for _, a, _ in spans] + [b for _, _, b in spans], share)
    held: dict[str, float] = {}
    for stage, a, b in spans:
        if min(b, hi) > max(a, lo):
            held[stage] = held.get(stage, 0.0) + min(b, hi) - max(a, lo)
    return hi - lo, {k: v / (hi - lo) for k, v in held.items()}


def window_states(rows: list[dict], share: tuple[float, float] = (0.3, 0.9)) -> dict[str, float]:
    """Over the same steady part as ``in_flight``, the share of the time a timing window held
    the GPU (``held``), a window was asked for but none held it (``asked``: the windows' own
    hand-overs), and no window was held or asked for (``none``: no grade was ready to be timed).
    Single grades are bound by the window only where ``none`` is small; where it is large, by
    the time grades take to reach their windows."""
    spans = _spans(rows)
    if not spans:
        return {}
    lo, hi = _steady([a for _, a, _ in spans] + [b for _, _, b in spans], share)
    if hi <= lo:
        return {}
    held = [(a, b) for stage, a, b in spans if stage == "candidate: timing window"]
    asked = [(a, b) for stage, a, b in spans if stage == "candidate: timing exclusive wait"]
    held_s = _union_s(held, lo, hi)
    busy_s = _union_s(held + asked, lo, hi)
    span = hi - lo
    return {"held": held_s / span, "asked": (busy_s - held_s) / span, "none": 1 - busy_s / span}


def verdict_waves(rows: list[dict], share: tuple[float, float] = (0.3, 0.9)) -> dict:
    """How the verdicts' ends fell over the same steady part as ``in_flight``: the gaps
    between consecutive ends (``gap_median_s``, ``gap_max_s``) and their burstiness
    ``(sd - mean) / (sd + mean)`` (Goh and Barabasi): about 0 for ends at random, -1 evenly
    spaced, toward 1 in waves (grades moving in lockstep: many ends at once, then none for
    seconds). Empty with fewer than 3 ends there."""
    ends = sorted(p["began_at"] + p["reference_s"] + p["candidate_s"]
                  for p in (row.get("profile") or {} for row in rows)
                  if all(isinstance(p.get(k), (int, float))
                         for k in ("began_at", "reference_s", "candidate_s")))
    if len(ends) < 3:
        return {}
    lo, hi = _steady(ends, share)
    steady = [t for t in ends if lo <= t <= hi]
    gaps = [b - a for a, b in itertools.pairwise(steady)]
    if len(gaps) < 2:
        return {}
    mean, sd = statistics.fmean(gaps), statistics.pstdev(gaps)
    return {"ends": len(steady), "gap_median_s": statistics.median(gaps),
            "gap_max_s": max(gaps),
            "burstiness": (sd - mean) / (sd + mean) if sd + mean > 0 else 0.0}


# The candidate worker's stages held under its window's shared hold (from its "go" to its end),
# the timing stage aside (its window held the GPU alone); in the worker's order
HELD_STAGES = ("setup", "import", "init", "profiler start", "forward", "forward refill",
               "forward repeat", "early check", "after timing", "graph check", "audit", "ghost",
               "witness read", "result", "send")


def held_host_share(rows: list[dict]) -> dict:
    """Per candidate stage held shared (``HELD_STAGES``), the median wall seconds less the time
    its workers were stopped for other grades' windows, and the median CPU seconds of the
    worker: a stage whose CPU is near its wall is host work holding the GPU shared (what
    ``benchmarks/gpu_queue.py --held`` models moving out). ``total``: the grades' medians of
    the sums. Empty where no verdict gives both."""
    per_stage: dict[str, tuple[list[float], list[float]]] = {}
    totals: tuple[list[float], list[float]] = ([], [])
    for row in rows:
        profile = row.get("profile") or {}
        wall, cpu = profile.get("stages_s") or {}, profile.get("stages_cpu_s") or {}
        aside = profile.get("stepped_aside_by_stage") or {}
        sums = [0.0, 0.0]
        for stage in HELD_STAGES:
            if not isinstance(wall.get(stage), (int, float)) or \
                    not isinstance(cpu.get(stage), (int, float)):
                continue
            stopped = aside.get(stage) if isinstance(aside.get(stage), (int, float)) else 0.0
            held = max(0.0, wall[stage] - stopped)
            per_stage.setdefault(stage, ([], []))[0].append(held)
            per_stage[stage][1].append(cpu[stage])
            sums[0] += held
            sums[1] += cpu[stage]
        if sums[0] > 0:
            totals[0].append(sums[0])
            totals[1].append(sums[1])
    if not totals[0]:
        return {}
    found = {stage: (statistics.median(w), statistics.median(c))
             for stage, (w, c) in per_stage.items()}
    found["total"] = (statistics.median(totals[0]), statistics.median(totals[1]))
    return found


def _steady(times: list[float], share: tuple[float, float]) -> tuple[float, float]:
    """The steady part of a phase whose events span ``times``: from ``share[0]`` to
    ``share[1]`` of that span (the start's wave and the cut's tail left out)."""
    first, last = min(times), max(times)
    return first + (last - first) * share[0], first + (last - first) * share[1]


def _union_s(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] that the union of ``intervals`` covers."""
    total, end = 0.0, lo
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _timing_parts(profile: dict, seconds: float) -> dict[str, float]:
    """A candidate's timing stage split: its timer's preparation (warm-up, estimate, capture,
    where the verdict says), its wait for the window's last participant to be ready, the
    window's wait for the GPU alone, the window itself, and the rest (the step back after the
    window), each at most what is left of the stage."""
    def number(key: str, scale: float = 1.0) -> float:
        value = profile.get(key)
        return max(0.0, value * scale) if isinstance(value, (int, float)) else 0.0

    prepare = (profile.get("prepare_ms") or {}).get("candidate")
    parts, left = {}, seconds
    for part, value in (("prepare", max(0.0, prepare / 1e3) if isinstance(
                            prepare, (int, float)) else 0.0),
                        ("for the last ready", number("last_ready_ms", 1e-3) -
                         number("ready_ms", 1e-3)),
                        ("exclusive wait", number("exclusive_wait_ms", 1e-3)),
                        ("window", number("window_ms", 1e-3))):
        parts[part] = min(max(0.0, value), left)
        left -= parts[part]
    parts["other"] = left
    return parts


def report_in_flight(out: Path, items: int | None = None, group: int | None = None) -> None:
    """Where the grades in flight were (``in_flight``), with the slots the pass had
    (``items``: the grades it was given, in groups of ``group``): a pass of fewer than two
    jobs per slot cannot keep its slots busy, and its throughput is its start's and tail's,
    not a steady state's."""
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    seconds, held = in_flight(rows)
    if not held:
        return
    from kernelmill.grade import batch

    slots = sum(batch._SLOTS_PER_GPU.values())
    top = sorted(held.items(), key=lambda kv: -kv[1])[:12]
    print(f"grades in flight over the phase's steady part ({seconds:.0f} s): "
          f"{sum(held.values()):.1f} on average"
          + (f" (slots: {slots})" if slots else "") + "; by stage: "
          + " ".join(f"{k}={v:.2f}" for k, v in top))
    states = window_states(rows)
    if states:
        print(f"  the GPU's timing windows over that part: held {states['held']:.0%}, asked for "
              f"with none held {states['asked']:.0%}, none held or asked for "
              f"{states['none']:.0%} (grades not yet ready to be timed: where this is large, "
              "the time to reach a window bounds the rate, not the window)")
    share = held_host_share(rows)
    if share:
        wall, cpu = share.pop("total")
        print(f"  the candidate's stages under its window's shared hold, median: {wall:.2f} s "
              f"held, {cpu:.2f} CPU-s ({cpu / wall:.0%} of it host work where one thread "
              "computes); by stage, held/CPU s: " + " ".join(
                  f"{k}={w:.2f}/{c:.2f}" for k, (w, c) in
                  sorted(share.items(), key=lambda kv: -kv[1][0])[:8]))
    waves = verdict_waves(rows)
    if waves:
        print(f"  verdicts' ends over that part: {waves['ends']}, gaps median "
              f"{waves['gap_median_s']:.2f} s, longest {waves['gap_max_s']:.2f} s, burstiness "
              f"{waves['burstiness']:+.2f} (0: at random; toward 1: in waves)")
    if slots and items is not None:
        jobs = -(-items // max(1, group or 1))
        if jobs < 2 * slots:
            print(f"  the pass gave its {slots} slots {jobs} "
                  f"{'groups' if (group or 1) > 1 else 'grades'}: fewer than two each, so its "
                  "slots could not all stay busy (more --copies for a steady state)")


def report_slowest_and_median(out: Path) -> None:
    """One grade whole: the slowest submission's and the median one's (by wall time) reference
    and candidate runs, every stage of the candidate's worker, the window's parts and the CPU
    seconds of each worker."""
    rows = sorted((json.loads(line) for line in out.read_text().splitlines()),
                  key=lambda r: r.get("wall_s") or 0.0)
    rows = [r for r in rows if r.get("wall_s") is not None]
    if not rows:
        return
    for label, row in (("slowest", rows[-1]), ("median", rows[len(rows) // 2])):
        profile = row.get("profile") or {}
        stages = " ".join(f"{k}={v:.2f}" for k, v in (profile.get("stages_s") or {}).items())
        cpu = " ".join(f"{k}={v}" for k, v in (profile.get("cpu_s") or {}).items())
        ref_stages = " ".join(f"{k}={v:.2f}" for k, v in
                              (profile.get("reference_stages_s") or {}).items())
        stage_cpu = " ".join(f"{k}={v:.2f}" for k, v in
                             (profile.get("stages_cpu_s") or {}).items())
        print(f"{label} {row['submission_id']}: wall {row['wall_s']:.1f} s, reference "
              f"{profile.get('reference_s')} s, candidate {profile.get('candidate_s')} s, "
              f"window {profile.get('window_ms')} ms {profile.get('phases_ms')}, waits shared "
              f"{profile.get('shared_wait_ms')} / exclusive {profile.get('exclusive_wait_ms')} ms"
              f", GPU memory admission {profile.get('admission_wait_s')} s "
              f"({profile.get('worker_device_gib')} GiB per worker)"
              f"\n    candidate stages (s): {stages}\n    reference stages (s): {ref_stages}"
              f"\n    CPU s: {cpu}\n    candidate CPU s by stage: {stage_cpu}"
              f"\n    unseen check (ms per hidden trial): parent's hand-overs "
              f"{profile.get('late_write_ms')}, worker's {profile.get('unseen_steps_ms')}")
    steps: dict[str, list[float]] = {}
    for row in rows:  # each grade's unseen check: its trials' steps summed
        profile = row.get("profile") or {}
        for name, values in {**(profile.get("unseen_steps_ms") or {}),
                             "parent hand-over": profile.get("late_write_ms") or []}.items():
            if values:
                steps.setdefault(name, []).append(sum(values))
    if steps:
        print("unseen check, median ms per grade (its hidden trials together): " +
              " ".join(f"{k}={statistics.median(v):.1f}" for k, v in steps.items()) +
              " (late: the worker's wait for its part, the parent's hand-over included)")


def report_spread(out: Path) -> None:
    """With ``--copies``: each answer's speedup spread ``(max - min) / median`` over its copies,
    graded concurrently (the slots share the GPU; the timing windows do not)."""
    speedups: dict[str, list[float]] = {}
    timings: dict[str, list[dict]] = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        if row.get("speedup_vs_eager"):
            answer = row["submission_id"].split("#")[0]
            speedups.setdefault(answer, []).append(row["speedup_vs_eager"])
            timings.setdefault(answer, []).append(row.get("timing") or {})
    spreads = {k: (max(v) - min(v)) / statistics.median(v) * 100
               for k, v in speedups.items() if len(v) > 1}
    if spreads:
        worst = max(spreads, key=spreads.get)
        print(f"speedup spread over copies: median {statistics.median(spreads.values()):.2f}%  "
              f"max {spreads[worst]:.2f}% ({worst})  "
              + " ".join(f"{k}={v:.1f}" for k, v in sorted(spreads.items())))
        print(f"{worst}'s copies (reference ms, candidate ms, reps, CI %):")
        for timing in timings[worst]:
            print("  " + "  ".join(str(timing.get(k)) for k in
                                   ("reference_ms", "candidate_ms", "reps", "ci_pct")))


if __name__ == "__main__":
    sys.exit(main())
