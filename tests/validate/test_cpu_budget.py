"""The CPU build's per-problem budget (issue 49, item 1): a problem that cannot finish its checks
within ``cpu_budget_s`` CPU seconds on CPU is flagged ``too_slow_on_cpu`` (a counted drop reason)
instead of eating the wall-clock timeout, and problems that normalise by ``K ** 0.5`` shrink."""
from __future__ import annotations

import time

from kernelmill.core.record import Record
from kernelmill.core.stats import StageStats
from kernelmill.synth.resize import CPU_MAX_NUMEL, shrink_for_cpu
from kernelmill.validate.filter import keep_passed
from kernelmill.validate.runner import validate_source

# The default build's synthesized float16 problem that timed out (300 s) on CPU: `/ K ** 0.5`
# made K a "divisor", which froze K and every size it divided at full size (134 M elements).
EINSUM_FP16 = '''"""Einsum contraction followed by Softshrink (float16).

category: fused
level: 2
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 512
M = 256
K = 512
N = 1024
DTYPE = torch.float16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        out = torch.einsum("bmk,bnk->bmn", a, b)
        out = F.softshrink(out, lambd=0.25)
        return out


def get_inputs():
    return [torch.randn(BATCH, M, K, dtype=DTYPE), torch.randn(BATCH, N, K, dtype=DTYPE) / K ** 0.5]


def get_init_inputs():
    return []
'''

# Burns CPU in forward at a tiny size: only the CPU budget can stop it early.
SPIN = '''"""Elementwise scale that spins first.

category: elementwise
level: 1
"""
import torch
import torch.nn as nn

SIZE = 64


class Model(nn.Module):
    def forward(self, x):
        total = 0
        for i in range(10 ** 9):
            total += i
        return x * 2.0


def get_inputs():
    return [torch.randn(SIZE, SIZE)]


def get_init_inputs():
    return []
'''

# Sizes written in the call: resize cannot shrink it, so it stays 4 Gi elements on CPU.
HUGE = '''"""Scale of an unshrinkable input.

category: elementwise
level: 1
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0


def get_inputs():
    return [torch.randn(65536, 65536)]


def get_init_inputs():
    return []
'''


def test_root_normalisation_does_not_freeze_sizes():
    result = shrink_for_cpu(EINSUM_FP16)
    assert result.numel_after <= CPU_MAX_NUMEL
    assert {"BATCH", "K", "N"} <= set(result.changes)


def test_a_problem_over_the_cpu_budget_is_too_slow_on_cpu_not_a_timeout():
    start = time.monotonic()
    validation = validate_source(SPIN, config={"max_ablations": 0, "cpu_budget_s": 3,
                                               "timeout_s": 300})
    assert time.monotonic() - start < 150  # 6 CPU-s (estimator, probe), not the 300 s timeout
    assert validation["flags"] == ["too_slow_on_cpu"]
    assert validation["checks"]["too_slow_on_cpu"]["passed"] is False
    assert "CPU budget of 3" in validation["checks"]["too_slow_on_cpu"]["detail"]
    stats = StageStats("filter")
    record = Record.from_dict({"id": "x", "source": SPIN, "validation": validation})
    assert list(keep_passed([record], stats)) == []
    assert stats.drop_reasons() == {"failed too_slow_on_cpu": 1}


def test_a_problem_too_large_after_shrinking_is_flagged_before_it_runs():
    start = time.monotonic()
    validation = validate_source(HUGE, config={"max_ablations": 0})
    assert time.monotonic() - start < 30  # no worker ran: no estimate, no probe
    assert validation["flags"] == ["too_slow_on_cpu"]
    assert "4,294,967,296 elements" in validation["checks"]["too_slow_on_cpu"]["detail"]


def test_which_worker_ends_are_too_slow_on_cpu():
    import signal

    from kernelmill.validate.harness import WorkerResult
    from kernelmill.validate.runner import _out_of_cpu_budget

    def ended(**kw) -> WorkerResult:
        return WorkerResult(False, **kw)

    assert _out_of_cpu_budget(ended(returncode=-signal.SIGXCPU, cpu_s=60.2), 60)
    # caught SIGXCPU, killed at the hard limit: told by the CPU seconds it used
    assert _out_of_cpu_budget(ended(returncode=-signal.SIGKILL, cpu_s=65.0), 60)
    assert not _out_of_cpu_budget(ended(returncode=-signal.SIGKILL, cpu_s=3.0), 60)  # memory
    # the wall clock ran out first on a busy host while it worked: slow, not hung
    assert _out_of_cpu_budget(ended(timed_out=True, returncode=-9, cpu_s=20.0), 60)
    assert not _out_of_cpu_budget(ended(timed_out=True, returncode=-9, cpu_s=0.3), 60)  # asleep
    assert not _out_of_cpu_budget(ended(timed_out=True, returncode=-9, cpu_s=None), 60)
    assert not _out_of_cpu_budget(WorkerResult(True, returncode=0, cpu_s=61.0), 60)
