"""The problem record: one JSON object per line, shared by every stage.

Each stage owns one section (``validation`` belongs to validate/, ``dedup`` to curate's dedup,
``split`` to splits/ ...) and never rewrites another's. Sections a newer stage adds that this
class does not name are kept verbatim in ``extra`` so a round trip loses nothing.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from .canonical import source_id

RECORD_FIELDS = ("id", "source", "name", "category", "level", "provenance", "validation",
                 "dedup", "cluster", "split", "contamination", "split_group")

S = TypeVar("S", bound="Section")
_SECTION_NAMES: dict[type, tuple[frozenset[str], frozenset[str], tuple[str, ...]]] = {}


def _section_names(cls: type) -> tuple[frozenset[str], frozenset[str], tuple[str, ...]]:
    """(all field names, those but ``extra``, those in declaration order) of a section class,
    cached: records are read and written by the hundred thousand."""
    names = _SECTION_NAMES.get(cls)
    if names is None:
        ordered = tuple(f.name for f in dataclasses.fields(cls) if f.name != "extra")
        names = (frozenset((*ordered, "extra")), frozenset(ordered), ordered)
        _SECTION_NAMES[cls] = names
    return names


class Section(Mapping):
    """A typed section of a record: named fields, plus ``extra`` for keys a newer stage wrote that
    this version does not name (kept verbatim, so a round trip loses nothing).

    Read fields as attributes (``record.validation.eager_ms``). A section is also a read-only
    mapping of its JSON form, so code written against the JSON (``row["validation"]["passed"]``)
    reads a typed record the same way.
    """

    extra: dict[str, Any]
    _names: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_dict(cls: type[S], data: Mapping[str, Any] | S | None) -> S | None:
        if data is None or isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise ValueError(f"section {cls.__name__.lower()} must be a JSON object, got "
                             f"{type(data).__name__}")
        names = cls._data_names()
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names}
        return cls(**known, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self._ordered_names()}
        data.update(self.extra)
        return data

    # read-only mapping view of the JSON form
    def __getitem__(self, key: str) -> Any:
        if key != "extra" and key in self._field_names():
            return getattr(self, key)
        return self.extra[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    @classmethod
    def _field_names(cls) -> frozenset[str]:
        return _section_names(cls)[0]

    @classmethod
    def _data_names(cls) -> frozenset[str]:
        return _section_names(cls)[1]

    @classmethod
    def _ordered_names(cls) -> tuple[str, ...]:
        return _section_names(cls)[2]

    def replace(self: S, **changes: Any) -> S:
        names = self._field_names()
        extra = {**self.extra, **{k: v for k, v in changes.items() if k not in names}}
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if k in names},
                                   extra=extra)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value


@dataclass(eq=True)
class Validation(Section):
    """What validate/ measured about a problem on one device (see validate/checks.py)."""

    passed: bool = False
    flags: list[str] = field(default_factory=list)
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    device: str | None = None
    torch: str | None = None
    dtype: str | None = None
    eager_ms: float | None = None
    inductor_ms: float | None = None
    inductor_speedup: float | None = None
    flops: float | None = None
    bytes: float | None = None
    roofline_ms: float | None = None
    headroom: float | None = None
    atol: float | None = None
    rtol: float | None = None
    difficulty: dict[str, Any] | None = None  # {"tier", "score", ...}: validate/difficulty.py
    aten_ops: list[str] = field(default_factory=list)
    probe_stats: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=True)
class Dedup(Section):
    """The dedup stage's keys: exact and structural hashes, the near-duplicate group (MinHash LSH
    component) and the behaviour key (outputs on fixed inputs)."""

    exact_key: str | None = None
    structural_key: str | None = None
    near_group: str | None = None
    behaviour_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=True)
class Contamination(Section):
    """Matches of a problem against a reference benchmark (splits/contamination.py)."""

    matches: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=True)
class Verdict(Section):
    """The grader's judgement of one submission against one problem (grade.judge decides it).

    ``timing`` holds the one exclusive timing window both speedups come from
    (``{method, reps, ci_pct, reference_ms, candidate_ms}``; with the reference's time pooled
    over windows, ``grade.reference_pool``, ``reference_ms`` is the pool's and the window's own
    is ``reference_window_ms``); ``timings`` the raw measurements.
    ``reward`` is None where no reward applies (the reference itself could not run).
    """

    compiled: bool = False
    correct: bool = False
    hacks: list[str] = field(default_factory=list)
    reward: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_inductor: float | None = None
    stage_reached: str = "none"
    error: dict[str, Any] | None = None  # {"stage", "message"}
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, Any] | None = None
    hack_details: dict[str, str] = field(default_factory=dict)
    # the checked calls' device work: the candidate's share of the GPU time and the library
    # kernels that ran (``grade.checks.attribution.device_work``)
    device_work: dict[str, Any] | None = None
    # every check that found something, in the order they ran: {code, check, threat, layer,
    # detail} (``grade.checks``; a row written before findings existed reads as [])
    findings: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def failure(cls, stage: str, message: str, *, reward: float | None = 0.0,
                **marks: Any) -> Verdict:
        """A submission that never reached judgement: why (``stage``, ``message``), its reward,
        and marks such as ``reference_failed=True`` (the problem's fault, not the candidate's)."""
        return cls(error={"stage": stage, "message": message}, reward=reward, extra=marks)


_SECTIONS: dict[str, type[Section]] = {"validation": Validation, "dedup": Dedup,
                                       "contamination": Contamination}


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
    validation: Validation | None = None
    dedup: Dedup | None = None
    cluster: int | None = None
    split: str | None = None
    contamination: Contamination | None = None
    split_group: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __setattr__(self, name: str, value: Any) -> None:
        section = _SECTIONS.get(name)  # a JSON object assigned to a section becomes typed
        object.__setattr__(self, name, section.from_dict(value) if section else value)

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
        for name in _SECTIONS:
            if data[name] is not None:
                data[name] = data[name].to_dict()
        for name in ("contamination", "split_group"):  # written only by the split stage
            if data[name] is None:
                del data[name]
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
