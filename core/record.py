"""The problem record: one JSON object per line, shared by every stage.

Each stage owns one section (``validation`` belongs to validate/, ``dedup`` to curate's dedup,
``split`` to splits/ ...) and never rewrites another's. Sections a newer stage adds that this
class does not name are kept verbatim in ``extra`` so a round trip loses nothing.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .canonical import source_id

RECORD_FIELDS = ("id", "source", "name", "category", "level", "provenance", "validation",
                 "dedup", "cluster", "split")


def default_provenance(parent: str | None = None) -> dict[str, Any]:
    return {"seed": parent, "operations": [], "generator": None, "parent": parent}


@dataclass
class Record:
    """One problem. ``id`` is the content hash of the canonical source."""

    id: str
    source: str
    name: str
    category: str = "unknown"
    level: int = 1
    provenance: dict[str, Any] = field(default_factory=default_provenance)
    validation: dict[str, Any] | None = None
    dedup: dict[str, Any] | None = None
    cluster: int | None = None
    split: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_source(cls, source: str, *, name: str, category: str = "unknown", level: int = 1,
                    provenance: dict[str, Any] | None = None) -> "Record":
        """A new record whose id is derived from ``source``; raises SyntaxError if it won't parse."""
        rid = source_id(source)
        prov = default_provenance()
        prov.update(provenance or {})
        if prov.get("seed") is None:
            prov["seed"] = rid  # a record with no family root is its own root
        return cls(id=rid, source=source, name=name, category=category, level=int(level),
                   provenance=prov)

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in RECORD_FIELDS}
        data.update(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Record":
        """Build a record from its JSON object; raises ValueError naming what is missing/wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a record is a JSON object, got {type(data).__name__}")
        missing = [k for k in ("id", "source") if k not in data]
        if missing:
            raise ValueError(f"record lacks required field(s): {', '.join(missing)}")
        if not isinstance(data["source"], str):
            raise ValueError("record field 'source' must be a string")
        known = {k: data[k] for k in RECORD_FIELDS if k in data}
        known.setdefault("name", str(data["id"]))
        if known.get("provenance") is None:
            known["provenance"] = default_provenance()
        extra = {k: v for k, v in data.items() if k not in RECORD_FIELDS}
        return cls(**known, extra=extra)

    def replace(self, **changes: Any) -> "Record":
        return dataclasses.replace(self, **changes)

    @property
    def family(self) -> str:
        """The family root: the seed this record descends from (itself when it has none)."""
        return str(self.provenance.get("seed") or self.id)
