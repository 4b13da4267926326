"""Static scan of a candidate source for APIs a kernel has no business touching.

A kernel submission needs torch, triton, math and a compiler for extension source strings. It
does not need to walk interpreter frames, reach the harness's modules, start threads or
processes, write files, replace attributes of library modules, or push dispatch modes. Those are
how a submission forges results, hides PyTorch calls or patches timers, so their presence is
flagged (``forbidden_api``) before anything runs. The scan reads the AST (names, attributes,
imports, calls) and the C/C++/CUDA source strings handed to ``load_inline``.
"""
from __future__ import annotations

import ast
import functools
import re

FORBIDDEN_MODULES = {
    "ctypes", "subprocess", "multiprocessing", "threading", "_thread", "concurrent", "signal",
    "socket", "gc", "inspect", "importlib", "builtins", "kernelmill", "pickle", "marshal",
    "shutil", "tempfile", "sysconfig", "resource", "mmap", "fcntl", "pty", "asyncio", "code",
    "codeop", "faulthandler", "tracemalloc", "sched", "atexit", "weakref", "cffi", "psutil",
    # clocks: a kernel has no reason to time itself (or to notice it is being observed)
    "time", "datetime", "timeit",
    # compute outside torch's dispatcher, invisible to the op trace
    "numpy", "cupy", "numba", "pycuda", "jax", "tensorflow", "scipy", "tinygrad", "cuda",
}
FORBIDDEN_ATTRIBUTES = {
    "__subclasses__", "__globals__", "__code__", "__builtins__", "__closure__", "f_back",
    "f_locals", "f_globals", "gi_frame", "tb_frame", "_getframe", "_current_frames",
    "settrace", "setprofile", "__torch_function__", "__torch_dispatch__",
    "_python_dispatch", "_get_dispatch_mode", "_len_torch_dispatch_stack",
    "_len_torch_function_stack", "_push_on_torch_dispatch_stack", "TorchDispatchMode",
    "TorchFunctionMode", "overrides", "_dynamo", "_inductor", "compile", "fork", "forkpty",
    "system", "popen", "execv", "execve", "execvp", "spawnv", "kill", "killpg", "setsid",
    "setpgid", "_exit", "dup", "dup2", "fdopen", "write_text", "write_bytes", "unlink",
    "rmdir", "chmod", "symlink", "putenv", "load_library", "_load_library", "__dict__",
    "numpy", "from_numpy", "tolist", "__array__", "__array_interface__", "__dlpack__",
    "from_dlpack", "frombuffer", "cr_frame", "ag_frame", "__traceback__", "elapsed_time",
    "perf_counter", "perf_counter_ns", "monotonic", "process_time", "thread_time",
    "setrecursionlimit", "_send", "mark_stage", "attrgetter", "methodcaller",
    "getattr_static", "__getattribute__", "exc_info", "exception",
    "__class__", "__bases__", "__mro__",
}
# Attributes that are harmless on most objects but not on these modules.
FORBIDDEN_MODULE_ATTRIBUTES = {("sys", "modules"), ("os", "environ"), ("os", "remove"),
                               ("os", "rename"), ("os", "replace"), ("os", "truncate"),
                               ("os", "write"), ("os", "open"), ("sys", "stdout")}
INDIRECT_BUILTINS = {"getattr", "setattr", "delattr", "eval", "exec", "compile", "__import__",
                     "globals", "vars", "locals", "open"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__", "globals", "vars", "setattr",
                   "delattr", "breakpoint", "input"}
