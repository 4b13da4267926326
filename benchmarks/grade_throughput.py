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
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

from grade_reports import (
    report_per_problem,
    report_slowest_and_median,
    report_spread,
    report_uncertified,
    summarize,
)
from grade_sets import build_set, find_kernelbench, kernelbench_answers, read_lines
from grade_timeline import report_in_flight

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
                  _pairs(workers) +
                  f" parent={r['parent_cpu_s']} total={total:.2f} (the host's {cores} cores "
                  f"allow {cores * 60 / total:.0f} per minute at that cost)")
        if r.get("window_phases_ms"):
            print(f"{phase}: a window's parts, median ms: " +
                  _pairs(r["window_phases_ms"]) +
                  f"; rounds {r.get('median_rounds')}; a graph captured again in "
                  f"{r.get('windows_resized', 0)} of {r.get('windows')} windows")
        if r.get("window_phase_share"):
            print(f"{phase}: a window's parts, share of all the windows' time: " +
                  " ".join(f"{k}={v:.0%}" for k, v in r["window_phase_share"].items()))
        if r.get("witness"):
            print(f"{phase}: reading the candidate's witness, median: " +
                  _pairs(r["witness"]))
        if r.get("warm_by"):
            share = r.get("sm_clock_share")
            print(f"{phase}: windows by their warm-up: " +
                  _pairs(r["warm_by"]) +
                  (f"; NVML's SM clock at their start {share[0]:.0%}-{share[1]:.0%} of its "
                   "highest" if share else ""))
        if r.get("windows_drained") is not None and r.get("windows"):
            stretch = r.get("reference_stretch_s")
            print(f"{phase}: windows that waited for shared work to step aside or end: "
                  f"{r['windows_drained']} of {r['windows']}, {r.get('drain_s_total')} s in all "
                  f"(held alone {r.get('held_s_total')} s)" +
                  (f"; a reference run's longest stretch between points, median "
                   f"{stretch[0]} s, max {stretch[1]} s" if stretch else ""))
        if r.get("compile_aside"):
            count, each, total = r["compile_aside"]
            print(f"{phase}: candidates whose Triton compiles stepped aside: {count}, "
                  f"{each} s each at the median, {total} s in all")
        if r.get("unseen_checks"):
            print(f"{phase}: unseen checks that timed spare trials: "
                  f"{r['checks_with_spares']} of {r['unseen_checks']}, the spares' steps "
                  f"(asked for, loaded, looked at, the calls after) {r['spare_s_total']} s "
                  "of the windows in all")
        if r.get("candidate_stretch_s"):
            low, high = r["candidate_stretch_s"]
            print(f"{phase}: a candidate's longest stretch between points, median {low} s, "
                  f"max {high} s; by the stage it was in: " +
                  _pairs(r.get("candidate_stretch_stages") or {}))
        if r.get("settled_by"):
            print(f"{phase}: windows by their turns' settling: " +
                  _pairs(r["settled_by"]))
        if r.get("turn_ms"):
            print(f"{phase}: a turn's parts (the windows' medians), ms: " +
                  _pairs(r["turn_ms"]))
        if r["candidate_stages_s"]:
            print(f"{phase}: {r['windows']} windows; candidate worker stages, median s: " +
                  _pairs(r["candidate_stages_s"]))
        if r.get("reference_stages_s"):
            print(f"{phase}: reference worker stages, median s: " +
                  _pairs(r["reference_stages_s"]) +
                  f"; memory admission wait, median s: {r['median_admission_wait_s']}, "
                  f"max {r.get('max_admission_wait_s')}" +
                  "".join(f"; waiting for the {budget}'s budget, median {w[0]}, max {w[1]}, "
                          f"{w[2]} member-seconds in all" for budget, w in
                          (r.get("admission_waits_s") or {}).items()) +
                  "; members graded again alone after "
                  f"running out of GPU memory beside other grades: {r.get('reruns_alone', 0)}")
        if r.get("device_mib"):
            from kernelmill.grade.admitted import WORKER_BASE_BYTES
            from kernelmill.validate.admission import ALLOCATOR_FACTOR

            print(f"{phase}: a worker's device memory (NVML, its GPU work done), median / max "
                  "MiB: " + ", ".join(f"{who} {m[0]:.0f} / {m[1]:.0f}"
                                      for who, m in r["device_mib"].items()) +
                  (f"; its problem's estimate, median / max GiB: {r['admitted_gib'][0]} / "
                   f"{r['admitted_gib'][1]} (admitted at {ALLOCATOR_FACTOR}x that plus "
                   f"{WORKER_BASE_BYTES / 2**30:.2f})" if r.get("admitted_gib") else ""))
        for who in ("candidate", "reference"):
            if r.get(f"{who}_stages_cpu_s"):
                print(f"{phase}: {who} worker CPU seconds by stage, median: " +
                      _pairs(r[f"{who}_stages_cpu_s"]))
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


def _pairs(values: dict) -> str:
    """``k=v k=v ...`` of a report's dict, as the pass lines print them."""
    return " ".join(f"{k}={v}" for k, v in values.items())


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


def _own_cpu_s() -> float:
    """This process's CPU seconds, user and system (its threads: the batch's judging)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    sys.exit(main())
