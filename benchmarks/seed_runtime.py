"""Eager and torch.compile runtimes of every seed problem at its declared size, on CUDA.

    python benchmarks/seed_runtime.py [--json PATH] [--only NAME ...] [--workers N]

Seeds are meant to take roughly 0.3-30 ms in eager PyTorch; the table marks the ones outside
that window. Compilation is CPU-bound and slow (seconds per seed), so worker processes compile
in parallel while a shared lock lets only one of them time on the GPU at a time; medians come
from ``triton.testing.do_bench`` (CUDA events, warm-up, L2 flushed between runs). Inputs are
drawn directly on the GPU. Every per-seed failure is caught and reported. Imports only torch,
triton and the standard library, so it runs on a bare GPU image.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import re
import statistics
import sys
import time
import traceback
from pathlib import Path

SEEDS_DIR = Path(__file__).resolve().parents[1] / "data" / "seeds"
WINDOW_MS = (0.3, 30.0)


def _metadata(source: str) -> tuple[str, int]:
    category = re.search(r"(?im)^category\s*:\s*([\w-]+)", source)
    level = re.search(r"(?im)^level\s*:\s*(\d+)", source)
    return (category.group(1) if category else "?"), (int(level.group(1)) if level else 0)


def _bench_ms(fn, warmup_ms: float, rep_ms: float, device: str = "cuda") -> float:
    import torch
    if device == "cpu":  # smoke runs only: wall-clock median
        fn()
        times = []
        deadline = time.perf_counter() + rep_ms / 1e3
        while len(times) < 3 or time.perf_counter() < deadline:
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)
    try:
        from triton.testing import do_bench
        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    except ImportError:  # CUDA events by hand
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        once = max(start.elapsed_time(end), 1e-3)
        for _ in range(max(1, int(warmup_ms / once))):
            fn()
        times = []
        for _ in range(max(5, int(rep_ms / once))):
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)


def _measure(path: Path, lock, options: dict) -> dict:
    import torch

    source = path.read_text()
    category, level = _metadata(source)
    device = options["device"]
    if options["max_numel"]:
        from kernelmill.synth.resize import shrink_for_cpu
        source = shrink_for_cpu(source, options["max_numel"]).source
    row = {"name": path.stem, "category": category, "level": level, "eager_ms": None,
           "compiled_ms": None, "speedup": None, "compile_s": None, "error": None}
    stage = "load"
    try:
        namespace: dict = {"__name__": f"seed_{path.stem}"}
        exec(compile(source, str(path), "exec"), namespace)
        stage = "build"
        torch.manual_seed(0)
        with torch.device(device):  # draw inputs where they are used: no host copies
            model = namespace["Model"](*namespace["get_init_inputs"]())
            inputs = namespace["get_inputs"]()
        model = model.to(device)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]

        def eager():
            return model(*inputs)

        def sync():
            if device != "cpu":
                torch.cuda.synchronize()

        stage = "eager"
        eager()
        sync()
        compiled_fn = None
        if options["compile"]:
            stage = "compile"
            try:
                compiled_model = torch.compile(model)

                def compiled_fn():
                    return compiled_model(*inputs)

                start = time.perf_counter()
                compiled_fn()  # compiles (CPU-bound) outside the GPU lock
                sync()
                row["compile_s"] = round(time.perf_counter() - start, 2)
            except Exception as exc:  # still time eager
                compiled_fn = None
                row["error"] = _describe(stage, exc)
        with lock:
            stage = "time eager"
            row["eager_ms"] = _bench_ms(eager, options["warmup_ms"], options["rep_ms"], device)
            if compiled_fn is not None:
                stage = "time compiled"
                try:
                    row["compiled_ms"] = _bench_ms(compiled_fn, options["warmup_ms"],
                                                   options["rep_ms"], device)
                    row["speedup"] = row["eager_ms"] / row["compiled_ms"]
                except Exception as exc:  # keep the eager number
                    row["error"] = _describe(stage, exc)
    except Exception as exc:
        row["error"] = _describe(stage, exc)
        if options["verbose"]:
            traceback.print_exc()
    return row


def _describe(stage: str, exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{stage}: {type(exc).__name__}: {first}"[:300]


def _worker(tasks, results, lock, options: dict) -> None:
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(options["compile_threads"]))
    import torch

    torch.set_grad_enabled(False)
    while True:
        try:
            path = tasks.get_nowait()
        except queue.Empty:
            return
        results.put(_measure(Path(path), lock, options))
        torch._dynamo.reset()
        if options["device"] != "cpu":
            torch.cuda.empty_cache()


def _print_table(rows: list[dict]) -> None:
    low, high = WINDOW_MS
    header = f"{'seed':38s} {'category':13s} {'lvl':>3s} {'eager ms':>9s} {'compile ms':>10s} " \
             f"{'speedup':>7s} {'comp s':>6s}  note"
    print(header)
    print("-" * len(header))
    for row in sorted(rows, key=lambda r: (r["eager_ms"] is None, r["eager_ms"] or 0)):
        def fmt(value, spec):
            return format(value, spec) if value is not None else "-"
        note = ""
        if row["eager_ms"] is not None and not low <= row["eager_ms"] <= high:
            note = "OUTSIDE WINDOW "
        if row["error"]:
            note += row["error"]
        print(f"{row['name'][:38]:38s} {row['category']:13s} {row['level']:3d} "
              f"{fmt(row['eager_ms'], '9.3f')} {fmt(row['compiled_ms'], '10.3f')} "
              f"{fmt(row['speedup'], '7.2f')} {fmt(row['compile_s'], '6.1f')}  {note}")
    timed = [r for r in rows if r["eager_ms"] is not None]
    inside = [r for r in timed if low <= r["eager_ms"] <= high]
    speedups = [r["speedup"] for r in rows if r["speedup"]]
    print(f"\n{len(rows)} seeds, {len(timed)} timed, {len(inside)} inside {low}-{high} ms, "
          f"{sum(1 for r in rows if r['error'])} with errors")
    if timed:
        print(f"eager median of medians {statistics.median(r['eager_ms'] for r in timed):.3f} ms")
    if speedups:
        print(f"torch.compile speedup: median {statistics.median(speedups):.2f}x, "
              f"min {min(speedups):.2f}x, max {max(speedups):.2f}x")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=Path, default=SEEDS_DIR, help="folder of seed problems")
    parser.add_argument("--only", nargs="*", default=None, help="seed names to run")
    parser.add_argument("--json", type=Path, default=None, help="write the rows as JSON here")
    parser.add_argument("--workers", type=int, default=8,
                        help="processes compiling in parallel (timing is serialized)")
    parser.add_argument("--compile-threads", type=int, default=2,
                        help="Inductor compile threads per worker")
    parser.add_argument("--no-compile", dest="compile", action="store_false",
                        help="time eager only")
    parser.add_argument("--warmup-ms", type=float, default=25.0)
    parser.add_argument("--rep-ms", type=float, default=100.0)
    parser.add_argument("--budget-s", type=float, default=340.0,
                        help="stop waiting after this long; unfinished seeds are reported")
    parser.add_argument("--verbose", action="store_true", help="print tracebacks")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu only for smoke runs of this script (wall-clock timing)")
    parser.add_argument("--max-numel", type=int, default=None,
                        help="shrink seeds first (kernelmill.synth.resize; smoke runs)")
    args = parser.parse_args(argv)

    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("seed_runtime: error: needs a CUDA device (--device cpu for a smoke run)",
              file=sys.stderr)
        return 2
    paths = sorted(args.seeds.glob("*.py"))
    if args.only:
        paths = [p for p in paths if p.stem in set(args.only)]
    if not paths:
        print(f"seed_runtime: error: no seeds in {args.seeds}", file=sys.stderr)
        return 2
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"{len(paths)} seeds on {device}, torch {torch.__version__}, "
          f"{args.workers} workers", flush=True)

    options = {"compile": args.compile, "warmup_ms": args.warmup_ms, "rep_ms": args.rep_ms,
               "compile_threads": args.compile_threads, "verbose": args.verbose,
               "device": args.device, "max_numel": args.max_numel}
    ctx = mp.get_context("spawn")
    tasks, results, lock = ctx.Queue(), ctx.Queue(), ctx.Lock()
    for path in paths:
        tasks.put(str(path))
    workers = [ctx.Process(target=_worker, args=(tasks, results, lock, options), daemon=True)
               for _ in range(max(1, min(args.workers, len(paths))))]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    rows: list[dict] = []
    deadline = started + args.budget_s
    while len(rows) < len(paths) and time.perf_counter() < deadline:
        try:
            row = results.get(timeout=1.0)
        except queue.Empty:
            if not any(w.is_alive() for w in workers) and results.empty():
                break
            continue
        rows.append(row)
        eager = f"{row['eager_ms']:.3f} ms" if row["eager_ms"] is not None else "-"
        print(f"[{len(rows)}/{len(paths)} {time.perf_counter() - started:5.0f}s] "
              f"{row['name']}: eager {eager}"
              + (f", compiled {row['compiled_ms']:.3f} ms" if row["compiled_ms"] else "")
              + (f"  ({row['error']})" if row["error"] else ""), flush=True)
    for worker in workers:
        if worker.is_alive():
            worker.terminate()
    done = {r["name"] for r in rows}
    for path in paths:
        if path.stem not in done:
            category, level = _metadata(path.read_text())
            rows.append({"name": path.stem, "category": category, "level": level,
                         "eager_ms": None, "compiled_ms": None, "speedup": None,
                         "compile_s": None, "error": "not finished within the time budget"})
    print()
    _print_table(rows)
    print(f"total {time.perf_counter() - started:.0f}s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"device": device, "torch": torch.__version__,
                                         "window_ms": WINDOW_MS, "rows": rows}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
