"""Does a kernel's time follow the GPU's clock, power and temperature? Times a power-hungry fp16
GEMM (cuBLAS, 4096²) and a memory-bound kernel in several fresh processes, each timed with a CUDA
graph as the grader does, while a thread samples NVML (SM clock, power, temperature); then the
same after heating the GPU with the GEMM for ``--heat`` seconds.

    python scripts/clock_probe.py [--runs 5] [--heat 3]

Prints one row per process: kernel, ms per call, SM clock (median during the timing), power,
temperature, and per kernel the spread (max-min)/median of the times and of the clocks.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time


def _sampler(handle, stop: threading.Event, samples: list) -> None:
    import pynvml

    while not stop.is_set():
        samples.append((pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                        pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,
                        pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)))
        time.sleep(0.005)


def one(kernel: str, heat: float) -> dict:
    import pynvml
    import torch
    import triton.testing

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    if kernel == "matmul_fp16_4k":
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        fn = lambda: a @ b
    else:
        x = torch.randn(16 * 2**20, device="cuda")
        fn = lambda: x * 2.0 + 1.0
    fn()
    torch.cuda.synchronize()
    if heat:
        end = time.monotonic() + heat
        while time.monotonic() < end:
            for _ in range(50):
                fn()
            torch.cuda.synchronize()
    samples: list = []
    stop = threading.Event()
    thread = threading.Thread(target=_sampler, args=(handle, stop, samples), daemon=True)
    thread.start()
    ms = triton.testing.do_bench_cudagraph(fn, rep=500)
    stop.set()
    thread.join()
    clocks, power, temp = zip(*samples) if samples else ((0,), (0,), (0,))
    return {"kernel": kernel, "heat": heat, "ms": ms, "sm_mhz": statistics.median(clocks),
            "sm_mhz_min": min(clocks), "power_w": statistics.median(power),
            "temp_c": statistics.median(temp)}


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) * 100


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--heat", type=float, default=3.0)
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], float(args.one[1]))))
        return 0
    rows = []
    for heat in (0.0, args.heat):
        for run in range(args.runs):
            for kernel in ("matmul_fp16_4k", "scale_16m"):
                done = subprocess.run([sys.executable, __file__, "--one", kernel, str(heat)],
                                      capture_output=True, text=True, check=False)
                if done.returncode:
                    print(done.stderr[-2000:], file=sys.stderr)
                    return 1
                row = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append(row)
                print(f"heat {heat:>3.0f}s run {run} {kernel:<15} {row['ms']:.5f} ms  SM "
                      f"{row['sm_mhz']:.0f} MHz (min {row['sm_mhz_min']:.0f})  "
                      f"{row['power_w']:.0f} W  {row['temp_c']:.0f} C", flush=True)
    print(f"\n{'kernel':<15} {'heat s':>6} {'ms spread':>9} {'clock spread':>12} "
          f"{'ms median':>9} {'MHz median':>10}")
    for heat in (0.0, args.heat):
        for kernel in ("matmul_fp16_4k", "scale_16m"):
            sel = [r for r in rows if r["kernel"] == kernel and r["heat"] == heat]
            ms = [r["ms"] for r in sel]
            mhz = [r["sm_mhz"] for r in sel]
            print(f"{kernel:<15} {heat:>6.0f} {spread(ms):>8.2f}% {spread(mhz):>11.2f}% "
                  f"{statistics.median(ms):>9.5f} {statistics.median(mhz):>10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
