"""KernelBench's own eval (``kernelbench.eval.eval_kernel_against_ref``) on the answers
kernelmill grades, and the two tools side by side.

The eval runs as KernelBench runs it: in one process (benchmarks/kernelbench_eval_child.py),
one evaluation after another. A child that dies (a crash) or runs past the timeout is killed and
a fresh one takes the next evaluation; the evaluation it was on is a row with the error. A child
whose CUDA context a sticky error poisoned answers that row with ``context_lost`` and ends; a
fresh one takes the next. Each row's seconds include starting a child where one was started for
it, so submissions per minute counts every second KernelBench took.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CHILD = Path(__file__).resolve().with_name("kernelbench_eval_child.py")
# KernelBench's eval as its scripts call it on one answer
EVAL_KWARGS = {"measure_performance": True, "num_correct_trials": 5, "num_perf_trials": 100,
               "device": 0}


def check_checkout(path: str | Path) -> Path:
    """``path`` if it is a KernelBench checkout (it holds src/kernelbench/eval.py)."""
    if not (Path(path) / "src" / "kernelbench" / "eval.py").is_file():
        raise SystemExit(f"--kernelbench-eval {path}: no src/kernelbench/eval.py there "
                         f"(pass a ScalingIntelligence/KernelBench checkout)")
    return Path(path)


class Child:
    """One KernelBench eval process: a job in on stdin, a JSON line out on stdout."""

    def __init__(self, checkout: Path, log: Path):
        self.log = log
        with log.open("ab") as err:
            self.proc = subprocess.Popen([sys.executable, str(CHILD), str(checkout)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, text=True, start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)  # the child is gone

    def ask(self, job: dict, timeout_s: float) -> dict:
        """The child's row for ``job``; raises RuntimeError when it dies or times out."""
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s (child killed)") from None
        except OSError:
            line = None
        if line is None:
            code = self.proc.wait()
            raise RuntimeError(f"child died (exit {code}): {self._last_log_line()}")
        return json.loads(line)

    def _last_log_line(self) -> str:
        lines = [x for x in self.log.read_text(errors="replace").splitlines() if x.strip()]
        return lines[-1].strip()[:200] if lines else "no output"

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # with any compiler it started
            except ProcessLookupError:
                pass
        self.proc.wait()


