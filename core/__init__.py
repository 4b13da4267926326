"""The shared types below every stage: errors, the record and its typed sections, the JSONL
store, stage stats, the problem loader, canonical source, progress and devices.

``kernelmill.core`` imports no stage. Its names are loaded lazily so that worker-side code can
import one small module (``kernelmill.core.errors``) without pulling in the store's dependencies.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "canonical_source": "canonical", "source_id": "canonical",
    "KernelmillError": "errors", "ProblemError": "errors",
    "CATEGORIES": "problem", "Problem": "problem", "check_source": "problem",
    "load_problem": "problem",
    "Record": "record", "StageStats": "stats",
    "JsonlWriter": "store", "read_jsonl": "store", "read_records": "store",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kernelmill.core' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
