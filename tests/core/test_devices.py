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


def test_a_cgroup_cpu_quota_caps_the_cores(tmp_path):
    """A container given a CPU quota (``--cpus``) sees every host core in its affinity; the
    quota, cgroup v2 or v1, in its own cgroup or at the root, is what it may use."""
    from kernelmill.core.devices import cgroup_cpus

    v2 = tmp_path / "v2"
    (v2 / "job").mkdir(parents=True)
    (v2 / "job" / "cpu.max").write_text("250000 100000\n")
    (v2 / "cpu.max").write_text("max 100000\n")
    member = tmp_path / "cgroup"
    member.write_text("0::/job\n")
    assert cgroup_cpus(str(v2), str(member)) == 3  # 2.5 CPUs: three cores busy in part
    member.write_text("0::/\n")
    assert cgroup_cpus(str(v2), str(member)) is None  # "max": no quota
    v1 = tmp_path / "v1"
    (v1 / "cpu,cpuacct" / "docker").mkdir(parents=True)
    (v1 / "cpu,cpuacct" / "docker" / "cpu.cfs_quota_us").write_text("400000\n")
    (v1 / "cpu,cpuacct" / "docker" / "cpu.cfs_period_us").write_text("100000\n")
    member.write_text("4:cpu,cpuacct:/docker\n3:pids:/docker\n")
    assert cgroup_cpus(str(v1), str(member)) == 4
    (v1 / "cpu,cpuacct" / "docker" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpus(str(v1), str(member)) is None
    assert cgroup_cpus(str(tmp_path / "none"), str(tmp_path / "missing")) is None
