"""One run per target: a second run fails at once naming the holder; a dead holder blocks nobody."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelmill.core.lock import LockedError, hold_lock, lock_path_for


def _holder(lock: Path) -> subprocess.Popen:
    """A separate process that takes ``lock`` and keeps it until killed."""
    code = textwrap.dedent(f"""
        import sys, time
        from kernelmill.core.lock import hold_lock
        with hold_lock({str(lock)!r}, "target"):
            print("held", flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_holder_fails_at_once_naming_the_holder_pid(tmp_path):
    lock = tmp_path / "build" / ".kernelmill.lock"
    proc = _holder(lock)
    try:
        with pytest.raises(LockedError) as info:
            with hold_lock(lock, f"build folder {lock.parent}"):
                pytest.fail("took a lock another process holds")
        message = str(info.value)
        assert message.startswith(f"build folder {lock.parent} is in use by pid {proc.pid} ")
        assert "\n" not in message and info.value.pid == proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holder_leaves_no_lock_behind(tmp_path):
    lock = tmp_path / "verdicts.jsonl.lock"
    proc = _holder(lock)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert lock.exists()  # the file stays after kill -9, but the kernel dropped the lock
    pid_file = lock.with_name(lock.name + ".pid")
    assert pid_file.read_text().strip() == str(proc.pid)  # stale: names a dead holder
    with hold_lock(lock) as held:
        assert held == lock and pid_file.read_text().strip() == str(os.getpid())
    assert not pid_file.exists()  # a clean release removes the holder's pid


def test_the_same_process_cannot_take_it_twice(tmp_path):
    lock = lock_path_for(tmp_path / "out.jsonl")
    assert lock == tmp_path / "out.jsonl.lock"
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "out.jsonl")
    assert lock_path_for(link) == lock  # a run naming a link to the file holds the file's lock
    with hold_lock(lock, "out.jsonl"):
        with pytest.raises(LockedError, match=f"in use by pid {os.getpid()}"):
            with hold_lock(lock, "out.jsonl"):
                pass
    with hold_lock(lock, "out.jsonl"):  # released: free again
        pass


def test_lock_is_not_inherited_by_spawned_workers(tmp_path):
    lock = tmp_path / "x.lock"
    with hold_lock(lock):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with hold_lock(lock):  # the worker still runs, yet the lock went with its holder
            pass
    finally:
        child.kill()
        child.wait()
