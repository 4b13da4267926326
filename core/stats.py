"""Per-stage counts by label, in the manner of datatrove's step stats.

A stage returns a ``StageStats``: how many records it kept and, for each reason, how many it
dropped. The build's funnel table and the report are made from these counts.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field


# Records a resumed stage found finished by an earlier run and kept as they were (counted apart
# from ``kept``, this run's own)
DONE_BEFORE = "already validated"


@dataclass
class StageStats:
    stage: str
    counts: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def kept(self, n: int = 1) -> None:
        self.counts["kept"] += n

    def dropped(self, reason: str, n: int = 1) -> None:
        self.counts[f"dropped: {reason}"] += n

    def count(self, label: str, n: int = 1) -> None:
        self.counts[label] += n

    @property
    def n_kept(self) -> int:
        return self.counts["kept"]

    @property
    def n_kept_all(self) -> int:
        """Kept by this run and by the earlier runs a resumed stage took over (``DONE_BEFORE``):
        what the stage's output holds."""
        return self.counts["kept"] + self.counts.get(DONE_BEFORE, 0)

    @property
    def n_dropped(self) -> int:
        return sum(v for k, v in self.counts.items() if k.startswith("dropped: "))

    def drop_reasons(self) -> dict[str, int]:
        return {k[len("dropped: "):]: v for k, v in self.counts.items() if k.startswith("dropped: ")}

    def to_dict(self) -> dict:
        return {"stage": self.stage, "counts": dict(self.counts), "seconds": round(self.seconds, 3)}

    @classmethod
    def from_dict(cls, data: dict) -> "StageStats":
        return cls(data["stage"], Counter(data.get("counts", {})), data.get("seconds", 0.0))

    def summary(self) -> str:
        parts = [f"{self.n_kept} kept"] + [f"{v} {k}" for k, v in sorted(self.counts.items())
                                           if k != "kept"]
        return f"{self.stage}: " + ", ".join(parts)

    def __str__(self) -> str:
        return json.dumps(self.to_dict())
