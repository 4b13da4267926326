"""Host-memory admission of CPU workers: real problems validated against a small configured
budget (never the machine's real size), with the workers' resident memory watched from outside."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from kernelmill.data import SEEDS_DIR
from kernelmill.validate import memory as MM
from kernelmill.validate.admission import reset_budgets
from kernelmill.validate.host_admission import (
    HostLedger,
    cgroup_room,
    host_budget,
    read_host_memory,
)
from kernelmill.validate.runner import validate_source

GIB = 1 << 30

# Sizes written in the call, not as constants: resize has nothing to scale, so the CPU run is at
# full size. 8 Mi float32 elements (32 MiB) of input: the probe's estimate is about 1.5 GiB with
# a worker's own memory.
LARGE = '''"""Row softmax, doubled, on a large input.

category: activation
level: 1
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1) * 2.0


def get_inputs():
    return [torch.randn(1024, 8192)]


def get_init_inputs():
    return []
'''

# Looks small to the estimate (meta cannot follow numpy); its forward asks for 6 GiB.
HIDDEN = '''"""Tanh plus a large hidden array.

category: activation
level: 1
"""
import numpy as np
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        big = torch.from_numpy(np.ones((3 << 29,), dtype=np.float32))  # invisible to meta
        return torch.tanh(x) + big[: x.numel()].view_as(x)


n = 64


def get_inputs():
    return [torch.randn(n, n)]


def get_init_inputs():
    return []
