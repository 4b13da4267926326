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
import copy
import functools
import os
import re
from pathlib import Path

from kernelmill.core.problem import PARSE_LOCK

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
    "monotonic_ns", "process_time_ns", "thread_time_ns", "time_ns", "clock_gettime",
    "clock_gettime_ns", "get_clock_info", "pthread_getcpuclockid", "getallocatedblocks",
    "get_count", "get_stats",
    "setrecursionlimit", "_send", "mark_stage", "attrgetter", "methodcaller",
    "getattr_static", "__getattribute__", "exc_info", "exception",
    "__class__", "__bases__", "__mro__",
    # a module or attribute found from a string (an importer, a resolver, a format field)
    "import_module", "resolve_name", "locate", "get_field", "PackageImporter",
    "PackageExporter", "hub",
    # the call stack read without frames (tells a timed call from a checked one)
    "extract_stack", "walk_stack", "format_stack", "print_stack",
    # raw memory and serialization: tensor bytes on the host without a tensor op
    "from_address", "from_buffer", "serialization", "__reduce__", "__reduce_ex__",
    "__setstate__", "from_file",
    # an attribute set past the scan's assignment rule (object.__setattr__(torch, ...))
    "__setattr__", "__delattr__",
    # what evaluates strings as code later (typing.get_type_hints through singledispatch or
    # torch.library.infer_schema evaluated an annotation assembled at run time)
    "__annotations__", "__annotate__", "__defaults__", "__kwdefaults__", "__signature__",
    "__text_signature__",
    # eval by another name: string annotations evaluated against a module's globals
    "get_type_hints", "get_annotations", "ForwardRef", "_eval_type", "evaluate_forward_ref",
    # code generated from a graph (torch.fx, an exported program's graph): a call_method node
    # whose name is built at run time is a getattr by string
    "fx", "call_method", "create_node", "graph_module", "python_code", "recompile",
}
# ``os`` functions that create, replace or wait for processes, or make pipes and FIFOs between
# them (seccomp stops the creation itself; on CUDA only after the first call), and its clocks
# (a kernel has no reason to time itself or to notice it is being observed).
OS_PROCESS = re.compile(r"^(?:spawn\w*|exec\w*|posix_spawnp?|fork\w*|kill\w*|wait\w*|"
                        r"mkfifo|mknod|pipe2?|setsid|setpgid|setpgrp|register_at_fork|"
                        r"pidfd_\w+|memfd_create|openpty|login_tty|times|getloadavg)$")
# Attributes that are harmless on most objects but not on these modules.
FORBIDDEN_MODULE_ATTRIBUTES = {("sys", "modules"), ("os", "environ"), ("os", "remove"),
                               ("os", "rename"), ("os", "replace"), ("os", "truncate"),
                               ("os", "write"), ("os", "open"), ("sys", "stdout"),
                               # serialization: tensor bytes written and read outside any op
                               ("torch", "save"), ("torch", "load"), ("torch", "from_file")}
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
    # threads: work that runs beside forward, outside its op trace and profiler session
    r"std::(?:j?thread|async)\b|\bpthread_\w+|<(?:thread|future|pthread\.h)>|\bthrd_create\b|"
    # and work handed to threads that exist already: ATen's and c10's pools, the CUDA driver's
    # host-callback thread
    r"\bat::(?:launch|intraop_launch\w*)\b|\b(?:Task)?ThreadPool\b|\bget_\w*pool\b|"
    r"\bcu(?:da)?LaunchHostFunc\b|\bcu(?:da)?StreamAddCallback\b|"
    # the grader's stream capture and graphs: which capture a call is in (its id, its graph,
    # the nodes so far) tells the timing graph's calls apart (GRAPH_COPY.md); building,
    # launching or editing graphs is the grader's
    r"\bcu(?:da)?StreamGetCaptureInfo\w*|\bcu(?:da)?StreamUpdateCaptureDependencies\w*|"
    r"\bcu(?:da)?(?:StreamBeginCapture|StreamEndCapture|ThreadExchangeStreamCaptureMode)\w*|"
    r"\bcu(?:da)?Graph[A-Z]\w*|"
    r"\bfork\s*\(|\bsystem\s*\(|\bpopen\s*\(|\bdlopen\s*\(|"
    # the network (a red-team build sent a file over UDP from its static initializer)
    r"\b(?:socket|sendto|sendmsg|connect|getaddrinfo|gethostbyname)\s*\(|"
    r"<(?:sys/socket|netinet/\w+|arpa/inet|netdb)\.h>|"
    r"\bsyscall\s*\(|\b_exit\s*\(|\bdup2?\s*\(|\bwrite\s*\(|"
    r"\bkill\s*\(|\bexecv|\bptrace\s*\(|/proc/|\bfopen\s*\(|std::ofstream|\bmprotect\s*\(|"
    r"\bposix_spawn|\bvfork\s*\(|\bclone3?\s*\(|"
    # a library function found by its symbol name: no operator or header names it
    r"\bdl(?:v)?sym\s*\(|\bRTLD_(?:DEFAULT|NEXT)\b|_ZNK?(?:2at|3c10|5torch)\d|"
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