def run_kernelbench_eval(path: str | Path, pairs: list[tuple[Path, Path]], repeats: int = 3,
                         timeout_s: float = 300.0) -> list[dict]:
    """One row per evaluation: each (answer, problem file) pair evaluated ``repeats`` times, all
    answers once per round. A row holds answer, problem, repeat, backend, compiled, correctness,
    runtime_ms, ref_runtime_ms, speedup (ref_runtime / runtime, correct answers only), error
    (the first line), metadata, context_lost (a sticky CUDA error after it), seconds (wall, a
    child's start included) and restarted (a fresh child was started for it after one died,
    timed out or lost its CUDA context)."""
    checkout = check_checkout(path)
    work = Path(tempfile.mkdtemp(prefix="kernelmill-kbeval-"))
    rows: list[dict] = []
    child, dead = None, False
    try:
        for repeat in range(repeats):
            for answer, problem in pairs:
                custom = answer.read_text()
                backend = "cuda" if "load_inline" in custom else "triton"
                row = {"answer": answer.stem, "problem": f"{problem.parent.name}/{problem.name}",
                       "repeat": repeat, "backend": backend, "restarted": dead}
                start = time.monotonic()
                if child is None:
                    child = Child(checkout, work / "child.log")
                kwargs = {**EVAL_KWARGS, "backend": backend,
                          "build_dir": str(work / "build" / answer.stem)}
                try:
                    row.update(child.ask({"ref": problem.read_text(), "custom": custom,
                                          "kwargs": kwargs}, timeout_s))
                    dead = False
                    if row.get("context_lost"):  # a sticky CUDA error: the child has ended
                        child.close()
                        child, dead = None, True
                except RuntimeError as e:
                    row["error"] = str(e)
                    child.close()
                    child, dead = None, True
                row["seconds"] = round(time.monotonic() - start, 3)
                rows.append(_with_speedup(row))
                print(f"KernelBench eval {len(rows)}/{repeats * len(pairs)}: {row['answer']} "
                      f"correct={row.get('correctness')} speedup={row.get('speedup')} "
                      f"{row['seconds']} s {row.get('error') or ''}"[:300], flush=True)
    except KeyboardInterrupt:  # a time limit: what finished is still reported
        print(f"KernelBench eval: stopped after {len(rows)} evaluations", flush=True)
    finally:
        if child is not None:
            child.close()
    if any(r.get("restarted") or r.get("error", "").startswith(("child died", "timed out"))
           for r in rows):
        print(f"KernelBench eval: the children's output is in {work / 'child.log'}", flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def _with_speedup(row: dict) -> dict:
    # KernelBench's result calls its runtimes microseconds; its timers return CUDA events'
    # elapsed times, milliseconds
    runtime, ref = row.pop("runtime", -1.0), row.pop("ref_runtime", -1.0)
    row["runtime_ms"] = runtime if runtime > 0 else None
    row["ref_runtime_ms"] = ref if ref > 0 else None
    row["speedup"] = round(ref / runtime, 4) if row.get("correctness") and runtime > 0 \
        and ref > 0 else None
    return row


def spread_pct(values: list[float]) -> float | None:
    """``(max - min) / median`` in percent, over two values or more."""
    return (max(values) - min(values)) / statistics.median(values) * 100 \
        if len(values) > 1 else None


def per_minute(kb_rows: list[dict]) -> float | None:
    """KernelBench's evaluations per minute: its rows over the seconds they took."""
    seconds = sum(r["seconds"] for r in kb_rows)
    return round(len(kb_rows) / seconds * 60, 1) if seconds else None


def _ours(rows: list[dict]) -> tuple[str, float | None, float | None]:
    """kernelmill's verdict on one answer's copies: certified or why not, median speedup vs
    eager, its spread over the copies."""
    reasons = []
    for r in rows:
        if r.get("hacks"):
            reasons.append("hacked: " + ",".join(r["hacks"]))
        elif r.get("error"):
            message = (r["error"] or {}).get("message") or str(r["error"])
            reasons.append("error: " + (message.splitlines() or [""])[0])
        elif not r.get("correct"):
            reasons.append("incorrect")
    speedups = [r["speedup_vs_eager"] for r in rows if r.get("speedup_vs_eager")]
    verdict = "certified" if not reasons else reasons[0]
    if reasons and len(reasons) < len(rows):
        verdict = f"{len(rows) - len(reasons)}/{len(rows)} certified; {verdict}"
    return (verdict, statistics.median(speedups) if speedups else None, spread_pct(speedups))


def _kernelbench(evals: list[dict]) -> tuple[str, str, float | None, float | None,
                                             float | None, float | None, str]:
    """KernelBench's evaluations of one answer: compiled and correct counts, median runtime and
    ref_runtime (us), median speedup, its spread over the repeats, the first error."""
    def median(key: str) -> float | None:
        values = [r[key] for r in evals if r.get(key)]
        return statistics.median(values) if values else None

    def count(key: str) -> str:
        return f"{sum(bool(r.get(key)) for r in evals)}/{len(evals)}"

    speedups = [r["speedup"] for r in evals if r.get("speedup")]
    error = next((r.get("error") or f"CUDA context lost after it: {r['context_lost']}"
                  for r in evals if r.get("error") or r.get("context_lost")), "")
    return (count("compiled"), count("correctness"), median("runtime_ms"),
            median("ref_runtime_ms"), median("speedup"), spread_pct(speedups), error)


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _median_max(values: list[float]) -> str:
    return (f"median {_fmt(statistics.median(values) if values else None, '.2f')}% "
            f"max {_fmt(max(values, default=None), '.2f')}%")


def side_by_side_table(ours_rows: list[dict], kb_rows: list[dict],
                       ours_per_minute: float | None = None) -> str:
    """Per answer: kernelmill's verdict, speedup vs eager and its spread over copies, against
    KernelBench's compiled and correct counts, median runtime and ref_runtime (us), median
    speedup and its spread over repeats, and its first error; then each tool's submissions
    per minute."""
    ours: dict[str, list[dict]] = {}
    for r in ours_rows:
        ours.setdefault(r["submission_id"].split("#")[0], []).append(r)
    kb: dict[str, list[dict]] = {}
    for r in kb_rows:
        kb.setdefault(r["answer"], []).append(r)
    lines = [(f"{'answer':34} | {'kernelmill':28} {'speedup':>8} {'spread%':>8} | "
              f"{'KernelBench: compiled':>21} {'correct':>7} {'runtime ms':>11} "
              f"{'ref ms':>11} {'speedup':>8} {'spread%':>8}  error")]
    ours_spreads, kb_spreads = [], []
    for answer in [*kb, *(a for a in ours if a not in kb)]:
        verdict, speedup, spread = _ours(ours[answer]) if answer in ours else ("-", None, None)
        compiled, correct, runtime, ref, kb_speedup, kb_spread, error = \
            _kernelbench(kb.get(answer, []))
        ours_spreads += [spread] if spread is not None else []
        kb_spreads += [kb_spread] if kb_spread is not None else []
        lines.append(f"{answer[:34]:34} | {verdict[:28]:28} {_fmt(speedup, '.3f'):>8} "
                     f"{_fmt(spread, '.2f'):>8} | {compiled:>21} {correct:>7} "
                     f"{_fmt(runtime, '.4g'):>11} {_fmt(ref, '.4g'):>11} "
                     f"{_fmt(kb_speedup, '.3f'):>8} {_fmt(kb_spread, '.2f'):>8}  {error[:80]}")
    restarts = sum(bool(r.get("restarted")) for r in kb_rows)
    seconds = sum(r["seconds"] for r in kb_rows)
    lines.append(f"speedup spread (max - min) / median: kernelmill over copies "
                 f"{_median_max(ours_spreads)}; KernelBench over repeats "
                 f"{_median_max(kb_spreads)}")
    lines.append(f"submissions per minute: kernelmill {_fmt(ours_per_minute, '.1f')}; "
                 f"KernelBench {_fmt(per_minute(kb_rows), '.1f')} ({len(kb_rows)} evaluations "
                 f"in {seconds:.0f} s, one process, {restarts} restarts)")
    return "\n".join(lines)


def main() -> int:
    """KernelBench's eval alone on the kernelbench set's answers, beside kernelmill's verdict
    rows from an earlier grade_throughput run (``--ours``); a SIGTERM reports what finished."""
    import argparse

    from grade_sets import find_kernelbench, kernelbench_answers

    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("checkout", help="a ScalingIntelligence/KernelBench checkout")
    parser.add_argument("--kernelbench", help="KernelBench problems folder (level1/, ...)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per evaluation")
    parser.add_argument("--ours", help="kernelmill's verdict rows (JSONL) on the same answers")
    parser.add_argument("--json", help="write KernelBench's rows here")
    args = parser.parse_args()
    check_checkout(args.checkout)
    signal.signal(signal.SIGTERM, _stop)
    pairs = kernelbench_answers(find_kernelbench(args.kernelbench))
    rows = run_kernelbench_eval(args.checkout, pairs, args.repeats, args.timeout)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    ours = [json.loads(line) for line in Path(args.ours).read_text().splitlines()] \
        if args.ours and Path(args.ours).exists() else []
    print(side_by_side_table(ours, rows, None))
    return 0


def _stop(*_args) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
