"""Filesystem and signal confinement of a worker with Linux Landlock (no privileges needed).

After ``confine(writable=[...])`` the process and its children may read and execute anything but
write only under the given folders (plus ``/dev``, for ``/dev/null``, ``/dev/shm`` and GPU device
nodes), and, on kernels with Landlock ABI 6+, may not signal processes outside the sandbox (a
submission cannot kill its grader). Landlock also stops ptrace of processes outside the sandbox.
A kernel without Landlock leaves the worker unconfined; ``confine`` then returns ``None`` and the
parent's file guards remain the only defence against tampering.

Standard library only (runs inside the harness worker before any untrusted code is imported).
"""
from __future__ import annotations

import ctypes
import os
import platform
import struct

_SYS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE = 1 << 13, 1 << 14
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

READ = EXECUTE | READ_FILE | READ_DIR


def _libc():
    return ctypes.CDLL(None, use_errno=True)


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


def confine(writable: list[str]) -> int | None:
    """Restrict this process (and its future children); return the ABI used, or None."""
    abi = abi_version()
    if abi <= 0:
        return None
    create, add_rule, restrict = _SYS[platform.machine()]
    libc = _libc()
    handled = READ | _all_write(abi)
    scoped = (SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET) if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("=QQQ", handled, 0, scoped)
    elif abi >= 4:
        attr = struct.pack("=QQ", handled, 0)
    else:
        attr = struct.pack("=Q", handled)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(create, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return None
    try:
        rules = [("/", READ)] + [(path, READ | _all_write(abi)) for path in ["/dev", *writable]]
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
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
    return abi
