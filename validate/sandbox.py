"""Operating-system confinement of a worker: Landlock, seccomp, a network namespace.

``confine(writable=[...])`` (every worker, before any untrusted code is imported), with Linux
Landlock (no privileges needed):

- files: read and execute anything except other processes' ``/proc/<pid>`` entries (the
  grader's environment and memory maps stay unreadable; the process's own entry, ``/proc/self``,
  and the machine-wide ones like ``/proc/cpuinfo`` stay readable), the kernel-memory files and
  the folders the caller hides (``hidden``: files other processes lock);
  write only under the given folders and to the usual character devices (``/dev/null``...,
  GPU nodes). ``/dev/shm`` and ``/tmp`` are not writable, so nothing survives a run for the
  next submission to find, and no FIFO or file can be shared with another run.
- network: TCP bind and connect refused (ABI 4+);
- signals and abstract unix sockets: scoped to the sandbox (ABI 6+: a submission cannot kill
  or talk to its grader). Landlock also stops ptrace of processes outside the sandbox.

``forbid_process_creation()`` (the candidate worker, before the candidate's code runs) loads a
seccomp filter through libseccomp (the maintained library, loaded with ctypes): ``fork``,
``vfork``, ``execve``, ``execveat`` and ``clone`` without ``CLONE_THREAD`` fail with EPERM
(``clone3``, whose flags a filter cannot read, with ENOSYS, so libc falls back to ``clone``):
threads may start, processes may not, whatever API asks (``subprocess``, ``os.posix_spawn``,
``os.spawn*``, a shell, native code). ``isolate_network()`` moves the process into a new network
namespace (only loopback, down) where the kernel lets it, and refuses the host's System V IPC
objects and POSIX message queues (a channel between workers no file rule covers).
``forbid_other_processes()`` (before the candidate is imported, on every device) refuses the
calls that renice, pin or limit another process by its pid (``OTHER_PROCESS_CALLS``).

Each step records what it did in ``STATE`` (``report()``); where the kernel or the image lacks a
feature the entry says why, and the verdict carries the downgrade.

Standard library only (runs inside the harness worker before any untrusted code is imported).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import platform
import stat
import struct

_SYS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE = 1 << 13, 1 << 14
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

READ = EXECUTE | READ_FILE | READ_DIR
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE  # the rights a non-directory can take

# /proc entries that expose kernel or physical memory (readable by root).
_PROC_HIDDEN = {"kcore", "kmem", "kmsg", "kpagecount", "kpageflags", "kpagecgroup", "kallsyms"}
# Character devices a worker writes: the usual sinks and sources, and accelerators' nodes.
_DEVICE_NAMES = ("null", "zero", "full", "random", "urandom")
_DEVICE_PREFIXES = ("nvidia", "dri", "kfd", "accel")

STATE: dict = {"landlock": None, "proc_hidden": False, "shm_private": False, "tcp": "open",
               "process_creation": "allowed", "network": "shared", "ip_sockets": "allowed"}


def report() -> dict:
    """What confinement this process is under (copied into the verdict)."""
    return dict(STATE)


def _libc():
    return ctypes.CDLL(None, use_errno=True)


@functools.lru_cache(maxsize=1)
def abi_version() -> int:
    """Landlock ABI of the running kernel; 0 when unavailable."""
    numbers = _SYS.get(platform.machine())
    if numbers is None:
        return 0
    try:
        version = _libc().syscall(numbers[0], None, ctypes.c_size_t(0),
                                  ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


def _all_write(abi: int) -> int:
    rights = (WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK
              | MAKE_FIFO | MAKE_BLOCK | MAKE_SYM)
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    return rights


def _entries(folder: str) -> list[str]:
    try:
        return [os.path.join(folder, name) for name in sorted(os.listdir(folder))]
    except OSError:
        return []


def _read_rules(hidden: tuple[str, ...] = ()) -> list[tuple[str, int]]:
    """Read access to the whole tree but other processes' /proc entries, kernel memory, the
    entries of this process's own that read its memory (``_own_proc_rules``) and the folders
    ``hidden`` names (``_readable``)."""
    hidden = tuple(os.path.realpath(path) for path in hidden)
    rules = [("/", READ_DIR)]  # listing is harmless; reading files is what is granted below
    descended: set[str] = {"/"}
    for path in _entries("/"):
        if path != "/proc":
            rules += _readable(path, hidden, descended)
    for path in _entries("/proc"):
        name = os.path.basename(path)
        # ``self`` and ``thread-self`` are links to this process's own entry (below)
        if name.isdigit() or name in _PROC_HIDDEN or name in ("self", "thread-self"):
            continue
        rules.append((path, READ))
    return rules + _own_proc_rules(f"/proc/{os.getpid()}")


def _readable(path: str, hidden: tuple[str, ...], descended: set[str]
              ) -> list[tuple[str, int]]:
    """Rules to read ``path`` and everything beneath it but the real paths ``hidden`` (and what
    lies beneath them). Landlock only grants, so a folder on the way to a hidden one is granted
    listing alone and each of its entries but that one is granted on its own: an entry made in
    such a folder after the process confined itself cannot be read by it. ``descended``: the
    folders on the way already granted so (a link back to one of them, ``/tmp/x -> /``, adds
    nothing). A second mount of a folder on the way (a bind mount elsewhere) is not seen: its
    tree is granted whole."""
    real = os.path.realpath(path)
    if any(_beneath(real, h) for h in hidden):
        return []
    if not os.path.isdir(real) or not any(h != real and _beneath(h, real) for h in hidden):
        return [(path, READ)]
    if real in descended:
        return []
    descended.add(real)
    rules = [(real, READ_DIR)]
    for inner in _entries(real):
        rules += _readable(inner, hidden, descended)
    return rules


def _beneath(path: str, folder: str) -> bool:
    """Whether the real path ``path`` is ``folder`` or lies beneath it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


