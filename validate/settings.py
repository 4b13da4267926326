"""The validator's settings (``ValidateConfig``, each field a ``kernelmill validate`` flag), the
fixed names and limits it runs by (worker targets, non-gating checks, CPU-second estimates) and
the ``validation`` section of a problem that could not be validated (``_failed``). Split out of
``validate.runner``, which re-exports these names.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kernelmill.core.errors import KernelmillError
from kernelmill.core.step import option

from . import checks as C

PROBE = "kernelmill.validate.probe:probe_problem"
ESTIMATE = "kernelmill.validate.memory:estimate_problem"
ESTIMATE_BYTES = 1 << 30  # host memory the estimator may hold (a worker and the source's import)
REPLAY = "kernelmill.validate.replay:replay_problem"
# checks that describe a problem without deciding whether it is kept. constant_params_used: a
# constant that does nothing at any value is usually a cheap add (real attention's key bias, zero
# after Hugging Face's init, cancels in the softmax); the expensive case, a branch it silences,
# fails no_dead_branches
NON_GATING = frozenset({"roofline", "constant_params_used"})
# checks that need the second worker (its timing window, its Inductor compile)
REPLAY_CHECKS = frozenset({"runtime", "launch_overhead", "inductor"})
# why the Inductor check did not run on CPU: the card and the report quote it, so it names
# options that exist (`kernelmill build` has no --inductor flag)
INDUCTOR_OFF_ON_CPU = ("skipped on cpu (turn it on with `kernelmill validate --inductor`, or "
                       "`inductor = true` in the [validate] table of the build config)")
# CPU seconds a probe takes, about, as a function of how many times the CPU size
# (synth.resize.CPU_MAX_NUMEL elements) its largest tensor still holds after shrinking: the
# default CPU build's 113 problems, all at or under the CPU size, took median 2.2 and max 8.4
# CPU-s (an LSTM); its float16 einsum left at 512x the CPU size by the old resize took 49.5
# (shared 2-core host). Fixed part + per CPU size, with room for the LSTM's kind.
CPU_SECONDS_FIXED = 8.0
CPU_SECONDS_PER_CPU_SIZE = 0.1


@dataclass
class ValidateConfig:
    """Validation settings; each field is also a ``kernelmill validate`` flag."""

    seed: int = option(0, "base seed of all input, weight and RNG draws")
    timeout_s: float = option(300.0, "wall-clock limit per worker (s)", result=False)
    min_ms: float = option(0.1, "runtime band: fastest eager time kept (ms, CUDA)")
    max_ms: float = option(1000.0, "runtime band: slowest eager time kept (ms, CUDA)")
    max_launch_ratio: float = option(0.8, "host issue time / GPU time above which a problem is "
                                     "launch-bound")
    sensitivity_margin: float = option(10.0, "input/weight changes must move outputs by this "
                                       "many tolerances")
    min_sensitive_fraction: float = option(0.01, "... in at least this fraction of elements")
    max_zero_fraction: float = option(0.99, "fail when an all-zeros answer is right on this "
                                      "fraction")
    max_constant_fraction: float = option(0.99, "fail when a constant answer is right on this "
                                          "fraction")
    max_dead_work: float = option(0.5, "fail when more than this share of the matmul/conv/"
                                  "attention work cannot reach the output")
    dead_call_share: float = option(0.1, "... or when one call carrying this share of it "
                                    "cannot reach the output at all")
    max_sliced_dead_work: float = option(0.2, "... or when more than this share of it makes "
                                         "whole slices (channels, positions) the output never "
                                         "reads")
    max_offset_slack: float = option(0.05, "fail when rtol on the output's magnitude adds this "
                                     "share of its variation across inputs to the slack an "
                                     "output varying about zero gets")
    max_nonaffine_slack: float = option(0.2, "... or this share of the variation of its part "
                                        "that is not an affine function of its inputs (a "
                                        "computed branch beside a passthrough)")
    inflated_tolerance: float = option(10.0, "a calibrated tolerance this many dtype floors or "
                                       "more must reject matmul operands rounded to bf16")
    tolerance_margin: float = option(10.0, "calibrated tolerance = max(dtype floor, margin x "
                                     "fp64 noise)")
    max_ablations: int = option(48, "most forward ablations tried per problem")
    inductor: bool | None = option(None, "run the TorchInductor check (default: on CUDA only; a "
                                   "cold CPU compile is ~20 s)")
    inductor_mode: str | None = option(None, "torch.compile mode for the Inductor check")
    cross_process: bool | None = option(None, "check determinism in a second worker (default: on "
                                        "CUDA only)")
    cpu_max_numel: int | None = option(None, "on CPU, shrink problems to at most this many "
                                       "elements per tensor (default: synth.resize's)")
    cpu_budget_s: float = option(60.0, "on CPU, CPU seconds each worker of a problem may use "
                                 "(at its shrunk size); a problem that needs more, or whose "
                                 "shrunk size predicts more, is flagged too_slow_on_cpu; 0: no "
                                 "budget")
    workers_per_gpu: int | None = option(None, "workers sharing each GPU (compiles overlap; "
                                         "timing is exclusive; default: CPU cores per GPU, <= 16)")
    host_memory_gib: float | None = option(None, "host memory the CPU workers may hold together "
                                           "(GiB; default: what is available, MemAvailable or "
                                           "the cgroup's room, less a tenth)", result=False)
    early_exit: bool = option(True, "skip the second worker (Inductor, timing) for a problem "
                              "the first one already failed")
    timing_ci_pct: float = option(1.0, "eager and Inductor timing: sample until the 95 "
                                  "percent confidence half-width is under this percentage of "
                                  "the median")
    timing_cap_ms: float = option(1000.0, "... or until this much time (ms, per forward); the "
                                  "GPU is held alone meanwhile")
    gating: tuple[str, ...] | None = None  # None: every check except NON_GATING

    @classmethod
    def coerce(cls, config: ValidateConfig | dict | None) -> ValidateConfig:
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(config) - names
        if unknown:
            raise KernelmillError(f"unknown validate setting(s): {', '.join(sorted(unknown))}")
        return cls(**config)

    def thresholds(self) -> dict:
        return {k: getattr(self, k) for k in C.DEFAULT_THRESHOLDS}


def _torch_version() -> str | None:
    try:
        import torch

        return torch.__version__
    except ImportError:  # pragma: no cover
        return None


def _failed(device: str, stage: str, message: str, **extra: Any) -> dict:
    checks = {"runs": C.check(False, None, f"{stage}: {message}" if stage else message)}
    return {"device": device, "torch": _torch_version(), "dtype": None, "checks": checks,
            "passed": False, "flags": ["runs"], "eager_ms": None, "inductor_ms": None,
            "inductor_speedup": None, "flops": None, "bytes": None, "roofline_ms": None,
            "headroom": None, "atol": None, "rtol": None, "difficulty": None, "aten_ops": [],
            "probe_stats": None, "resized": extra.get("resized")}
