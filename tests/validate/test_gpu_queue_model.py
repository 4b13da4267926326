"""The lock model of ``benchmarks/gpu_queue.py``: real locks, sleeps for the work."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_queue
from kernelmill.validate import gpu_lock


@pytest.mark.parametrize("policy", gpu_queue.POLICIES)
def test_the_model_grades_under_each_policy_and_leaves_the_lock_as_it_was(policy):
    behind, locked = gpu_lock._behind_windows, gpu_lock.GpuLock._locked
    result = gpu_queue.run(policy, slots=4, seconds=1.5, scale=0.02)
    assert result["grades"] >= 4 and result["per_min"] > 0
    # each grade held the GPU alone for its window, one window at a time
    assert 0 < result["held_pct"] < 100
    assert (gpu_lock._behind_windows, gpu_lock.GpuLock._locked) == (behind, locked)


def test_moving_work_out_of_the_shared_hold_moves_it_to_the_host_steps():
    import random

    whole = gpu_queue._jittered(random.Random(1), 0.3)
    moved = gpu_queue._jittered(random.Random(1), 0.3, held=0.25)
    shared = [sum(p) for step, p in whole if step == "shared"]
    kept = [sum(p) for step, p in moved if step == "shared"]
    assert [round(k, 9) for k in kept] == [round(s * 0.25, 9) for s in shared]
    total = lambda steps: sum(sum(p) if isinstance(p, list) else p for _, p in steps)
    assert abs(total(whole) - total(moved)) < 1e-9
    with pytest.raises(ValueError, match="policy"), gpu_queue._policy("fifo"):
        pass
