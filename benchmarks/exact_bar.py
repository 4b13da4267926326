"""How steady ``stable_exact_outputs`` is over draws of a problem's weights and inputs.

The check's verdict on a problem near its bar is a draw: this runs ``realcode.exact_outputs``
as the probe does (the problem's own draw of the inputs, then the further draws the density
pools) for each of ``--draws`` seeds of ``forwards.seeds`` and prints, per problem, how often
it was rejected, with the full noise's events over the draws of the inputs pooled and the
estimate of how often an honest kernel fails a grade (``realcode.density.honest_failures``). The
one-thread comparison is left out (as on CUDA), so that the noise's bars alone decide; the
tolerance is the dtype's floor (the probe's calibrated one is at least that).

    python benchmarks/exact_bar.py tests/fixtures/problems_defective/bool_threshold.py \\
        tests/fixtures/problems_healthy/top1_router_max_dim.py --draws 16
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path


def one_problem(path: Path, draws: int, device: str) -> dict:
    from kernelmill.validate import checks as C
    from kernelmill.validate import realcode as R
    from kernelmill.validate.forwards import (_declared_dtype, build_model, draw_inputs,
                                              load_namespace, seeds)
    from kernelmill.validate.probe import LIVENESS_DRAWS
    from kernelmill.validate.verdicts_realcode import judge_exact_outputs

    ns = load_namespace(path.read_text(), path.stem)
    rejected, events, grades = 0, [], []
    for base in range(draws):
        sd = seeds(1000 * base)
        model = build_model(ns, sd, device)
        inputs = draw_inputs(ns, sd["inputs"], device)
        ref = R.forward(model, inputs, sd["forward"])
        dtype = _declared_dtype(ref)
        jitter = C.calibrate_tolerance(None, dtype)["tol"]

        def more():
            yield draw_inputs(ns, sd["inputs_alt"], device)
            for k in range(LIVENESS_DRAWS - 2):
                yield draw_inputs(ns, sd["liveness"] + k, device)

        exact = R.exact_outputs(model, inputs, ref, sd["forward"], jitter, sd["weights_alt"],
                                device, True, jitter, more=itertools.islice(more(), None),
                                dtype=dtype)
        if exact is None:
            continue
        verdict = judge_exact_outputs({**exact, "threads_changed": None})
        rejected += not verdict["passed"]
        kinds = (exact.get("density") or {}).get("kinds") or {}
        if kinds:  # the kind the estimate fails most
            worst = max(kinds.values(), key=lambda r: r["grades"])
            events.append(worst["full"])
            grades.append(worst["grades"])
    return {"problem": path.stem, "draws": draws, "rejected": rejected, "events": events,
            "grades": grades}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--draws", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    print(f"{'problem':40} {'rejected':>9} {'events (min-median-max)':>24} "
          f"{'honest grades failed (median)':>30}")
    for path in args.problems:
        row = one_problem(path, args.draws, args.device)
        ev = row["events"]
        spread = (f"{min(ev)}-{statistics.median(ev):g}-{max(ev)}" if ev else "-")
        grade = f"{statistics.median(row['grades']):.2%}" if row["grades"] else "-"
        print(f"{row['problem']:40} {row['rejected']:>4} of {row['draws']:<3} {spread:>24} "
              f"{grade:>30}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