# The modules a kernel submission may import at all (the root of the dotted name). Everything
# else is refused whatever it is: the standard library holds many ways to reach a module or an
# attribute from a string built at run time (pkgutil.resolve_name, pydoc.locate, runpy,
# string.Formatter fields), to read the call stack (traceback), to write through another file
# API (io) or to start a process (webbrowser, platform), and a deny list never holds them all.
ALLOWED_IMPORTS = frozenset({
    "torch", "triton", "math", "cmath", "typing", "typing_extensions", "functools",
    "itertools", "collections", "dataclasses", "numbers", "enum", "abc", "__future__", "os",
    "warnings", "operator", "contextlib", "random", "statistics", "re", "copy", "textwrap",
    # what KernelBench's own problems import (level 3 einops, level 4 Hugging Face models):
    # an answer builds the same modules
    "einops", "transformers",
})
# Vendor-library entry points in native source (BLAS, MKL, oneDNN, cuBLAS, cuDNN): library
# work that no op or (on CPU) kernel record shows. Not forbidden in itself: ``grade.judge``
# judges findings that start with VENDOR_PREFIX by the policy, as it judges vendor kernels.
VENDOR_NATIVE = re.compile(r"\b(?:cblas_\w+|[sdcz]gemm_?(?=\s*\()|mkl_\w+|dnnl_\w+|"
                           r"cublas(?:Lt)?\w+|cudnn\w+|cutlass::gemm|(?:dnnl|ideep|mkldnn)::\w+|"
                           r"at::native::cpublas)")
VENDOR_PREFIX = "vendor:"


def vendor_findings(text: str) -> list[str]:
    return [f"{VENDOR_PREFIX} native source calls {name}"
            for name in sorted(set(VENDOR_NATIVE.findall(text)))]


# A ``__global__`` function the candidate's native source defines (templates, ``extern "C"``
# and launch bounds allowed): the kernels its own extension modules are compiled from.
GLOBAL_KERNEL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                           r"(?:static\s+|inline\s+|__noinline__\s+)*void\s+"
                           r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")


def declared_kernels(source: str) -> frozenset[str]:
    """Names of the ``__global__`` functions written in the candidate's source text (its
    ``load_inline`` strings): a GPU kernel launched from its extension is its own only when
    compiled from one of them; anything else an extension launches (cuBLAS, cuDNN, ATen,
    CUTLASS) is library work."""
    return frozenset(GLOBAL_KERNEL.findall(source))


def qualified_kernel_name(name: str) -> str:
    """``void ns::scale_kernel<float>(float*, int)`` -> ``ns::scale_kernel``."""
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    return re.split(r"[<(]", name, maxsplit=1)[0].strip()


def kernel_base(name: str) -> str:
    """``void ns::scale_kernel<float>(float*, int)`` -> ``scale_kernel``."""
    return qualified_kernel_name(name).rsplit("::", 1)[-1]


