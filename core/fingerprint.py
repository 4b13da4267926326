"""Fingerprints of files and folders: "up to date" means the same content, not "it exists".

A finished stage records the fingerprint of what it wrote (a content hash and a row count); a
later run compares it with the file on disk, so an output that was cut, edited or replaced after
its stage finished makes that stage run again, with the reason in one line.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

Fingerprint = dict[str, Any]  # {"sha256": str, "rows": int, "files": int} or {"missing": True}


def _hash_file(path: Path, digest: Any) -> int:
    """Feed ``path`` to ``digest``; return its line count (an unterminated last line counts)."""
    rows = 0
    tail = b"\n"
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            rows += block.count(b"\n")
            tail = block[-1:]
    return rows + (tail != b"\n")


def _files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


def fingerprint(path: str | Path) -> Fingerprint:
    """Hash and row count of a file, or of every file under a folder (names included).

    Rows are the lines of ``.jsonl`` files (a folder sums its ``.jsonl`` files); other files count
    toward the hash only.
    """
    path = Path(path)
    if path.is_dir():
        digest = hashlib.sha256()
        rows = 0
        files = _files(path)
        for child in files:
            digest.update(str(child.relative_to(path)).encode() + b"\0")
            inner = hashlib.sha256()
            n = _hash_file(child, inner)
            digest.update(inner.digest())
            if child.suffix == ".jsonl":
                rows += n
        return {"sha256": digest.hexdigest()[:20], "rows": rows, "files": len(files)}
    if not path.exists():
        return {"missing": True}
    digest = hashlib.sha256()
    rows = _hash_file(path, digest)
    return {"sha256": digest.hexdigest()[:20], "rows": rows if path.suffix == ".jsonl" else None,
            "files": 1}


def fingerprints(paths: dict[str, Path]) -> dict[str, Fingerprint]:
    """``{name: fingerprint}`` of several outputs."""
    return {name: fingerprint(path) for name, path in paths.items()}


def why_changed(recorded: dict[str, Fingerprint] | None,
                current: dict[str, Fingerprint]) -> str | None:
    """One line saying how ``current`` differs from what was ``recorded``; None when the same."""
    if recorded is None:
        return "no fingerprint of its output was recorded (an older build)"
    for name, now in current.items():
        before = recorded.get(name)
        if before == now:
            continue
        if now.get("missing"):
            return f"{name} is missing"
        if before is None or before.get("missing"):
            return f"{name} was not recorded when the stage finished"
        if before.get("rows") != now.get("rows"):
            return (f"{name} changed since the stage finished ({now.get('rows')} rows, "
                    f"{before.get('rows')} when it finished)")
        if before.get("files") != now.get("files"):
            return (f"{name} changed since the stage finished ({now.get('files')} files, "
                    f"{before.get('files')} when it finished)")
        return f"{name} changed since the stage finished (same row count, other content)"
    return None
