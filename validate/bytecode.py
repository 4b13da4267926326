"""The libraries' bytecode for workers, where the installed torch has none beside its sources.

A GPU image was installed without compiling its bytecode and runs with
``PYTHONDONTWRITEBYTECODE``: every worker compiled from source what it imported lazily
(Inductor's modules on every replay, ~4 CPU-s of its compile stage). ``bytecode_folder`` names a
folder of bytecode written by a trusted process of this one (it imports ``WARM_MODULES``, the
libraries' and kernelmill's own, and nothing a problem or a candidate wrote), owned by this user
and writable by no one else; workers read it (``harness_worker.use_bytecode_cache``) and never
write it (it is in no worker's writable list, and their ``dont_write_bytecode`` stays set). A
worker that imports a module the folder lacks compiles it in memory, as before.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import stat
import subprocess
import sys
import tempfile
import threading

_log = logging.getLogger("kernelmill")

# A module workers import lazily: where the installed torch holds no bytecode for it, the tree
# was installed without compiling
LAZY_PROBE_MODULE = ("_inductor", "compile_fx.py")
# What the trusted process imports (each where it can): Inductor's compile and code generation
# (a replay's and a timing reference's ``torch.compile``), and the validator's and grader's own
# worker modules, imported after the fork
WARM_MODULES = (
    "torch._dynamo", "torch._inductor.compile_fx", "torch._inductor.codegen.triton",
    "torch._inductor.runtime.triton_heuristics", "torch._inductor.scheduler",
    "torch._inductor.lowering", "torch._inductor.graph", "torch._functorch.aot_autograd",
    "torch.fx.experimental.symbolic_shapes", "torch.utils.flop_counter",
    "kernelmill.validate.probe", "kernelmill.validate.replay", "kernelmill.grade.worker")
WARM_TIMEOUT_S = 600


@functools.cache
def bytecode_missing() -> bool:
    """Whether the installed torch has no bytecode of ``LAZY_PROBE_MODULE`` beside it."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return False
    folder = os.path.join(os.path.dirname(spec.origin), LAZY_PROBE_MODULE[0])
    stem = LAZY_PROBE_MODULE[1].rsplit(".", 1)[0]
    tag = sys.implementation.cache_tag
    return os.path.exists(os.path.join(folder, LAZY_PROBE_MODULE[1])) and tag is not None and \
        not os.path.exists(os.path.join(folder, "__pycache__", f"{stem}.{tag}.pyc"))


def _own_folder(path: str) -> bool:
    """Made here if absent (mode 0700); a folder another user made, or one others may write, is
    refused."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and \
        not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


_lock = threading.Lock()
_warming: dict[str, threading.Thread] = {}


def _warm(folder: str) -> None:
    """Import ``WARM_MODULES`` in a fresh process of this interpreter that writes their
    bytecode under ``folder`` (a module that will not import is skipped)."""
    code = ("import importlib, sys\n"
            f"sys.pycache_prefix = {folder!r}\n"
            "sys.dont_write_bytecode = False\n"
            "for name in sys.argv[1:]:\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except Exception:\n"
            "        pass\n")
    try:
        subprocess.run([sys.executable, "-c", code, *WARM_MODULES], timeout=WARM_TIMEOUT_S,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        _log.info("bytecode warm-up failed: %s", exc)


def bytecode_folder(wait: bool = False) -> str | None:
    """The folder of the libraries' bytecode workers read, or None (the installed torch has
    its bytecode, or no folder of this user's own could be had). Its warm-up starts on the first
    call, in the background (``wait``: return once it has run); workers started before it ends
    read what is there."""
    if not bytecode_missing():
        return None
    key = hashlib.sha256(f"{sys.executable}|{sys.version}|{WARM_MODULES}".encode()).hexdigest()
    folder = os.path.join(tempfile.gettempdir(), f"kernelmill-bytecode-{os.getuid()}", key[:16])
    if not (_own_folder(os.path.dirname(folder)) and _own_folder(folder)):
        return None
    with _lock:
        thread = _warming.get(folder)
        if thread is None:
            thread = _warming[folder] = threading.Thread(target=_warm, args=(folder,),
                                                         name="kernelmill-bytecode", daemon=True)
            thread.start()
    if wait:
        thread.join()
    return folder