# Native code that reaches into the Python interpreter can do whatever a Python submission may
# not (read the grader's frames and locals, import modules, patch objects), and the Python scan
# never sees it. Its whole surface goes by a few names: the CPython C API and its structs
# (``PyEval_*``, ``_Py*``, ``Py_*``, ``Py*Object``, type slots ``tp_*``, ``ob_*``; prose names
# such as PyTorch, PyPI or PyCUDA are not API names), torch's Python bindings
# (``THP*``, ``torch::python``) and pybind11's objects. An extension needs none of them: its
# entry points are bound by ``load_inline(functions=...)`` or ``PYBIND11_MODULE``'s ``m.def``,
# so only pybind11's binding declarations are allowed. A symbol may not be named in a string
# (an ``asm`` label, an alias or weakref attribute) or pasted from pieces (``##``), where none
# of these names would show.
INTERPRETER_NATIVE = re.compile(
    # (not only at a word's start: ``__real_PyImport_ImportModule`` under ``-Wl,--wrap``)
    r"(?<![A-Za-z0-9])(?:Py[A-Z][A-Za-z]*_[A-Za-z]\w*|_Py[A-Za-z]\w*|Py_[A-Z]\w*|Py\w*Object\b|"
    r"THP[A-Z]\w*)|\btorch::python\b|torch/csrc/\w*/?python|"
    # the linker's symbol renaming (a name reached under another one)
    r"--(?:wrap|defsym)\b|"
    r"(?:->|\.)\s*(?:tp_\w+|ob_type|ob_refcnt)\b")
# the same reach written with punctuation, judged only in text that reads as C/C++ (prose and
# Markdown in a docstring use ``##`` and ``.attr(`` freely)
INTERPRETER_SYNTAX = re.compile(r"\.\s*(?:attr|import)\s*[(<]|##|"
                                r"\)\s*(?:__asm__|__asm|asm)\s*\(|"
                                r"\b(?:alias|weakref)\s*\(\s*\"")
PYBIND_NAME = re.compile(r"\b(?:py|pybind11)::(\w+)((?:\s*::\s*\w+)*)")
PYBIND_BINDING = frozenset({"arg", "arg_v", "module", "module_", "return_value_policy",
                            "call_guard", "gil_scoped_release", "gil_scoped_acquire", "kw_only",
                            "pos_only", "overload_cast", "init", "doc"})


def interpreter_findings(text: str) -> list[str]:
    """Native source that reaches the Python interpreter (``INTERPRETER_NATIVE``), or pybind11
    beyond binding declarations (``py::arg``, ``py::return_value_policy::...``)."""
    native = "#include" in text or ("{" in text and ";" in text)
    match = INTERPRETER_NATIVE.search(text) or (native and INTERPRETER_SYNTAX.search(text))
    found = [f"native source reaches the Python interpreter ({match.group(0).strip()})"] \
        if match else []
    for match in PYBIND_NAME.finditer(text):
        name, rest = match.group(1), match.group(2)
        if name not in PYBIND_BINDING or (rest and name != "return_value_policy"):
            found.append(f"native source reaches the Python interpreter ({match.group(0)})")
            break
    return found


NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".inl")


def built_source_findings(folder: str | os.PathLike, limit: int = 4 << 20,
                          total: int = 32 << 20, entries: int = 20000) -> list[str]:
    """Findings in the native sources an extension build left in ``folder`` (``load_inline``
    writes what it compiles there: ``main.cpp``, ``cuda.cu``): the text that was compiled,
    whatever the submission assembled at run time, read by the parent. At most ``limit``
    bytes of a file are read, and a folder with more than ``total`` bytes of source or
    ``entries`` entries is itself a finding (a build writes a few small files; a red-team answer
    left a sparse gigabyte ``.cpp`` that the parent read whole)."""
    found, read = [], 0
    paths = []
    for count, path in enumerate(Path(folder).rglob("*")):
        if count >= entries:
            return [f"build folder: more than {entries} entries (a build writes a few files)"]
        paths.append(path)
    for path in sorted(paths):
        if path.suffix in NATIVE_SUFFIXES and path.is_file() and not path.is_symlink():
            with open(path, "rb") as handle:
                data = handle.read(min(limit, total - read + 1))
            read += len(data)
            if read > total:
                return found + [f"build folder: more than {total >> 20} MiB of native source"]
            text = data.decode("utf-8", "replace")
            found += [f"compiled {path.name}: {f}" for f in native_findings(text)]
    return found


