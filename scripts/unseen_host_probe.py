"""What the host adds to the unseen check's reading of a one-call graph replay, by what came
just before it: its spare trials' trigger (``window_worker.reads_slow``) reads that reading, and
honest LayerNorm answers at KernelBench's size read 1.08-1.12x slower on new inputs than on the
timed ones by it while their kernels' busy time was the same (H100).

    python scripts/unseen_host_probe.py [--mib 256] [--repeats 30]

A forward of LayerNorm's shape (one call per sample: its output fills the held outputs' bound)
is captured by ``timer.Timer`` as the grader's worker does, the profiler recording CUDA activity
as the witness does during the check. Then, for each way the inputs reach the buffers before a
timed replay (``Timer.once(whole=True)``), interleaved, ``--repeats`` times: ``device`` (from a
copy on the device: the timed inputs' reload), ``pageable`` (from pageable host memory: an
unseen trial's load), ``pageable+graph`` (the same, then one replay of a small graph of our own
before the timed one: the graph launch path warmed again), ``pinned`` (from page-locked host
memory), each with the device-wide synchronize inside the timed span (``sync``, the default) and
without it (``replay_sync=False``). Prints each way's median and least reading, and its excess
over ``device`` with the same synchronize.
"""
from __future__ import annotations

import argparse
import statistics


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="the input's size (MiB)")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    import torch
    from kernelmill.validate import timer as T

    if not torch.cuda.is_available():
        print("unseen_host_probe: no CUDA device")
        return 2
    numel = (args.mib << 20) // 4
    shape = (max(1, numel // (64 * 256 * 256)), 64, 256, 256)
    buffer = torch.randn(shape, device="cuda")

    def forward():
        return torch.nn.functional.layer_norm(buffer, shape[1:])

    on_device = buffer.clone()
    pageable = buffer.cpu()
    pinned = pageable.pin_memory()
    small = torch.zeros(1 << 10, device="cuda")
    own = torch.cuda.CUDAGraph()
    with torch.cuda.graph(own):
        small.add_(1.0)
    sources = {"device": on_device, "pageable": pageable, "pageable+graph": pageable,
               "pinned": pinned}
    timers = {}
    for sync in (True, False):
        timer = T.Timer(forward, "cuda", replay_sync=sync)
        info = timer.prepare()
        if info.get("method") != "cuda_graph":
            print(f"unseen_host_probe: the forward was not captured ({info})")
            return 1
        timers[sync] = timer
    print(f"input {args.mib} MiB {shape}, calls per sample {timers[True].calls_per_sample}, "
          f"estimate {timers[True].estimate_ms:.4f} ms")
    readings: dict[tuple[str, bool], list[float]] = {(way, sync): [] for way in sources
                                                      for sync in timers}
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities):
        for _ in range(args.repeats):
            for (way, sync), values in readings.items():
                buffer.copy_(sources[way])
                if way == "pageable+graph":
                    own.replay()
                timer = timers[sync]
                ms, _out = timer.once(forward, whole=True)
                values.append(ms / timer.calls_per_sample)
    print(f"{'way':<16} {'sync':<5} {'median ms':>10} {'least ms':>9} {'excess ms':>10}")
    for (way, sync), values in readings.items():
        base = statistics.median(readings[("device", sync)])
        median = statistics.median(values)
        print(f"{way:<16} {sync!s:<5} {median:>10.4f} {min(values):>9.4f} "
              f"{median - base:>10.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
