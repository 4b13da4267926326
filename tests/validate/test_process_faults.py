"""Process trees end with their run: a problem that leaves a detached process fails validation,
and when the grader or validator itself is killed, its workers and their children die too."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from kernelmill.validate.runner import validate_source

DETACHING = '''"""Tanh, and a process left behind in a session of its own.

category: activation
level: 1
"""
import os
import time

import torch
import torch.nn as nn

_FORKED = []


def _detach():
    if _FORKED:
        return
    _FORKED.append(1)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(120)
        os._exit(0)
    os.wait()


class Model(nn.Module):
    def forward(self, x):
        _detach()
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(256)]


def get_init_inputs():
    return []
'''


def test_a_problem_that_leaves_a_detached_process_fails_validation():
    validation = validate_source(DETACHING, config={"max_ablations": 0, "cross_process": False})
    check = validation["checks"]["no_leaked_process"]
    assert check["passed"] is False and check["value"] >= 1, check
    assert "no_leaked_process" in validation["flags"] and not validation["passed"]
    clean = validate_source(DETACHING.replace("        _detach()\n", ""),
                            config={"max_ablations": 0, "cross_process": False})
    assert clean["checks"]["no_leaked_process"] == {"passed": True, "value": 0,
                                                    "detail": "no process left behind"}


FORKING_WORKER = '''
import os, subprocess, sys, time

def main():
    out = os.environ["PIDS_FILE"]
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    r, w = os.pipe()
    if os.fork() == 0:  # a detached grandchild in a session of its own
        os.setsid()
        pid = os.fork()
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        os.write(w, str(pid).encode())
        os._exit(0)
    os.close(w)
    detached = int(os.read(r, 32))
    with open(out + ".tmp", "w") as handle:
        handle.write(" ".join(map(str, [os.getpid(), plain.pid, detached])))
    os.rename(out + ".tmp", out)
    time.sleep(120)
    return {}
'''


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def test_killing_the_parent_kills_its_workers_and_their_children(tmp_path):
    pids_file = tmp_path / "pids"
    parent_code = textwrap.dedent(f"""
        from kernelmill.validate.harness import run_in_worker
        run_in_worker("kernelmill.validate.harness:run_source", {{"source": {FORKING_WORKER!r}}},
                      timeout_s=300, device="cpu", env={{"PIDS_FILE": {str(pids_file)!r}}},
                      sandbox=False)
    """)
    parent = subprocess.Popen([sys.executable, "-c", parent_code])
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not pids_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = [int(p) for p in pids_file.read_text().split()]
        assert all(_alive(p) for p in pids)
        os.kill(parent.pid, signal.SIGKILL)  # the grader or validator dies without cleaning up
        parent.wait()
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [p for p in pids if _alive(p)] == [], json.dumps({"worker, plain, detached": pids})
    finally:
        parent.kill()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


SCRUBBED_ESCAPE = '''
import os, sys

def main():
    r, w = os.pipe()
    if os.fork() == 0:  # a new session, then exec with an empty environment: no run token left
        os.setsid()
        if os.fork() == 0:
            os.execve("/bin/sleep", ["sleep", "120"], {})
        os._exit(0)
    os.wait()
    os.close(w)
    return {"ppid_of_escapee": 0}
'''


def _sleepers() -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _alive(int(entry)):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if handle.read() == b"sleep\x00120\x00":
                        found.add(int(entry))
            except OSError:
                pass
    return found


def test_a_process_that_scrubs_its_environment_and_leaves_the_session_is_still_killed():
    """Warm workers are forked under a subreaper: an escapee stays a descendant of the run (or
    of the zygote), whatever it does to its environment, and is killed and counted."""
    from kernelmill.validate.harness import run_in_worker

    before = _sleepers()
    result = run_in_worker("kernelmill.validate.harness:run_source",
                           {"source": SCRUBBED_ESCAPE}, timeout_s=60, device="cpu",
                           sandbox=False, warm=True)
    assert result.ok, result.error
    assert result.leaked_processes >= 1
    deadline = time.monotonic() + 5
    while _sleepers() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (_sleepers() - before)


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return int(handle.read().rsplit(b")", 1)[1].split()[1])


@pytest.mark.parametrize("victim", ["zygote", "guardian"])
def test_a_zygote_killed_with_sigkill_takes_every_process_of_its_runs_along(tmp_path, victim):
    """A warm run leaves a plain child and a detached daemon (setsid, double fork); then its
    zygote, or the zygote's guardian, is killed with SIGKILL. No process of the run survives,
    and the next warm run gets a fresh zygote."""
    import threading

    from kernelmill.validate.harness import run_in_worker

    pids_file = tmp_path / "pids"
    results = []
    runner = threading.Thread(target=lambda: results.append(run_in_worker(
        "kernelmill.validate.harness:run_source", {"source": FORKING_WORKER}, timeout_s=120,
        device="cpu", env={"PIDS_FILE": str(pids_file)}, sandbox=False, warm=True)))
    runner.start()
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while not pids_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = [int(p) for p in pids_file.read_text().split()]
        assert all(_alive(p) for p in pids)
        zygote = _parent_of(pids[0])
        guardian = _parent_of(zygote)
        assert guardian != os.getpid()  # the zygote is not this process's child
        os.kill(zygote if victim == "zygote" else guardian, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in [*pids, zygote, guardian]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [p for p in pids if _alive(p)] == [], json.dumps({"worker, plain, detached": pids})
        assert not _alive(zygote) and not _alive(guardian)
        runner.join(timeout=30)
        assert results and not results[0].ok and not runner.is_alive()
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    again = run_in_worker("kernelmill.validate.harness:echo", {"n": 1}, timeout_s=60,
                          device="cpu", sandbox=False, warm=True)
    assert again.ok and again.warm and again.value["n"] == 1, again.error


NON_TENSOR = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return RESULT


def get_inputs():
    return [torch.randn(256)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("result, what", [
    ("int((x > 0).sum())", "int (int)"), ("None", "NoneType (NoneType)"),
    ("{'y': x * 2}", "dict (dict)"), ("(x * 2, 3.0)", "tuple:2 (float)"),
    ("[x * 2, (x, x)]", "list:2 (tuple)")])
def test_a_problem_whose_forward_returns_anything_but_tensors_fails_at_runs(result, what):
    """The grader compares a tensor or a tuple/list of tensors: anything else fails validation
    at ``runs``, in the grader's words, instead of failing every submission later."""
    validation = validate_source(NON_TENSOR.replace("RESULT", result),
                                 config={"max_ablations": 0, "cross_process": False})
    assert not validation["passed"] and validation["flags"] == ["runs"], validation["flags"]
    detail = validation["checks"]["runs"]["detail"]
    assert f"forward returned {what}; a problem's forward must return tensors" in detail, detail
    tensors = validate_source(NON_TENSOR.replace("RESULT", "(torch.tanh(x), x * 2)"),
                              config={"max_ablations": 0, "cross_process": False})
    assert tensors["checks"]["runs"]["passed"], tensors["checks"]["runs"]
