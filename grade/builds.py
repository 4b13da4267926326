"""A candidate's extension build: its folder, the GPU architecture it builds for, the native
texts its compile worker streamed, and the worker-side files no run may change (stamped before
and after).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path


def _guarded_files() -> list[str]:
    """The worker-side modules: a submission that rewrote them would own later workers."""
    from kernelmill.validate import gpu_lock, harness_worker, measure, sandbox, timer

    from . import witness, worker

    package = sorted(str(path) for path in Path(worker.__file__).parent.rglob("*.py"))
    return [harness_worker.__file__, sandbox.__file__, *package, measure.__file__,
            timer.__file__, gpu_lock.__file__, witness.__file__]


def _stamp(paths: list[str]) -> dict[str, tuple]:
    stamps = {}
    for path in paths:
        try:
            st = os.stat(path)
            stamps[path] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            stamps[path] = None
    return stamps


def needs_extension_build(source: str) -> bool:
    return "load_inline" in source or "cpp_extension" in source


def extension_dir(root: str | os.PathLike, source: str) -> str:
    """A build folder per candidate source, shared by its compile worker and its GPU worker."""
    path = Path(root) / hashlib.sha256(source.encode()).hexdigest()[:16]
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


_ARCH: list[str | None] = []


def cuda_arch_list() -> str | None:
    """Compute capability of GPU 0 as TORCH_CUDA_ARCH_LIST wants it (via nvidia-smi)."""
    if not _ARCH:
        import subprocess

        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30).stdout.split()
            _ARCH.append(out[0] if out else None)
        except (OSError, subprocess.SubprocessError):
            _ARCH.append(None)
    return _ARCH[0]


def streamed_texts(reports: list[dict]) -> list[str]:
    """The native texts a compile worker streamed to the parent as its loaders were handed them
    (``worker._stream_texts``: ``{"native_text": i, "part": str}``), joined again."""
    parts: dict[int, list[str]] = {}
    for value in reports:
        index, part = value.get("native_text"), value.get("part")
        if isinstance(index, int) and isinstance(part, str):
            parts.setdefault(index, []).append(part)
    return ["".join(parts[index]) for index in sorted(parts)]
