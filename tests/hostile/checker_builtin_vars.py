"""family: red-team round 6, builtins.vars rebound so the patch check sees the originals.
Closed: the patch check binds the builtins it uses as keyword defaults."""
# red-team 6: the patch CHECKER's own builtins. Grade against
# tests/fixtures/submissions/ref_scale_add.py.
# worker.patched_functions (run by the result guard just before encoding) reads every watched
# binding as `vars(owner).get(name)`, and `vars` is looked up in builtins at call time. The
# candidate rebinds builtins.vars (a module setattr: no audit event) to a function that answers
# with the ORIGINAL objects for exactly the bindings it changed (itself included). The checker
# then vouches for every patch. Here the patch is round 5's save_wrap_doctor, reopened:
# torch.serialization._save (looked up by torch.save at call time, while the result is encoded
# after the guard) is wrapped to doctor the facts: every call's op lists emptied, the ghost call's
# outputs replaced by NaN. Forward returns torch.add(y, x, alpha=2) after a one-element Triton
# launch that does nothing useful.
# problem: ref_scale_add
# expect: not_certified
import enum

import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
_VARS = "va" + "rs"
_real_vars = _b.getattr(_b, _VARS)
_ser = _b.__import__("torch.serial" + "ization", None, None, ["x"])
_real_save = _b.getattr(_ser, "_save")
_OPS = ("ops", "op_roots", "traced_ops", "launch_ops", "top_op_us", "candidate_ops", "kernels")


def _vars(*args):
    found = _real_vars(*args)
    if args and args[0] is _ser:
        found = dict(found)
        found["_save"] = _real_save
    elif args and args[0] is _b:
        found = dict(found)
        found[_VARS] = _real_vars
    return found


def _doctor(value):
    for call in value.get("calls") or []:
        for key in _OPS:
            if key in call:
                call[key] = []
    value["timed_ops"] = []
    value["timed_candidate_ops"] = []
    value["timed_kernel_us"] = {}
    ghost = value.get("ghost")
    if type(ghost) is dict and ghost.get("outputs"):
        ghost["outputs"] = [torch.full_like(t, float("nan")) for t in ghost["outputs"]]


def _save(obj, *args, **kwargs):
    if type(obj) is dict and "calls" in obj:
        _doctor(obj)
    return _real_save(obj, *args, **kwargs)


_b.setattr(_ser, "_save", _save)
_b.setattr(_b, _VARS, _vars)


@triton.jit
def noop_kernel(flag_ptr):
    tl.store(flag_ptr, 1.0)


class ModelNew(nn.Module):
    def forward(self, x, y):
        flag = torch.empty(1, device=x.device)
        noop_kernel[(1,)](flag)
        return torch.add(y, x, alpha=2.0)
