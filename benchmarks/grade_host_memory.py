"""What the grading process holds on the host for a grade, against what host admission asks for
it (``Grader.host_bytes``): one group of N copies of an honest Triton answer graded on this
machine, the process's memory files (each once, by inode: a file passed on to another worker is
one file) and its anonymous memory sampled every 20 ms.

    python benchmarks/grade_host_memory.py [--members 4] [--cases scale_add row_sum] [--device cpu]

Cases: ``scale_add`` (2x + y over 16M floats: as much out as in, per input), ``row_sum`` (row
sums of a 4096x4096 matrix: 64 MB in, 16 KB out). Prints per case: the peak of the memory files
and of the anonymous memory's growth, the ask per member by output size (the one in use) and
by ``HOST_COPIES``, and the ask for the group over the peak.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "submissions"
ROW_SUM_REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=1)


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
'''
ROW_SUM_ANSWER = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + rows[:, None] * N + cols[None, :],
                    mask=(rows[:, None] < M) & (cols[None, :] < N), other=0.0)
        acc += tl.sum(x, axis=1)
    tl.store(out_ptr + rows, acc, mask=rows < M)


class ModelNew(nn.Module):
    def forward(self, x):
        M, N = x.shape
        out = torch.empty(M, device=x.device, dtype=x.dtype)
        row_sum_kernel[(triton.cdiv(M, 256),)](x, out, M, N, BLOCK_M=256, BLOCK_N=4096)
        return out
'''


def cases() -> dict[str, tuple[str, str]]:
    """Each case's reference and honest answer (the scale-add fixtures at 16M elements)."""
    reference = (FIXTURES / "ref_scale_add.py").read_text().replace("N = 4096", "N = 1 << 24")
    answer = (FIXTURES / "honest_scale_add.py").read_text() \
        .replace("BLOCK=1024", "BLOCK=1 << 18").replace("cdiv(n, 1024)", "cdiv(n, 1 << 18)")
    return {"scale_add": (reference, answer), "row_sum": (ROW_SUM_REFERENCE, ROW_SUM_ANSWER)}


def process_memory(pid: str = "self") -> tuple[int, int]:
    """A process's anonymous resident bytes and the bytes of the memory files it holds open,
    each file once (by inode)."""
    anon = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                anon = int(line.split()[1]) << 10
    files, seen = 0, set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:"):
                continue
            stat = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if stat.st_ino not in seen:
            seen.add(stat.st_ino)
            files += stat.st_blocks * 512
    return anon, files


def measure(reference: str, answer: str, members: int, device: str) -> dict:
    from kernelmill.grade.grader import HOST_COPIES, Grader

    peak = {"files": 0, "anon": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            anon, files = process_memory()
            peak["files"], peak["anon"] = max(peak["files"], files), max(peak["anon"], anon)
            time.sleep(0.02)

    with tempfile.TemporaryDirectory() as cache:
        grader = Grader(device, cache_root=cache, cpu_max_numel=1 << 26)
        base_anon, _ = process_memory()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        began = time.monotonic()
        verdicts = grader.grade_group(reference, [answer] * members)
        done.set()
        sampler.join()
        tensors = grader._sizes(reference, None).get("tensor_bytes") or 0
        return {"wall_s": time.monotonic() - began,
                "certified": sum(bool(v.get("correct")) and not v.get("hacks")
                                 for v in verdicts),
                "files": peak["files"], "anon": max(0, peak["anon"] - base_anon),
                "ask": grader.host_bytes(reference) or 0, "copies": HOST_COPIES * tensors}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--cases", nargs="+", default=list(cases()), choices=list(cases()))
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    mib = 1 << 20
    print(f"{'case':10s} {'members':>7s} {'certified':>9s} {'files MiB':>9s} {'anon MiB':>8s} "
          f"{'ask/member':>10s} {'2x tensors':>10s} {'ask/peak':>8s} {'wall s':>6s}")
    for name in args.cases:
        row = measure(*cases()[name], args.members, args.device)
        held = row["files"] + row["anon"]
        print(f"{name:10s} {args.members:7d} {row['certified']:9d} {row['files'] / mib:9.0f} "
              f"{row['anon'] / mib:8.0f} {row['ask'] / mib:10.0f} {row['copies'] / mib:10.0f} "
              f"{row['ask'] * args.members / max(held, 1):8.2f} {row['wall_s']:6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
