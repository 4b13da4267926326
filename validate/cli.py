"""``kernelmill validate IN.jsonl --out OUT.jsonl``: validate problem records on a device."""
from __future__ import annotations

import argparse
import dataclasses

from .runner import ValidateConfig

_HELP = {
    "seed": "base seed of all input, weight and RNG draws",
    "timeout_s": "wall-clock limit per worker (s)",
    "min_ms": "runtime band: fastest eager time kept (ms, CUDA)",
    "max_ms": "runtime band: slowest eager time kept (ms, CUDA)",
    "max_launch_ratio": "host issue time / GPU time above which a problem is launch-bound",
    "sensitivity_margin": "input/weight changes must move outputs by this many tolerances",
    "min_sensitive_fraction": "... in at least this fraction of elements",
    "max_zero_fraction": "fail when an all-zeros answer is right on this fraction",
    "max_constant_fraction": "fail when a constant answer is right on this fraction",
    "tolerance_margin": "calibrated tolerance = max(dtype floor, margin x fp64 noise)",
    "max_ablations": "most forward ablations tried per problem",
    "inductor_mode": "torch.compile mode for the Inductor check",
    "cpu_max_numel": "on CPU, shrink problems to at most this many elements per tensor",
    "workers_per_gpu": "workers sharing each GPU (compiles overlap; timing is exclusive)",
}


def _cmd_validate(args: argparse.Namespace) -> int:
    from .runner import validate_file

    config = {name: getattr(args, name) for name in _HELP if getattr(args, name) is not None}
    if args.inductor is not None:
        config["inductor"] = args.inductor
    if args.cross_process is not None:
        config["cross_process"] = args.cross_process
    stats = validate_file(args.input, args.out, device=args.device, workers=args.workers,
                          backend=args.backend, address=args.address, config=config)
    print(stats.summary())
    reasons = stats.drop_reasons()
    if reasons:
        width = max(len(r) for r in reasons)
        for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
            print(f"  failed {reason:<{width}}  {n}")
    print(f"wrote {args.out} in {stats.seconds:.1f}s")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "validate", help="run every problem on a device and record its checks",
        description="Validate problem records: runs, finite, deterministic, not stochastic, "
        "input/weight sensitive, not near-zero/constant/affine, no dead ops, tolerance vs fp64, "
        "runtime band, launch overhead, TorchInductor, roofline, difficulty. Every record is "
        "written to OUT with its validation section; rerunning resumes.")
    p.add_argument("input", help="problem records (JSONL)")
    p.add_argument("--out", required=True, help="validated records (JSONL, appended)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
    p.add_argument("--workers", type=int, help="parallel problems (default: CUDA "
                   "workers-per-gpu x GPUs, CPU 2)")
    p.add_argument("--backend", choices=("local", "ray"), default="local")
    p.add_argument("--address", help="Ray cluster address (--backend ray)")
    defaults = ValidateConfig()
    for f in dataclasses.fields(ValidateConfig):
        if f.name not in _HELP:
            continue
        kind = {"int": int, "float": float}.get(str(f.type).split(" ")[0], str)
        p.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=kind, default=None,
                       help=f"{_HELP[f.name]} (default {getattr(defaults, f.name)})")
    p.add_argument("--inductor", dest="inductor", action=argparse.BooleanOptionalAction,
                   default=None, help="run the TorchInductor check (default: on CUDA only)")
    p.add_argument("--cross-process", dest="cross_process",
                   action=argparse.BooleanOptionalAction, default=None,
                   help="check determinism in a second worker (default: on CUDA only)")
    p.set_defaults(func=_cmd_validate)
