"""What the grader keeps of a reference run: the run itself, its failure (the problem's fault,
not a candidate's), its tensors' size, the dtype its tolerance is picked by, and the on-disk
cache of its timing (library versions, files written whole).
"""
from __future__ import annotations

import functools
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kernelmill.core.errors import KernelmillError
from kernelmill.validate.harness import WorkerResult


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