# torch._C internals that reveal or switch off dispatch tracing
PRIVATE_DISPATCH = re.compile(r"^_(dispatch|len_torch|get_dispatch|get_torch_dispatch|"
                              r"python_dispatch|unset_dispatch|set_dispatch|push_on|pop_torch|"
                              r"is_torch_function|disabled_torch|set_torch_function|"
                              r"DisableTorch|EnableTorch|ExcludeDispatchKeyGuard|"
                              r"IncludeDispatchKeyGuard|RestorePythonTLSSnapshot|"
                              r"AutoDispatchBelow|ForceDispatchKeyGuard|PreserveDispatchKeyGuard|"
                              r"DisableFuncTorch|EnablePythonDispatcher|DisablePythonDispatcher|"
                              r"unsafe_set_version|autograd\._unsafe|disable_profiler|"
                              r"enable_profiler|prepare_profiler|kineto)")
NATIVE_PATTERNS = re.compile(
    r"std::thread|pthread_create|\bfork\s*\(|\bsystem\s*\(|\bpopen\s*\(|\bdlopen\s*\(|"
    r"\bsyscall\s*\(|\b_exit\s*\(|\bdup2?\s*\(|\bwrite\s*\(|"
    r"\bkill\s*\(|\bexecv|\bptrace\s*\(|/proc/|\bfopen\s*\(|std::ofstream|\bmprotect\s*\(|"
    r"\bposix_spawn|\bvfork\s*\(|\bclone3?\s*\(|"
    # ATen entry points that run a kernel without the dispatcher (no trace, no profiler
    # record), their headers, and the guards that switch dispatch keys off in native code
    r"\bat::(?:native|_ops)::|"
    r"ATen/(?:CPU|CUDA|Meta|CompositeExplicitAutograd|CompositeImplicitAutograd)Functions|"
    r"ATen/native/|ATen/ops/\w+_(?:native|cpu_dispatch|cuda_dispatch|ops)\.h|"
    r"DispatchKeyGuard|AutoDispatchBelow|AutoNonVariableTypeMode|\bredispatch\b|"
    r"\bcallBoxed\b|findSchemaOrThrow|c10::Dispatcher")
# ``at::cpu::add``, ``at::cuda::mm``: an operator's backend kernel called without the dispatcher
# (no trace, no profiler record). The same namespaces hold the utilities an honest extension needs
# (``at::cuda::getCurrentCUDAStream``, stream guards), so only names of ATen operators count.
BACKEND_ENTRY = re.compile(
    r"\bat::(cpu|cuda|meta|mps|compositeexplicitautograd|compositeimplicitautograd|"
    r"compositeexplicitautogradnonfunctional)::(\w+)")


@functools.cache
def aten_operator_names() -> frozenset[str]:
    """Every ATen operator's name (``add``, ``mm``, ``_softmax`` ...), from the dispatcher."""
    import torch

    return frozenset(name.split("::", 1)[1].split(".", 1)[0]
                     for name in torch._C._dispatch_get_all_op_names()
                     if name.startswith("aten::"))


def backend_entry_points(text: str) -> list[str]:
    """``at::<backend>::<operator>`` calls in native source (``_out``/``_outf`` variants too)."""
    found = []
    for match in BACKEND_ENTRY.finditer(text):
        name = match.group(2)
        base = name.removesuffix("_outf").removesuffix("_out").removesuffix("_symint")
        if base in aten_operator_names() or base.rstrip("_") in aten_operator_names():
            found.append(match.group(0))
    return found


# Dangerous modules that library modules re-export as attributes (torch.os, torch.sys, ...).
REACHABLE_MODULES = {"sys", "os", "ctypes", "subprocess", "gc", "inspect", "importlib",
                     "builtins", "threading", "_thread", "signal", "multiprocessing", "pickle",
                     "marshal", "shutil", "tempfile", "socket", "time", "weakref", "atexit"}
# Module objects whose attributes a submission must not assign (monkeypatching).
LIBRARY_ROOTS = {"torch", "triton", "time", "os", "sys", "math", "numpy", "np", "tl", "F", "nn",
                 "random", "statistics", "functools", "operator"}


