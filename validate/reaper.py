"""The runs of a harness parent that dies go with it: a small watcher process per parent.

``run_in_worker`` kills a worker's process group and every process carrying its run token when
the run ends. A parent killed outright (kill -9, an out-of-memory kill, ``os._exit`` on Ctrl-C)
never gets there, and its workers, in their own sessions, would run on with whatever they
forked. So the first run starts this watcher, in its own session; the parent tells it each run's
token and process group on a pipe (``+ TOKEN PGID`` when a worker starts, ``- TOKEN`` when the
run is cleaned up). When the pipe reaches end of file (the parent is gone, however it went), the
watcher kills every group and every process still carrying a token it was told, then exits.

Standard library only: it runs beside the harness and must start fast.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

TOKEN_VAR = "KERNELMILL_RUN_TOKEN"


def processes_with_tokens(tokens: set[str]) -> list[int]:
    """Pids of this user's live processes whose environment carries one of ``tokens``."""
    needles = {f"{TOKEN_VAR}={t}".encode() for t in tokens}
    me, uid, found = os.getpid(), os.getuid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needles & set(handle.read().split(b"\0")):
                    with open(f"/proc/{entry}/stat", "rb") as stat:
                        state = stat.read().rsplit(b")", 1)[1].split()[0]
                    if state not in (b"Z", b"X"):
                        found.append(int(entry))
        except OSError:
            continue
    return found


def kill_all(tokens: set[str], groups: set[int]) -> None:
    for pgid in groups:
        if pgid <= 1:
            continue
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for _ in range(20):  # a process may fork between our scan and our kill: look again
        live = processes_with_tokens(tokens) if tokens else []
        if not live:
            return
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


def main() -> None:
    tokens: dict[str, int] = {}
    for line in sys.stdin.buffer:
        op, *args = line.decode("ascii", "replace").split()
        if op == "+" and len(args) == 2 and args[1].isdigit():
            tokens[args[0]] = int(args[1])
        elif op == "-" and args:
            tokens.pop(args[0], None)
    kill_all(set(tokens), set(tokens.values()))


class Watcher:
    """The parent's side: starts the watcher on first use and tells it about each run."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _send(self, line: str) -> None:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", "from kernelmill.validate.reaper import main; main()"],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True)
            try:
                self._proc.stdin.write(line.encode() + b"\n")
                self._proc.stdin.flush()
            except OSError:
                pass  # the watcher is gone; the run still cleans up after itself when it ends

    def started(self, token: str, pgid: int) -> None:
        self._send(f"+ {token} {pgid}")

    def ended(self, token: str) -> None:
        self._send(f"- {token}")


WATCHER = Watcher()
