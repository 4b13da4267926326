"""A worker run's environment and processes: the environment a worker gets (ours minus
credentials, plus device pinning and the run's token, ``worker_env``), and finding and killing
every process of a run by that token (``kill_run``). Split out of ``validate.harness``, which
re-exports these names.
"""
from __future__ import annotations

import os
import signal
import time

from .harness_worker import BYTECODE_VAR

TOKEN_VAR = "KERNELMILL_RUN_TOKEN"
# Variables a worker must not see: credentials for hubs and LLM endpoints.
_SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "API_KEY", "ACCESS_KEY", "CREDENTIAL")


def worker_env(device: str, env: dict | None = None, token: str = "", tmp: str = "") -> dict:
    """The environment of a worker: ours minus credentials, plus device pinning and the token."""
    base = {k: v for k, v in os.environ.items()
            if not any(marker in k.upper() for marker in _SECRET_MARKERS)}
    base.update({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "PYTHONNOUSERSITE": "1"})
    base.pop(BYTECODE_VAR, None)  # a bytecode folder only where the run's own env names one
    if tmp:
        base["TMPDIR"] = tmp
        base["XDG_CACHE_HOME"] = os.path.join(tmp, "cache")
        base["TRITON_CACHE_DIR"] = os.path.join(tmp, "triton")
        base["CUDA_CACHE_PATH"] = os.path.join(tmp, "nv")
    if device.startswith("cpu"):
        base["TRITON_INTERPRET"] = "1"
        base["CUDA_VISIBLE_DEVICES"] = ""
    else:
        base.pop("TRITON_INTERPRET", None)
    if env:
        base.update({k: str(v) for k, v in env.items()})
    if token:
        base[TOKEN_VAR] = token
    return base


def _proc_with_token(token: str) -> list[int]:
    needle = f"{TOKEN_VAR}={token}".encode()
    me, uid, found = os.getpid(), os.getuid(), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def kill_run(pgid: int, token: str) -> int:
    """Kill the worker's process group and every process carrying the run token.

    Returns how many had escaped the group (a new session or group: ``setsid``, ``setpgid``)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    escaped: set[int] = set()
    for _ in range(5):
        live = []
        for pid in _proc_with_token(token):
            try:
                with open(f"/proc/{pid}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if fields[0] in (b"Z", b"X"):
                continue  # already dead, waiting to be reaped
            live.append(pid)
            if int(fields[2]) != pgid:
                escaped.add(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not live:
            break
        time.sleep(0.05)
    return len(escaped)
