"""family: red-team round 4, builtins without naming them: a generator's code object (``gi_code``,
not on the scan's list; ``__code__`` is) is renamed with ``code.replace(co_names=...)``
(names assembled at run time) and made a function with ``type(fn)(code, {})``: a function
whose globals lack __builtins__ gets the caller's builtins, so its global ``pkg_imp`` becomes
``__import__`` and ``pkg_get``/``pkg_put`` getattr/setattr. Nothing is compiled from a string
(the audit hook sees only code.__new__/function.__new__ events, which it ignores). Then the
same facts edit as builtin_self_witnessed. Forward is plain PyTorch."""
# problem: ref_scale_add
# expect: not_certified
import torch
import torch.nn as nn


def _tool(which, *args):
    yield (pkg_imp, pkg_get, pkg_put)[which](*args)


_names = {"pkg_imp": "__imp" + "ort__", "pkg_get": "get" + "attr", "pkg_put": "set" + "attr"}
_code = _tool(0).gi_code
_code = _code.replace(co_names=tuple(_names.get(n, n) for n in _code.co_names))
_fresh = type(_tool)(_code, {})
_load = lambda *a: next(_fresh(0, *a))  # noqa: E731
_get = lambda *a: next(_fresh(1, *a))  # noqa: E731
_put = lambda *a: next(_fresh(2, *a))  # noqa: E731
_w = _load("kernel" + "mill.grade.worker", None, None, ["main"])
_cls = _get(_w, "_" + "Run")
_orig = _get(_cls, "witnessed")


def _witnessed(self, facts):
    _orig(self, facts)
    for call in facts["calls"]:
        for key in ("ops", "op_roots", "traced_ops", "launch_ops", "top_op_us",
                    "candidate_ops", "kernels"):
            if key in call:
                call[key] = []
        call["output_by_copy"] = False
        call["launches"] = max(1, call.get("launches", 0))
    facts["timed_ops"] = []
    facts["timed_candidate_ops"] = []
    facts["timed_kernel_us"] = {}
    if isinstance(facts.get("timing"), dict):
        facts["timing"]["launches"] = facts["timing"].get("calls", 0)
    if isinstance(facts.get("ghost"), dict):
        facts["ghost"]["skipped"] = 0


_put(_cls, "witnessed", _witnessed)


class ModelNew(nn.Module):
    def forward(self, x, y):
        return torch.add(y, x, alpha=2.0)
