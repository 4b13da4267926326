"""How fast can one GPU host start CUDA worker processes? (every grade starts one per candidate,
one for its fresh references and one that times the reference, and a group's start stage read
4-14 s on an H200 while dozens started at once)

    python scripts/context_probe.py [--counts 1 4 8 16 32] [--modes torch driver]

For each mode and count N, N processes are forked at once from a parent that has imported torch
without touching CUDA (as the grader's zygote does). Each child, in order, times:

- ``init``: ``torch.cuda.init()`` (mode ``torch``) or ``cuInit`` (mode ``driver``, libcuda
  through ctypes, no torch CUDA state);
- ``context``: the first allocation (``torch.zeros(1, device="cuda")``, or
  ``cuDevicePrimaryCtxRetain`` + ``cuCtxSetCurrent`` + ``cuMemAlloc``): the driver makes the
  context here;
- ``blas`` (mode ``torch``): a first 64x64 matmul (cuBLAS's handle and workspace);

then waits until every child is done (the contexts exist side by side, as a group's do) and
exits. Prints per N: the wall time from the fork to the last child ready, contexts made per
second, and each stage's median and max over the children, with their CPU seconds.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import time

import torch


def _driver_context() -> tuple[float, float]:
    cuda = ctypes.CDLL("libcuda.so.1")
    began = time.monotonic()
    if cuda.cuInit(0) != 0:
        raise RuntimeError("cuInit failed")
    inited = time.monotonic()
    device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    for call in (lambda: cuda.cuDeviceGet(ctypes.byref(device), 0),
                 lambda: cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
                 lambda: cuda.cuCtxSetCurrent(context),
                 lambda: cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(1 << 20))):
        if call() != 0:
            raise RuntimeError("driver call failed")
    return inited - began, time.monotonic() - inited


def _torch_context() -> tuple[float, float, float]:
    began = time.monotonic()
    torch.cuda.init()
    inited = time.monotonic()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    made = time.monotonic()
    a = torch.randn(64, 64, device="cuda")
    (a @ a).sum().item()
    return inited - began, made - inited, time.monotonic() - made


def child(mode: str, write_fd: int, go_fd: int) -> None:
    cpu0 = time.process_time()
    try:
        if mode == "driver":
            init, context = _driver_context()
            stages = {"init": init, "context": context}
        else:
            init, context, blas = _torch_context()
            stages = {"init": init, "context": context, "blas": blas}
        stages["cpu"] = time.process_time() - cpu0
        stages["ready_at"] = time.time()
    except Exception as exc:  # noqa: BLE001 — reported, the probe goes on
        stages = {"error": f"{type(exc).__name__}: {exc}"}
    os.write(write_fd, (json.dumps(stages) + "\n").encode())
    os.read(go_fd, 1)  # held until every child is ready: the contexts coexist
    os._exit(0)


def run(mode: str, count: int) -> dict:
    results_r, results_w = os.pipe()
    go_r, go_w = os.pipe()
    began = time.time()
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os.close(results_r)
            os.close(go_w)
            child(mode, results_w, go_r)
        pids.append(pid)
    os.close(results_w)
    os.close(go_r)
    lines: list[dict] = []
    with os.fdopen(results_r) as reader:
        for line in reader:
            lines.append(json.loads(line))
            if len(lines) == count:
                break
    os.write(go_w, b"x" * count)
    for pid in pids:
        os.waitpid(pid, 0)
    os.close(go_w)
    errors = [line["error"] for line in lines if "error" in line]
    good = [line for line in lines if "error" not in line]
    wall = max((line["ready_at"] for line in good), default=time.time()) - began
    row = {"mode": mode, "n": count, "wall_s": round(wall, 3), "errors": errors[:2],
           "per_s": round(len(good) / wall, 2) if wall > 0 else None}
    for stage in ("init", "context", "blas", "cpu"):
        values = [line[stage] for line in good if stage in line]
        if values:
            row[stage] = (round(statistics.median(values), 3), round(max(values), 3))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    parser.add_argument("--modes", nargs="+", default=["torch", "driver"])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    print(f"{'mode':7} {'N':>3} {'wall s':>7} {'ctx/s':>6}  stage median/max s "
          "(init, context, blas, cpu)")
    for mode in args.modes:
        for count in args.counts:
            row = run(mode, count)
            rows.append(row)
            stages = "  ".join(f"{k}={row[k][0]:.3f}/{row[k][1]:.3f}"
                               for k in ("init", "context", "blas", "cpu") if k in row)
            print(f"{mode:7} {count:>3} {row['wall_s']:>7.2f} {row['per_s'] or 0:>6.1f}  "
                  f"{stages}{'  errors: ' + str(row['errors']) if row['errors'] else ''}",
                  flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
