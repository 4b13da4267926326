"""What the candidate worker's profiler session costs on this GPU: kernel time measured with the
session recording every replayed kernel (``on``), with the session ended for the timing rounds
and started again after them as the grader does for a captured graph (``paused``), and with no
profiler at all; and the seconds spent stopping the session and reading its records.

    python scripts/profiler_cost.py [--only NAME ...] [--reps 400] [--device cuda]

In one process, no sandbox: the point is the profiler, not the harness.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from grade_fidelity import SET, problem_source  # noqa: E402
from kernelmill.grade.witness import Witness  # noqa: E402
from kernelmill.validate.measure import load_namespace, median_ci_pct  # noqa: E402
from kernelmill.validate.measure import synchronize  # noqa: E402
from kernelmill.validate.timer import Timer  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--only", nargs="*", default=["scale_add_4k", "relu_16k", "row_sum_64x96",
                                                    "softmax_4kx4k", "matmul_fp16_2k"])
parser.add_argument("--reps", type=int, default=400)
parser.add_argument("--device", default="cuda")
args = parser.parse_args()


def build(name, answer, sizes):
    ref = load_namespace(problem_source(answer, sizes), f"ref_{name}")
    cand = load_namespace(answer.read_text(), f"cand_{name}")
    torch.manual_seed(0)
    model = cand["ModelNew"](*ref["get_init_inputs"]()).to(args.device)
    inputs = [x.to(args.device) if isinstance(x, torch.Tensor) else x
              for x in ref["get_inputs"]()]
    return model, inputs


def run(model, inputs, mode):
    witness = Witness(args.device) if mode != "none" else None
    if witness:
        witness.start()

    def forward():
        if witness is None:
            with torch.no_grad():
                return model(*inputs)
        with torch.no_grad(), witness.call():
            return model(*inputs)

    for _ in range(3):
        forward()
    synchronize(args.device)
    timer = Timer(forward, args.device)
    timer.prepare()
    if mode == "paused":
        witness.pause()
    timer.warm(200)
    samples = timer.round(args.reps)
    if mode == "paused":
        witness.resume()
    forward()  # an audit call after the window: its kernels must be recorded
    synchronize(args.device)
    stop_s = parse_s = 0.0
    events = kernels_last = None
    if witness:
        began = time.perf_counter()
        witness.stop()
        stop_s = time.perf_counter() - began
        began = time.perf_counter()
        per_call = witness.per_call()
        parse_s = time.perf_counter() - began
        events = len(witness._events or [])
        kernels_last = len(per_call[-1]["kernels"]) if per_call else None
        if witness.error:
            raise RuntimeError(f"witness: {witness.error}")
    return {"us": statistics.median(samples) * 1e3, "ci": median_ci_pct(samples),
            "method": timer.method, "calls": timer.calls_per_sample, "stop_s": stop_s,
            "parse_s": parse_s, "events": events, "audit_kernels": kernels_last}


print(f"{'case':16s} {'mode':8s} {'method':10s} {'calls':>5s} {'median_us':>10s} {'ci%':>6s} "
      f"{'stop_s':>7s} {'parse_s':>7s} {'events':>8s} {'audit_k':>7s}", flush=True)
for name, answer, sizes in SET:
    if name not in args.only:
        continue
    model, inputs = build(name, answer, sizes)
    for mode in ("none", "on", "paused", "none"):
        try:
            r = run(model, inputs, mode)
        except Exception as exc:  # noqa: BLE001
            print(f"{name:16s} {mode:8s} FAILED {type(exc).__name__}: {exc}"[:300], flush=True)
            continue
        print(f"{name:16s} {mode:8s} {r['method']:10s} {r['calls']:5d} {r['us']:10.3f} "
              f"{r['ci'] or 0:6.2f} {r['stop_s']:7.2f} {r['parse_s']:7.2f} "
              f"{r['events'] or 0:8d} {r['audit_kernels'] if r['audit_kernels'] is not None else '-':>7}",
              flush=True)