'''

QUICK = {"max_ablations": 0, "timeout_s": 300}


@pytest.fixture(autouse=True)
def private_ledger(tmp_path, monkeypatch):
    """This machine's other kernelmill processes (other test runs) stay out of these budgets."""
    folder = tmp_path / "ledger"
    monkeypatch.setenv("KERNELMILL_HOST_LEDGER", str(folder))
    return folder


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    found = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as handle:
                found.extend(int(p) for p in handle.read().split())
    except OSError:
        pass
    return found


class WorkerWatch:
    """Samples the resident memory of every process under this one that runs a CPU worker
    (forked from a zygote, or started fresh), together: the most the runs held at once."""

    def __init__(self):
        self.peak = 0
        self.peak_workers = 0
        self.skip: set[int] = set()  # processes that are not runs (a build's own process)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _descendants(self) -> list[int]:
        seen, stack = [], _children(os.getpid())
        while stack:
            pid = stack.pop()
            seen.append(pid)
            stack.extend(_children(pid))
        return seen

    def _workers(self) -> list[int]:
        """Descendants but the zygotes and their guardians (a guardian is a session leader
        started by this process, a zygote shares its guardian's session; a run is forked from
        a zygote into a session of its own)."""
        found = []
        for pid in self._descendants():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    warm_side = b"zygote_worker" in handle.read()
                with open(f"/proc/{pid}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            ppid, session = int(fields[1]), int(fields[3])
            if pid not in self.skip and \
                    (not warm_side or (session == pid and ppid != os.getpid())):
                found.append(pid)
        return found

    def _loop(self) -> None:
        while not self._stop.is_set():
            workers = self._workers()
            self.peak = max(self.peak, sum(_rss(p) for p in workers))
            self.peak_workers = max(self.peak_workers, len(workers))
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)


def _concurrently(sources: list[str], config: dict) -> list[dict]:
    results: list[dict | None] = [None] * len(sources)

    def one(i: int) -> None:
        results[i] = validate_source(sources[i], config=config)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(sources))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "admission deadlocked"
    return results


def test_the_host_estimate_bounds_what_a_cpu_worker_really_holds():
    for name in ("rms_norm", "transformer_encoder_block", "conv_transpose3d_softmax_scale"):
        validation = validate_source((SEEDS_DIR / f"{name}.py").read_text(), config=QUICK)
        mem = validation["memory"]
        assert validation["checks"]["runs"]["passed"], (name, validation["checks"]["runs"])
        assert mem["method"] == "meta" and not mem["retried_alone"], (name, mem)
        assert 0 < mem["measured_bytes"] <= mem["need_bytes"] == mem["estimate_bytes"], (name, mem)


def test_two_large_problems_that_together_exceed_the_budget_run_one_after_the_other():
    alone = validate_source(LARGE, config=QUICK)
    need = alone["memory"]["need_bytes"]
    assert alone["passed"], alone["checks"]
    assert alone["memory"]["measured_bytes"] <= need
    budget = int(need * 1.25)  # one fits, two do not
    config = {**QUICK, "host_memory_gib": budget / GIB}
    with WorkerWatch() as watch:
        both = _concurrently([LARGE, LARGE.replace("* 2.0", "* 3.0")], config)
    assert all(v["passed"] for v in both), [v["checks"] for v in both]
    assert all(v["memory"]["need_bytes"] == need for v in both)
    assert need <= budget < 2 * need
    assert 0 < watch.peak <= budget, (watch.peak, budget)  # together they held 2.4 GiB
    shared = host_budget(budget)
    # one worker at a time (a probe and an estimator, 1 GiB, do not fit together either)
    assert shared.peak_holders == 1 and shared.used == 0 and shared.holders == 0


def test_a_problem_larger_than_the_whole_budget_is_too_large_and_never_runs():
    config = {**QUICK, "host_memory_gib": 1.0}
    with WorkerWatch() as watch:
        validation = validate_source(LARGE, config=config)
    assert validation["flags"] == ["too_large"], validation["checks"]
    assert validation["checks"]["runs"]["passed"] is None
    detail = validation["checks"]["too_large"]["detail"]
    assert "host memory budget is 1 GiB" in detail and "probe estimate" in detail, detail
    assert validation["memory"]["estimate_bytes"] > GIB
    assert watch.peak < GIB  # only the estimator ran


def test_a_wrong_estimate_fails_its_own_run_with_out_of_host_memory_and_no_other():
    config = {**QUICK, "host_memory_gib": 4.0}
    honest = (SEEDS_DIR / "rms_norm.py").read_text()
    with WorkerWatch() as watch:
        hidden, fine = _concurrently([HIDDEN, honest], config)
    assert hidden["flags"] == ["too_large"], hidden["checks"]
    detail = hidden["checks"]["too_large"]["detail"]
    assert detail.startswith("out of host memory (") and "4 GiB" in detail, detail
    assert hidden["memory"]["retried_alone"] and hidden["memory"]["method"] == "unknown"
    assert fine["passed"], fine["checks"]
    assert watch.peak <= 4 * GIB  # the 6 GiB array was refused, never allocated


def test_cgroup_limits_lower_than_the_machine_bound_the_host(tmp_path):
    proc = tmp_path / "cgroup"
    mount = tmp_path / "sys"
    # v1: a limit on an ancestor of this process's group counts too
    (mount / "memory" / "job" / "run").mkdir(parents=True)
    (mount / "memory" / "job" / "memory.limit_in_bytes").write_text(str(6 * GIB))
    (mount / "memory" / "job" / "memory.usage_in_bytes").write_text(str(2 * GIB))
    (mount / "memory" / "job" / "run" / "memory.limit_in_bytes").write_text(str(1 << 62))
    (mount / "memory" / "job" / "run" / "memory.usage_in_bytes").write_text(str(GIB))
    proc.write_text("4:memory:/job/run\n1:cpu:/job\n")
    assert cgroup_room(str(proc), str(mount)) == (4 * GIB, 6 * GIB)
    # v2: memory.max "max" is no limit
    (mount / "cgroup.controllers").write_text("memory\n")
    (mount / "a").mkdir()
    (mount / "a" / "memory.max").write_text("max\n")
    (mount / "a" / "memory.current").write_text(str(GIB))
    proc.write_text("0::/a\n")
    assert cgroup_room(str(proc), str(mount)) is None
    (mount / "a" / "memory.max").write_text(str(3 * GIB))
    assert cgroup_room(str(proc), str(mount)) == (2 * GIB, 3 * GIB)
    available, total = read_host_memory()
    assert 0 < available <= total


@pytest.mark.parametrize("configured", [None, 2 * GIB])
def test_the_host_budget_is_what_is_available_less_a_margin_or_the_configured_size(configured):
    # (the private ledger is empty: no other process holds anything)
    reset_budgets()
    try:
        budget = host_budget(configured, read=lambda: (10 * GIB, 16 * GIB))
        assert budget is host_budget(configured)  # one per configured size, shared by threads
        assert budget.capacity == (configured or 9 * GIB) and budget.factor == 1.0
    finally:
        reset_budgets()


HOLDER = """
import sys, time
from kernelmill.validate.host_admission import HostLedger
ledger = HostLedger(sys.argv[1])
ledger.set(int(sys.argv[2]))
print("held", flush=True)
time.sleep(120)
"""


def test_the_ledger_counts_what_live_processes_hold_and_forgets_a_killed_one(private_ledger):
    holders = [subprocess.Popen([sys.executable, "-c", HOLDER, str(private_ledger), str(n)],
                                stdout=subprocess.PIPE, text=True) for n in (3 * GIB, 5 * GIB)]
    try:
        assert [h.stdout.readline().strip() for h in holders] == ["held", "held"]
        mine = HostLedger(private_ledger)
        mine.set(7 * GIB)
        assert mine.others() == 8 * GIB
        holders[0].send_signal(signal.SIGKILL)  # gone without a word: its lock goes with it
        holders[0].wait()
        assert mine.others() == 5 * GIB
        assert len(list(private_ledger.glob("*.held"))) == 2  # its file was removed
        mine.close()
        assert HostLedger(private_ledger).others() == 5 * GIB
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()


VALIDATE_ONE = """
import json, sys
from kernelmill.validate.runner import validate_source
validation = validate_source(sys.stdin.read(), config=json.loads(sys.argv[1]))
print(json.dumps({"passed": validation["passed"], "memory": validation["memory"]}))
"""


def test_two_processes_on_one_machine_share_one_host_budget(private_ledger):
    """Two validations in separate processes (two builds), each told the machine has room for
    one large problem: through the ledger they run one after the other."""
    est = MM.estimate_problem({"source": LARGE})
    need = MM.probe_bytes(est, MM.HOST_BASE_BYTES)
    budget = int(need * 1.25)
    config = json.dumps({**QUICK, "host_memory_gib": budget / GIB})
    env = {**os.environ, "KERNELMILL_HOST_LEDGER": str(private_ledger)}
    with WorkerWatch() as watch:
        procs = [subprocess.Popen([sys.executable, "-c", VALIDATE_ONE, config], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for _ in range(2)]
        watch.skip.update(p.pid for p in procs)  # the two builds' own processes: the runs count
        outs = [p.communicate(LARGE.replace("* 2.0", f"* {2.0 + i}"), timeout=600)[0]
                for i, p in enumerate(procs)]
    results = [json.loads(out.strip().splitlines()[-1]) for out in outs]
    assert all(r["passed"] and r["memory"]["need_bytes"] == need for r in results), results
    # together they would hold 2.4 GiB, 1.6 budgets; resident sizes summed over runs count the
    # pages two runs share (forked from one zygote) in each: a 2% allowance
    assert 0 < watch.peak <= 1.02 * budget, (watch.peak, budget)
    assert HostLedger(private_ledger).others() == 0  # both processes have gone
    assert not list(private_ledger.glob("*.held"))  # and their files with them
