"""The one ordered registry of pipeline stages, as ``"module:STEP"`` strings.

The build runs them in this order; the CLI makes one subcommand of each. Nothing else in the
application names a stage.
"""
from __future__ import annotations

from functools import cache

from kernelmill.core.step import Step, load_step

STAGES = (
    "kernelmill.core.interop:STEP",       # import: KernelBench-format files -> records
    "kernelmill.validate.mining:STEP",    # mine: problems from real PyTorch code (sources)
    "kernelmill.synth.generate:STEP",     # synth: new problems from seeds and the op catalog
    "kernelmill.core.interop:CONCAT",     # concat: seeds + synthesized -> problems
    "kernelmill.validate.runner:STEP",    # validate: enrich every record with its checks
    "kernelmill.validate.filter:STEP",    # filter: keep the problems that passed
    "kernelmill.curate.dedup:STEP",       # dedup
    "kernelmill.curate.cluster:STEP",     # cluster
    "kernelmill.splits.split:STEP",       # split: train/eval, decontamination
    "kernelmill.splits.publish:STEP",     # publish: Hugging Face dataset folder + card
)


@cache
def stages() -> tuple[Step, ...]:
    return tuple(load_step(spec) for spec in STAGES)


def stage(name: str) -> Step:
    for step in stages():
        if step.name == name:
            return step
    raise KeyError(name)
