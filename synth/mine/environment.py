"""Questions a package asks about its environment, answered while mining for the environment a
mined problem runs in: the installed torch and nothing else, no environment variables set.

* Availability helpers (``is_torch_available()``, ``is_flash_attn_2_available()``,
  ``is_torch_xpu_available()``): torch is there; other packages and other accelerators' torch
  builds are not.
* Version helpers (``is_torch_greater_or_equal("2.7", accept_dev=True)``,
  ``is_torch_less_or_equal``): compared with the installed torch's version (read from its
  distribution metadata, torch is never imported here).
* Version comparisons (``version.parse(torch.__version__) >= version.parse("2.1")``,
  ``version.parse(get_torch_version()).base_version == "2.6.0"``): the installed torch's.
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
QUERY_NAME = re.compile(r"^_?is_\w+_(available|or_equal|than)$|^__version__$|"
                        r"^_?(get_)?torch_version$")


@functools.cache
def torch_version_text() -> str | None:
    """The installed torch's version string (its distribution's metadata), the torch every
    environment question is answered for; None without one."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return None


@functools.cache
def torch_version() -> tuple[tuple[int, ...], bool]:
    """(release numbers, is a pre-release or dev build) of the installed torch."""
    text = torch_version_text()
    return _parse(text) if text is not None else ((0,), False)


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


def _is_torch_version(node: cst.BaseExpression) -> bool:
    """``torch.__version__`` or a call of a ``get_torch_version``-like helper."""
    if isinstance(node, cst.Attribute) and node.attr.value == "__version__":
        return isinstance(node.value, cst.Name) and node.value.value == "torch"
    return isinstance(node, cst.Call) and not node.args and \
        (_callee(node.func) or "").lstrip("_") in ("get_torch_version", "torch_version")


def version_of(node: cst.BaseExpression) -> tuple[tuple[int, ...], bool, bool] | None:
    """(release, pre-release, is torch's) of a version expression: a string literal,
    ``torch.__version__``, ``version.parse(...)``/``Version(...)`` of either, and its
    ``.base_version``; None for anything else."""
    if isinstance(node, cst.SimpleString):
        text = _string(node)
        return (*_parse(text), False) if text is not None else None
    if _is_torch_version(node):
        return (*torch_version(), True)
    if isinstance(node, cst.Attribute) and node.attr.value == "base_version":
        inner = version_of(node.value)
        return (inner[0], False, inner[2]) if inner is not None else None
    if isinstance(node, cst.Call) and len(node.args) == 1 and node.args[0].keyword is None \
            and (_callee(node.func) in ("parse", "Version") or
                 (isinstance(node.func, cst.Name) and node.func.value in ("parse", "Version"))):
        return version_of(node.args[0].value)
    return None


def compare_truth(node: cst.Comparison) -> bool | None:
    """``version.parse(torch.__version__) >= version.parse("2.1")`` and its kin, for the
    installed torch (a comparison that involves no torch version is not answered)."""
    if len(node.comparisons) != 1:
        return None
    target = node.comparisons[0]
    left, right = version_of(node.left), version_of(target.comparator)
    if left is None or right is None or not (left[2] or right[2]):
        return None
    # a pre-release sorts just below its release
    a, b = (left[0], 0 if left[1] else 1), (right[0], 0 if right[1] else 1)
    ops = {cst.Equal: a == b, cst.NotEqual: a != b, cst.LessThan: a < b,
           cst.LessThanEqual: a <= b, cst.GreaterThan: a > b, cst.GreaterThanEqual: a >= b}
    return ops.get(type(target.operator))


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
        versions = compare_truth(node)
        if versions is not None:
            return versions
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

    def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison
                         ) -> cst.BaseExpression:
        value = compare_truth(original)
        if value is None:
            return updated
        self.answered += 1
        return cst.Name("True" if value else "False")
