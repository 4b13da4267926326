"""Questions a package asks about its environment, answered while mining for the environment a
mined problem runs in: the installed torch and nothing else, no environment variables set.

* Availability helpers (``is_torch_available()``, ``is_flash_attn_2_available()``,
  ``is_torch_xpu_available()``): torch is there; other packages and other accelerators' torch
  builds are not.
* Version helpers (``is_torch_greater_or_equal("2.7", accept_dev=True)``,
  ``is_torch_less_or_equal``): compared with the installed torch's version (read from its
  distribution metadata, torch is never imported here).
* Environment variables (``"TIMM_FUSED_ATTN" in os.environ``, ``os.environ.get("X")``,
  ``os.getenv("X")``): unset, so the package's default branch is the one taken.

``truth(expr)`` is True, False or None (not a question this module answers). The index reads
only the branch a module-level ``if`` takes when its test is answered, and the gatherer
replaces an answered call inside a definition by its literal: the helpers (and the
``packaging`` or ``importlib.metadata`` code behind them) never reach a problem.
"""
from __future__ import annotations

import functools
import re

import libcst as cst

# availability of another torch build's accelerator: never, in a problem that runs on CPU/CUDA
_OTHER_ACCELERATORS = frozenset({
    "xpu", "npu", "mlu", "musa", "hpu", "xla", "tpu", "neuron", "neuroncore", "supa", "mps",
    "tensorrt_fx", "optimi"})
_AVAILABLE = re.compile(r"^_?is_(\w+?)_available$")
_TORCH_VERSION = re.compile(r"^_?is_torch_(greater_or_equal|less_or_equal|greater_than|"
                            r"less_than)$")
QUERY_NAME = re.compile(r"^_?is_\w+_(available|or_equal|than)$")


@functools.cache
def torch_version() -> tuple[tuple[int, ...], bool]:
    """(release numbers, is a pre-release or dev build) of the installed torch."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version("torch")
    except PackageNotFoundError:
        return (0,), False
    return _parse(text)


def _parse(text: str) -> tuple[tuple[int, ...], bool]:
    text = text.split("+")[0].strip()
    match = re.match(r"^v?(\d+(?:\.\d+)*)(.*)$", text)
    if not match:
        return (0,), False
    numbers = tuple(int(n) for n in match.group(1).split("."))
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers = numbers[:-1]
    return numbers, bool(re.search(r"(a|b|rc|dev|pre)", match.group(2)))


def compare_torch(op: str, wanted: str, accept_dev: bool = False) -> bool:
    """``installed torch <op> wanted``; a pre-release or dev build sorts just below its
    release unless ``accept_dev`` (then its base version is compared)."""
    (have, pre), (want, _) = torch_version(), _parse(wanted)
    # below the release: 2.7.0.dev sorts after 2.6.x and before 2.7.0
    key_have, key_want = (have, 0 if pre and not accept_dev else 1), (want, 1)
    return {"greater_or_equal": key_have >= key_want, "less_or_equal": key_have <= key_want,
            "greater_than": key_have > key_want, "less_than": key_have < key_want}[op]


def _callee(node: cst.BaseExpression) -> str | None:
    """The function name of a call to a plain or module-qualified helper (not a method of
    ``self``/``cls``)."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute) and isinstance(node.value, (cst.Name, cst.Attribute)):
        head = node.value
        while isinstance(head, cst.Attribute):
            head = head.value
        if isinstance(head, cst.Name) and head.value not in ("self", "cls", "torch"):
            return node.attr.value
    return None


def _string(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value if isinstance(node.evaluated_value, str) else None
    return None


def _is_environ(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Attribute) and node.attr.value == "environ" and \
        isinstance(node.value, cst.Name) and node.value.value == "os"


def _literal_truth(node: cst.BaseExpression) -> bool | None:
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return node.value == "True"
    if isinstance(node, (cst.Integer, cst.Float)):
        return float(node.value.replace("_", "")) != 0
    if isinstance(node, cst.SimpleString):
        return bool(node.evaluated_value)
    return None


def query_truth(call: cst.Call) -> bool | None:
    """The answer to one availability, version or environment-variable call; None: not one."""
    func = call.func
    args = [a for a in call.args if a.keyword is None]
    kwargs = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    # os.environ.get("X"[, default]) / os.getenv("X"[, default]): unset
    if isinstance(func, cst.Attribute) and (
            (func.attr.value == "get" and _is_environ(func.value)) or
            (func.attr.value == "getenv" and isinstance(func.value, cst.Name) and
             func.value.value == "os")):
        default = args[1].value if len(args) > 1 else kwargs.get("default")
        return False if default is None else _literal_truth(default)
    name = _callee(func)
    if name is None:
        return None
    match = _TORCH_VERSION.match(name)
    if match:
        wanted = _string(args[0].value) if args else _string(kwargs.get("library_version"))
        dev = kwargs.get("accept_dev", args[1].value if len(args) > 1 else None)
        accept_dev = _literal_truth(dev) if dev is not None else False
        if wanted is None or accept_dev is None:
            return None
        return compare_torch(match.group(1), wanted, accept_dev)
    match = _AVAILABLE.match(name)
    if match and not args and not kwargs:
        what = match.group(1)
        if what == "torch":
            return True
        if what.startswith("torch_"):
            return False if what.removeprefix("torch_") in _OTHER_ACCELERATORS else None
        return False  # another package: a problem runs with torch alone
    return None


def truth(node: cst.BaseExpression) -> bool | None:
    """A test's value in a problem's environment, where this module can tell; else None."""
    if isinstance(node, cst.Call):
        return query_truth(node)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        inner = truth(node.expression)
        return None if inner is None else not inner
    if isinstance(node, cst.BooleanOperation):
        left, right = truth(node.left), truth(node.right)
        if isinstance(node.operator, cst.And):
            if left is False or right is False:
                return False
            return True if left and right else None
        if left is True or right is True:
            return True
        return False if left is False and right is False else None
    if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
        target = node.comparisons[0]
        if _is_environ(target.comparator) and _string(node.left) is not None:
            if isinstance(target.operator, cst.In):
                return False
            if isinstance(target.operator, cst.NotIn):
                return True
    return None


class AnswerQueries(cst.CSTTransformer):
    """Replaces every answered availability or version call (``truth`` of a call) by its
    literal ``True``/``False``; environment-variable reads inside definitions stay (they run
    in the problem's own environment)."""

    def __init__(self):
        super().__init__()
        self.answered = 0

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = _callee(original.func)
        if name is None or not QUERY_NAME.match(name):
            return updated
        value = query_truth(original)
        if value is None:
            return updated
        self.answered += 1
        return cst.Name("True" if value else "False")
