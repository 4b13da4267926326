"""Host memory (CPU workers) works the same way as GPU memory (``admission``), with one
``MemoryBudget`` per process for the host (``host_budget``): what is available (``MemAvailable``,
or the cgroup's room when lower, read once, plus what other kernelmill processes hold) or a
configured size, less the margin. A CPU worker asks for its estimate plus what a worker process
holds besides its tensors (``memory.HOST_BASE_BYTES``) and gets an address-space
limit consistent with that ask (``address_limit``: what it starts with mapped, plus the ask and
``ADDRESS_SLACK``), so a wrong estimate fails that run alone, with "out of memory", instead of
the machine. ``run_on_host`` then reruns it once, alone, with the whole budget as its limit;
``too_large`` when that still was not enough. The kernelmill processes of one machine share the
host's memory through a ``HostLedger`` (one locked file per process saying what it holds): a
task starts only when that, too, leaves room for it (after ``max_wait_s``, whatever it says).
"""
from __future__ import annotations

import fcntl
import logging
import os
import secrets
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .admission import _BUDGETS, _REGISTRY, MARGIN, Admitted, MemoryBudget

log = logging.getLogger("kernelmill")

# Address space a CPU worker maps beyond its starting mappings (``base``: torch, triton and
# numpy, its zygote's VmSize) and what it was admitted to hold: thread stacks, allocator arenas,
# libraries loaded late (measured with 4 seeds on this 2-core machine: VmPeak grew
# 0.16-0.27 GiB during a probe beyond its tensors' peak, within the 0.5 GiB of
# ``memory.HOST_BASE_BYTES`` that every ask includes).
ADDRESS_SLACK = 512 << 20


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cgroup_room(proc_cgroup: str = "/proc/self/cgroup", mount: str = "/sys/fs/cgroup"
                ) -> tuple[int, int] | None:
    """``(limit - usage, limit)`` of the tightest memory limit on this process's cgroup or an
    ancestor of it (v2 ``memory.max``, v1 ``memory.limit_in_bytes``); None without a limit."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    v2_root = Path(mount) if (Path(mount) / "cgroup.controllers").exists() \
        else Path(mount) / "unified"
    best: tuple[int, int] | None = None
    for line in lines:
        _id, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            root, files = v2_root, ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            root, files = Path(mount) / "memory", ("memory.limit_in_bytes",
                                                   "memory.usage_in_bytes")
        else:
            continue
        folder = root / path.strip("/")
        while True:
            limit, usage = _read_int(folder / files[0]), _read_int(folder / files[1])
            limited = limit is not None and usage is not None and limit < 1 << 60
            if limited and (best is None or limit - usage < best[0]):
                best = (max(0, limit - usage), limit)
            if folder == root or root not in folder.parents:
                break
            folder = folder.parent
    return best


def read_host_memory() -> tuple[int, int]:
    """``(available, total)`` bytes of host memory for this process: ``MemAvailable`` and
    ``MemTotal`` from /proc/meminfo, or the cgroup's room and limit where they are lower."""
    info: dict[str, int] = {}
    with open("/proc/meminfo") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                info[key] = int(parts[0]) * 1024
    available = info.get("MemAvailable", info.get("MemFree", 0))
    total = info.get("MemTotal", available)
    room = cgroup_room()
    if room is not None:
        available, total = min(available, room[0]), min(total, room[1])
    return available, total


