"""Whether NVML's power and thermal violation counters (``gpus.gpu_activity``'s ``held_ns``, the
window setting ``settle_if: held``) see a kernel at the GPU's power cap, and how often they move.

    python scripts/held_probe.py [--seconds 1.5] [--device cuda]

For a heavy load (fp16 GEMMs back to back) and a light one (an elementwise add of a small
vector), each run for ``--seconds``: the counters before and after, and, polled every 2 ms from a
thread meanwhile, the times at which they changed (their update period: a hold inside a window's
turn is seen only once they move). Then the same reading after an idle pause.
"""
from __future__ import annotations

import argparse
import itertools
import json
import threading
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    import torch
    from kernelmill.validate.gpus import gpu_activity

    def read() -> dict:
        return gpu_activity(args.device) or {}

    if not torch.cuda.is_available():
        print("held_probe: no CUDA device")
        return 2
    first = read()
    print("first reading:", json.dumps(first))
    if "held_ns" not in first:
        print("held_probe: this GPU keeps no violation counters (settle_if: held settles always)")
    a = torch.randn(4096, 4096, device=args.device, dtype=torch.float16)
    b = torch.randn(4096, 4096, device=args.device, dtype=torch.float16)
    x = torch.randn(1 << 16, device=args.device)
    loads = {"gemm fp16 4096": lambda: a @ b, "add 64k": lambda: x + 1.0}
    for name, work in loads.items():
        changes: list[tuple[float, int, int]] = []
        stop = threading.Event()

        def poll(stop: threading.Event = stop, changes: list = changes) -> None:
            last = read().get("held_ns")
            began = time.monotonic()
            while not stop.is_set():
                now = read()
                held, sm = now.get("held_ns"), now.get("sm_mhz")
                if held != last:
                    changes.append((round((time.monotonic() - began) * 1e3, 1), held, sm))
                    last = held
                time.sleep(0.002)
        before = read()
        watcher = threading.Thread(target=poll, daemon=True)
        watcher.start()
        began = time.monotonic()
        calls = 0
        while time.monotonic() - began < args.seconds:
            for _ in range(20):
                work()
            torch.cuda.synchronize()
            calls += 20
        stop.set()
        watcher.join()
        after = read()
        gaps = [round(b[0] - a[0], 1) for a, b in itertools.pairwise(changes)]
        held = (after.get("held_ns") or 0) - (before.get("held_ns") or 0) \
            if "held_ns" in after and "held_ns" in before else None
        print(f"{name}: {calls} calls in {args.seconds:g} s; held {held and held / 1e6} ms; "
              f"SM {before.get('sm_mhz')} -> {after.get('sm_mhz')} MHz; counter changes "
              f"{len(changes)}, first at {changes[0][0] if changes else None} ms, gaps (ms) "
              f"median {sorted(gaps)[len(gaps) // 2] if gaps else None}, "
              f"max {max(gaps) if gaps else None}")
        time.sleep(1.0)
    print("after a 1 s pause:", json.dumps(read()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
