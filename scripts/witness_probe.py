"""What the profiler tells about GPU kernels on this machine, for the grader's witness.

    python scripts/witness_probe.py [--only NAME ...] [--rounds 4]

1. ``links``: every record of a short session in which a user range holds an ATen op, a Triton
   launch and a replay of a captured CUDA graph: which device records are linked to a host
   record (``linked_correlation_id``), and whether their start times fall inside the range.
2. ``unseen``: per kernel of the fidelity set (plus a device-side answer cache), one-call graph
   replays timed two ways after an L2 flush: CUDA events around the replay, and the sum of the
   device records' durations inside a user range around it; on the inputs of the call before
   (``seen``) and on new ones (``unseen``).

In one process, no sandbox: the point is the profiler, not the harness.
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from grade_fidelity import SET, SUBMISSIONS, problem_source  # noqa: E402
from kernelmill.validate.measure import L2Flush, load_namespace  # noqa: E402
from kernelmill.validate.timer import Timer  # noqa: E402

HOSTILE = ROOT / "tests" / "hostile"
EXTRA = [("device_cache_32x64", HOSTILE / "observed_device_cache.py", {}),
         ("honest_linear_32x64", HOSTILE / "honest_linear.py", {}),
         ("device_cache_512", HOSTILE / "observed_device_cache.py",
          {"M": 512, "K": 512, "N": 512}),
         ("honest_linear_512", HOSTILE / "honest_linear.py", {"M": 512, "K": 512, "N": 512})]


@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def _records(prof):
    results = prof.kineto_results
    cpu = torch._C._autograd.DeviceType.CPU
    rows = []
    for e in results.events():
        rows.append({"name": e.name(), "cuda": e.device_type() != cpu,
                     "user": e.is_user_annotation(), "corr": e.correlation_id(),
                     "linked": e.linked_correlation_id(), "start": e.start_ns(),
                     "end": e.end_ns(), "dur_us": e.duration_ns() / 1e3})
    return rows


def links() -> None:
    x = torch.randn(1 << 16, device="cuda")
    y = torch.empty_like(x)
    static_in = torch.randn(1 << 16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        static_out = static_in * 3 + 1
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = static_in * 3 + 1
    _double[(64,)](x, y, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    with torch.autograd.profiler.profile(use_device="cuda", use_kineto=True) as prof:
        with torch.autograd.profiler.record_function("probe.range"):
            torch.relu(x)
            with torch.autograd.profiler.record_function("probe.launch"):
                _double[(64,)](x, y, x.numel(), BLOCK=1024)
            graph.replay()
            torch.cuda.synchronize()
    rows = _records(prof)
    base = min(r["start"] for r in rows)
    host = {r["corr"]: r["name"] for r in rows if not r["cuda"]}
    span = next(r for r in rows if r["name"] == "probe.range" and not r["cuda"])
    print("\n== links: every record (start/end in µs from the first record)")
    for r in sorted(rows, key=lambda r: r["start"]):
        inside = span["start"] <= r["start"] <= span["end"]
        print(f"{'CUDA' if r['cuda'] else 'host'} user={int(r['user'])} corr={r['corr']:>6} "
              f"linked={r['linked']:>6} ->{host.get(r['linked'], '-')[:24]:24} "
              f"start={(r['start'] - base) / 1e3:9.1f} dur={r['dur_us']:8.2f} "
              f"in_range={int(inside)} {r['name'][:70]}")
    del static_out


def build(name, answer, sizes):
    text = answer.read_text()
    if "# problem:" in text and answer.parent != HOSTILE:
        ref_source = problem_source(answer, sizes)
    else:
        problem = next(line.split()[-1] for line in text.splitlines()
                       if line.startswith("# problem:"))
        ref_source = (SUBMISSIONS / f"{problem}.py").read_text()
        for constant, value in sizes.items():
            ref_source = ref_source.replace(f"\n{constant} = ", f"\n{constant} = {value}  # ", 1)
    ref = load_namespace(ref_source, f"ref_{name}")
    cand = load_namespace(text, f"cand_{name}")
    torch.manual_seed(0)
    model = cand["ModelNew"](*ref["get_init_inputs"]()).cuda()
    draw = lambda: [t.cuda() if isinstance(t, torch.Tensor) else t  # noqa: E731
                    for t in ref["get_inputs"]()]
    return model, draw


def unseen(name, answer, sizes, rounds: int) -> dict:
    model, draw = build(name, answer, sizes)
    buffers = draw()
    fn = lambda: model(*buffers)  # noqa: E731
    with torch.no_grad():
        timer = Timer(fn, "cuda")
        timer.prepare()
        graph, _out = timer._single
        flush = L2Flush("cuda")
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        events = {"seen": [], "unseen": []}
        labels = []
        with torch.autograd.profiler.profile(use_device="cuda", use_kineto=True) as prof:
            for _ in range(rounds):
                for kind in ("seen", "unseen"):
                    if kind == "unseen":
                        for b, v in zip(buffers, draw()):
                            if isinstance(b, torch.Tensor):
                                b.copy_(v)
                    else:
                        graph.replay()  # the call before, on the same inputs
                    torch.cuda.synchronize()
                    flush.flush()
                    with torch.autograd.profiler.record_function(f"probe.{kind}"):
                        start.record()
                        graph.replay()
                        torch.cuda.synchronize()
                        end.record()
                    end.synchronize()
                    events[kind].append(start.elapsed_time(end) * 1e3)
                    labels.append(kind)
    rows = _records(prof)
    spans = sorted((r for r in rows if not r["cuda"] and r["name"].startswith("probe.")),
                   key=lambda r: r["start"])
    kernels = [r for r in rows if r["cuda"] and not r["user"]]
    device = {"seen": [], "unseen": []}
    for span in spans:
        kind = span["name"].split(".")[1]
        device[kind].append(sum(k["dur_us"] for k in kernels
                                if span["start"] <= k["start"] <= span["end"]))
    linked = sum(1 for k in kernels if k["linked"] > 0)
    med = lambda v: statistics.median(v) if v else float("nan")  # noqa: E731
    row = {"name": name, "events_seen": med(events["seen"]),
           "events_unseen": min(events["unseen"]), "dev_seen": med(device["seen"]),
           "dev_unseen": min(device["unseen"]), "dev_seen_all": device["seen"],
           "dev_unseen_all": device["unseen"], "kernels": len(kernels), "linked": linked}
    print(f"{name:22} events seen {row['events_seen']:8.2f} unseen {row['events_unseen']:8.2f} "
          f"| device seen {row['dev_seen']:8.2f} unseen {row['dev_unseen']:8.2f} "
          f"ratio {row['dev_unseen'] / max(row['dev_seen'], 1e-9):5.2f} "
          f"| kernels {len(kernels)} linked {linked} "
          f"| seen {[round(v, 2) for v in device['seen']]} "
          f"unseen {[round(v, 2) for v in device['unseen']]}", flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    links()
    print("\n== unseen: µs per call (events: min over unseen, median over seen)")
    for name, answer, sizes in [*SET, *EXTRA]:
        if args.only and name not in args.only:
            continue
        try:
            unseen(name, answer, sizes, args.rounds)
        except Exception as exc:  # noqa: BLE001 — a probe: say what failed, go on
            print(f"{name:22} failed: {type(exc).__name__}: {exc}"[:300], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
