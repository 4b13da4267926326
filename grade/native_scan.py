"""The native-source scan: C/C++/CUDA text a submission hands to ``load_inline`` or builds.

Process, file and network APIs, symbol lookup by name, ATen's backend kernels called without
the dispatcher, the CPython C API and vendor libraries, and the ``__global__`` kernels a source
declares. ``static.scan`` runs it on a submission's string literals; the grader runs it on what
the compile worker reports and on the files of the build folder.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

NATIVE_PATTERNS = re.compile(
    # threads: work that runs beside forward, outside its op trace and profiler session
    r"std::(?:j?thread|async)\b|\bpthread_\w+|<(?:thread|future|pthread\.h)>|\bthrd_create\b|"
    # and work handed to threads that exist already: ATen's and c10's pools, the CUDA driver's
    # host-callback thread
    r"\bat::(?:launch|intraop_launch\w*)\b|\b(?:Task)?ThreadPool\b|\bget_\w*pool\b|"
    r"\bcu(?:da)?LaunchHostFunc\b|\bcu(?:da)?StreamAddCallback\b|"
    # grids the device launches itself (dynamic parallelism: relocatable device code linked
    # with cudadevrt, device-side named streams): the profiler records no such kernel, so its
    # work is in no device time the judge reads
    r"(?<![\w-])-(?:rdc|dc)\b|--relocatable-device-code|cudadevrt\b|"
    r"\bcudaStream(?:TailLaunch|FireAndForget)\b|\bcuda(?:GetParameterBuffer|LaunchDevice)\w*|"
    # the grader's stream capture and graphs: which capture a call is in (its id, its graph,
    # the nodes so far) tells the timing graph's calls apart (GRAPH_COPY.md); building,
    # launching or editing graphs is the grader's
    r"\bcu(?:da)?StreamGetCaptureInfo\w*|\bcu(?:da)?StreamUpdateCaptureDependencies\w*|"
    r"\bcu(?:da)?(?:StreamBeginCapture|StreamEndCapture|ThreadExchangeStreamCaptureMode)\w*|"
    r"\bcu(?:da)?Graph[A-Z]\w*|"
    r"\bfork\s*\(|\bsystem\s*\(|\bpopen\s*\(|\bdlopen\s*\(|"
    # the network (a build can send files out from its static initializer, before any run)
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
# (``void __global__`` too, and launch bounds with parentheses inside: ``(BLOCK * (2))``)
_BOUNDS = r"(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?"
GLOBAL_KERNEL = re.compile(r"(?:__global__\s+" + _BOUNDS +
                           r"(?:static\s+|inline\s+|__noinline__\s+)*void|void\s+__global__)\s+"
                           + _BOUNDS + r"(\w+)\s*\(")


def declared_kernels(source: str) -> frozenset[str]:
    """Names of the ``__global__`` functions written in the candidate's source text (its
    ``load_inline`` strings): a GPU kernel launched from its extension is its own only when
    compiled from one of them; anything else an extension launches (cuBLAS, cuDNN, ATen,
    CUTLASS) is library work."""
    return frozenset(GLOBAL_KERNEL.findall(source))


def qualified_kernel_name(name: str) -> str:
    """``void ns::scale_kernel<float>(float*, int)`` -> ``ns::scale_kernel``; an anonymous
    namespace is no name (``(anonymous namespace)::k(float*)`` -> ``k``: a kernel inside
    ``namespace { }``, as the profiler demangles it)."""
    name = name.strip().replace("(anonymous namespace)::", "")
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
    ``entries`` entries is itself a finding (a build writes a few small files; a submission can
    leave a sparse gigabyte ``.cpp`` there for the parent to read whole)."""
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
