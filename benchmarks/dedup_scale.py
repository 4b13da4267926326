"""Dedup + cluster at scale: N synthetic problems (default 100,000), times per phase, peak memory.

    python benchmarks/dedup_scale.py [--n 100000] [--workers 2] [--keep DIR]

Sources are random compositions of torch ops (1-7 ops: a layer, activations, elementwise
epilogues, reductions, normalizations) with random sizes, constant names and variable names,
written the way problems are (docstring, imports, UPPER_CASE sizes, Model, get_inputs,
get_init_inputs). About 5% are planted copies of earlier problems (reformatted and renamed, or
resized) so the exact and structural paths do real work. Prints one table; peak memory is the
maximum resident set of this process and of its worker processes.
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

from kernelmill.core.canonical import content_hash
from kernelmill.curate.cluster import cluster_file
from kernelmill.curate.dedup import dedup_file
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter

LAYERS = [
    ("nn.Linear({cin}, {cout})", "linear", "[torch.randn({b}, {cin})]"),
    ("nn.Conv2d({cin}, {cout}, {k}, padding={p})", "conv", "[torch.randn({b}, {cin}, {h}, {h})]"),
    ("nn.Conv1d({cin}, {cout}, {k})", "conv1d", "[torch.randn({b}, {cin}, {h})]"),
    ("nn.ConvTranspose2d({cin}, {cout}, {k}, stride=2)", "deconv",
     "[torch.randn({b}, {cin}, {h}, {h})]"),
    (None, "plain", "[torch.randn({b}, {cin})]"),
]
UNARY = ["torch.relu({x})", "torch.sigmoid({x})", "torch.tanh({x})", "F.gelu({x})",
         "F.silu({x})", "{x}.abs()", "torch.exp({x})", "F.leaky_relu({x}, {f})",
         "torch.clamp({x}, min=-{f}, max={f})", "F.hardtanh({x})", "F.softplus({x})",
         "F.elu({x})", "F.mish({x})", "torch.log1p({x}.abs())", "{x} * {f}", "{x} + {f}",
         "{x} - {f}", "{x} / {f}", "torch.square({x})", "F.hardswish({x})"]
REDUCE = ["torch.sum({x}, dim=1, keepdim=True)", "{x}.mean(dim=1, keepdim=True)",
          "torch.amax({x}, dim=1, keepdim=True)", "torch.softmax({x}, dim=1)",
          "torch.log_softmax({x}, dim=1)", "F.normalize({x}, dim=1)"]
NAMES = ["x", "h", "y", "out", "t", "z", "act", "feat", "tmp", "val"]


def make_source(rng: random.Random) -> str:
    layer, _kind, inputs = rng.choice(LAYERS)
    sizes = {"b": rng.choice([8, 16, 32, 64, 128]), "cin": rng.choice([3, 16, 32, 64, 256]),
             "cout": rng.choice([16, 32, 64, 128]), "k": rng.choice([1, 3, 5, 7]),
             "p": rng.choice([0, 1]), "h": rng.choice([16, 32, 64, 128])}
    names = rng.sample(NAMES, 3)
    consts = [f"{w}_{rng.randint(0, 9)}" for w in ("BATCH", "IN_CH", "OUT_CH", "KSIZE", "DIM")]
    lines = ['"""Synthetic composition.\n\ncategory: fused\nlevel: 2\n"""', "import torch",
             "import torch.nn as nn", "import torch.nn.functional as F", ""]
    lines += [f"{consts[0]} = {sizes['b']}", f"{consts[1]} = {sizes['cin']}",
              f"{consts[2]} = {sizes['cout']}", f"{consts[3]} = {sizes['k']}",
              f"{consts[4]} = {sizes['h']}", "", "", "class Model(nn.Module):",
              "    def __init__(self, in_ch, out_ch, ksize):", "        super().__init__()"]
    if layer:
        lines.append(f"        self.layer = {layer.format(**sizes).replace(str(sizes['cin']), 'in_ch', 1)}")
    lines.append(f"        self.scale = {rng.uniform(0.1, 2.0):.3f}")
    x = names[0]
    lines += ["", f"    def forward(self, {x}):"]
    cur = x
    if layer:
        lines.append(f"        {names[1]} = self.layer({cur})")
        cur = names[1]
    for _ in range(rng.randint(1, 6)):
        op = rng.choice(UNARY if rng.random() < 0.8 else REDUCE)
        target = rng.choice(names[1:])
        lines.append(f"        {target} = {op.format(x=cur, f=round(rng.uniform(0.1, 3), 2))}")
        cur = target
    lines.append(f"        return {cur} * self.scale")
    shape = inputs.format(b=consts[0], cin=consts[1], h=consts[4])
    lines += ["", "", "def get_inputs():", f"    return {shape}", "", "",
              "def get_init_inputs():", f"    return [{consts[1]}, {consts[2]}, {consts[3]}]", ""]
    return "\n".join(lines)


def variant(source: str, rng: random.Random) -> str:
    """A planted copy: reformatted with a comment, or resized."""
    if rng.random() < 0.5:
        return "# copy\n" + source.replace("    def forward(self, ", "    def forward(self,  ")
    return source.replace("= 16\n", "= 24\n").replace("= 32\n", "= 48\n")


def write_records(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    sources: list[str] = []
    with JsonlWriter(path, resume=False) as writer:
        i = 0
        while writer.written < n:
            if sources and rng.random() < 0.05:
                source = variant(rng.choice(sources), rng)
            else:
                source = make_source(rng)
                sources.append(source)
            i += 1
            # ids hash the raw text (cheap); a reformatted copy gets its own id, as an
            # independently generated duplicate would
            record = Record(id=content_hash(source), source=source, name=f"synthetic_{i}",
                            category="fused", level=2)
            writer.write(record)


def peak_mb() -> tuple[float, float]:
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return self_kb / 1024, child_kb / 1024


def cpu_seconds() -> tuple[float, float]:
    """(CPU seconds of this process, of its finished children)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def cpu_delta(before: tuple[float, float]) -> tuple[float, float]:
    now = cpu_seconds()
    return now[0] - before[0], now[1] - before[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="keep the files in this folder")
    parser.add_argument("--reuse", action="store_true",
                        help="reuse raw.jsonl already in --keep instead of generating it")
    args = parser.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="dedup_scale_")) if args.keep is None else args.keep
    folder.mkdir(parents=True, exist_ok=True)
    raw, deduped, clustered = folder / "raw.jsonl", folder / "dedup.jsonl", folder / "cluster.jsonl"
    for path in (deduped, clustered):
        path.unlink(missing_ok=True)
    clock = time.perf_counter()
    if not (args.reuse and raw.exists()):
        write_records(raw, args.n, args.seed)
    generate_s = time.perf_counter() - clock

    dedup_t: dict[str, float] = {}
    clock, cpu = time.perf_counter(), cpu_seconds()
    dstats = dedup_file(raw, deduped, workers=args.workers, timings=dedup_t)
    dedup_s, dedup_cpu = time.perf_counter() - clock, cpu_delta(cpu)
    cluster_t: dict[str, float] = {}
    clock, cpu = time.perf_counter(), cpu_seconds()
    cstats = cluster_file(deduped, clustered, timings=cluster_t)
    cluster_s, cluster_cpu = time.perf_counter() - clock, cpu_delta(cpu)
    self_mb, child_mb = peak_mb()

    print(f"dedup + cluster of {args.n:,} synthetic records (workers={args.workers}; "
          f"generating them took {generate_s:.1f} s, not counted)")
    print(f"{'phase':<28}{'seconds':>10}")
    for name, seconds in dedup_t.items():
        print(f"{'dedup: ' + name:<28}{seconds:>10.2f}")
    print(f"{'dedup total':<28}{dedup_s:>10.2f}")
    for name, seconds in cluster_t.items():
        print(f"{'cluster: ' + name:<28}{seconds:>10.2f}")
    print(f"{'cluster total':<28}{cluster_s:>10.2f}")
    print(f"{'dedup + cluster':<28}{dedup_s + cluster_s:>10.2f}")
    main_cpu = dedup_cpu[0] + cluster_cpu[0]
    worker_cpu = dedup_cpu[1] + cluster_cpu[1]
    print(f"CPU seconds: main process {main_cpu:.1f}, worker processes {worker_cpu:.1f}; "
          f"on {args.workers} idle cores that is about {main_cpu + worker_cpu / args.workers:.0f} s "
          f"of wall time (load average now {os.getloadavg()[0]:.1f})")
    print(f"peak RSS: main process {self_mb:,.0f} MB, largest worker {child_mb:,.0f} MB")
    print(dstats.summary())
    print(cstats.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
