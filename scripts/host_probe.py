"""Does a busy host change a captured graph's timing? (group windows on an H100: honest 1 µs
kernels read 1.5x slow in some samples and 2x slow on the parent's clock while other grades kept
the 16 cores busy)

    python scripts/host_probe.py [--only NAME ...] [--busy N]

For small kernels of the fidelity set, graphs of 64, 256 and 1024 calls, on an idle host and
then with ``--busy`` spinning processes: the host µs one ``replay()`` takes to return, the
device time of one call (a graph replayed behind a spin kernel that covers its launch), the
grader's sample (an untimed replay, then a timed one), the same sample covered by a spin kernel
instead, how often the GPU reached the start event before the timed graph was launched, and
the per-call wall time of 200 replays back to back (the parent clock's loop).
"""
import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from grade_fidelity import SET, problem_source  # noqa: E402
from kernelmill.validate.measure import load_namespace  # noqa: E402


def spin() -> None:
    while True:
        pass


def gpu_neighbour(kind: str) -> None:
    """Another process's GPU work outside any lock: ``copies`` (256 MB to and from the
    device), ``alloc`` (2 GB allocated, touched and given back to the driver), ``context``
    (a process that creates a CUDA context, allocates 1 GB and exits, again and again),
    ``profiler`` (an idle process with a Kineto session open)."""
    import subprocess

    if kind == "context":
        code = "import torch; x = torch.ones(1 << 28, device='cuda'); torch.cuda.synchronize()"
        while True:
            subprocess.run([sys.executable, "-c", code], check=False)
    torch.cuda.init()
    if kind == "copies":
        host = torch.empty(1 << 26, pin_memory=False)
        while True:
            dev = host.cuda()
            dev.cpu()
    elif kind == "alloc":
        while True:
            x = torch.ones(1 << 29, device="cuda")
            del x
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    elif kind == "profiler":
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            while True:
                time.sleep(0.01)


def capture(forward, inputs, calls):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            forward(*inputs)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(calls):
            forward(*inputs)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    return graph


def measure(graph, calls: int, cycles: int) -> dict:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    host, covered, plain, early_plain, early_cover = [], [], [], 0, 0
    for _ in range(40):
        begin = time.perf_counter()
        graph.replay()
        host.append((time.perf_counter() - begin) * 1e6)
        torch.cuda.synchronize()
    for _ in range(40):  # the grader's sample
        graph.replay()
        start.record()
        graph.replay()
        early_plain += bool(start.query())
        end.record()
        end.synchronize()
        plain.append(start.elapsed_time(end) / calls)
    for _ in range(40):  # covered by a spin kernel
        torch.cuda._sleep(cycles)
        start.record()
        graph.replay()
        early_cover += bool(start.query())
        end.record()
        end.synchronize()
        covered.append(start.elapsed_time(end) / calls)
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for _ in range(200):
        graph.replay()
    torch.cuda.synchronize()
    loop = (time.perf_counter() - begin) * 1e3 / (200 * calls)
    med = statistics.median
    return {"host_us": med(host), "covered_us": med(covered) * 1e3,
            "plain_us": med(plain) * 1e3, "plain_max_us": max(plain) * 1e3,
            "covered_max_us": max(covered) * 1e3, "early_plain": early_plain,
            "early_cover": early_cover, "loop_us": loop * 1e3}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*",
                        default=["relu_16k", "softmax_128x512", "scale_add_4k", "row_sum_64x96"])
    parser.add_argument("--busy", type=int, default=32)
    parser.add_argument("--loads", nargs="*",
                        default=["idle", "busy", "copies", "alloc", "context", "profiler"])
    parser.add_argument("--calls", nargs="*", type=int, default=[64, 256, 1024])
    parser.add_argument("--sleep-cycles", type=int, default=4_000_000)  # ~2 ms at 1.98 GHz
    args = parser.parse_args()
    cases = []
    for name, answer, sizes in SET:
        if name not in args.only:
            continue
        reference = load_namespace(problem_source(answer, sizes), f"host_ref_{name}")
        candidate = load_namespace(answer.read_text(), f"host_{name}")
        torch.manual_seed(0)
        model = candidate["ModelNew"](*reference["get_init_inputs"]()).cuda().eval()
        inputs = [v.cuda() if isinstance(v, torch.Tensor) else v
                  for v in reference["get_inputs"]()]
        for calls in args.calls:
            cases.append((name, calls, capture(model, inputs, calls)))
    print(f"{'kernel':18} {'calls':>5} {'load':>8} {'replay host µs':>14} {'call µs covered':>15} "
          f"{'sample µs':>9} {'max':>7} {'covered max':>11} {'early':>5} {'early cov':>9} "
          f"{'loop µs/call':>12}")
    spawn = multiprocessing.get_context("spawn")
    for load in args.loads:
        spinners = []
        if load == "busy":
            spinners = [multiprocessing.Process(target=spin, daemon=True)
                        for _ in range(args.busy)]
        elif load != "idle":
            spinners = [spawn.Process(target=gpu_neighbour, args=(load,), daemon=True)
                        for _ in range(2)]
        for p in spinners:
            p.start()
        if spinners:
            time.sleep(1.0 if load == "busy" else 8.0)
        try:
            for name, calls, graph in cases:
                r = measure(graph, calls, args.sleep_cycles)
                print(f"{name:18} {calls:>5} {load:>8} {r['host_us']:>14.1f} "
                      f"{r['covered_us']:>15.3f} {r['plain_us']:>9.3f} {r['plain_max_us']:>7.3f} "
                      f"{r['covered_max_us']:>11.3f} {r['early_plain']:>5} "
                      f"{r['early_cover']:>9} {r['loop_us']:>12.3f}", flush=True)
        finally:
            for p in spinners:
                p.kill()
            if load == "context":
                import subprocess
                subprocess.run(["pkill", "-f", "torch.ones(1 << 28"], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
