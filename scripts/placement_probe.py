"""Does where a kernel's tensors sit in device memory change its time? (for the grader's
fidelity: one answer's time moving between grades while the reference's held still)

    python scripts/placement_probe.py [--only NAME ...] [--placements 8] [--repeats 2]

For each kernel of the fidelity set, in one process: ``--placements`` times, a padding tensor of
a random size is allocated (and kept) so the next allocations land elsewhere, the inputs are
copied to new tensors there, and the forward is timed the grader's way (a captured CUDA graph of
several calls, replayed; median of 1 ms samples). Each placement is timed ``--repeats`` times,
interleaved, so a drift of the clocks shows as disagreement between repeats of one placement,
and placement as disagreement between placements. Prints per kernel: the median ms of each
placement, the spread across placements and the worst spread across repeats of one placement.
"""
import argparse
import random
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from grade_fidelity import SET, problem_source  # noqa: E402
from kernelmill.validate.measure import load_namespace  # noqa: E402


def graph_ms(forward, inputs, calls: int = 20, samples: int = 25) -> float:
    """Median per-call ms of replays of a graph of ``calls`` forwards on ``inputs``."""
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
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def probe(name: str, answer: Path, sizes: dict, placements: int, repeats: int) -> dict:
    reference = load_namespace(problem_source(answer, sizes), f"probe_ref_{name}")
    candidate = load_namespace(answer.read_text(), f"probe_{name}")
    torch.manual_seed(0)
    init = reference["get_init_inputs"]()
    model = candidate["ModelNew"](*init).cuda().eval()
    base = [v.cuda() if isinstance(v, torch.Tensor) else v for v in reference["get_inputs"]()]
    rng = random.Random(0)
    keep, placed = [], []
    for _ in range(placements):
        keep.append(torch.empty(rng.randrange(1, 64) << 20, dtype=torch.uint8, device="cuda"))
        placed.append([v.clone() if isinstance(v, torch.Tensor) else v for v in base])
    per = {i: [] for i in range(placements)}
    with torch.no_grad():
        for _ in range(repeats):
            for index, inputs in enumerate(placed):
                per[index].append(graph_ms(model, inputs))
    medians = [statistics.median(v) for v in per.values()]
    middle = statistics.median(medians)
    return {"name": name, "ms": medians,
            "placement_spread_pct": (max(medians) - min(medians)) / middle * 100,
            "repeat_spread_pct": max((max(v) - min(v)) / statistics.median(v) * 100
                                     for v in per.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--placements", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(f"{'kernel':<18} {'placement spread %':>18} {'repeat spread %':>16}  ms per placement")
    for name, answer, sizes in SET:
        if args.only and name not in args.only:
            continue
        row = probe(name, answer, sizes, args.placements, args.repeats)
        print(f"{name:<18} {row['placement_spread_pct']:>18.2f} {row['repeat_spread_pct']:>16.2f}"
              f"  {' '.join(f'{m:.4f}' for m in row['ms'])}", flush=True)


if __name__ == "__main__":
    main()