class HostLedger:
    """What each kernelmill process on this machine holds of the host's memory, so that two
    processes (two builds, a validation beside a grade) share one budget.

    One small file per process in ``folder``, holding its bytes, which that process keeps
    locked (``flock``) for as long as it lives. A file whose lock can be taken belongs to a
    process that has gone, however it went: it is ignored and removed. A process's file
    appears only once locked (written under a temporary name, then renamed)."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.path = self.folder / f"{os.getpid()}-{secrets.token_hex(6)}.held"
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._broken = False
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # set() reports it when this process first holds something

    def set(self, held: int) -> None:
        with self._lock:
            if self._broken:
                return
            try:
                if self._fd is None:
                    temporary = self.path.with_suffix(".new")
                    fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    os.replace(temporary, self.path)
                    self._fd = fd
                os.pwrite(self._fd, f"{int(held):>20}\n".encode(), 0)
            except OSError as exc:
                self._broken = True
                log.warning("host memory ledger %s unusable (%s): other kernelmill processes "
                            "do not see what this one holds", self.folder, exc)

    def others(self) -> int:
        total = 0
        try:
            entries = list(self.folder.glob("*.held"))
        except OSError:
            return 0
        for path in entries:
            if path == self.path:
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:  # its process is alive
                    total += int(os.pread(fd, 32, 0).strip() or 0)
                    continue
                path.unlink(missing_ok=True)  # its process has gone
            except (OSError, ValueError):
                continue
            finally:
                os.close(fd)
        return total

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                self.path.unlink(missing_ok=True)
                os.close(self._fd)
                self._fd = None


def ledger_folder() -> Path:
    """Where this machine's host ledger lives: ``KERNELMILL_HOST_LEDGER``, else a folder in the
    temporary folder, shared by every kernelmill process and writable by no worker."""
    folder = os.environ.get("KERNELMILL_HOST_LEDGER")
    return Path(folder) if folder else Path(tempfile.gettempdir()) / "kernelmill-host-memory"


def host_budget(configured: int | None = None,
                read: Callable[[], tuple[int, int]] = read_host_memory) -> MemoryBudget:
    """The host's budget for CPU workers (made on first use, one per configured size): what is
    available (plus what other kernelmill processes hold, which the budget counts apart) less
    ``MARGIN``, or ``configured`` bytes when that is smaller. Shared with the other kernelmill
    processes of this machine through a ``HostLedger``."""
    key = ("host", configured)
    with _REGISTRY:
        if key not in _BUDGETS:
            ledger = HostLedger(ledger_folder())
            available, total = read()
            room = int(min(available + ledger.others(), total) * (1.0 - MARGIN))
            if configured is not None:
                room = min(room, int(configured))
            _BUDGETS[key] = MemoryBudget(room, total, margin=0.0, factor=1.0, name="host",
                                         shared=ledger)
        return _BUDGETS[key]


def address_limit(need: int, base: int) -> int:
    """The address-space limit (RLIMIT_AS) of a CPU worker admitted for ``need`` bytes that
    starts with ``base`` bytes mapped."""
    return int(base) + int(need) + ADDRESS_SLACK


def run_on_host(budget: MemoryBudget, need: int, run: Callable[[int], Any],
                out_of_memory: Callable[[Any], bool], base: int) -> Admitted:
    """``run(address_limit)`` once ``need`` bytes fit in ``budget`` (``base``: the address space
    the worker starts with). A run that went out of memory (its limit: the estimate was wrong)
    runs once more, alone, with the whole budget as its limit; ``too_large`` when that failed
    too, or when it already had the whole budget."""
    with budget.hold(need) as grant:
        result = run(address_limit(need, base))
    admitted = Admitted(result, need=need, waited_s=grant.waited_s)
    if not out_of_memory(result):
        return admitted
    whole = budget.capacity
    if need >= whole:
        admitted.too_large = True
        return admitted
    log.info("host: a CPU worker went out of memory under its %.3g GiB; rerunning it alone "
             "with the whole budget (%.3g GiB)", need / 2**30, whole / 2**30)
    with budget.hold(whole, alone=True) as again:
        admitted.result = run(address_limit(whole, base))
    admitted.retried_alone = True
    admitted.need = whole
    admitted.waited_s += again.waited_s
    admitted.too_large = out_of_memory(admitted.result)
    return admitted


__all__ = ["ADDRESS_SLACK", "HostLedger", "address_limit", "cgroup_room", "host_budget",
           "ledger_folder", "read_host_memory", "run_on_host"]
