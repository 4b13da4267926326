"""What the grader keeps of a reference run: the run itself, its failure (the problem's fault,
not a candidate's), its tensors' size, the dtype its tolerance is picked by, and the on-disk
cache of its timing (library versions, files written whole).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kernelmill.core.errors import KernelmillError
from kernelmill.validate.harness import WorkerResult
from kernelmill.validate.gpus import gpu_name
from kernelmill.validate.window import WindowSettings

TIMING_KEYS = ("eager", "inductor", "inductor_error")
SIZE_KEYS = ("tensor_bytes", "device_peak_bytes")


# Timer settings that change how a sample is taken, not what it times: the cached eager and
# Inductor times are read as their ratio (``checks.timing``), both taken alike
RATIO_NEUTRAL = ("cover",)


def cached_timing_settings(settings: dict) -> dict:
    """The timing settings a cached reference timing depends on: all but the window's own
    (``validate.window.WindowSettings``) and ``RATIO_NEUTRAL``. Inductor's timing is measured
    once per reference, outside any window, so a window's settling or round length does not
    change it."""
    window = WindowSettings.__dataclass_fields__
    return {k: v for k, v in (settings or {}).items()
            if k not in window and k not in RATIO_NEUTRAL}


@functools.lru_cache(maxsize=1)
def _library_versions() -> tuple:
    from importlib import metadata

    import torch

    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = None
    return ("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton)


def _write_atomically(path: Path, text: str) -> None:
    """A cache file appears whole or not at all; several graders (threads or processes) may
    write the same one at once. A cache that cannot be written costs speed, never a grade."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError:
        pass


class ReferenceError(KernelmillError):
    """The reference problem itself failed to build or run."""


@dataclass
class ReferenceRun:
    value: dict
    result: WorkerResult
    device: str
    source: str = ""  # what the reference worker ran (the window's timing worker rebuilds it)


def _first_dtype(ref: dict) -> str:
    """The dtype the judge picks a trial's tolerance by: its first tensor output's."""
    return next((str(t.dtype) for trial in ref["trials"][:1] for t in trial["outputs"]
                 if hasattr(t, "dtype")), "torch.float32")


def _tensor_bytes(value) -> int:
    """Bytes of the tensors in a (nested) reference result."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


class ReferenceTiming:
    """The ``Grader``'s caches on disk of the reference's eager and Inductor times and of its
    runs' sizes. Reads the grader's ``policy``, ``cache_root``, ``worker_device``, ``_env`` and
    ``reference``."""

    def inductor_timing(self, source: str, *, slot_env: dict | None = None) -> dict:
        """The reference's eager and Inductor times, measured together (their ratio prices
        Inductor in every verdict). They do not depend on a submission's inputs, so they are
        kept on disk per reference source, GPU model, library versions and timing settings,
        shared by every grader and trainer process on this machine."""
        path = self._timing_cache_path(source, slot_env)
        if path is not None and path.exists():
            try:
                return json.loads(path.read_text())
            except (OSError, ValueError):
                pass  # unreadable: measure again and rewrite
        timed = self.reference(source, slot_env=slot_env).value
        found = {k: timed[k] for k in TIMING_KEYS if k in timed}
        if path is not None and found:
            _write_atomically(path, json.dumps(found, default=str))
        return found

    def remembered_size(self, source: str, slot_env: dict | None) -> dict:
        """The sizes (``tensor_bytes``, ``device_peak_bytes``) an earlier grader process saw
        of one fresh reference run of ``source`` on this GPU model ({} where none did): a
        problem's first grade in a new process is admitted by them, not by a share of the GPU
        held until its reference is in."""
        path = self._size_cache_path(source, slot_env)
        try:
            sizes = json.loads(path.read_text()) if path is not None and path.exists() else {}
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in sizes.items() if k in SIZE_KEYS and type(v) is int and v > 0} \
            if isinstance(sizes, dict) else {}

    def remember_size(self, source: str, slot_env: dict | None, sizes: dict) -> None:
        path = self._size_cache_path(source, slot_env)
        if path is not None:
            _write_atomically(path, json.dumps(sizes))

    def _size_cache_path(self, source: str, slot_env: dict | None) -> Path | None:
        """Sizes depend on the source, the GPU model, the libraries and the trials a grade
        draws."""
        name = gpu_name(self.worker_device, self._env(slot_env))
        if name is None:
            return None
        policy = self.policy
        key = json.dumps(["sizes", source, name, _library_versions(), policy.trials,
                          policy.unseen_trials, policy.unseen_spares, policy.state_trials,
                          policy.redraw_state],
                         sort_keys=True, default=str)
        folder = self.cache_root / "reference-size"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"

    def _timing_cache_path(self, source: str, slot_env: dict | None) -> Path | None:
        name = gpu_name(self.worker_device, self._env(slot_env))
        if name is None:
            return None
        key = json.dumps([source, name, _library_versions(),
                          cached_timing_settings(self.policy.timing_settings)],
                         sort_keys=True, default=str)
        folder = self.cache_root / "reference-timing"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"
