"""A copy of a model whose forward computes with the copy's own modules and tensors.

``copy.deepcopy`` copies a plain function by reference, so a function kept as a module's
attribute still reaches the ORIGINAL modules through its closure: minGPT's
``self.mlpf = lambda x: m.c_proj(m.act(m.c_fc(x)))`` (``m`` the constructed ``self.mlp``) makes
a deep copy's forward run the first model's MLP. A copy changed on purpose (parameters
perturbed, a sub-module bypassed, moved to float64) would then silently compute with the
unchanged original. ``copy_model`` re-binds every such function's closure cells to the copies
of what they held. Worker-side: imports only the standard library.
"""
from __future__ import annotations

import copy
import types
from typing import Any


def copy_model(model: Any) -> Any:
    """A deep copy of ``model`` whose module attributes that are functions closing over parts
    of the model (modules, tensors, the model itself), or holding them as default arguments
    (``lambda x, m=self.fc: m(x)``), hold the copied parts instead.
    Objects a closure holds that are not part of the model (``torch``, a constant) stay
    shared, as a deep copy shares a module."""
    memo: dict[int, Any] = {}
    new = copy.deepcopy(model, memo)
    for module in new.modules():
        attrs = vars(module)
        for name, value in list(attrs.items()):
            if isinstance(value, types.FunctionType) and \
                    (value.__closure__ or value.__defaults__ or value.__kwdefaults__):
                attrs[name] = _rebound(value, memo)
    return new


def _rebound(fn: types.FunctionType, memo: dict[int, Any]) -> types.FunctionType:
    cells = []
    for cell in fn.__closure__ or ():
        try:
            held = cell.cell_contents
        except ValueError:  # an empty cell
            cells.append(cell)
            continue
        cells.append(types.CellType(memo.get(id(held), held)))
    defaults = None if fn.__defaults__ is None else \
        tuple(memo.get(id(v), v) for v in fn.__defaults__)
    out = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, defaults, tuple(cells))
    out.__kwdefaults__ = None if fn.__kwdefaults__ is None else \
        {k: memo.get(id(v), v) for k, v in fn.__kwdefaults__.items()}
    out.__dict__.update(fn.__dict__)
    return out


__all__ = ["copy_model"]
