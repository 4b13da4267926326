"""The child side of the zygote (``zygote_worker``): what a process forked there does to become a
fresh worker (``_child``), or a spare that makes its CUDA context ahead and then takes one job
(``_spare``), before running the harness's worker main.

Worker-side: the standard library; torch only as the zygote preloaded it.
"""
from __future__ import annotations

import ctypes
import importlib
import json
import os
import signal
import socket
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
MAX_MESSAGE = 1 << 20
# descriptors one fork request may carry (a run's: its output files, job pipes, control pipe and
# memory files); a request with more is never sent (the run starts a fresh interpreter)
MAX_FDS = 16


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _forget_environment_caches() -> None:
    """What the zygote's imports computed from its own environment and would otherwise hand
    every child: the temporary folder (a child writes only in its own ``TMPDIR``), Inductor's
    compile threads (``TORCHINDUCTOR_COMPILE_THREADS``) and its precompiled-header folder (under
    the temporary folder)."""
    import tempfile

    tempfile.tempdir = None
    sys.dont_write_bytecode = True
    # Inductor's, read at import from the zygote's environment and temporary folder
    config = sys.modules.get("torch._inductor.config")
    if config is not None:
        config.compile_threads = config.decide_compile_threads()
    codecache = sys.modules.get("torch._inductor.codecache")
    if codecache is not None and hasattr(codecache, "_HEADER_DIR"):
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        codecache._HEADER_DIR = os.path.join(default_cache_dir(), "precompiled_headers")
        codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")


def _own_session() -> None:
    """A child forked here: its own session and process group, a subreaper of what it starts,
    the default signal handlers."""
    os.setsid()
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)


# The environment a CUDA context is made under: a spare made under the same settings serves a
# run (``spare_key``). The driver's JIT cache folder is each run's own and not known ahead: a
# spare makes its context with that cache off.
SPARE_PREFIXES = ("CUDA_", "PYTORCH_", "NVIDIA_", "LD_", "CUBLAS", "CUDNN", "KERNELMILL_CUDA_")
SPARE_ANY_RUN = ("CUDA_CACHE_PATH",)
# Device settings spares are kept for at once (a host's GPUs, each its own setting); the
# least recently served setting's spares go first
MAX_SPARE_KEYS = 8


def spare_key(env: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items()
                        if k.startswith(SPARE_PREFIXES) and k not in SPARE_ANY_RUN))


def _spare(channel: socket.socket, env: dict, cuda: bool, zygote: int) -> None:
    """A spare: its own session, its CUDA context made under ``env``'s device settings, then
    one job from ``channel`` (None there: exit), run as ``_child`` runs a fresh one."""
    code = 1
    try:
        # Only its channel and its standard streams: it was forked while the zygote held the
        # descriptors of the run whose fork made it (that run's result pipe, its streams), and
        # one of them held open here kept that run's end of file from its parent for as long as
        # this spare lived (and was its to write)
        keep = channel.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, _fd_limit())
        _own_session()
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))  # an unused spare dies with the zygote
        if os.getppid() != zygote:  # it died before the request took effect
            os._exit(1)
        if cuda:
            os.environ.update(dict(spare_key(env)))
            os.environ["CUDA_CACHE_DISABLE"] = "1"
            try:
                torch = sys.modules.get("torch") or importlib.import_module("torch")
                from .cuda_wait import init_cuda

                init_cuda(torch)
            except Exception:  # noqa: BLE001 — a run reports a broken device in its own stage
                pass
        data, fds, _flags, _addr = socket.recv_fds(channel, MAX_MESSAGE, 8)
        channel.close()
        if not data:
            for fd in fds:
                os.close(fd)
            os._exit(0)
        _run_job(json.loads(data), fds)
        code = 0
    except BaseException:  # noqa: BLE001 — the parent sees no result and reports the exit
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _fd_limit() -> int:
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(1024, min(soft, 1 << 16))


def _child(message: dict, fds: list[int]) -> None:
    """In the forked child: become a fresh worker, then run the harness's worker main."""
    code = 1
    try:
        _own_session()
        _run_job(message, fds)
        code = 0
    except BaseException:  # noqa: BLE001 — the parent sees no result and reports the exit
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _run_job(message: dict, fds: list[int]) -> None:
    """The job's fds, folder and whole environment taken, the harness's worker main run."""
    stdout, stderr, rest = fds[0], fds[1], fds[2:]
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    for fd in (null, stdout, stderr):
        os.close(fd)
    os.chdir(message["cwd"])
    env = {str(k): str(v) for k, v in (message.get("env") or {}).items()}
    extra_path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                  if p and p not in sys.path]
    sys.path[:0] = extra_path
    os.environ.clear()
    os.environ.update(env)
    _forget_environment_caches()
    import random

    random.seed()  # not the zygote's state, which every sibling shares
    from .harness_worker import main as worker_main

    worker_main([str(fd) for fd in rest])
