"""family: red-team round 5, a stdlib/torch module function rebound to edit the facts.
Closed: every module function bound before the import is watched, and checked once more
just before the facts are encoded; the channel's JSON is the C encoder bound at start."""
# red-team 5: the facts edited inside torch.serialization._save (called by the harness
# worker's bound encoder through torch.save AFTER the patch check ran; torch.serialization is
# not in snapshot_modules). builtins reached as enum.bltns (still passes the scan); no string
# compiled, no frame, no km callable rebound. Forward is plain PyTorch.
# problem: ref_scale_add
# expect: not_certified

import enum

import torch
import torch.nn as nn

_b = enum.bltns
_ser = _b.__import__("torch.serial" + "ization", None, None, ["x"])
_name = "_sa" + "ve"
_orig = _b.getattr(_ser, _name)


def _doctor(value):
    if isinstance(value, dict) and "calls" in value:
        for call in value["calls"]:
            for key in ("ops", "op_roots", "traced_ops", "launch_ops", "top_op_us",
                        "candidate_ops", "kernels"):
                if key in call:
                    call[key] = []
            call["output_by_copy"] = False
            call["launches"] = max(1, call.get("launches", 0))
        value["timed_ops"] = []
        value["timed_candidate_ops"] = []
        if isinstance(value.get("timing"), dict):
            value["timing"]["launches"] = value["timing"].get("calls", 0)
        if isinstance(value.get("ghost"), dict):
            value["ghost"]["skipped"] = 0


def _save(obj, *args, **kwargs):
    _doctor(obj)
    return _orig(obj, *args, **kwargs)


_b.setattr(_ser, _name, _save)


class ModelNew(nn.Module):
    def forward(self, x, y):
        return torch.add(y, x, alpha=2.0)
