"""Slots follow the cores a job was given (its CPU affinity), not the host's count."""
import os
import subprocess
import sys

import pytest

CHILD = """
import os
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from kernelmill.core.devices import device_slots, usable_cores
from kernelmill.grade.batch import default_slots_per_gpu
print(usable_cores(), default_slots_per_gpu(1), len(device_slots("cpu")), os.cpu_count())
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_a_process_pinned_to_one_core_sizes_its_slots_for_one():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         check=True, env=os.environ).stdout.split()
    cores, grade_slots, cpu_slots, host = map(int, out)
    assert (cores, grade_slots, cpu_slots) == (1, 1, 1)
    assert host >= cores  # the host's count is not what sized them
