"""What the judge derives while it judges one run: its own objects, never written into the
facts (``grade.facts``). Each check reads the facts and this context."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..compare import Unchanged
from ..facts import CallFacts, Facts, RunFacts
from ..policy import Policy, compute_ops, op_base, reference_compute_ops


@dataclass
class Attribution:
    """Whose work one call's device (or CPU) time was (``attribution.attribute``)."""

    owners: dict  # id(kernel) -> candidate | vendor | library
    device: list  # kernel records other than copies
    share_us: tuple | None = None  # (the candidate's µs, all counted µs, clock name)
    library_us: list = field(default_factory=list)  # (kernel, us, owner), not the candidate's


@dataclass
class CallView:
    """One checked call as the judge sees it: the facts, and what the judge derived."""

    name: str  # "kind:trial"
    call: CallFacts
    trial: dict  # the reference's trial it ran on
    mine: list | None  # ops the candidate registered (None: namespaces decide)
    allowed: frozenset | None  # library op bases the policy allows (None: all)
    compute: list  # computing library ops beyond those allowed
    attribution: Attribution | None = None
    ok: bool = False  # its answer was right (set after its checks ran)
    why: str = ""  # why its answer was wrong
    floor_only: bool = False  # wrong at the output's scale, right within the absolute floor


@dataclass
class Context:
    reference: dict
    policy: Policy
    facts: Facts
    findings: list  # the static scan's lines
    record: dict | None = None
    window: dict | None = None
    own_kernels: frozenset | None = None
    error: dict | None = None  # the failed run's error, explained (``judge.explained``)
    verdict: dict = field(default_factory=dict)  # the verdict being assembled
    checks: dict = field(default_factory=dict)  # the verdict's named checks (passed, detail)
    views: list = field(default_factory=list)  # CallView per checked call
    unchanged: Unchanged = field(default_factory=Unchanged)
    compared: dict = field(default_factory=dict)  # answers by where the outputs live
    all_correct: bool = True
    correct: bool = False  # all calls right and there were calls (before hacks)

    @property
    def run(self) -> RunFacts:
        return self.facts.run

    @property
    def reference_ops(self) -> list:
        return self.reference.get("ops", [])

    @property
    def trials(self) -> list[dict]:
        usable = [t for t in self.reference.get("trials") or [] if t["usable"]]
        return [t for t in usable if not t.get("hidden")]

    @property
    def hidden(self) -> list[dict]:
        usable = [t for t in self.reference.get("trials") or [] if t["usable"]]
        return [t for t in usable if t.get("hidden")]

    @property
    def ref_device(self) -> Any:
        return self.reference["trials"][0]["device_types"]

    @property
    def scored_ms(self) -> Any:
        return (((self.window or {}).get("participants") or {}).get("candidate") or {}).get("ms")

    def tolerance(self, trial: dict) -> tuple[float, float]:
        """The tolerance of a trial, by its first tensor output's dtype."""
        dtype = next((str(t.dtype) for t in trial["outputs"] if isinstance(t, torch.Tensor)),
                     "torch.float32")
        return self.policy.tolerance(dtype, self.record)

    def view(self, call: CallFacts) -> CallView:
        trial = self.trials[call["trial"]]
        mine = call.get("candidate_ops")
        allowed = self.policy.allowed_library_ops(self.reference_ops)
        ops, roots = call.ops, call.get("op_roots") or []
        # what runs inside an allowed vendor op (a convolution's own reshapes) is the vendor's
        judged = [op for op, root in zip(ops, roots)
                  if not (allowed and op != root and op_base(root) in allowed)] \
            if len(roots) == len(ops) else ops
        compute = compute_ops([*judged, *call.get("launch_ops", [])], mine) + \
            reference_compute_ops(ops, self.reference_ops)
        compute = [op for op in compute if allowed is not None and op_base(op) not in allowed]
        return CallView(f"{call['kind']}:{call['trial']}", call, trial, mine, allowed, compute)
