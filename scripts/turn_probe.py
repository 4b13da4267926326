"""How long does a power-hungry kernel take to settle after another participant's turn? The
timing window alternates short turns (``round_ms``, 10 ms): a kernel that hits the GPU's power
cap (an fp16 4096² GEMM) starts each turn at the clock the previous, lighter participant left
and slows down within the turn, so its median depends on how turns are cut.

Two ``timer.Timer``s in one process (the GEMM, and a lighter fp32 elementwise kernel of about
the same duration) alternate as a window does. Prints (1) each sample's time by its position in
a GEMM turn (how many milliseconds until it settles), and (2) the GEMM's median over a window of
30 rounds with each turn first running ``settle`` ms untimed, for several settles, 3 windows
each: the spread between windows and the distance from the sustained time (500 ms back to back).

    python scripts/turn_probe.py
"""
from __future__ import annotations

import statistics
import sys


def main() -> int:
    import torch
    from kernelmill.validate import timer as T

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    x = torch.randn(64 * 2**20, device="cuda")
    gemm = T.Timer(lambda: a @ b, "cuda")
    light = T.Timer(lambda: x * 2.0 + 1.0, "cuda")
    gemm.prepare()
    light.prepare()
    print(f"gemm {gemm.describe()}\nlight {light.describe()}")
    gemm.warm(500)
    sustained = statistics.median(gemm.round(200))
    print(f"sustained (after 500 ms back to back): {sustained:.5f} ms/call")

    per_turn = 12
    by_position: list[list[float]] = [[] for _ in range(per_turn)]
    for _ in range(20):
        light.round(6)
        for k, ms in enumerate(gemm.round(per_turn)):
            by_position[k].append(ms)
    print("\nGEMM sample by position in its turn (after a light turn): median ms/call")
    elapsed = 0.0
    for k, values in enumerate(by_position):
        med = statistics.median(values)
        elapsed += 2 * med * gemm.calls_per_sample  # a timed and an untimed replay
        print(f"  sample {k:>2} (ends ~{elapsed:6.1f} ms into the turn): {med:.5f} "
              f"({(med / (sustained) - 1) * 100:+.1f}% vs sustained)")

    print(f"\n{'settle ms':>9} {'window medians ms/call':<40} {'spread':>7} {'vs sustained':>12}")
    for settle in (0, 5, 10, 20, 40):
        medians = []
        for _ in range(3):
            samples = []
            for _ in range(30):
                light.round(6)
                if settle:
                    gemm.warm(settle)
                samples += gemm.round(6)
            medians.append(statistics.median(samples))
        spread = (max(medians) - min(medians)) / statistics.median(medians) * 100
        off = (statistics.median(medians) / (sustained) - 1) * 100
        print(f"{settle:>9} {' '.join(f'{m:.5f}' for m in medians):<40} {spread:>6.2f}% "
              f"{off:>+11.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
