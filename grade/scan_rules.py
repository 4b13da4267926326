"""What the Python scan refuses: modules, attributes, calls and dispatch machinery a kernel
submission does not need, and the modules it may import at all (``python_scan`` walks for them).
"""

from __future__ import annotations

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