def native_findings(text: str) -> list[str]:
    """Findings in C/C++/CUDA source: process and file APIs, symbol lookup by name, ATen entry
    points without the dispatcher. For the literals of a submission (``scan``) and for sources
    a submission builds at run time and hands to ``load_inline`` (the compile worker can report
    them: the text that was compiled, not the text that was written)."""
    found = []
    match = NATIVE_PATTERNS.search(text)
    if match:
        found.append(f"native source uses {match.group(0).strip()}")
    for entry in backend_entry_points(text):
        found.append(f"native source calls {entry} (an operator without the dispatcher)")
    return found + interpreter_findings(text) + vendor_findings(text)


# Dangerous modules that library modules re-export as attributes (torch.os, torch.sys, ...),
# and the standard library's resolvers by name, which other modules import and so re-export.
REACHABLE_MODULES = {"sys", "os", "ctypes", "subprocess", "gc", "inspect", "importlib",
                     "builtins", "threading", "_thread", "signal", "multiprocessing", "pickle",
                     "marshal", "shutil", "tempfile", "socket", "time", "weakref", "atexit",
                     "pkgutil", "pydoc", "runpy", "traceback", "string", "io", "webbrowser",
                     "zipimport", "copyreg", "platform", "types"}
# Names whose private (``_``) attributes are the library's internals (torch._inductor,
# torch._utils, torch._C._...): a kernel uses the public API.
LIBRARY_MODULE_ROOTS = ("torch", "triton")
# What a kernel uses of the triton package: the decorators and helpers, the language, Hopper's
# TMA descriptors, and the driver's device queries (the tutorials' SM count). The rest is
# Triton's machinery: its C module builder (``triton.runtime.build`` compiles and imports any C
# source as a CPython extension: a red-team answer built one that rewrote the worker's result
# encoder), its compiler, IR builder, cache and knobs, reached under any path (the language
# module holds ``knobs`` too).
TRITON_API = ("jit", "autotune", "heuristics", "Config", "cdiv", "next_power_of_2", "language",
              "constexpr", "OutOfResources", "__version__", "tools.experimental_descriptor",
              "tools.tensor_descriptor", "set_allocator", "testing")
TRITON_DEVICE_QUERIES = ("runtime.driver.active.get_active_torch_device",
                         "runtime.driver.active.get_current_device",
                         "runtime.driver.active.get_current_stream",
                         "runtime.driver.active.get_current_target",
                         "runtime.driver.active.utils.get_device_properties")
TRITON_MACHINERY = {"knobs", "compiler", "backends", "build", "ir", "libtriton", "runtime",
                    "driver", "cache"}


def _triton_path_allowed(parts: list[str]) -> bool:
    """``parts`` (after ``triton``) is on, or on the way to, a public path."""
    path = ".".join(parts)
    if any(path == q or q.startswith(path + ".") for q in TRITON_DEVICE_QUERIES):
        return True
    if any(part in TRITON_MACHINERY for part in parts):
        return False
    return not parts or any(path == p or path.startswith(p + ".") or p.startswith(path + ".")
                            for p in TRITON_API)