# Entries of a process's own /proc folder through which its memory is read at any address
# (``mem``, and the same under ``task/<tid>/``, which is only listed). ``map_files`` and ``fd``
# stay: their links open files Landlock judges by their own place (a memory file is always
# open to its process), so what a worker must not read may not be in it before it is due
# (``harness`` sends late data only when it is used).
_OWN_PROC_HIDDEN = {"mem", "pagemap"}


def _own_proc_rules(base: str) -> list[tuple[str, int]]:
    rules = [(base, READ_DIR)]
    for path in _entries(base):
        name = os.path.basename(path)
        if name in _OWN_PROC_HIDDEN or os.path.islink(path):  # ``root`` links to "/"
            continue
        rules.append((path, READ_DIR if name == "task" else READ))
    return rules


def _device_rules(abi: int) -> list[tuple[str, int]]:
    rules = []
    for path in _entries("/dev"):
        name = os.path.basename(path)
        if name in _DEVICE_NAMES or name.startswith(_DEVICE_PREFIXES):
            inner = _entries(path) if os.path.isdir(path) else [path]
            rules += [(p, READ | _all_write(abi)) for p in inner]
    return rules


def confine(writable: list[str], hidden: list[str] | tuple[str, ...] = ()) -> int | None:
    """Restrict this process (and its future children); return the ABI used, or None.
    ``hidden``: folders it may not read at all (``harness.hidden_folders``: the files other
    processes lock, which a process that could open them could hold)."""
    abi = abi_version()
    if abi <= 0:
        STATE["landlock"] = "unavailable: the kernel has no Landlock"
        return None
    create, add_rule, restrict = _SYS[platform.machine()]
    libc = _libc()
    handled = READ | _all_write(abi)
    net = (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0
    scoped = (SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET) if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("=QQQ", handled, net, scoped)
    elif abi >= 4:
        attr = struct.pack("=QQ", handled, net)
    else:
        attr = struct.pack("=Q", handled)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(create, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        STATE["landlock"] = f"unavailable: landlock_create_ruleset errno {ctypes.get_errno()}"
        return None
    try:
        rules = _read_rules(tuple(hidden)) + _device_rules(abi) + \
            [(path, READ | _all_write(abi)) for path in writable]
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    access &= FILE_RIGHTS
                    if not access:
                        continue
                rule = ctypes.create_string_buffer(struct.pack("=Qi", access, fd), 12)
                if libc.syscall(add_rule, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                rule, ctypes.c_uint32(0)) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule({path})")
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(restrict, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    STATE.update(landlock=abi, proc_hidden=True, shm_private=True,
                 tcp="refused" if net else "open (Landlock ABI < 4)")
    return abi


# ---------------------------------------------------------------- seccomp (libseccomp)

_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_NE = 1
_SCMP_CMP_MASKED_EQ = 7
_CLONE_THREAD = 0x00010000


def _scmp_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


@functools.lru_cache(maxsize=1)
def _libseccomp():
    """libseccomp, loaded once: ``find_library`` runs a subprocess, which the first filter
    forbids."""
    try:
        found = ctypes.util.find_library("seccomp")
    except OSError:
        found = None
    names = [found, "libseccomp.so.2", "libseccomp.so"]
    for name in [n for n in names if n]:
        try:
            return ctypes.CDLL(name, use_errno=True)
        except OSError:
            continue
    return None


def _load_filter(rules: list[tuple[str, int, _ArgCmp | None]]) -> str | None:
    """Load one seccomp filter (allow everything but ``rules``: name, action, one argument
    comparison or None); None once loaded, else why not."""
    lib = _libseccomp()
    if lib is None:
        return "libseccomp not found"
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        return "seccomp_init failed"
    try:
        for name, action, compare in rules:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number < 0:
                continue  # not a syscall on this architecture (fork on aarch64)
            array = (_ArgCmp * 1)(compare) if compare is not None else None
            rc = lib.seccomp_rule_add_array(ctx, action, number, 1 if compare else 0, array)
            if rc < 0:
                return f"seccomp rule for {name} failed ({rc})"
        rc = lib.seccomp_load(ctx)
        if rc < 0:
            return f"seccomp_load failed ({rc})"
    finally:
        lib.seccomp_release(ctx)
    return None


def forbid_process_creation() -> str:
    """Load the seccomp filter that stops this process from creating processes; returns
    ``STATE["process_creation"]`` ("blocked", or why it is still allowed)."""
    eperm = _scmp_errno(errno.EPERM)
    failed = _load_filter([
        ("fork", eperm, None), ("vfork", eperm, None), ("execve", eperm, None),
        ("execveat", eperm, None), ("clone3", _scmp_errno(errno.ENOSYS), None),
        ("clone", eperm, _ArgCmp(0, _SCMP_CMP_MASKED_EQ, _CLONE_THREAD, 0))])
    STATE["process_creation"] = f"allowed: {failed}" if failed else "blocked"
    return STATE["process_creation"]


# Calls that change another process's scheduling or memory by its pid, and the argument that
# holds it (0: the caller itself). Nice value and CPU affinity pass through fork: set on the
# zygote, they would slow every worker forked after, reference timing workers included.
OTHER_PROCESS_CALLS = (("setpriority", 1), ("ioprio_set", 1), ("sched_setaffinity", 0),
                       ("sched_setscheduler", 0), ("sched_setparam", 0), ("sched_setattr", 0),
                       ("prlimit64", 0), ("migrate_pages", 0), ("move_pages", 0),
                       ("process_madvise", 0))


# Calls that would put the caller itself ahead of the processes beside it (a worker runs as
# root: its threads could renice themselves to -20, T-15): a real-time or other policy, a
# priority, and a nice value below 0 (``setpriority``'s third argument, its sign bit).
RAISE_PRIORITY_CALLS = ("sched_setscheduler", "sched_setparam", "sched_setattr")
_SIGN_BIT = 0x80000000


def forbid_other_processes() -> str:
    """Load the seccomp filters that refuse (EPERM) the calls of ``OTHER_PROCESS_CALLS`` on
    any pid but 0 (the caller): a submission cannot renice, pin or limit its grader, the
    zygote or the workers beside it; and the calls that raise the caller's own priority
    (``RAISE_PRIORITY_CALLS``, a negative nice value). Returns ``STATE["other_processes"]``."""
    eperm = _scmp_errno(errno.EPERM)
    failed = _load_filter([(name, eperm, _ArgCmp(arg, _SCMP_CMP_NE, 0, 0))
                           for name, arg in OTHER_PROCESS_CALLS]) or _load_filter(
        [(name, eperm, None) for name in RAISE_PRIORITY_CALLS]
        + [("setpriority", eperm, _ArgCmp(2, _SCMP_CMP_MASKED_EQ, _SIGN_BIT, _SIGN_BIT))])
    STATE["other_processes"] = f"allowed: {failed}" if failed else "blocked"
    return STATE["other_processes"]


_CLONE_NEWNET = 0x40000000


_SCMP_CMP_EQ = 4
# Address families of the network (IPv4, IPv6, raw packets): Landlock refuses TCP only, and a
# fresh network namespace needs privileges a CI runner may not have; a build could send a
# file over UDP from the compile worker (T-03).
NETWORK_FAMILIES = (2, 10, 17)  # AF_INET, AF_INET6, AF_PACKET


# Calls on the host's System V IPC objects and POSIX message queues: named by a key, an id any
# process may read in /proc/sysvipc, or a name, outside the file system Landlock rules, they
# are a channel between two workers running at once
SHARED_IPC_CALLS = ("shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl",
                    "semget", "semop", "semtimedop", "semctl", "mq_open", "mq_unlink",
                    "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr")


def isolate_network() -> str:
    """Enter a fresh network namespace (no interface up) where the kernel allows it, and refuse
    (seccomp, EPERM) sockets of ``NETWORK_FAMILIES`` and io_uring, whose operations bypass the
    filter; returns ``STATE["network"]`` (the sockets' in ``STATE["ip_sockets"]``). The host's
    IPC objects (``SHARED_IPC_CALLS``) are refused too (``STATE["shared_ipc"]``)."""
    eperm = _scmp_errno(errno.EPERM)
    failed = _load_filter([("socket", eperm, _ArgCmp(0, _SCMP_CMP_EQ, family, 0))
                           for family in NETWORK_FAMILIES] + [("io_uring_setup", eperm, None)])
    STATE["ip_sockets"] = f"allowed: {failed}" if failed else "refused"
    failed = _load_filter([(name, eperm, None) for name in SHARED_IPC_CALLS])
    STATE["shared_ipc"] = f"allowed: {failed}" if failed else "refused"
    if _libc().unshare(_CLONE_NEWNET) == 0:
        STATE["network"] = "isolated"
    else:
        STATE["network"] = f"shared: unshare(CLONE_NEWNET) errno {ctypes.get_errno()}"
    return STATE["network"]