def _forbidden_name(name: str) -> bool:
    """A name that is flagged as an attribute is flagged when imported by name too."""
    return name in FORBIDDEN_ATTRIBUTES or bool(PRIVATE_DISPATCH.match(name)) or \
        name in REACHABLE_MODULES and name not in ("time",)


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_write_open(call: ast.Call) -> bool:
    mode = call.args[1] if len(call.args) > 1 else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and \
        any(c in mode.value for c in "wax+")


def scan(source: str) -> list[str]:
    """Findings as short strings (``line N: what``); empty when nothing suspicious is used."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    findings: list[str] = []
    imported_modules = set(LIBRARY_ROOTS)
    bound_by_import: set[str] = set()

    def flag(node: ast.AST, what: str) -> None:
        findings.append(f"line {getattr(node, 'lineno', '?')}: {what}")

    # getattr(obj, "constant") is ordinary; getattr passed around (reduce(getattr, ...),
    # g = getattr) or called with a computed name is a way around this scan.
    direct_calls = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in INDIRECT_BUILTINS and \
                id(node) not in direct_calls:
            flag(node, f"passes {node.id} around")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported_modules.add((alias.asname or alias.name).split(".")[0])
                bound_by_import.add((alias.asname or alias.name).split(".")[0])
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    flag(node, f"imports {alias.name}")
                # ``import a.b as c`` binds a.b just as ``from a import b`` does
                for part in alias.name.split(".")[1:]:
                    if _forbidden_name(part):
                        flag(node, f"imports {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.split(".")[0] in FORBIDDEN_MODULES or \
                    any(_forbidden_name(part) for part in module.split(".")[1:]):
                flag(node, f"imports from {module}")
            for alias in node.names:
                if _forbidden_name(alias.name) or alias.name in FORBIDDEN_CALLS:
                    flag(node, f"imports {alias.name} from {module}")
                if module.startswith("torch.utils._python_dispatch"):
                    flag(node, f"imports {alias.name} from {module}")
        elif isinstance(node, ast.Attribute):
            base = node.value.id if isinstance(node.value, ast.Name) else \
                node.value.attr if isinstance(node.value, ast.Attribute) else None
            if node.attr in FORBIDDEN_ATTRIBUTES:
                flag(node, f"uses .{node.attr}")
            elif PRIVATE_DISPATCH.match(node.attr):
                flag(node, f"uses dispatch internals .{node.attr}")
            elif (base, node.attr) in FORBIDDEN_MODULE_ATTRIBUTES:
                # also reached through another module: torch.sys.modules, torch.os.environ
                flag(node, f"uses {base}.{node.attr}")
            elif base in REACHABLE_MODULES and base not in bound_by_import:
                flag(node, f"reaches module {base} through an attribute")
        elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
            flag(node, f"uses {node.id}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
                flag(node, f"calls {func.id}()")
            if isinstance(func, ast.Name) and func.id == "open" and _is_write_open(node):
                flag(node, "opens a file for writing")
            if isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) >= 2 and \
                    not isinstance(node.args[1], ast.Constant):
                flag(node, "getattr with a computed name")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Attribute) and _root_name(sub) in imported_modules \
                            and _root_name(sub) not in ("self", "cls"):
                        flag(node, f"assigns {ast.unparse(sub)} (patches a library)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = NATIVE_PATTERNS.search(node.value)
            if match:
                flag(node, f"native source uses {match.group(0).strip()}")
            for entry in backend_entry_points(node.value):
                flag(node, f"native source calls {entry} (an operator without the dispatcher)")
            text = node.value.strip()
            if text in FORBIDDEN_ATTRIBUTES or text in REACHABLE_MODULES or \
                    (text in FORBIDDEN_CALLS and text != "input") or "kernelmill" in text or \
                    PRIVATE_DISPATCH.match(text):
                flag(node, f"names {text!r} in a string (indirect access)")
    return sorted(set(findings), key=lambda f: (int(f.split()[1].rstrip(":"))
                                                if f.split()[1].rstrip(":").isdigit() else 0, f))