def _chain(node: ast.AST) -> tuple[str | None, list[str]]:
    """``a.b.c`` -> ("a", ["b", "c"]); anything else -> (None, [])."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    return (node.id, parts) if isinstance(node, ast.Name) else (None, [])


def _bindings(tree: ast.AST):
    """(names bound, the expression they are bound from) for every binding a scan can follow:
    assignments, walrus, for and comprehension targets, ``with ... as``, default arguments."""
    names = lambda target: [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]  # noqa: E731
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                yield names(target), node.value
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and \
                node.value is not None:
            yield names(node.target), node.value
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            yield names(node.target), node.iter
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    yield names(item.optional_vars), item.context_expr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            for arg, default in zip(positional[len(positional) - len(args.defaults):],
                                    args.defaults):
                yield [arg.arg], default
            for arg, default in zip(args.kwonlyargs, args.kw_defaults):
                if default is not None:
                    yield [arg.arg], default


# torch.utils holds the extension builder a CUDA answer needs, and tools that exec strings
# (torch.utils.benchmark's Timer runs its ``stmt``: a red-team answer assembled one at run time)
TORCH_UTILS_API = {"cpp_extension"}


def _torch_utils_refused(parts: list[str]) -> str | None:
    for i, part in enumerate(parts[:-1]):
        if part == "utils" and parts[i + 1] not in TORCH_UTILS_API:
            return ".".join(parts[:i + 2])
    return None


# Module objects whose attributes a submission must not assign (monkeypatching).
LIBRARY_ROOTS = {"torch", "triton", "time", "os", "sys", "math", "numpy", "np", "tl", "F", "nn",
                 "random", "statistics", "functools", "operator"}


def _forbidden_name(name: str) -> bool:
    """A name that is flagged as an attribute is flagged when imported by name too."""
    return name in FORBIDDEN_ATTRIBUTES or bool(PRIVATE_DISPATCH.match(name)) or \
        name in REACHABLE_MODULES and name not in ("time",)


def _root_name(node: ast.AST) -> str | None:
    return _chain(node)[0]


_MODE = re.compile(r"^[rwaxbt+]{1,4}$")
# Calls that open a file by any API (builtins.open, io.open, io.FileIO, Path.open, os.fdopen).
OPENERS = {"open", "FileIO", "fdopen"}


def _is_write_open(call: ast.Call) -> bool:
    """Any call named like an opener with a mode that writes (positional or ``mode=``), or
    whose mode is computed (a red-team answer wrote a sparse gigabyte file that way)."""
    # open(path, mode), io.open / FileIO(path, mode), os.fdopen(fd, mode); Path(...).open(mode)
    method = isinstance(call.func, ast.Attribute) and call.func.attr == "open" and not (
        isinstance(call.func.value, ast.Name) and call.func.value.id in ("io", "builtins"))
    modes = [*call.args[0 if method else 1:2 if method else 3],
             *(k.value for k in call.keywords if k.arg == "mode")]
    return any(not isinstance(m, ast.Constant) or isinstance(m.value, str) and
               _MODE.match(m.value) and any(c in m.value for c in "wax+") for m in modes)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _path_parts(text: str) -> list[str] | None:
    """The parts of a dotted name written as a string (``"torch._inductor"``,
    ``"os:environ"``, ``"0.__globals__[sys]"``), or None for any other string."""
    if not re.fullmatch(r"[\w.:\[\]]+", text) or not re.search(r"[.:\[]", text):
        return None
    return [part for part in re.split(r"[.:\[\]]+", text) if part]


# Findings of GPU MODE's rule-based hack detector start with this (``grade.judge`` gives them
# their own hack code).
KERNELGUARD_PREFIX = "kernelguard:"


@functools.cache
def _kernelguard():
    try:
        import kernelguard
    except ImportError:  # an optional dependency (``pip install -e '.[guard]'``)
        return None
    return kernelguard if hasattr(kernelguard, "analyze_code") else None


def kernelguard_findings(source: str) -> list[str]:
    """The rules for which ``kernelguard`` (PyPI; optional) calls the source ``hacked``, the only
    class it auto-filters; empty when it is not installed or calls the source anything else.
    ``benchmarks/kernelguard_eval.py`` runs it over every honest kernel we hold (none flagged)."""
    guard = _kernelguard()
    if guard is None:
        return []
    try:
        with _PARSE_LOCK:  # it parses with ast too (a CI run failed on it, unlocked)
            result = guard.analyze_code(source, compute_structural_hash=False)
    except Exception:  # noqa: BLE001 — its own failure says nothing about the candidate
        return []
    if result.get("classification") != "hacked":
        return []
    return sorted({f"{KERNELGUARD_PREFIX} {m.get('pattern', '?')} "
                   f"({str(m.get('evidence', ''))[:120]})"
                   for m in result.get("matched_patterns") or [] if m.get("field") == "code"}
                  or {f"{KERNELGUARD_PREFIX} {result.get('filter_reason')}"})


# CPython 3.11 keeps ast.parse's recursion depth in state its threads share: two grading
# threads parsing at once failed one with "AST constructor recursion depth mismatch" (a CI run
# of the hostile suite). Parses in this process take turns.
_PARSE_LOCK = PARSE_LOCK  # the process's one parse lock (core.problem)


def _parse(text: str) -> ast.AST:
    with _PARSE_LOCK:
        return ast.parse(text)


def _code_in_string(text: str) -> list[str]:
    """Findings in a string that is itself Python (a string annotation that typing evaluates,
    source handed to an evaluator by another name); prose and C++ do not parse."""
    if len(text) > 4000 or not any(c in text for c in "(.[="):
        return []
    try:
        tree = _parse(text)
    except (SyntaxError, ValueError):
        return []
    return _scan_tree(tree)


def scan(source: str) -> list[str]:
    """Findings as short strings (``line N: what``; ``kernelguard: RULE (evidence)`` for the
    optional detector's); empty when nothing suspicious is used."""
    try:
        tree = _parse(source)
    except SyntaxError:
        return []
    return _scan_tree(tree) + kernelguard_findings(source)


# Builtin classes whose positional class pattern matches the subject itself (``case int(n)``),
# reading no attribute
SELF_MATCHING = {"bool", "bytearray", "bytes", "dict", "float", "frozenset", "int", "list", "set",
                 "str", "tuple"}
# What makes ``isinstance`` or a class pattern run code of the class's choosing
MATCH_HOOKS = ("__match_args__", "__instancecheck__", "__subclasscheck__")


def _pattern_findings(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """Class patterns are attribute reads by name: a positional one reads the names in the
    class's ``__match_args__``, a tuple a class may compute at run time, and with a metaclass's
    ``__instancecheck__`` any subject matches (red-team round 22: a ``getattr`` by computed
    name). A positional class pattern (but on a builtin that matches itself), a class that
    defines a matching hook, a metaclass and a class built by ``type(name, bases, dict)`` are
    findings; keywords are judged as the reads they are (``_with_pattern_reads``)."""
    found = []
    for node in ast.walk(tree):
        name = getattr(node, "name", None) if isinstance(node, ast.FunctionDef) else \
            node.id if isinstance(node, ast.Name) else \
            node.value if isinstance(node, ast.Constant) else None
        if isinstance(node, ast.MatchClass) and node.patterns and not (
                isinstance(node.cls, ast.Name) and node.cls.id in SELF_MATCHING):
            found.append((node, "a positional class pattern (reads the attributes its "
                                "class's __match_args__ names)"))
        elif isinstance(node, ast.ClassDef) and any(k.arg == "metaclass" for k in node.keywords):
            found.append((node, f"class {node.name} has a metaclass"))
        elif isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id == "type" for b in node.bases):
            found.append((node, f"class {node.name} is a metaclass"))
        elif isinstance(name, str) and name in MATCH_HOOKS:
            found.append((node, f"names {name}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "type" and len(node.args) == 3:
            found.append((node, "builds a class at run time (type with three arguments)"))
    return found


def _with_pattern_reads(tree: ast.AST) -> ast.AST:
    """``tree`` with the attribute reads its class patterns make written out: ``match S:
    case C(name=p)`` reads ``S.name`` (red-team round 21 read a forbidden module as
    ``case object(gc=g)``, a keyword no attribute rule saw). Each becomes an ``S.name``
    expression after the module's body, so every attribute rule judges it."""
    reads = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Match):
            continue
        for case in node.cases:
            for pattern in ast.walk(case.pattern):
                if isinstance(pattern, ast.MatchClass):
                    for name in pattern.kwd_attrs:
                        read = ast.copy_location(ast.Attribute(
                            value=copy.deepcopy(node.subject), attr=name, ctx=ast.Load()),
                            pattern)
                        read.pattern_read = True  # a module's attribute, as far as it may be
                        reads.append(ast.copy_location(ast.Expr(read), pattern))
    if not reads or not isinstance(tree, ast.Module):
        return tree
    return ast.Module(body=[*tree.body, *reads], type_ignores=[])


def _scan_tree(tree: ast.AST) -> list[str]:
    tree = _with_pattern_reads(tree)
    findings: list[str] = []
    imported_modules = set(LIBRARY_ROOTS)
    bound_by_import: set[str] = set()

    def flag(node: ast.AST, what: str) -> None:
        findings.append(f"line {getattr(node, 'lineno', '?')}: {what}")

    for node, what in _pattern_findings(tree):
        flag(node, what)

    # getattr(obj, "constant") is ordinary; getattr passed around (reduce(getattr, ...),
    # g = getattr) or called with a computed name is a way around this scan.
    direct_calls = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in INDIRECT_BUILTINS and \
                id(node) not in direct_calls:
            flag(node, f"passes {node.id} around")

    # Names bound to the libraries' modules (torch, nn, F, triton, tl ...): their private
    # attributes are internals.
    library_names = set(LIBRARY_MODULE_ROOTS)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in LIBRARY_MODULE_ROOTS:
                    library_names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and \
                (node.module or "").split(".")[0] in LIBRARY_MODULE_ROOTS:
            library_names.update(alias.asname or alias.name for alias in node.names)

    def imported(node: ast.AST, module: str, what: str) -> None:
        """One imported module path (``a.b.c``), named in a finding as ``what``."""
        parts = module.split(".")
        if parts[0] == "torch" and _torch_utils_refused(parts[1:]):
            flag(node, f"imports {what} (torch.utils beyond cpp_extension)")
        if parts[0] in FORBIDDEN_MODULES:
            flag(node, f"imports {what}")
        elif parts[0] not in ALLOWED_IMPORTS:
            flag(node, f"imports {what} (not a module a kernel needs)")
        if any(_forbidden_name(part) for part in parts[1:]) or \
                (parts[0] in LIBRARY_MODULE_ROOTS and any(map(_private, parts[1:]))):
            flag(node, f"imports {what}")

    # name bound by an import -> the module's dotted name (``import os as o``: o -> os)
    aliases = {alias.asname or alias.name.split(".")[0]:
               alias.name if alias.asname else alias.name.split(".")[0]
               for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names}

    # name -> its triton path (``import triton.language as tl``: tl -> [language]); every
    # attribute chain from one (aliases included), and every import, stays on Triton's API
    triton_paths: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "triton":
                    triton_paths[alias.asname or "triton"] = parts[1:] if alias.asname else []
                    if not _triton_path_allowed(parts[1:]):
                        flag(node, f"imports {alias.name} (Triton's machinery, not its API)")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "triton":
            base = (node.module or "").split(".")[1:]
            for alias in node.names:
                triton_paths[alias.asname or alias.name] = [*base, alias.name]
                if not _triton_path_allowed([*base, alias.name]):
                    flag(node, f"imports {alias.name} from {node.module} (Triton's machinery, "
                         "not its API)")
    # Aliases: a name bound from a library name (``_t = torch``, ``_rt = triton.runtime``,
    # ``def f(m=torch)``, ``for m in [torch]``) is a library name too; one bound from anything
    # else that mentions one holds a library object (its private attributes are internals).
    bindings = list(_bindings(tree))
    torch_names = {"torch", *(name for name, module in aliases.items() if module == "torch")}
    growing = True
    while growing:
        growing = False
        for targets, value in bindings:
            if isinstance(value, ast.Name) and value.id in torch_names and \
                    not set(targets) <= torch_names:
                torch_names.update(targets)
                growing = True
            root, parts = _chain(value)
            if root in triton_paths:
                for name in targets:
                    if name not in triton_paths:
                        triton_paths[name] = [*triton_paths[root], *parts]
                        growing = True
            mentioned = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
            if mentioned & (library_names | set(triton_paths)):
                fresh = set(targets) - library_names - {"self", "cls"}
                library_names.update(fresh)
                growing = growing or bool(fresh)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            root, chain = _chain(node)
            if root in triton_paths and not _triton_path_allowed([*triton_paths[root], *chain]):
                flag(node, f"uses {ast.unparse(node)} (Triton's machinery, not its API)")
            refused = _torch_utils_refused(chain) if root in torch_names else None
            if refused and len(chain) == refused.count(".") + 1:  # once per chain
                flag(node, f"uses {root}.{refused} (torch.utils beyond cpp_extension)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("getattr", "hasattr") and len(node.args) >= 2 and \
                isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            # getattr(torch, "_C") is the attribute written as a string
            name = node.args[1].value
            if _private(name) and _root_name(node.args[0]) in library_names:
                flag(node, f"uses library internals .{name} (by getattr)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "__getattr__" and node.args and \
                _root_name(node.func.value) in library_names:
            # torch.ops.aten.__getattr__("_x") is getattr by another name (red-team round 29)
            name = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
            if not isinstance(name, str):
                flag(node, "a library's __getattr__ with a computed name")
            elif _private(name):
                flag(node, f"uses library internals .{name} (by __getattr__)")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported_modules.add((alias.asname or alias.name).split(".")[0])
                bound_by_import.add((alias.asname or alias.name).split(".")[0])
                # ``import a.b as c`` binds a.b just as ``from a import b`` does: every part
                # is judged, the last one as an imported name
                imported(node, alias.name, alias.name)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                flag(node, f"imports from a relative package {'.' * node.level}{module}")
            elif module:
                imported(node, module, f"from {module}")
            root = module.split(".")[0]
            for alias in node.names:
                if root == "torch" and _torch_utils_refused([*module.split(".")[1:], alias.name]):
                    flag(node, f"imports {alias.name} from {module} (torch.utils beyond "
                         "cpp_extension)")
                if _forbidden_name(alias.name) or alias.name in FORBIDDEN_CALLS or \
                        (root, alias.name) in FORBIDDEN_MODULE_ATTRIBUTES or \
                        (module.split(".")[-1], alias.name) in FORBIDDEN_MODULE_ATTRIBUTES or \
                        (root in LIBRARY_MODULE_ROOTS and _private(alias.name)) or \
                        (module == "os" and OS_PROCESS.match(alias.name)):
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
            elif aliases.get(base, base) == "os" and OS_PROCESS.match(node.attr):
                flag(node, f"uses os.{node.attr} (processes)")
            elif (base, node.attr) in FORBIDDEN_MODULE_ATTRIBUTES or \
                    (aliases.get(base), node.attr) in FORBIDDEN_MODULE_ATTRIBUTES:
                # also reached through another module: torch.sys.modules, torch.os.environ
                flag(node, f"uses {base}.{node.attr}")
            elif base in REACHABLE_MODULES and base not in bound_by_import:
                flag(node, f"reaches module {base} through an attribute")
            elif node.attr in REACHABLE_MODULES and \
                    (node.attr != "time" or getattr(node, "pattern_read", False) or
                     _root_name(node) in library_names | imported_modules):
                # ``torch.sys``: a module held by another, then used under any name (``.time``
                # of an object is often its own: of a module, it is the clock module, round 21)
                flag(node, f"reaches module {node.attr} through an attribute")
            elif _private(node.attr) and _root_name(node) in library_names:
                flag(node, f"uses library internals .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
            flag(node, f"uses {node.id}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
                flag(node, f"calls {func.id}()")
            name = func.id if isinstance(func, ast.Name) else \
                func.attr if isinstance(func, ast.Attribute) else None
            if name in OPENERS and _is_write_open(node):
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
            for finding in native_findings(node.value):
                flag(node, finding)
            text = node.value.strip()
            for inner in _code_in_string(text):
                flag(node, f"code in a string: {inner.split(': ', 1)[-1]}")
            parts = _path_parts(text) or []
            if any(_forbidden_name(part) or part in FORBIDDEN_MODULES or part == "kernelmill"
                   for part in parts) or (parts and parts[0] in LIBRARY_MODULE_ROOTS
                                          and any(map(_private, parts[1:]))):
                flag(node, f"names {text!r} in a string (a dotted path to resolve)")
            if text in FORBIDDEN_ATTRIBUTES or text in REACHABLE_MODULES or \
                    (text in FORBIDDEN_CALLS and text != "input") or "kernelmill" in text or \
                    PRIVATE_DISPATCH.match(text):
                flag(node, f"names {text!r} in a string (indirect access)")
    return sorted(set(findings), key=lambda f: (int(f.split()[1].rstrip(":"))
                                                if f.split()[1].rstrip(":").isdigit() else 0, f))
