"""The mechanisms behind the hostile suite, one by one: non-finite comparison, op classification
by registration, the static scan of native sources and imports, the verdict cache key, fresh
inputs per submission, and the worker's OS confinement (Landlock, seccomp, network)."""
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from conftest import FIXTURES

import pytest
import torch
from kernelmill.grade import static
from kernelmill.grade.batch import verdict_key
from kernelmill.grade.judge import compare, downgrades
from kernelmill.grade.policy import Policy, compute_ops, custom_ops
from kernelmill.validate import sandbox

INF, NAN = float("inf"), float("nan")


# ---------------------------------------------------------------- comparison

@pytest.mark.parametrize("got, ok", [
    ([1.0, -INF, INF, NAN], True),        # exact non-finite match
    ([1.0, INF, INF, NAN], False),        # sign of an infinity flipped
    ([1.0, -1e30, INF, NAN], False),      # finite where the reference is -inf
    ([1.0, NAN, INF, NAN], False),        # NaN where the reference is -inf
    ([1.0, -INF, INF, 0.0], False),       # finite where the reference is NaN
    ([-INF, -INF, INF, NAN], False),      # -inf where the reference is finite
])
def test_non_finite_values_must_match_exactly(got, ok):
    expected = torch.tensor([1.0, -INF, INF, NAN])
    assert compare([expected], [torch.tensor(got)], 1e-4, 1e-4)[0] is ok
    assert compare([expected], [torch.tensor(got)], 1e-4, 1e-4, count=False)[0] is ok


@pytest.mark.parametrize("where", ["first", "last", "past_matching_non_finite"])
def test_the_answer_alone_agrees_with_the_count(where):
    """``count=False`` stops at the first element off: it must still find one wherever it is,
    past chunks that pass and past unsure elements that pass in the exact pass (NaN for NaN,
    the same infinity: more than the first ones it looks at)."""
    from kernelmill.grade import judge

    expected = torch.randn(judge.COMPARE_CHUNK + 5000, generator=torch.Generator().manual_seed(0))
    if where == "past_matching_non_finite":
        expected[:judge.FIRST_UNSURE * 2:2] = NAN
        expected[1:judge.FIRST_UNSURE * 2:2] = -INF
    got = expected.clone()
    if where == "first":
        got[:] = NAN  # a ghost call's garbage
    else:
        got[judge.COMPARE_CHUNK - 1 if where == "past_matching_non_finite" else -1] += 1.0
    counted = compare([expected], [got], 1e-4, 1e-4)
    answered = compare([expected], [got], 1e-4, 1e-4, count=False)
    assert counted[0] is False and answered[0] is False, (counted, answered)
    assert compare([expected], [expected.clone()], 1e-4, 1e-4, count=False)[0]


def test_complex_outputs_compare_both_parts():
    expected = torch.tensor([1 + 1j, 2 - 1j])
    assert compare([expected], [expected.clone()], 1e-4, 1e-4)[0]
    assert not compare([expected], [expected.conj()], 1e-4, 1e-4)[0]


# ---------------------------------------------------------------- op classification

def test_library_namespaces_are_compute_unless_registered_by_the_candidate():
    ops = ["aten.empty_like", "mkldnn._linear_pointwise", "mkl._mkl_linear", "aten.km_add",
           "mine.fused", "profiler._record_function_exit", "aten.add"]
    mine = ["mine.fused.default"]
    assert compute_ops(ops, mine) == ["mkldnn._linear_pointwise", "mkl._mkl_linear",
                                      "aten.km_add", "aten.add"]
    assert custom_ops(ops, mine) == ["mine.fused"]
    # without the worker's registration list, only namespaces decide (the old behaviour)
    assert "mkldnn._linear_pointwise" not in compute_ops(ops)


# ---------------------------------------------------------------- static scan

@pytest.mark.parametrize("snippet, needle", [
    ('src = "return at::cpu::add(x, y);"', "at::cpu::add"),
    ('src = "auto c = at::cuda::mm_out(out, a, b);"', "at::cuda::mm_out"),
    ('src = "at::native::add(x, y)"', "at::native::"),
    ('src = "#include <ATen/CPUFunctions.h>"', "CPUFunctions"),
    ('src = "c10::impl::ExcludeDispatchKeyGuard g(ks);"', "DispatchKeyGuard"),
    ("from torch._C import _DisableTorchDispatch", "_DisableTorchDispatch"),
    ("from torch._C import _ExcludeDispatchKeyGuard as G", "_ExcludeDispatchKeyGuard"),
    ("import torch.utils._python_dispatch as pd", "_python_dispatch"),
    ("from torch._C import _dispatch_tls_local_include_set", "_dispatch_tls"),
])
def test_static_scan_flags_native_entry_points_and_imported_internals(snippet, needle):
    findings = static.scan(snippet)
    assert any(needle in f for f in findings), findings


@pytest.mark.parametrize("as_import, from_import, flagged", [
    ("import torch._inductor as ind", "from torch import _inductor as ind", True),
    ("import torch.utils._python_dispatch as pd", "from torch.utils import _python_dispatch",
     True),
    ("import torch.serialization as s", "from torch import serialization as s", True),
    ("import torch._C._autograd as a", "from torch._C import _autograd as a", True),
    ("import torch.nn.functional as F", "from torch.nn import functional as F", False),
    ("import triton.language as tl", "from triton import language as tl", False),
    ("import os.path as osp", "from os import path as osp", False),
])
def test_static_scan_treats_import_as_like_from_import(as_import, from_import, flagged):
    """``import a.b as c`` binds ``a.b`` just as ``from a import b`` does: same judgement."""
    assert bool(static.scan(as_import)) is flagged, static.scan(as_import)
    assert bool(static.scan(from_import)) is flagged, static.scan(from_import)


@pytest.mark.parametrize("module", ["pkgutil", "pydoc", "runpy", "traceback", "string", "io",
                                    "webbrowser", "array", "struct", "zipfile", "copyreg",
                                    "platform", "types", "sys"])
def test_static_scan_refuses_modules_outside_the_allowlist(module):
    """The standard library resolves names built at run time (pkgutil.resolve_name,
    pydoc.locate, format fields), reads the stack, writes files or starts processes through
    modules no deny list holds: a kernel may import only what it needs."""
    assert any(module in f for f in static.scan(f"import {module}")), module
    assert any(module in f for f in static.scan(f"from {module} import x"))


@pytest.mark.parametrize("snippet, needle", [
    ('import torch\ntorch.ops.import_module("c" + "types")', "import_module"),
    ("import torch\nhost = torch.sys\nhost.modules", "sys"),
    ("import torch\nloader = torch._C._aoti.AOTIModelPackageLoader", "internals"),
    ("import torch.nn as nn\nnn._reduction", "internals"),
    ('target = "torch._inductor"', "torch._inductor"),
    ('target = "kernelmill.grade.worker:_active"', "kernelmill"),
    ('path = "0.__globals__[sys]"', "__globals__"),
    ('import os\nos.getenv("X")\nio.open("f", "w")', "writing"),
    ('Path("f").open("wb")', "writing"),
    ('FileIO(5, "wb", closefd=False)', "writing"),
    ('import torch\ntorch.save(x, "x.pt")', "torch.save"),
    ("from torch import load", "load"),
    ('src = "void* f = dlsym(RTLD_DEFAULT, name);"', "dlsym"),
    ('src = "\\"_ZN2at3cpu3addERKNS_6TensorES3_RKN3c106ScalarE\\""', "_ZN2at3"),
    ("import traceback\n[f.name for f in traceback.extract_stack()]", "extract_stack"),
    ('import os as o\no.posix_spawn("/bin/sh", ["sh"], {})', "posix_spawn"),
    ("from os import mkfifo", "mkfifo"),
    ("import os\nstarted = os.times().elapsed", "os.times"),
    ("import typing\ntyping.get_type_hints(f)", "get_type_hints"),
    ("def f(a: \"__import__('pkgutil').resolve_name('x')\"): pass", "code in a string"),
    ('import torch\ng = torch.fx.Graph()\ng.call_method("m" + "x", ())', "call_method"),
    ("from torch.fx import Graph", "fx"),
    ("ep = export(m, args)\nep.graph_module.recompile()", "graph_module"),
    ('import torch\ntorch.ops.aten.__getattr__("_addmm_activation")', "internals"),
    ("import torch\ntorch.ops.aten.__getattr__(name)", "computed name"),
])
def test_static_scan_flags_resolvers_internals_and_writers(snippet, needle):
    findings = static.scan(snippet)
    assert any(needle in f for f in findings), findings


def _honest_sources() -> list[Path]:
    hostile = Path(__file__).resolve().parent
    found = [*hostile.glob("honest_*.py"), *(FIXTURES / "honest").glob("*.py"),
             *(FIXTURES / "submissions").glob("honest_*.py")]
    # the cases and CUDA fixtures that must be certified (the other CUDA fixtures are hostile)
    for path in [*hostile.glob("*.py"), *(FIXTURES / "submissions").glob("cuda_*.py")]:
        if not path.name.startswith(("ref_", "test_")) and \
                "# expect: certified" in path.read_text():
            found.append(path)
    return sorted({p for p in found if not p.name.startswith("ref_")})


def test_static_scan_passes_every_honest_kernel():
    flagged = {p.name: static.scan(p.read_text()) for p in _honest_sources()}
    assert len(flagged) >= 10 and not any(flagged.values()), flagged


def test_static_scan_allows_the_cuda_context_an_honest_extension_needs():
    """``at::cuda::getCurrentCUDAStream`` launches on PyTorch's stream; it is no operator."""
    honest = (FIXTURES / "submissions" / "cuda_scale_add.py").read_text()
    assert "at::cuda::getCurrentCUDAStream" in honest
    assert static.scan(honest) == []
    guarded = 'src = "const at::cuda::OptionalCUDAGuard g(x.device()); at::cuda::CUDAStream s;"'
    assert static.scan(guarded) == []


# ---------------------------------------------------------------- verdict cache key

def test_verdict_key_covers_exact_bytes_problem_and_policy():
    source = 'import torch\nclass ModelNew:\n    """mode: honest"""\n'
    problem = {"source": "ref", "validation": {"atol": 1e-3}}
    key = verdict_key(source, problem, "cpu", Policy())
    assert key == verdict_key(source, dict(problem), "cpu", Policy())
    assert key != verdict_key(source.replace("honest", "cheat"), problem, "cpu", Policy())
    assert key != verdict_key(source + "# comment\n", problem, "cpu", Policy())
    assert key != verdict_key(source, {**problem, "source": "ref2"}, "cpu", Policy())
    assert key != verdict_key(source, {**problem, "validation": {"atol": 1e-2}}, "cpu", Policy())
    assert key != verdict_key(source, problem, "cuda", Policy())
    assert key != verdict_key(source, problem, "cpu", Policy(trials=2))


def test_verdict_key_names_the_optional_pre_filter_and_the_witness():
    """Installing or upgrading kernelguard, or changing the op witness, changes verdicts."""
    from kernelmill.grade.batch import grader_versions

    versions = grader_versions().split("\0")
    assert any(part.startswith("kernelguard=") for part in versions)
    assert len(versions) == 3 + 25  # three packages, twenty-five grading modules hashed
    assert not [part for part in versions[3:] if part.endswith("=none")], versions  # all found


# ---------------------------------------------------------------- fresh inputs

def test_every_submission_gets_fresh_inputs_and_weights(tmp_path):
    from kernelmill.grade.grader import Grader

    grader = Grader("cpu", policy=Policy(time=False, trials=2), cache_root=str(tmp_path))
    reference = (FIXTURES / "submissions" / "ref_linear.py").read_text()
    first = grader.fresh_reference(reference).value
    second = grader.fresh_reference(reference).value
    assert first["init_seed"] != second["init_seed"]
    assert not torch.equal(first["trials"][0]["inputs"][0], second["trials"][0]["inputs"][0])
    assert not torch.equal(first["state_dict"]["weight"], second["state_dict"]["weight"])


# ---------------------------------------------------------------- OS confinement

PROBE = textwrap.dedent("""
    import json, os, socket, subprocess, sys, threading
    from kernelmill.validate import sandbox

    writable = sys.argv[1]
    sandbox.confine([writable])
    sandbox.isolate_network()
    sandbox.forbid_process_creation()
    sandbox.forbid_other_processes()
    facts = {"state": sandbox.report()}

    def attempt(name, fn):
        try:
            fn()
            facts[name] = "allowed"
        except Exception as exc:
            facts[name] = type(exc).__name__

    attempt("spawn", lambda: subprocess.run(["true"]))
    attempt("posix_spawn", lambda: os.waitpid(os.posix_spawn("/bin/true", ["true"], {}), 0))
    attempt("fork", lambda: os.fork() or None)
    attempt("parent_environ", lambda: open(f"/proc/{os.getppid()}/environ", "rb").read())
    attempt("own_status", lambda: open("/proc/self/status").read())
    attempt("cpuinfo", lambda: open("/proc/cpuinfo").read())
    attempt("shm_write", lambda: open("/dev/shm/kmhostile-probe", "w").write("x"))
    attempt("tmp_write", lambda: open("/tmp/kmhostile-probe", "w").write("x"))
    attempt("run_write", lambda: open(os.path.join(writable, "ok"), "w").write("x"))
    attempt("dev_null", lambda: open("/dev/null", "w").write("x"))
    attempt("mkfifo_shm", lambda: os.mkfifo("/dev/shm/kmhostile-fifo"))
    attempt("tcp", lambda: socket.create_connection(("127.0.0.1", 9), timeout=2))
    attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
        b"x", ("127.0.0.1", 9)))
    attempt("unix", lambda: socket.socketpair())
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)

    def ipc(make, remove, *args):  # a host-wide IPC object, removed again where made
        made = make(*args)
        if made < 0:
            raise OSError(ctypes.get_errno(), make.__name__)
        remove(made)

    create = 0o1000 | 0o600  # IPC_CREAT, or O_CREAT for a queue below
    attempt("sysv_shm", lambda: ipc(libc.shmget, lambda i: libc.shmctl(i, 0, None),
                                    0x4B4D4801, 4096, create))
    attempt("sysv_msg", lambda: ipc(libc.msgget, lambda i: libc.msgctl(i, 0, None),
                                    0x4B4D4802, create))
    attempt("sysv_sem", lambda: ipc(libc.semget, lambda i: libc.semctl(i, 0, 0),
                                    0x4B4D4803, 1, create))
    attempt("mqueue", lambda: ipc(libc.mq_open, lambda q: (libc.mq_close(q),
                                                          libc.mq_unlink(b"/kmhostile-q")),
                                  b"/kmhostile-q", os.O_CREAT | os.O_RDWR, 0o600, None))
    parent, mine = os.getppid(), sorted(os.sched_getaffinity(0))
    attempt("renice_parent", lambda: os.setpriority(os.PRIO_PROCESS, parent, 7))
    attempt("pin_parent", lambda: os.sched_setaffinity(parent, mine[:1]))
    attempt("renice_self", lambda: os.setpriority(os.PRIO_PROCESS, 0, 1))
    attempt("raise_own_nice", lambda: os.setpriority(os.PRIO_PROCESS, 0, -5))
    attempt("realtime_self", lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1)))
    attempt("pin_self", lambda: os.sched_setaffinity(0, mine))
    import resource
    attempt("own_rlimit", lambda: resource.setrlimit(
        resource.RLIMIT_CORE, resource.getrlimit(resource.RLIMIT_CORE)))
    results = []
    thread = threading.Thread(target=lambda: results.append(1))
    attempt("thread", lambda: (thread.start(), thread.join()))
    facts["thread_ran"] = results == [1]
    print(json.dumps(facts))
""")


def test_worker_confinement(tmp_path):
    if sandbox.abi_version() <= 0:
        pytest.skip("this kernel has no Landlock")
    result = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    state = facts["state"]
    assert state["proc_hidden"] and state["shm_private"]
    for name in ("parent_environ", "shm_write", "tmp_write", "mkfifo_shm"):
        assert facts[name] == "PermissionError", (name, facts)
    for name in ("own_status", "cpuinfo", "run_write", "dev_null", "thread"):
        assert facts[name] == "allowed", (name, facts)
    assert facts["thread_ran"]
    if state["process_creation"] == "blocked":
        for name in ("spawn", "posix_spawn", "fork"):
            assert facts[name] == "PermissionError", (name, facts)
    else:
        assert downgrades(state), "a downgrade must be recorded"
    if state["tcp"] == "refused" or state["network"] == "isolated":
        assert facts["tcp"] != "allowed"
    if state["ip_sockets"] == "refused":  # UDP too (Landlock refuses TCP only)
        assert facts["tcp"] == facts["udp"] == "PermissionError", facts
    else:
        assert downgrades(state), "a downgrade must be recorded"
    assert facts["unix"] == "allowed", facts  # pipes and local sockets stay
    # the host's IPC objects: a channel between two workers at once that no file rule covers
    if state["shared_ipc"] == "refused":
        for name in ("sysv_shm", "sysv_msg", "sysv_sem", "mqueue"):
            assert facts[name] == "PermissionError", (name, facts)
    else:
        assert downgrades(state), "a downgrade must be recorded"
    # renicing or pinning another process (the zygote: every later worker inherits it) is
    # refused; the worker's own scheduling and limits are its own
    if state["other_processes"] == "blocked":
        # nor may it put itself ahead of them (a thread at nice -20 starved the reference)
        for name in ("renice_parent", "pin_parent", "raise_own_nice", "realtime_self"):
            assert facts[name] == "PermissionError", (name, facts)
    else:
        assert downgrades(state), "a downgrade must be recorded"
    for name in ("renice_self", "pin_self", "own_rlimit"):
        assert facts[name] == "allowed", (name, facts)


def test_downgrades_name_what_was_not_applied():
    full = {"landlock": 7, "proc_hidden": True, "shm_private": True, "tcp": "refused",
            "process_creation": "blocked", "other_processes": "blocked", "network": "isolated",
            "ip_sockets": "refused", "shared_ipc": "refused"}
    assert downgrades(full) == []
    partial = {**full, "landlock": "unavailable: the kernel has no Landlock",
               "process_creation": "allowed: libseccomp not found"}
    lines = downgrades(partial)
    assert any(line.startswith("landlock:") for line in lines)
    assert any("libseccomp" in line for line in lines)
    assert downgrades(None)


# ---------------------------------------------------------------- device-side attribution

def _kernel_verdict(preset: str, kernels: list, reference_ops: list[str]) -> dict:
    from kernelmill.grade.judge import kernel_checks, share_check

    hacks: dict = {}
    call = {"kernels": kernels}
    hack = lambda code, detail: hacks.setdefault(code, detail)  # noqa: E731
    found = kernel_checks("fresh:0", call, Policy(preset=preset), {"ops": reference_ops}, [],
                          hack)
    share_check([found], Policy(preset=preset), hack)
    share = found.share_us[0] / found.share_us[1] if found.share_us else None
    return {"hacks": hacks, "share": share}


def test_a_call_that_runs_every_op_of_the_reference_in_pytorch_redoes_it():
    from kernelmill.grade.judge import redoes_reference

    reference = ["aten.convolution.default", "aten.relu.default"]
    reuse = ["aten.conv2d", "aten.convolution", "aten._convolution", "aten.relu",
             "aten.clamp_min", "aten.empty_like"]
    hybrid = ["aten.conv2d", "aten.convolution", "aten._convolution", "aten.empty_like"]
    assert redoes_reference(reuse, [], reference) == ["convolution", "relu"]
    assert redoes_reference(hybrid, [], reference) == []
    # in-place spelling is the same op; the candidate's own registered op is not PyTorch's
    assert redoes_reference(["aten.convolution", "aten.relu_"], [], reference)
    assert not redoes_reference(["aten.convolution", "mine.relu"], ["mine.relu"], reference)


def test_kernelbench_share_is_taken_over_all_checked_calls():
    """One call at 29% among calls at 35% is noise on a few µs of kernels, not a submission
    whose kernels do not matter; calls whose kernels carry 20% together are rejected."""
    from kernelmill.grade.judge import kernel_checks, share_check

    def verdict(shares):
        hacks: dict = {}
        hack = lambda code, detail: hacks.setdefault(code, detail)  # noqa: E731
        calls = [{"kernels": [["cudnn_conv_kernel", 100.0 - s, "aten.cudnn_convolution"],
                              ["relu_kernel", float(s), "triton"]]} for s in shares]
        found = [kernel_checks(f"fresh:{index}", call, Policy(preset="kernelbench"),
                               {"ops": CONV_RELU}, [], hack)
                 for index, call in enumerate(calls)]
        share_check(found, Policy(preset="kernelbench"), hack)
        return hacks

    assert verdict([35, 29, 36, 35]) == {}
    assert "torch_compute" in verdict([20, 21, 19, 20])
    assert verdict([35, 29, 36, 35]) == verdict([35, 36, 35, 29])


CONV_RELU = ["aten.convolution.default", "aten.relu.default"]
GEMM_ONLY = ["aten.t.default", "aten.mm.default"]


def test_vendor_kernels_from_an_extension_follow_the_preset():
    kernels = [["sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n", 40.0, "extension"],
               ["my_epilogue_kernel", 10.0, "extension"]]
    assert "torch_compute" in _kernel_verdict("strict", kernels, CONV_RELU)["hacks"]
    assert _kernel_verdict("library", kernels, CONV_RELU)["hacks"] == {}
    # a problem that is only a GEMM: the GEMM must be the candidate's own, even under library
    assert "torch_compute" in _kernel_verdict("library", kernels, GEMM_ONLY)["hacks"]


def test_pytorch_kernels_from_an_extension_are_library_compute():
    kernels = [["void at::native::vectorized_elementwise_kernel<4, ...>", 5.0, "extension"],
               ["scale_add_kernel", 5.0, "triton"]]
    assert "torch_compute" in _kernel_verdict("library", kernels, CONV_RELU)["hacks"]


def test_kernelbench_share_of_gpu_time():
    token = [["cudnn::conv_fprop_kernel", 90.0, "aten.cudnn_convolution"],
             ["copy_kernel", 5.0, "triton"]]
    fused = [["cudnn::conv_fprop_kernel", 60.0, "aten.cudnn_convolution"],
             ["fused_tail_kernel", 40.0, "triton"]]
    low = _kernel_verdict("kernelbench", token, CONV_RELU)
    assert "torch_compute" in low["hacks"] and low["share"] < 0.1
    high = _kernel_verdict("kernelbench", fused, CONV_RELU)
    assert high["hacks"] == {} and high["share"] == pytest.approx(0.4)


def test_device_to_host_copies_are_host_compute():
    kernels = [["Memcpy DtoH (Device -> Pageable)", 1.0, "aten._to_copy"]] * 40 + \
        [["k", 1.0, "triton"]]
    assert "host_compute" in _kernel_verdict("library", kernels, CONV_RELU)["hacks"]


def test_kernels_launched_outside_every_range_are_not_the_candidates():
    """An AOTInductor package (or a driver call through an FFI) launches its kernels with no op,
    Triton launch or extension call around them: they are linked to the call's own range."""
    kernels = [["triton_poi_fused_add_mul_0", 30.0, "unattributed"],
               ["copy_kernel", 3.0, "triton"]]
    for preset in ("strict", "library"):
        assert "torch_compute" in _kernel_verdict(preset, kernels, CONV_RELU)["hacks"], preset
    share = _kernel_verdict("kernelbench", kernels, CONV_RELU)
    assert "torch_compute" in share["hacks"] and share["share"] < 0.1


def _event(name, start, end, parent=None, annotation=False, kernels=()):
    from types import SimpleNamespace

    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end),
                           is_user_annotation=annotation, cpu_parent=parent, device_type=None,
                           kernels=[SimpleNamespace(name=k, duration=us, start=start)
                                    for k, us in kernels])


def test_witness_links_kernels_of_the_calls_own_range_to_no_owner():
    from kernelmill.grade.witness import FORWARD, LAUNCH, UNATTRIBUTED, Witness

    forward = _event(FORWARD, 0, 100, annotation=True, kernels=[("triton_poi_fused_0", 20.0)])
    launch = _event(LAUNCH, 50, 90, parent=forward, annotation=True,
                    kernels=[("copy_kernel", 4.0)])
    add = _event("aten::add", 10, 20, parent=forward, kernels=[("at::add_kernel", 2.0)])
    witness = Witness("cpu")
    witness.calls, witness._events = 1, [forward, launch, add]
    [call] = witness.per_call()
    assert sorted(call["kernels"]) == [["at::add_kernel", 2.0, "aten.add"],
                                       ["copy_kernel", 4.0, "triton"],
                                       ["triton_poi_fused_0", 20.0, UNATTRIBUTED]]
    assert call["launch_us"] == 40.0 and witness.error is None


def test_witness_errs_where_a_kernel_ran_while_the_worker_had_stepped_aside():
    """A Triton compile in the first calls steps the worker's GPU work aside for other grades'
    windows (``launches._install_compile_aside``); the channel's writer keeps each aside's span.
    A kernel of the worker's that ran on the device within one (work queued before it, an op a
    hook of the submission's ran during the compile, a range of its own named like the
    wrapper's notwithstanding) ran inside another grade's window: the witness says so (a hack:
    ``trace_evaded``). Kernels that ended before it or start after it, its own launch among
    them, and an overlap within the clocks' margin, are nobody's concern."""
    from types import SimpleNamespace

    from kernelmill.grade.witness import ASIDE_MARGIN_US, FORWARD, LAUNCH, Witness

    def verdict(kernels: list[tuple[float, float]], spans: list[tuple[float, float]]):
        forward = _event(FORWARD, 0, 10_000, annotation=True)
        launch = _event(f"{LAUNCH}:kern", 10, 9_000, parent=forward, annotation=True)
        launch.kernels = [SimpleNamespace(name="kern", duration=us, start=start)
                          for start, us in kernels]
        witness = Witness("cpu")
        witness.calls, witness._events, witness._base_ns = 1, [forward, launch], 5_000_000
        witness.aside_spans_ns = [(5_000_000 + int(a * 1e3), 5_000_000 + int(b * 1e3))
                                  for a, b in spans]
        witness.per_call()
        return witness.error

    aside = [(1_000.0, 3_000.0)]
    assert verdict([(100.0, 800.0), (3_100.0, 4.0)], aside) is None  # before, and the launch
    assert verdict([(100.0, 900.0 + ASIDE_MARGIN_US / 2)], aside) is None  # within the margin
    assert "1 GPU kernel(s) ran while the worker had stepped aside" in \
        str(verdict([(500.0, 1_000.0)], aside))  # queued before it, ran through it
    assert verdict([(2_000.0, 10.0)], aside) is not None  # launched within it
    # two spans; a kernel in the second, however the first is placed
    assert verdict([(6_000.0, 200.0)], [(1_000.0, 3_000.0), (5_500.0, 6_500.0)]) is not None
    assert verdict([(6_000.0, 200.0)], [(1_000.0, 3_000.0), (6_300.0, 6_500.0)]) is None
    # a span never closed ends when the writer was asked (after every call): the work after
    assert verdict([(8_000.0, 500.0)], [(1_000.0, 9_500.0)]) is not None


def _static_verdict(source: str) -> dict:
    """The judge's verdict from the static findings alone (a candidate run that failed)."""
    from kernelmill.grade.judge import judge
    from kernelmill.validate.harness import WorkerResult

    failed = WorkerResult(ok=False, error={"stage": "import", "message": "x"})
    return judge({"trials": []}, failed, failed, policy=Policy(),
                 findings=static.scan(source))


def test_vendor_work_is_counted_and_a_thin_gemm_is_elementwise():
    """The op trace counts vendor FLOPs by torch's formulas and names GEMMs over an inner
    dimension of 0 or 1; under ``library`` the judge holds both against the reference's
    (red-team round 29: a ReLU as ``_addmm_activation`` over an empty inner dimension, a
    residual add as an identity GEMM)."""
    from kernelmill.grade.judge import _vendor_work
    from kernelmill.grade.worker.observers.optrace import _OpTrace

    c, a, b = torch.randn(8, 16), torch.randn(8, 32), torch.randn(32, 16)
    with _OpTrace() as trace:
        relu = torch._addmm_activation(c, torch.empty(8, 0), torch.empty(0, 16))
        torch.mm(a, b)
    assert torch.equal(relu, c.relu())
    assert trace.thin_gemms == ["aten._addmm_activation.default"]
    assert trace.flops == 2 * 8 * 16 * 32

    def hacks_of(call: dict, preset: str = "library") -> str:
        found: dict[str, str] = {}
        reference = {"ops": ["aten.convolution.default"], "flops": 50e6, "thin_gemms": 0}
        _vendor_work("fresh:0", call, reference, Policy(preset=preset),
                     lambda kind, detail: found.setdefault(kind, detail))
        return str(found)

    assert "beyond the problem" in hacks_of({"flops": 318e6})
    assert "inner dimension" in hacks_of({"flops": 50e6, "thin_gemms": ["aten.mm.default"]})
    assert "beyond the problem" not in hacks_of({"flops": 60e6})
    assert "beyond the problem" not in hacks_of({"flops": 318e6}, preset="kernelbench")


def test_a_process_refused_in_a_call_says_why():
    """A kernel first compiled after the first call runs ptxas where no process may start: the
    seccomp refusal (EPERM) in a call stage gets its reason; other errors are left as they are."""
    from kernelmill.grade.judge import judge
    from kernelmill.validate.harness import WorkerResult

    def error_of(stage: str, message: str) -> str:
        run = WorkerResult(ok=False, error={"stage": stage, "message": message})
        return judge({"trials": []}, run, run, policy=Policy(), findings=[])["error"]["message"]

    ptxas = "PermissionError: [Errno 1] Operation not permitted: '/triton/bin/ptxas'"
    assert "refused by the sandbox" in error_of("forward refill", ptxas)
    assert "refused by the sandbox" in error_of("timing", ptxas)
    assert error_of("import", ptxas) == ptxas
    denied = "PermissionError: [Errno 13] Permission denied: '/etc/x'"
    assert error_of("forward", denied) == denied


def test_kernelguard_rules_are_a_verdict_of_their_own():
    pytest.importorskip("kernelguard")
    source = (FIXTURES / "submissions" / "hack_patch_timer.py").read_text()
    assert any(f.startswith(static.KERNELGUARD_PREFIX) for f in static.scan(source))
    verdict = _static_verdict(source)
    assert {"kernelguard", "forbidden_api"} <= set(verdict["hacks"])
    assert "TIMER_MONKEYPATCH" in verdict["hack_details"]["kernelguard"]
    assert "kernelguard" not in verdict["hack_details"]["forbidden_api"]


def test_kernelguard_parses_under_the_process_parse_lock(monkeypatch):
    """kernelguard parses with ``ast`` in the grading threads; CPython 3.11 keeps the parser's
    recursion depth per interpreter, so an unlocked parse beside another failed a CI run with
    "AST constructor recursion depth mismatch"."""
    from kernelmill.core.problem import PARSE_LOCK
    held = []

    class Guard:
        @staticmethod
        def analyze_code(source, compute_structural_hash=False):
            held.append(PARSE_LOCK._is_owned())
            return {"classification": "clean"}

    monkeypatch.setattr(static, "_kernelguard", lambda: Guard)
    source = (FIXTURES / "submissions" / "hack_patch_timer.py").read_text()
    assert static.kernelguard_findings(source) == [] and static.scan(source)
    assert held == [True, True]


def test_kernelguard_is_off_cleanly_when_not_installed(monkeypatch):
    source = (FIXTURES / "submissions" / "hack_patch_timer.py").read_text()
    monkeypatch.setitem(sys.modules, "kernelguard", None)  # ``import kernelguard`` fails
    static._kernelguard.cache_clear()
    try:
        assert static.kernelguard_findings(source) == []
        findings = static.scan(source)
        assert findings and not any(f.startswith(static.KERNELGUARD_PREFIX) for f in findings)
        assert _static_verdict(source)["hacks"] == ["forbidden_api"]
    finally:
        static._kernelguard.cache_clear()


def test_witness_reads_the_same_tree_as_the_profilers_own_events():
    """``read_events`` walks the raw records once; it must give each op the parent and the
    top-level root that the profiler's own (slow) ``function_events`` tree gives it."""
    from kernelmill.grade.witness import Witness, read_events

    witness = Witness("cpu")
    witness.start()
    x = torch.randn(64, 64)
    for _ in range(3):
        with witness.call():
            y = torch.nn.functional.linear(x, x).relu()
            with Witness.launch():
                y = y.softmax(-1) + 1
            torch.cat([y, x]).sum()
    session = witness._profile
    witness.pause()

    def tree(records):
        out = []
        for r in records:
            if "::" not in r.name or r.is_user_annotation:
                continue
            root = r
            while root.cpu_parent is not None and not root.cpu_parent.is_user_annotation:
                root = root.cpu_parent
            parent = r.cpu_parent.name if r.cpu_parent is not None else None
            out.append((r.name, parent, root.name))
        return out

    legacy = [e for e in session.function_events if str(e.device_type).endswith("CPU")]
    fast = read_events(session.kineto_results, session.kineto_results.trace_start_ns())
    assert tree(fast) == tree(legacy) and len(tree(fast)) > 20
    assert [r.name for r in fast if r.is_user_annotation].count("kernelmill.forward") == 3
    witness.stop()
    calls = witness.per_call()
    assert len(calls) == 3 and witness.error is None
    assert "aten.mm" in calls[0]["ops"] and "aten.linear" in calls[0]["op_roots"]
    assert "aten._softmax" in calls[0]["launch_ops"]


def test_native_findings_read_sources_built_at_run_time():
    """What ``load_inline`` compiled is judged like a literal (the compile worker can report it)."""
    built = "".join(["void* f = dl", "sym(RTLD_DEFAULT, name);"])
    assert any("dlsym" in f for f in static.native_findings(built))
    assert any("at::cpu::add" in f for f in static.native_findings("return at::cpu::add(x, y);"))
    assert static.native_findings("__global__ void k(float* x) { x[0] = 1.f; }") == []


@pytest.mark.parametrize("native", [
    "PyFrameObject* f = PyEval_GetFrame();",
    "auto l = PyFrame_GetLocals(f);",
    'PyRun_String("import sys", Py_file_input, g, g);',
    "auto o = THPVariable_Wrap(t);",
    'auto sys = py::module_::import("sys");',
    'auto sys = pybind11::module::import("sys");',
    'py::object frame = py::eval("0");',
    'auto b = m.attr("__builtins__");',
    "#define CAT(a, b) a##b\nvoid* f = CAT(P, yEval_GetFrame)();",
    'extern "C" void* frame(void) __asm__("Py" "Eval_GetFrame");',
    'void* frame(void) __attribute__((weakref("PyEval_" "GetFrame")));',
    "torch::Tensor finish(py::object before, torch::Tensor src) { before(); return src; }",
    "auto t = ((struct _object*)p)->ob_type->tp_getattro;",
])
def test_static_scan_flags_native_code_that_reaches_the_interpreter(native):
    """The C API, torch's Python bindings and pybind11's objects let native code read the
    grader's frames (a red-team answer told scored timed calls from checked ones by its stack),
    import modules or call back into Python; a symbol named in a string or pasted from pieces
    hides those names."""
    findings = static.native_findings("#include <torch/extension.h>\n" + native)
    assert any("Python interpreter" in f for f in findings), findings


def test_static_scan_allows_extension_bindings_and_prose():
    binding = ("#include <torch/extension.h>\n// the same as PyTorch's own kernel\n"
               "torch::Tensor scale(torch::Tensor x) { return x; }\n"
               "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
               '  m.def("scale", &scale, "doc", py::arg("x"),'
               " py::call_guard<py::gil_scoped_release>(),"
               " py::return_value_policy::move); }")
    assert static.native_findings(binding) == []
    prose = ('"""## Notes\nThe output is read with .attr(name) as PyTorch does; unlike PyCUDA '
             '(from PyPI) nothing is installed."""')
    assert static.scan(prose) == []


@pytest.mark.parametrize("reference_ops, candidate_op, allowed", [
    (["aten.sum.dim_IntList"], "aten.mm.default", False),  # a row sum is not a GEMM
    (["aten._softmax.default"], "aten.scaled_dot_product_attention.default", False),
    (["aten.mul.Tensor", "aten.sum.dim_IntList"], "aten.addmm.default", False),
    (["aten.linear.default", "aten.relu.default"], "aten.addmm.default", True),
    (["aten.linear.default", "aten.relu.default"], "aten.convolution.default", False),
    (CONV_RELU, "aten.mm.default", True),  # an im2col answer's GEMM
    (["aten.scaled_dot_product_attention.default", "aten.mul.Tensor"], "aten.bmm.default",
     True),
])
def test_library_preset_allows_only_the_vendor_work_the_reference_does(reference_ops,
                                                                      candidate_op, allowed):
    """Under ``library`` a vendor class (GEMM, convolution, attention) is allowed only where the
    reference does that kind of work: a red-team answer computed a row sum as ``x @ ones`` and a
    softmax as attention against the identity, then copied PyTorch's answer with a Triton
    kernel."""
    from kernelmill.core.taxonomy import op_base

    ops = Policy(preset="library").allowed_library_ops(reference_ops)
    assert (op_base(candidate_op) in ops) is allowed, sorted(ops)


def test_vendor_kernels_are_judged_by_their_class():
    policy = Policy(preset="library")
    assert policy.allows_vendor_kernel("sm90_xmma_gemm_f32f32_tn_n", CONV_RELU)
    assert policy.allows_vendor_kernel("nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NNT",
                                       ["aten.linear.default", "aten.gelu.default"])
    assert not policy.allows_vendor_kernel("flash_fwd_kernel<Flash_fwd_kernel_traits>",
                                           ["aten.linear.default", "aten.gelu.default"])
    assert not policy.allows_vendor_kernel("cudnn::conv_fprop_kernel", ["aten.sum.dim_IntList"])
    assert not policy.allows_vendor_kernel("sm90_xmma_gemm_f32f32_tn_n", GEMM_ONLY)


@pytest.mark.parametrize("preset, reference_ops, flagged", [
    ("library", GEMM_ONLY, True), ("library", CONV_RELU, False), ("strict", CONV_RELU, True),
    ("kernelbench", GEMM_ONLY, False)])
def test_vendor_calls_in_native_source_follow_the_preset(preset, reference_ops, flagged):
    """A CPU extension calling the BLAS GEMM libtorch carries shows in no op and no kernel
    record: the scan names it and the policy judges it as it judges vendor kernels."""
    from kernelmill.grade.judge import judge
    from kernelmill.validate.harness import WorkerResult

    findings = static.scan('src = "cblas_sgemm(101, 111, 112, m, n, k, 1.0f, a, k, b, k, 0.0f, '
                           'c, n); ideep::inner_product_forward::compute(x, w, y);"')
    assert findings and all(static.VENDOR_PREFIX in f for f in findings), findings
    failed = WorkerResult(ok=False, error={"stage": "import", "message": "x"})
    verdict = judge({"trials": [], "ops": reference_ops}, failed, failed,
                    policy=Policy(preset=preset), findings=findings)
    assert ("torch_compute" in verdict["hacks"]) is flagged, verdict["hack_details"]
    assert "forbidden_api" not in verdict["hacks"]


def test_a_source_the_scan_flags_is_judged_without_running_it(monkeypatch, tmp_path):
    """``Policy.static_first``: a forbidden API makes any run's verdict hacked, so the source
    gets its verdict with no worker started (no GPU time, none of its code executed)."""
    from kernelmill.grade import grader as G
    from kernelmill.grade import reference_run

    hostile = Path(__file__).parent / "ctypes_from_address.py"
    reference = (FIXTURES / "submissions" / "ref_scale_add.py").read_text()
    assert "forbidden_api" in hostile.read_text()  # the case's own expectation

    def no_worker(*_args, **_kwargs):
        raise AssertionError("a worker was started for a source the scan decided")

    monkeypatch.setattr(G, "run_in_worker", no_worker)
    monkeypatch.setattr(reference_run, "run_in_worker", no_worker)  # the reference's workers
    grader = G.Grader("cpu", policy=Policy(time=False, trials=1), cache_root=str(tmp_path))
    verdict = grader.grade(reference, hostile.read_text())
    assert verdict["hacks"] == ["forbidden_api"] and not verdict["correct"]
    assert verdict["reward"] == 0.0 and verdict["profile"] == {"static_only": True}
    assert not verdict["compiled"]
    # an honest kernel is not decided statically: it needs a worker
    honest = (FIXTURES / "submissions" / "honest_scale_add.py").read_text()
    with pytest.raises(AssertionError, match="a worker was started"):
        grader.grade(reference, honest)


@pytest.mark.parametrize("native", [
    "auto job = std::async(std::launch::async, serve);",
    "std::jthread worker(serve);",
    "#include <future>",
    "#include <thread>",
    "pthread_t t; pthread_create(&t, nullptr, serve, nullptr);",
    "at::launch([=] { serve(); });",
    "c10::ThreadPool pool(1); pool.run(serve);",
    "cudaLaunchHostFunc(stream, serve, nullptr);",
    # grids launched from the device (dynamic parallelism) leave no kernel record
    "compute<<<grid, block, 0, cudaStreamTailLaunch>>>(x);",
    "-rdc=true",
    "-lcudadevrt",
    "--relocatable-device-code=true",
])
def test_static_scan_refuses_native_threads(native):
    """A thread started in native code (at import, say) runs library work or spins on the host
    beside forward, outside its op trace and profiler session (a red-team answer ran ATen's GEMM
    in a ``std::async`` thread fed by forward)."""
    assert static.native_findings(native), native


def test_built_sources_are_scanned_as_compiled(tmp_path):
    """Native source assembled at run time (names pasted in at import) is judged from the text
    the extension build compiled, which ``load_inline`` leaves in its build folder."""
    build = tmp_path / "km_linear"
    build.mkdir()
    (build / "main.cpp").write_text(
        "#include <torch/extension.h>\n"
        'extern "C" void sgemm_(const char*, const char*, const int*);\n'
        "torch::Tensor f(torch::Tensor x) { return x; }\n")
    (build / "cuda.cu").write_text("__global__ void k(float* x) { x[0] = 1.f; }\n")
    (build / "build.ninja").write_text("PyEval_GetFrame")  # not a source: not read
    found = static.built_source_findings(tmp_path)
    assert found == ["compiled main.cpp: vendor: native source calls sgemm_"], found
    (build / "main.cpp").write_text("int64_t f() { return (int64_t)PyEval_GetFrame(); }")
    assert any("Python interpreter" in f for f in static.built_source_findings(tmp_path))


def test_a_build_whose_compiled_sources_the_scan_flags_is_not_run(monkeypatch, tmp_path):
    """What the build compiled decides like a literal: a forbidden finding in it gets the
    verdict with no candidate worker started."""
    from kernelmill.grade import grader as G
    from kernelmill.validate.harness import WorkerResult

    real = G.run_in_worker

    def worker(target, payload, **kwargs):
        if target.endswith(":compile_task"):
            folder = Path(kwargs["env"]["TORCH_EXTENSIONS_DIR"]) / "km_assembled"
            folder.mkdir(parents=True)
            (folder / "main.cpp").write_text("#include <torch/extension.h>\n"
                                             "int64_t f() { return (int64_t)PyEval_GetFrame(); }")
            return WorkerResult(ok=True, value={"seconds": 0.0})
        if target.endswith(":candidate_task"):
            raise AssertionError("a candidate worker ran for a source its build decided")
        return real(target, payload, **kwargs)

    monkeypatch.setattr(G, "run_in_worker", worker)
    reference = (FIXTURES / "submissions" / "ref_scale_add.py").read_text()
    source = (FIXTURES / "submissions" / "honest_scale_add.py").read_text() + \
        "\n# its helper is built with torch.utils.cpp_extension.load_inline at import\n"
    assert not static.scan(source)
    grader = G.Grader("cpu", policy=Policy(time=False, trials=1), cache_root=str(tmp_path))
    verdict = grader.grade(reference, source)
    assert verdict["hacks"] == ["forbidden_api"] and not verdict["correct"], verdict
    assert "compiled main.cpp" in verdict["hack_details"]["forbidden_api"]
    assert verdict["profile"]["compiled_sources"] is True


def test_the_compile_worker_reports_every_native_text_its_loaders_were_handed(tmp_path):
    """Each ``load_inline``/``load`` call's native text is what the parent scans (a second build
    of the same name that rewrites the build folder's ``main.cpp`` hides nothing)."""
    from kernelmill.grade.worker.observers.extensions import _native_texts

    assert _native_texts("load_inline", ("km", "cpp one"), {"cuda_sources": ["cu one", "cu 2"]}) \
        == ["cpp one", "cu one", "cu 2"]
    assert _native_texts("load_inline", (), {"name": "km", "cpp_sources": ["a", "b"]}) == \
        ["a", "b"]
    source = tmp_path / "kernel.cpp"
    source.write_text("void* f() { return PyEval_GetFrame(); }")
    assert _native_texts("load", ("km", [str(source)]), {}) == [source.read_text()]
    assert static.native_findings(_native_texts("load", ("km",), {"sources": [str(source)]})[0])


class _RawEvent:
    """One raw Kineto record as ``read_events`` reads it (``results.events()``)."""

    def __init__(self, name, start, end, *, cuda=False, annotation=False, corr=0, linked=0,
                 thread=1):
        self._v = (name, start, end, cuda, annotation, corr, linked, thread)

    def name(self): return self._v[0]  # noqa: E704
    def start_ns(self): return self._v[1]  # noqa: E704
    def end_ns(self): return self._v[2]  # noqa: E704
    def duration_ns(self): return self._v[2] - self._v[1]  # noqa: E704
    def device_type(self):  # noqa: E301
        kinds = torch._C._autograd.DeviceType
        return kinds.CUDA if self._v[3] else kinds.CPU
    def is_user_annotation(self): return self._v[4]  # noqa: E301, E704
    def correlation_id(self): return self._v[5]  # noqa: E704
    def linked_correlation_id(self): return self._v[6]  # noqa: E704
    def start_thread_id(self): return self._v[7]  # noqa: E704
    def end_thread_id(self): return self._v[7]  # noqa: E704
    def is_hidden_event(self): return False  # noqa: E704
    def is_async(self): return False  # noqa: E704


def test_kernels_belong_to_the_record_around_their_launch():
    """Kineto links a kernel to an op only; a Triton launch, an extension call or a CUDA graph
    replay outside any op is linked to nothing (measured on an H100). The witness places each
    kernel by its runtime call: on the launching thread (the runtime's thread ids are the
    system's, mapped through a call made inside a known op), the innermost record open then.
    A kernel with no runtime call to place it goes to the call it ran in, owner unknown."""
    from types import SimpleNamespace

    from kernelmill.grade.witness import FORWARD, LAUNCH, SPAN, UNATTRIBUTED, Witness, read_events

    us = 1000  # ns
    raw = [
        _RawEvent(FORWARD, 0, 100 * us, annotation=True, corr=1),
        _RawEvent(LAUNCH, 10 * us, 30 * us, annotation=True, corr=2),
        _RawEvent("aten::add", 40 * us, 50 * us, corr=3),
        _RawEvent("cuLaunchKernelEx", 15 * us, 16 * us, corr=101, thread=999),
        _RawEvent("cudaLaunchKernel", 45 * us, 46 * us, corr=102, linked=3, thread=999),
        _RawEvent("cudaGraphLaunch", 60 * us, 61 * us, corr=103, thread=999),
        _RawEvent("my_kernel", 20 * us, 24 * us, cuda=True, corr=101),
        _RawEvent("void at::native::add_kernel<float>", 47 * us, 49 * us, cuda=True,
                  corr=102, linked=3),
        _RawEvent("graph_node_kernel", 62 * us, 70 * us, cuda=True, corr=103),
        _RawEvent("graph_node_kernel", 71 * us, 73 * us, cuda=True, corr=103),
        _RawEvent("mystery_kernel", 80 * us, 81 * us, cuda=True, corr=555),
        # a span timed by its kernels' device durations, after the call
        _RawEvent(SPAN, 200 * us, 300 * us, annotation=True, corr=4),
        _RawEvent("cudaGraphLaunch", 205 * us, 206 * us, corr=104, thread=999),
        _RawEvent("replayed", 210 * us, 215 * us, cuda=True, corr=104),
        _RawEvent("replayed", 220 * us, 222 * us, cuda=True, corr=104),
    ]
    results = SimpleNamespace(events=lambda: raw)
    witness = Witness("cpu")
    witness.calls = 1
    witness._events = read_events(results, 0, witness._loose)
    [call] = witness.per_call()
    assert sorted(call["kernels"]) == [
        ["graph_node_kernel", 2.0, UNATTRIBUTED], ["graph_node_kernel", 8.0, UNATTRIBUTED],
        ["my_kernel", 4.0, "triton"], ["mystery_kernel", 1.0, UNATTRIBUTED],
        ["void at::native::add_kernel<float>", 2.0, "aten.add"]]
    assert witness.span_us() == [7.0] and witness.error is None


def test_a_cuda_session_records_kernels_not_cuda_event_times():
    """Without ``use_kineto`` a CUDA session of the autograd profiler times each op with CUDA
    events and records no kernel (torch 2.11 on an H100: every call's kernel list was empty,
    so no device-side rule ever fired)."""
    import inspect

    from kernelmill.grade.witness import Witness

    assert "use_kineto\": True" in inspect.getsource(Witness.start)


def test_an_extension_kernel_is_the_candidates_only_when_its_source_defines_it():
    from kernelmill.grade.judge import kernel_owner

    source = '''
    cuda_src = """
    template <typename T>
    __global__ void __launch_bounds__(256) scale_add_kernel(const T* x, T* y, int n) {}
    extern "C" __global__ void relu_kernel(float* x) {}
    """
    '''
    own = static.declared_kernels(source)
    assert own == {"scale_add_kernel", "relu_kernel"}
    assert kernel_owner(["void scale_add_kernel<float>(float const*, float*, int)", 3.0,
                         "extension"], own) == "candidate"
    # cuBLAS on Hopper (nvjet), cuDNN, ATen's own kernels: whatever launched them
    assert kernel_owner(["nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNN", 9.0, "extension"],
                        own) == "vendor"
    assert kernel_owner(["void at::native::vectorized_elementwise_kernel<4>", 2.0,
                         "extension"], own) == "library"
    assert kernel_owner(["my_gemm_kernel", 2.0, "triton"], own) == "candidate"
    assert kernel_owner(["void conv2d_kernel(float*)", 2.0, "extension"],
                        frozenset({"conv2d_kernel"})) == "candidate"
    assert kernel_owner(["sm90_xmma_gemm_f32f32", 9.0, UNATTRIBUTED_OWNER], own) == "library"


UNATTRIBUTED_OWNER = "unattributed"


def test_cublas_called_from_an_extension_is_rejected_under_strict():
    from kernelmill.grade.judge import kernel_checks

    kernels = [["nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNN", 9.0, "extension"],
               ["void bias_relu_kernel(float*, int)", 1.0, "extension"]]
    hacks: dict = {}
    kernel_checks("fresh:0", {"kernels": kernels}, Policy(preset="strict"),
                   {"ops": ["aten.addmm", "aten.relu"]}, [],
                   lambda code, detail: hacks.setdefault(code, detail),
                   frozenset({"bias_relu_kernel"}))
    assert "torch_compute" in hacks and "nvjet" in hacks["torch_compute"]


def test_an_extension_whose_source_defines_no_kernel_owns_none():
    """A source with no ``__global__`` function (an extension that only calls cuBLAS, under a
    name the static scan does not see) launches nothing of its own, whatever the names."""
    from kernelmill.grade.judge import kernel_owner

    own = static.declared_kernels("load_inline(name='x', cpp_sources=S, cuda_sources=T)")
    assert own == frozenset()
    assert kernel_owner(["void gemv2T_kernel_val<int, int, float>", 2.0, "extension"],
                        own) == "vendor"
    assert kernel_owner(["some_kernel", 2.0, "extension"], own) == "library"
    assert kernel_owner(["some_kernel", 2.0, "extension"], None) == "candidate"


def test_fills_and_copies_are_not_library_compute_in_the_share():
    """Triton's autotuner clears the L2 with a fill between benchmark runs, inside the first
    call: under kernelbench those fill kernels must not count against an honest kernel."""
    autotuned = [["void at::native::vectorized_elementwise_kernel<4, FillFunctor<int>>", 90.0,
                  "aten.zero_"], ["fused_tail_kernel", 10.0, "triton"],
                 ["cudnn::conv_fprop_kernel", 10.0, "aten.cudnn_convolution"]]
    verdict = _kernel_verdict("kernelbench", autotuned, CONV_RELU)
    assert verdict["hacks"] == {} and verdict["share"] == pytest.approx(0.5)
    # a problem that only moves data: PyTorch's copy is the work
    copy = [["void at::native::elementwise_kernel<copy>", 9.0, "aten.copy_"],
            ["token_kernel", 1.0, "triton"]]
    moved = _kernel_verdict("kernelbench", copy, ["aten.t.default", "aten.clone.default",
                                                  "aten.copy_.default"])
    assert "torch_compute" in moved["hacks"] and moved["share"] == pytest.approx(0.1)


def test_only_kernels_of_the_launched_function_are_a_triton_launchs_own():
    """Python can run inside a Triton launch (a launch hook, an allocator): a captured graph it
    replays there launches kernels of other names, which are not the candidate's."""
    from types import SimpleNamespace

    from kernelmill.grade.witness import FORWARD, LAUNCH, UNATTRIBUTED, Witness, read_events

    us = 1000
    raw = [_RawEvent(FORWARD, 0, 100 * us, annotation=True, corr=1),
           _RawEvent(f"{LAUNCH}:copy_kernel", 10 * us, 60 * us, annotation=True, corr=2),
           _RawEvent("cudaGraphLaunch", 20 * us, 21 * us, corr=101, thread=999),
           _RawEvent("cuLaunchKernelEx", 50 * us, 51 * us, corr=102, thread=999),
           _RawEvent("void at::native::vectorized_elementwise_kernel<4>", 22 * us, 40 * us,
                     cuda=True, corr=101),
           _RawEvent("copy_kernel", 52 * us, 53 * us, cuda=True, corr=102)]
    witness = Witness("cpu")
    witness.calls = 1
    witness._events = read_events(SimpleNamespace(events=lambda: raw), 0, witness._loose)
    [call] = witness.per_call()
    assert sorted(call["kernels"]) == [
        ["copy_kernel", 1.0, "triton"],
        ["void at::native::vectorized_elementwise_kernel<4>", 18.0, UNATTRIBUTED]]


def test_a_decoy_global_named_like_a_library_kernel_does_not_make_it_the_candidates():
    """An extension source may define ``__global__`` functions named like library kernels
    (``vectorized_elementwise_kernel``, ``Kernel2``, ``gemv2T_kernel_val``) and then call the
    library: the real kernels carry a library namespace or a vendor's mark in their names."""
    from kernelmill.grade.judge import kernel_owner

    decoys = frozenset({"vectorized_elementwise_kernel", "Kernel2", "splitKreduce_kernel",
                        "gemv2T_kernel_val", "reduce_kernel"})
    library = [
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_tn_align1>(Params)",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float>(Params)",
        "void gemv2T_kernel_val<int, int, float, 128, cublasGemvParamsEx<float const>>(p)",
        "void at::native::reduce_kernel<512, 1, ReduceOp<float>>(ReduceOp<float>)"]
    for name in library:
        assert kernel_owner([name, 1.0, "extension"], decoys) != "candidate", name
    # the candidate's own kernel of the same base name, compiled from its source
    assert kernel_owner(["void vectorized_elementwise_kernel(float const*, float*, int)", 1.0,
                         "extension"], decoys) == "candidate"
    # its own template instantiated on ATen's types is still its own
    assert kernel_owner(["void reduce_kernel<c10::Half>(c10::Half const*, c10::Half*)", 1.0,
                         "extension"], decoys) == "candidate"


def test_an_honest_extensions_kernels_are_its_own_in_every_form_it_declares_them():
    """Kernels inside ``namespace { }`` (demangled ``(anonymous namespace)::``), templates,
    ``void __global__`` and launch bounds with parentheses inside are the candidate's own:
    under the ``library`` preset a vendor-sounding own kernel (``fused_gemm_relu``) counted as
    vendor work launched from the extension would fail an honest answer."""
    from kernelmill.grade.judge import kernel_owner
    from kernelmill.grade.native_scan import declared_kernels

    own = declared_kernels("""
namespace { __global__ void fused_gemm_relu(float* a) {} }
template <typename T> __global__ void tile_gemm(T* a) {}
__global__ void __launch_bounds__(BLOCK * (2)) conv_tile(float* a) {}
void __global__ splitk_reduce(float* a) {}
""")
    assert own == {"fused_gemm_relu", "tile_gemm", "conv_tile", "splitk_reduce"}, own
    for name in ("void (anonymous namespace)::fused_gemm_relu(float*)",
                 "void tile_gemm<float>(float*)", "void conv_tile(float*)",
                 "void splitk_reduce(float*)"):
        assert kernel_owner([name, 1.0, "extension"], own) == "candidate", name
    # a library's kernel in an anonymous namespace keeps its library's name
    assert kernel_owner(["void at::native::(anonymous namespace)::fused_gemm_relu(float*)",
                         1.0, "extension"], own) != "candidate"


def test_graph_replays_are_nobodys_launch_and_spans_time_the_first_call_busy():
    """A CUDA graph replayed inside a Triton launch or an extension call ran where it was
    captured: its kernels are no launch's own. A span (the unseen-input check replays the whole
    timing graph) is timed by its first call's kernels, overlapping ones counted once."""
    from types import SimpleNamespace

    from kernelmill.grade.witness import EXT, FORWARD, LAUNCH, SPAN, UNATTRIBUTED, Witness
    from kernelmill.grade.witness import read_events

    us = 1000
    raw = [_RawEvent(FORWARD, 0, 100 * us, annotation=True, corr=1),
           _RawEvent(f"{LAUNCH}:copy_kernel", 10 * us, 30 * us, annotation=True, corr=2),
           _RawEvent(EXT, 40 * us, 60 * us, annotation=True, corr=3),
           _RawEvent("cudaGraphLaunch", 12 * us, 13 * us, corr=101, thread=999),
           _RawEvent("cudaGraphLaunch", 42 * us, 43 * us, corr=102, thread=999),
           _RawEvent("copy_kernel", 14 * us, 15 * us, cuda=True, corr=101),
           _RawEvent("reduce_kernel", 44 * us, 46 * us, cuda=True, corr=102),
           # the span: two calls of two kernels each; the first call's second kernel overlaps
           _RawEvent(SPAN, 200 * us, 300 * us, annotation=True, corr=4),
           _RawEvent("cudaGraphLaunch", 201 * us, 202 * us, corr=103, thread=999),
           _RawEvent("a", 210 * us, 214 * us, cuda=True, corr=103),
           _RawEvent("b", 212 * us, 216 * us, cuda=True, corr=103),
           _RawEvent("a", 220 * us, 224 * us, cuda=True, corr=103),
           _RawEvent("b", 224 * us, 228 * us, cuda=True, corr=103)]
    witness = Witness("cpu")
    witness.calls = 1
    witness._events = read_events(SimpleNamespace(events=lambda: raw), 0, witness._loose)
    [call] = witness.per_call()
    assert sorted(call["kernels"]) == [["copy_kernel", 1.0, UNATTRIBUTED],
                                       ["reduce_kernel", 2.0, UNATTRIBUTED]]
    assert witness.span_us(2) == [6.0] and witness.span_us(1) == [14.0]
    assert witness.span_us(3) == [None]
    # every call's busy time of the span, and no time shared between calls
    assert witness.span_calls_us(2) == [[6.0, 8.0]] and witness.span_overlap_us == [0.0]
    # the span's busy time: its kernels' union, the idle gap between them (216-220) left out
    assert witness.span_busy_us == [14.0]
    assert witness.span_calls_us(3) == [None]
    # a call whose kernel runs on beside the next call's: the calls' sum exceeds the whole
    raw[-1] = _RawEvent("b", 213 * us, 228 * us, cuda=True, corr=103)
    witness._loose = []
    witness._events = read_events(SimpleNamespace(events=lambda: raw), 0, witness._loose)
    per_call = witness.span_calls_us(2)
    assert per_call == [[6.0, 15.0]] and witness.span_overlap_us == [3.0]
    assert witness.span_run_names == [[["a", "b"], ["a", "b"]]]


def test_the_timed_graphs_calls_must_each_do_the_work():
    """A forward that knows it is captured can compute in one call of the timing graph and copy
    that answer into the other calls' outputs: within a replay every call reads the same
    inputs, so each output is right (GRAPH_COPY.md: 1.31x at 16M elements on an H100). One hot
    replay's kernels, split by call, show it: the copies keep the GPU busy far less than the
    call that computed. Also failed: calls whose kernels run side by side, and a replay whose
    kernels cannot be read or split."""
    from types import SimpleNamespace

    from kernelmill.grade.judge import _graph_calls_even
    from kernelmill.grade.worker.call import _Run

    def worker_facts(per_call, overlap, counts, calls=4):
        run = _Run.__new__(_Run)
        run.witness = SimpleNamespace(
            span_calls_us=lambda _calls: per_call, span_overlap_us=overlap, span_counts=counts)
        facts = {"order": ["seen", "even", "unseen"], "calls": calls, "method": "cuda_graph"}
        run._even_calls_us(facts, calls)
        return facts

    def judged(facts):
        hacks, checks = [], {}
        _graph_calls_even(facts, Policy(), checks, lambda code, why: hacks.append((code, why)))
        return hacks, checks

    honest = worker_facts([[9.0] * 4, [68.1, 68.9, 67.7, 68.4], [9.0] * 4], [0, 0.2, 0],
                          [4, 4, 4])
    assert honest["even_calls_us"] == [68.1, 68.9, 67.7, 68.4]
    hacks, checks = judged(honest)
    assert not hacks and checks["graph_calls_even"]["passed"] is True
    # two calls of three compute (a 200 µs kernel), the third copies an output (6 µs)
    copied = worker_facts([[9.0] * 6, [200.0, 201.0, 6.0, 200.0, 199.0, 6.0], [9.0] * 6],
                          [0, 0, 0], [6, 6, 6], calls=6)
    hacks, checks = judged(copied)
    assert hacks and hacks[0][0] == "timing_behaviour" and "call 2 " in hacks[0][1]
    assert checks["graph_calls_even"]["passed"] is False
    # half the work in most calls, half copied: still well under the upper quartile
    assert judged(worker_facts([None, [100.0, 100.0, 55.0, 55.0], None], [0, 0, 0],
                               [4, 4, 4]))[0]
    # one honest call stretched (a clock step) is no bound; the upper quartile is
    assert not judged(worker_facts([None, [21.0] * 5 + [40.0, 45.0], None], [0, 0, 0],
                                   [7, 7, 7], calls=7))[0]
    # the cheap calls padded with kernels that run on beside the next call
    beside = worker_facts([None, [100.0, 95.0, 95.0, 95.0], None], [0, 90.0, 0], [4, 4, 4])
    hacks, _ = judged(beside)
    assert hacks and "side by side" in hacks[0][1]
    # calls that launch different numbers of kernels (a copy by cudaMemcpy has none)
    uneven = worker_facts([[9.0] * 4, None, [9.0] * 4], [0, 0, 0], [4, 5, 4])
    assert "do not split into 4 calls" in uneven["even_unread"]
    hacks, checks = judged(uneven)
    assert hacks and "could not be told apart" in hacks[0][1]
    # calls that launch other kernels than a checked call (the work in pieces in some calls,
    # none in others, so that the split by count moves off the calls' boundaries)
    from kernelmill.grade.worker.probes import _other_kernels
    checked = [["heavy", 90.0, "extension"]]
    assert _other_kernels([["heavy"], ["heavy"]], checked) == {}
    off = _other_kernels([["heavy"], ["piece", "piece"]], checked)["even_kernels_off"]
    assert off["call"] == 1 and off["wanted"] == ["heavy"]
    pieces = {**honest, "even_kernels_off": off}
    hacks, checks = judged(pieces)
    assert hacks and "launched kernels" in hacks[0][1] and not checks["graph_calls_even"]["passed"]
    # small kernels: within the floor of the busiest
    assert not judged(worker_facts([None, [2.9, 1.3, 1.4, 1.3], None], [0, 0, 0], [4, 4, 4]))[0]
    # one call per replay (or no graph): nothing to compare
    assert not judged({"method": "cuda_graph", "calls": 1})[0]
    assert not judged({"method": "cuda_events", "calls": 1})[0]


def test_unseen_device_times_that_cannot_be_read_fail_the_check():
    """On CUDA the unseen-input check is decided by the kernels' device time; when that cannot
    be read (no records, a range without kernels, ranges that do not split into the graph's
    calls) the worker says why and the judge does not pass the check (a group of 8 once
    certified a device-side answer cache whose spans were lost)."""
    from types import SimpleNamespace

    from kernelmill.grade.judge import _unseen_checks
    from kernelmill.grade.worker.call import _Run

    def unread(spans, counts, calls=1, order=("seen", "unseen", "seen")):
        run = _Run.__new__(_Run)
        per_call = None if spans is None else [None if s is None else [s] for s in spans]
        run.witness = SimpleNamespace(span_calls_us=lambda _calls: per_call, span_counts=counts,
                                      unavailable=None)
        facts = {"order": list(order), "calls": calls}
        run._unseen_device_us(facts)
        return facts

    assert unread([3.0, 4.5, 3.1], [2, 2, 2])["unseen_device_us"] == [4.5]
    assert unread(None, [])["device_unread"] == "no kernel records"
    assert "2 timed ranges" in unread([3.0, 3.1], [2, 2])["device_unread"]
    assert "no kernel" in unread([3.0, 0.0, 3.1], [2, 0, 2])["device_unread"]
    assert "do not split" in unread([3.0, None, 3.1], [4, 5, 4], calls=2)["device_unread"]

    hacks, checks = {}, {}
    facts = {"seen_ms": [0.005, 0.005], "unseen_ms": [0.005], "checks": [],
             "method": "cuda_graph", "device_unread": "no kernel records"}
    _unseen_checks(facts, [], Policy(), None, lambda code, why: hacks.setdefault(code, why),
                   True, "cuda", checks)
    assert "timing_behaviour" in hacks and checks["unseen_time_device_us"]["passed"] is False
    hacks.clear()
    del facts["device_unread"]
    facts.update(seen_device_us=[3.0, 3.0], unseen_device_us=[3.1])
    _unseen_checks(facts, [], Policy(), None, lambda code, why: hacks.setdefault(code, why),
                   True, "cuda", checks)
    assert not hacks and checks["unseen_time_device_us"]["passed"] is True


def test_the_unseen_checks_baseline_comes_before_any_unseen_input():
    """A cache that turns honest once shown an unseen input raised the old baseline (calls on
    the timed inputs interleaved with the unseen ones). The baseline is now the calls before
    any unseen input; calls on the timed inputs after them may not be slower; and on CUDA the
    check's calls may not be slower than the scored ones (a forward that tells them apart)."""
    from kernelmill.grade.judge import _unseen_checks

    def judged(facts, device="cpu", scored=None):
        hacks, checks = {}, {}
        _unseen_checks({"checks": [], "method": "perf_counter", **facts}, [], Policy(), None,
                       lambda code, why: hacks.setdefault(code, why), True, device, checks,
                       scored)
        return hacks, checks

    switched = {"seen_ms": [2.4, 2.3, 2.5], "unseen_ms": [58.0, 59.0], "after_ms": [66.0, 56.0]}
    hacks, checks = judged(switched)
    assert "timing_behaviour" in hacks and checks["unseen_time_ms"]["passed"] is False
    changed = {"seen_ms": [2.4, 2.3, 2.5], "unseen_ms": [2.4, 2.5], "after_ms": [40.0, 41.0]}
    assert "changed its ways" in judged(changed)[0]["timing_behaviour"]
    noisy = {"seen_ms": [2.4, 2.3, 2.5], "unseen_ms": [2.4, 2.5], "after_ms": [2.4, 40.0]}
    assert not judged(noisy)[0]  # one slow call after is host noise, not a switch
    honest = {"seen_ms": [49.3, 49.2, 49.4], "unseen_ms": [49.3, 50.0], "after_ms": [49.3, 51.4]}
    assert not judged(honest)[0]
    # told apart: 0.05 ms in the check, 0.005 ms scored
    apart = {"seen_ms": [0.05, 0.05, 0.05], "unseen_ms": [0.05, 0.05], "after_ms": [0.05, 0.05]}
    assert "tells the check apart" in judged(apart, "cuda", scored=0.005)[0]["timing_behaviour"]
    assert not judged(apart, "cuda", scored=0.048)[0]
    assert not judged(apart, "cpu", scored=0.005)[0]  # CPU: host noise, not judged


def test_on_cpu_the_unseen_check_also_reads_the_calling_threads_cpu_time():
    """On CPU the wall clock needs 3x plus 2 ms (other processes stretch it), which hid an
    answer cache of 0.5 ms against its honest 2.6 ms. The calling thread's CPU time is stretched
    far less: figures below are this machine's, the cache's from the red team's case, the
    honest ones from honest_row_sum with 5 busy processes on 2 cores and from a memory-bound
    16M-element scale_add beside another grading job."""
    from kernelmill.grade.judge import _unseen_checks

    def judged(facts, scored=None, scored_cpu=None):
        hacks, checks = {}, {}
        _unseen_checks({"checks": [], "method": "perf_counter", **facts}, [], Policy(), None,
                       lambda code, why: hacks.setdefault(code, why), True, "cpu", checks,
                       scored, scored_cpu)
        return hacks, checks

    cache = {"seen_ms": [0.56, 0.47, 0.52], "unseen_ms": [3.21, 2.53], "after_ms": [0.50, 0.49],
             "seen_cpu_ms": [0.56, 0.47, 0.52], "unseen_cpu_ms": [3.21, 2.53],
             "after_cpu_ms": [0.50, 0.49]}
    hacks, checks = judged(cache, 0.50, 0.50)
    assert checks["unseen_time_ms"]["passed"] is True  # under the wall clock's floor
    assert checks["unseen_time_cpu_ms"]["passed"] is False
    assert "remembers inputs" in hacks["timing_behaviour"]
    honest = {"seen_ms": [74.7, 93.3, 90.1], "unseen_ms": [104.2, 44.1], "after_ms": [43.0, 109.1],
              "seen_cpu_ms": [46.8, 45.8, 46.0], "unseen_cpu_ms": [46.8, 44.2],
              "after_cpu_ms": [45.2, 45.2]}
    hacks, checks = judged(honest, 52.9, 44.7)
    assert not hacks and checks["unseen_vs_scored_cpu_ms"]["passed"] is True
    memory_bound = {"seen_ms": [45.0, 41.2, 44.9], "unseen_ms": [60.1, 58.3],
                    "after_ms": [70.2, 66.9], "seen_cpu_ms": [40.7, 40.6, 41.0],
                    "unseen_cpu_ms": [55.2, 57.9], "after_cpu_ms": [66.4, 68.1]}
    assert not judged(memory_bound, 44.0, 40.9)[0]
    # the check's calls burn CPU the scored calls do not (a forward that tells them apart)
    apart = {**honest, "seen_cpu_ms": [150.0, 151.0, 152.0], "unseen_cpu_ms": [150.0, 151.0],
             "after_cpu_ms": [150.0, 151.0]}
    assert "tells the check apart" in judged(apart, 52.9, 44.7)[0]["timing_behaviour"]


def test_on_cpu_the_checks_calls_are_read_without_their_wait_for_a_core():
    """On CPU each of the check's calls is read less the time its thread waited, runnable, for
    a core other processes held (the thread's runqueue wait). Figures from an honest
    Triton-interpreted 4096-square GEMM graded in a group of 8 beside another group on 2 cores:
    its check's calls read 916-1,030 ms of wall at 207-228 ms of CPU, its scored calls 195.6 ms,
    and it was flagged as telling the check apart. A forward whose check calls burn CPU the
    scored calls do not is still told apart, waits or not."""
    from kernelmill.grade.judge import _unseen_checks

    def judged(facts, scored=195.6, scored_cpu=190.0):
        hacks, checks = {}, {}
        _unseen_checks({"checks": [], "method": "perf_counter", **facts}, [], Policy(), None,
                       lambda code, why: hacks.setdefault(code, why), True, "cpu", checks,
                       scored, scored_cpu)
        return hacks, checks

    crowded = {"seen_ms": [973.8, 958.3, 977.5], "unseen_ms": [1002.6, 994.2],
               "after_ms": [1029.0, 982.4, 1030.2, 1013.2],
               "seen_cpu_ms": [218.6, 207.3, 211.3], "unseen_cpu_ms": [217.5, 220.6],
               "after_cpu_ms": [218.0, 220.0, 222.7, 227.9]}
    assert "tells the check apart" in judged(crowded)[0]["timing_behaviour"]
    waits = {"seen_wait_ms": [752.0, 749.0, 763.0], "unseen_wait_ms": [781.0, 771.0],
             "after_wait_ms": [808.0, 760.0, 805.0, 783.0]}
    hacks, checks = judged({**crowded, **waits})
    assert not hacks, hacks
    assert checks["unseen_vs_scored_ms"]["passed"] and checks["unseen_time_ms"]["passed"]
    # the check's calls burn four times the CPU of the scored ones: the CPU clock tells them
    apart = {**crowded, **waits, "seen_cpu_ms": [800.0, 790.0, 805.0]}
    assert "tells the check apart" in judged(apart)[0]["timing_behaviour"]
    # waits not read for every call: the wall times as they are
    assert judged({**crowded, **waits, "seen_wait_ms": [752.0]})[0]
    # a forward's own sleep is no wait for a core: the kernel counts none for it
    from kernelmill.validate.schedstat import runqueue_wait_ns

    before = runqueue_wait_ns()
    if before is None:
        pytest.skip("the kernel does not report a thread's runqueue wait")
    time.sleep(0.2)
    assert runqueue_wait_ns() - before < 50e6


def test_a_threads_wait_for_a_core_another_process_holds_is_read():
    """Pinned to one core beside a process spinning there, the calling thread's runqueue wait
    grows by a good share of its wall time."""
    import multiprocessing

    from kernelmill.validate.schedstat import runqueue_wait_ns

    if runqueue_wait_ns() is None or not hasattr(os, "sched_setaffinity"):
        pytest.skip("no runqueue wait or affinity on this platform")
    core = sorted(os.sched_getaffinity(0))[0]
    before_affinity = os.sched_getaffinity(0)
    spinner = multiprocessing.get_context("fork").Process(target=_spin_on, args=(core, 1.5))
    spinner.start()
    try:
        os.sched_setaffinity(0, {core})
        time.sleep(0.2)  # the spinner is on the core
        waited, began = runqueue_wait_ns(), time.perf_counter()
        while time.perf_counter() - began < 0.6:
            pass
        grew = (runqueue_wait_ns() - waited) / 1e9
    finally:
        os.sched_setaffinity(0, before_affinity)
        spinner.join(5)
    assert grew > 0.1, grew


def _spin_on(core: int, seconds: float) -> None:
    os.sched_setaffinity(0, {core})
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        pass


def test_without_a_graph_the_check_and_the_scored_calls_compare_by_device_time():
    """Timed by CUDA events around each call (no captured graph), the check's calls carry the
    witness's launch cost (on an H100 an honest side-stream forward read 0.97 ms there and
    0.60 ms scored): their kernels' device time is compared instead. A forward whose kernels
    run longer in the check than the scored calls took is still told apart."""
    from kernelmill.grade.judge import _unseen_checks

    def judged(facts, scored):
        hacks, checks = {}, {}
        _unseen_checks({"checks": [], "method": "cuda_events", "unseen_ms": [0.97],
                        "after_ms": [0.97], "unseen_device_us": [590.0],
                        "after_device_us": [590.0], **facts}, [], Policy(), None,
                       lambda code, why: hacks.setdefault(code, why), True, "cuda", checks,
                       scored)
        return hacks, checks

    honest = {"seen_ms": [0.97, 0.98, 0.97], "seen_device_us": [590.0, 591.0, 590.0]}
    hacks, checks = judged(honest, 0.602)
    assert not hacks and checks["unseen_vs_scored_ms"]["passed"] is True
    apart = {"seen_ms": [0.97, 0.98, 0.97], "seen_device_us": [950.0, 951.0, 950.0]}
    assert "tells the check apart" in judged(apart, 0.602)[0]["timing_behaviour"]
    # the launch cost drifting between the calls on the timed inputs and the unseen ones
    # (an honest 1.1 µs side-stream kernel on an H200): the wall clocks are not compared...
    drift = {"seen_ms": [0.55, 0.59, 0.69], "unseen_ms": [1.03, 0.98], "after_ms": [0.96, 0.89],
             "seen_device_us": [1.15, 1.15, 1.12], "unseen_device_us": [1.12, 1.12],
             "after_device_us": [1.28, 1.12]}
    hacks, checks = judged(drift, 0.85)
    assert not hacks and "not compared" in checks["unseen_time_ms"]["detail"]
    # ...the device clocks are: a cache that saves kernel time on the timed inputs shows there
    cache = {**drift, "seen_device_us": [0.4, 0.4, 0.4], "unseen_device_us": [1.12, 1.12]}
    assert "remembers inputs" in judged(cache, 0.85)[0]["timing_behaviour"]


def test_on_the_device_clock_the_fastest_calls_are_compared():
    """The kernels' device time carries no host noise: the fastest call on unseen inputs
    against the fastest on the timed ones. An H100 run of ``observed_capture_tell`` (a cache
    saving about 1 µs of a 4 µs forward) had one slow call among three on the timed inputs
    and passed against their median."""
    from kernelmill.grade.judge import _unseen_checks

    def judged(before, new):
        hacks, checks = {}, {}
        _unseen_checks({"checks": [], "method": "cuda_graph", "seen_ms": [0.005] * 3,
                        "unseen_ms": [0.005] * 2, "after_ms": [0.005] * 2,
                        "seen_device_us": before, "unseen_device_us": new,
                        "after_device_us": before[:2]}, [], Policy(), None,
                       lambda code, why: hacks.setdefault(code, why), True, "cuda", checks)
        return hacks

    assert "remembers inputs" in judged([3.456, 3.231, 3.552], [4.192, 4.384])["timing_behaviour"]
    # honest, from the same runs: a 2k fp16 matmul and a 1.4 µs row sum
    assert not judged([56.513, 57.025, 57.537], [59.777, 58.913])
    assert not judged([1.376, 1.664, 1.441], [1.536, 1.664])


_LIBRARY_LOADER = """
import os, sys
from kernelmill.grade.worker.observers import extensions
from torch.utils import cpp_extension
extensions._install_extension_hooks(prebuilt=sys.argv[1] == "candidate",
                                    allowed_digests=sys.argv[2:] or None)
cpp = '''
#include <torch/extension.h>
torch::Tensor twice(torch::Tensor x) { return x + x; }
TORCH_LIBRARY(kmdigest, m) { m.def("twice(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(kmdigest, CPU, m) { m.impl("twice", twice); }
'''
try:
    cpp_extension.load_inline("km_digest_library", cpp_sources=[cpp], is_python_module=False)
except ImportError as exc:
    print("refused:", exc)
import torch
print("registered:", hasattr(torch.ops.kmdigest, "twice"))
print("digests:", " ".join(extensions._BUILT["digests"]))
"""


@pytest.mark.slow
def test_a_library_extension_loads_only_the_build_the_compile_worker_reported(tmp_path):
    """``load_inline(is_python_module=False)`` registers a library's ops instead of returning a
    module: its file is digest-checked too, before it is loaded (none of its code runs)."""
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)}

    def run(*args):
        done = subprocess.run([sys.executable, "-c", _LIBRARY_LOADER, *args], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (args[:1], done.stdout[-1000:], done.stderr[-2000:])
        return done.stdout

    built = run("compile")  # the compile worker builds it and reports its digest
    digest = built.split("digests:")[-1].split()
    assert "registered: True" in built and len(digest) == 1, built[-2000:]
    loaded = run("candidate", *digest)
    assert "registered: True" in loaded, loaded[-2000:]
    refused = run("candidate", "0" * 64)
    assert "refused:" in refused and "not what the compile worker built" in refused
    assert "registered: False" in refused, refused


REDTEAM = FIXTURES / "redteam"


@pytest.mark.parametrize("case, finding", [
    ("triton_build_alias", "Triton's machinery"),
    ("benchmark_timer_exec", "torch.utils beyond cpp_extension"),
    ("infer_schema_eval", "__annotations__"),
    ("compile_worker_udp", "socket"),
    ("build_folder_sparse", "opens a file for writing"),
    ("linker_wrap_capi", "Python interpreter"),
])
def test_the_red_teams_native_and_eval_routes_are_refused_by_the_scan(case, finding):
    """Red-team answers that, once run, build or eval code the worker cannot see (Triton's C
    module builder through an alias, torch.utils.benchmark's Timer, string annotations that
    typing evaluates, a UDP socket in a static initializer, a computed file mode, the linker's
    --wrap for the CPython API): each was certified; each is now a scan finding, so it never
    runs. Run anyway they would own the worker's facts, so the scan is where they stop."""
    found = static.scan((REDTEAM / f"{case}.py").read_text())
    assert any(finding in f for f in found), found


def test_scan_follows_aliases_of_library_modules():
    """A name bound from a library name is one: its private attributes and Triton paths are
    judged as the original's (``_t = torch; _t._C``, ``_rt = triton.runtime; _rt.build``)."""
    assert static.scan("import torch\n_t = torch\nx = _t._C._autograd\n")
    assert static.scan("import torch\ndef f(m=torch):\n    return m._C\n")
    assert static.scan("import torch\nx = getattr(torch, '_C')\n")
    assert static.scan("import triton\n_rt = triton.runtime\nb = _rt.build\n")
    assert static.scan("import triton.language as tl\nk = tl.core.knobs\n")
    assert not static.scan("import triton\nfrom triton.runtime import driver\n"
                           "n = driver.active.utils.get_device_properties(0)\n")
    assert not static.scan("from torch.utils.cpp_extension import load_inline\n")


def test_a_build_folder_is_read_within_bounds(tmp_path):
    """The parent reads at most a few MiB of a build folder's sources: a sparse gigabyte
    ``.cpp`` costs it nothing, and a folder holding more source than a build writes is itself
    a finding."""
    import tracemalloc

    build = tmp_path / "km_sparse"
    build.mkdir()
    (build / "main.cpp").write_text("int f() { return 1; }\n")
    with open(build / "huge.cpp", "wb") as handle:
        handle.truncate(1 << 30)
    tracemalloc.start()
    try:
        found = static.built_source_findings(tmp_path, limit=4 << 20, total=6 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found == [], found
    assert peak < 64 << 20, peak  # read whole, the file alone is 1 GiB
    for index in range(3):
        with open(build / f"pad{index}.cu", "wb") as handle:
            handle.truncate(4 << 20)
    assert any("MiB of native source" in f for f in
               static.built_source_findings(tmp_path, limit=4 << 20, total=6 << 20))


_RUNTIME_CODE = """
import dataclasses, functools, json, sys, typing
import torch
import triton
import triton.language as tl
from kernelmill.grade import worker
from kernelmill.grade.worker.observers.counts import _observed
worker.refuse_runtime_code()
results = {}

def attempt(name, fn):
    try:
        fn()
        results[name] = "ran"
    except RuntimeError as exc:
        results[name] = "refused" if "kernelmill: refused" in str(exc) else repr(exc)

def annotated(text):
    def f(x):
        return x
    f.__annotations__["x"] = text
    return f

attempt("annotation_type", lambda: typing.get_type_hints(annotated("torch.Tensor"), vars(torch)))
attempt("annotation_code", lambda: typing.get_type_hints(annotated("__import__('os')")))
attempt("singledispatch", lambda: functools.singledispatch(len).register(
    annotated("print.__self__.__import__('os')")))
attempt("dataclass", lambda: dataclasses.make_dataclass("Point", ["x", "y"])(1, 2))

@triton.jit
def kernel(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.arange(0, BLOCK))

attempt("triton_jit", lambda: triton.jit(lambda x: x) and kernel)
from torch.utils import benchmark
attempt("benchmark_timer", lambda: benchmark.Timer(stmt="x = 1").timeit(1))
print(json.dumps({**results, "refused": _observed()["refused"]}))
"""


def test_code_compiled_from_a_string_at_run_time_is_refused_in_a_worker():
    """Any route to eval or exec (typing's evaluation of an annotation built at run time,
    torch.utils.benchmark's statement) compiles a string: the worker's audit hook refuses it
    unless a code-generating package compiles it (Triton's JIT, dataclasses) or it reads as a
    type annotation. In a subprocess: an audit hook lasts as long as its process."""
    done = subprocess.run([sys.executable, "-c", _RUNTIME_CODE], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["annotation_type"] == results["dataclass"] == results["triton_jit"] == "ran", \
        results
    assert results["annotation_code"] == results["singledispatch"] == "refused", results
    assert results["benchmark_timer"] == "refused", results
    assert len(results["refused"]) >= 3


_SEALED_CODE = """
import copy, json, sys
import torch
from kernelmill.grade import worker
from kernelmill.grade.worker import call
from kernelmill.grade.worker.guards import audit
from kernelmill.grade.worker.guards.private import PACKAGE, _package_modules
from kernelmill.grade.worker.observers.counts import _observed
from kernelmill.validate import timer as T

worker.refuse_runtime_code()
results = {}
Run = call._Run
modules = _package_modules()
saved = [(module, {k: copy.copy(v) if isinstance(v, (list, dict)) else v
                   for k, v in vars(module).items()}) for module in modules]


def poison():
    # Everything every module of the worker package holds, changed: flags flipped in place,
    # dicts and lists emptied or poisoned, sets and tuples rebound empty, every function but the
    # reader rebound
    for module in modules:
        for name, value in list(vars(module).items()):
            if name.startswith("__") or name in ("_observed", "_audit_event", "_COUNTED"):
                continue
            if isinstance(value, list) and value and isinstance(value[0], bool):
                value[0] = not value[0]
            elif isinstance(value, (list, dict)):
                value.clear()
            elif isinstance(value, (frozenset, set, tuple)):
                setattr(module, name, type(value)())
            elif callable(value) and str(getattr(value, "__module__", "")).startswith(PACKAGE):
                setattr(module, name, lambda *args, **kwargs: True)
    audit._KINDS["<string>"] = ("own", "")


def restore():
    for module, values in saved:
        for name, value in values.items():
            current = vars(module).get(name)
            if isinstance(value, list) and isinstance(current, list):
                current[:] = value
            elif isinstance(value, dict) and isinstance(current, dict):
                current.clear()
                current.update(value)
            else:
                setattr(module, name, value)


def forge():
    # between the harness's own reads (``_Run.call``), outside any call: with the module
    # poisoned, the events that open a call and count are raised, and the counts asked for
    poison()
    try:
        try:
            sys._getframe(0)
            results["frame"] = "given"
        except RuntimeError:
            results["frame"] = "refused"
        sys.audit("kernelmill.call", 1, "")  # not the harness's code: opens no call
        sys.audit("kernelmill.count", "host_access", 5)
        sys.audit("kernelmill.launch", "launches", [], "", [])
    finally:
        restore()
    # the counts are the harness's alone: asked directly, through the reader, or through
    # kernelmill code that calls whatever it is given
    box = []
    sys.audit("kernelmill.read", box)
    timer = T.Timer(_observed, "cpu", warmup=1)
    timer.prepare()
    results["reads"] = [sorted(box[0]), sorted(_observed()), sorted(timer.output)]
    return 0


class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


call.active_modes = forge  # called by ``_Run.call`` after its first read
record = Run(Double(), "cpu", set(), set(), trials=[{"inputs": [torch.ones(4)], "seed": 1}]).call(0)
results.update(host_access=record["host_access"], launches=record["launches"])
print(json.dumps(results))
"""


def test_the_installed_audit_hook_and_the_observers_state_are_out_of_the_modules_reach():
    """The installed hook runs on a private copy of the worker's namespace: flags set in place,
    caches poisoned, constants and functions rebound on the module change nothing it does; the
    observers' events that open a call count only from the harness's own code; and their
    counts answer only the harness's readers (a submission that read them could tell the ghost
    call, in which its launches are skipped, by a sentinel launch)."""
    done = subprocess.run([sys.executable, "-c", _SEALED_CODE], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results == {"frame": "refused", "host_access": 0, "launches": 0,
                       "reads": [["armed", "refused"]] * 3}, results


def test_every_function_of_the_worker_that_reads_the_hooks_counts_is_a_reader():
    """The counts answer only the harness's readers; a reader the hook did not know got
    ``{"refused", "armed"}`` and failed with a KeyError where it ran: ``_Run.timed`` counted each
    captured call's launches inside a CUDA graph's capture, which no CPU run reaches, so every
    candidate's capture failed on the GPU (H200, 2026-11-28). Every function whose source takes
    a count out of ``_observed()`` (read from the source, nested functions and methods too)
    is among the readers the hook is given."""
    import ast
    import inspect

    from kernelmill.grade.worker.guards.audit import _readers_of
    from kernelmill.grade.worker.guards.private import _package_modules

    readers = {code.co_qualname for code in _readers_of("_observed")}
    takers = set()

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if isinstance(child, ast.FunctionDef) and any(
                        isinstance(n, ast.Call) and getattr(n.func, "id", None) == "_observed"
                        for n in ast.walk(child)):
                    takers.add(name)
                visit(child, f"{name}.<locals>." if isinstance(child, ast.FunctionDef)
                      else f"{name}.")
            else:
                visit(child, prefix)

    for module in _package_modules():  # every module of the worker package
        visit(ast.parse(inspect.getsource(module)), "")
    assert "_Run.timed" in takers and "_Probes.ghost" in takers
    assert takers <= readers, takers - readers


# ---------------------------------------------------------------- module patches, the channel

def test_a_function_rebound_on_any_module_loaded_before_the_import_is_a_patch():
    """Setting a module's attribute raises no audit event: the snapshot covers every module
    loaded before the candidate's import (the standard library's too), so a wrapped
    ``json.dumps`` or ``torch.serialization._save`` is seen, and new names are not patches."""
    import json as json_module

    import torch.serialization
    from kernelmill.grade import worker

    snapshot = worker.snapshot_modules()
    assert worker.patched_functions(snapshot) == []
    dumps, save = json_module.dumps, torch.serialization._save
    try:
        json_module.dumps = lambda *a, **k: "{}"
        torch.serialization._save = lambda *a, **k: None
        torch.serialization.a_new_helper = lambda: None  # a new name: nothing was replaced
        assert worker.patched_functions(snapshot) == ["json.dumps", "torch.serialization._save"]
    finally:
        json_module.dumps, torch.serialization._save = dumps, save
        del torch.serialization.a_new_helper
    assert worker.patched_functions(snapshot) == []


def test_a_module_given_a_lookup_hook_a_foreign_key_or_a_new_class_or_losing_a_name_is_a_patch():
    """Beside its callables, a module is reached through the names it lacks (a ``__getattr__``
    added after a non-callable entry was deleted: round 13), through a key that is not a ``str``
    (its ``__eq__`` runs at every lookup of the name it equals: round 11) and through its class.
    Each is a patch; adding an ordinary name is not."""
    import contextlib
    import types

    import torch.cuda
    from kernelmill.grade import worker

    class Sneaky(str):
        def __eq__(self, other):
            return str.__eq__(self, other)

        __hash__ = str.__hash__

    class Moduleish(types.ModuleType):
        pass

    snapshot = worker.snapshot_modules()
    assert worker.patched_functions(snapshot) == []
    generators = torch.cuda.default_generators
    try:
        del torch.cuda.default_generators
        torch.cuda.__getattr__ = lambda name: ()
        vars(contextlib)[Sneaky("StopIteration")] = StopIteration  # a builtin's name: a new key
        types.an_ordinary_name = 1
        patched = worker.patched_functions(snapshot)
        assert patched == ["contextlib: a name that is not a str", "torch.cuda.__getattr__",
                           "torch.cuda.default_generators (deleted)"], patched
    finally:
        del torch.cuda.__getattr__
        torch.cuda.default_generators = generators
        vars(contextlib).pop("StopIteration")
        del types.an_ordinary_name
    assert worker.patched_functions(snapshot) == []
    original = type(contextlib)
    try:
        contextlib.__class__ = Moduleish
        assert worker.patched_functions(snapshot) == ["contextlib.__class__"]
    finally:
        contextlib.__class__ = original
    assert worker.patched_functions(snapshot) == []


def test_the_result_guard_runs_after_the_target_and_before_the_result_is_encoded():
    """A target's ``RESULT_GUARD`` is called once the target has returned; problems it names
    replace the result with a ``ResultGuardError`` (the judge's ``patched_function``), and the
    channel's messages stay right while ``json.dumps`` is rebound in the worker."""
    from kernelmill.validate.harness import run_in_worker
    from kernelmill.validate.harness_worker import RESULT_GUARD, ResultGuardError

    body = textwrap.dedent(f'''
        import json
        from kernelmill.validate.harness_worker import mark_stage
        def main():
            json.dumps = lambda *a, **k: '{{"stage": "forged"}}'
            mark_stage("after the rebinding")
            return {{"answer": 42, {RESULT_GUARD!r}: lambda: PROBLEMS}}
    ''')
    run = lambda problems: run_in_worker(  # noqa: E731
        "kernelmill.validate.harness:run_source",
        {"source": body.replace("PROBLEMS", repr(problems))}, timeout_s=60, device="cpu")
    clean = run([])
    assert clean.ok and clean.value == {"answer": 42}, (clean.error, clean.value)
    assert "after the rebinding" in [stage for stage, _ in clean.stages]
    flagged = run(["replaced since the candidate's import: json.dumps"])
    assert not flagged.ok and flagged.value is None
    assert flagged.error["message"] == (f"{ResultGuardError.__name__}: replaced since the "
                                        "candidate's import: json.dumps"), flagged.error


# A CPU window short enough for a test: a few rounds of a few samples
SHORT_WINDOW = {"cap_ms": 30.0, "round_ms": 2.0, "warm_ms": 0.0, "min_reps": 3, "max_reps": 6,
                "loop_ms": 5.0, "warmup": 1, "sample_ms": 0.5}


def _keep_judged(monkeypatch) -> dict:
    """The grader's last ``judge`` call's arguments (``args``, ``kwargs``), kept as made: a
    real grade's facts, to edit and judge again."""
    from kernelmill.grade import grader as G
    from kernelmill.grade.judge import judge

    seen: dict = {}

    def keep(*args, **kwargs):
        seen.update(args=args, kwargs=kwargs)
        return judge(*args, **kwargs)

    monkeypatch.setattr(G, "judge", keep)
    return seen


def test_a_window_whose_unseen_check_was_left_out_is_not_certified(tmp_path, monkeypatch):
    """The parent counts the unseen parts it wrote for each member (``late_released``); the
    judge holds the worker's report to them: a report without the unseen-input check, or
    with the check on fewer trials than the parent gave, is ``timing_behaviour``, whatever
    else the facts say. Checked on a real grade of an honest kernel, its facts then edited as
    a submission that owned its worker's reports would."""
    import dataclasses

    from kernelmill.grade import grader as G
    from kernelmill.grade.judge import judge

    seen = _keep_judged(monkeypatch)
    # no spare: with no graph the warm one-call check's trial would be one
    timing = {**SHORT_WINDOW, "single_warm": False}
    grader = G.Grader("cpu", policy=Policy(trials=2, unseen_trials=2, unseen_spares=0,
                                           timing_settings=timing), cache_root=str(tmp_path))
    reference = (FIXTURES / "submissions" / "ref_scale_add.py").read_text()
    honest = (FIXTURES / "submissions" / "honest_scale_add.py").read_text()
    verdict = grader.grade(reference, honest)
    assert verdict["correct"] and not verdict["hacks"], verdict.get("hack_details")
    args, kwargs = seen["args"], seen["kwargs"]
    window, facts = kwargs["window"], args[2].value
    assert sorted(window["late_released"]) == [0, 1]
    assert [c["hidden"] for c in facts["unseen"]["checks"]] == [0, 1]

    def rejudge(facts_edit=None, window_edit=None) -> dict:
        run = dataclasses.replace(args[2], value=dict(facts, **(facts_edit or {})))
        return judge(args[0], args[1], run, *args[3:],
                     **{**kwargs, "window": dict(window, **(window_edit or {}))})

    left_out = rejudge({"unseen": None})
    one_trial = rejudge({"unseen": {**facts["unseen"], "checks": facts["unseen"]["checks"][:1]}})
    not_written = rejudge(window_edit={"late_released": [0]})
    for edited in (left_out, one_trial, not_written):
        assert "timing_behaviour" in edited["hacks"] and not edited["correct"], edited["hacks"]
        assert "unseen-input check covered" in edited["hack_details"]["timing_behaviour"]
    assert not rejudge()["hacks"]  # the control: the same facts, unedited


def test_an_unseen_check_slowed_for_a_moment_takes_its_spare_and_an_answer_cache_stays_slow(
        tmp_path, monkeypatch):
    """``Policy.unseen_spares``: a spare unseen trial is timed only where the first read slow
    (``window_worker.reads_slow``), and every bound takes the fastest call on new inputs. An
    answer cache (slow on every new input) asks for its spare and is slow there too; calls
    slowed on the first two new inputs alone (the GPU busy for a moment) pass with the spare
    and fail without it. The judge holds the trials covered to those the parent wrote, spares
    in order. A real CPU grade, its facts then edited."""
    import dataclasses

    from kernelmill.grade import grader as G
    from kernelmill.grade.judge import judge
    from kernelmill.validate.window_worker import reads_slow

    assert reads_slow([1.0, 1.1], [1.5, 1.3], [1.0], 1.1)  # the fastest new call is slow
    assert reads_slow([1.0], [1.0], [1.0, 1.4], 1.1)  # a call after one is slow
    assert not reads_slow([1.0, 1.2], [1.05, 3.0], [1.08], 1.1)
    assert not reads_slow([1.0], [5.0], [], None) and not reads_slow([], [5.0], [], 1.1)
    seen = _keep_judged(monkeypatch)
    # the spares alone: with no graph the warm one-call check's trial would be one more spare
    timing = {**SHORT_WINDOW, "single_warm": False}
    reference = (FIXTURES / "submissions" / "ref_scale_add.py").read_text()
    honest = (FIXTURES / "submissions" / "honest_scale_add.py").read_text()
    # an answer cache by content: every new input is a miss and slow, the spare's too
    cache = honest.replace(
        "        super().__init__()\n", "        super().__init__()\n        self.kept = {}\n",
        1).replace(
        "        out = torch.empty_like(x)\n",
        "        key = (float(x.sum()), float(y.sum()))\n"
        "        if key in self.kept:\n"
        "            return self.kept[key].clone()\n"
        "        self.busy = sum(range(4_000_000))\n"
        "        out = torch.empty_like(x)\n", 1).replace(
        "        return out\n", "        self.kept[key] = out.clone()\n        return out\n", 1)
    assert cache.count("self.kept") == 4
    policy = Policy(trials=2, unseen_trials=2, unseen_spares=1, timing_settings=timing)
    verdict = G.Grader("cpu", policy=policy, cache_root=str(tmp_path)).grade(reference, cache)
    args, kwargs = seen["args"], seen["kwargs"]
    facts, window = args[2].value, kwargs["window"]
    assert "timing_behaviour" in verdict["hacks"], verdict.get("hack_details")
    assert "remembers inputs" in verdict["hack_details"]["timing_behaviour"]
    assert sorted(window["late_released"]) == [0, 1, 2]
    checks = facts["unseen"]["checks"]
    assert [c["hidden"] for c in checks] == [0, 1, 2]

    def rejudge(unseen_edit: dict, released: list) -> dict:
        unseen = {**facts["unseen"], **unseen_edit}
        run = dataclasses.replace(args[2], value=dict(facts, unseen=unseen))
        return judge(args[0], args[1], run, *args[3:],
                     **{**kwargs, "window": dict(window, late_released=released)})

    def timing_of(factors: list) -> dict:
        """The honest calls' clocks: the timed inputs' as measured before the new ones, the
        calls after each at the fastest of those, the new inputs' at these multiples of it."""
        got, calls = facts["unseen"], {}
        for clock in ("ms", "cpu_ms"):
            usual = min(got[f"seen_{clock}"])
            calls[f"seen_{clock}"] = got[f"seen_{clock}"]
            calls[f"after_{clock}"] = [usual] * (2 * len(factors))
            calls[f"unseen_{clock}"] = [f * usual for f in factors]
        return calls

    def behaviour(verdict: dict) -> str:
        return (verdict.get("hack_details") or {}).get("timing_behaviour", "")

    moment = rejudge(timing_of([50.0, 50.0, 1.02]), [0, 1, 2])  # the spare's call is not slow
    assert "remembers" not in behaviour(moment) and "covered" not in behaviour(moment), \
        behaviour(moment)
    unspared = rejudge({**timing_of([50.0, 50.0]), "checks": checks[:2]}, [0, 1])
    assert "remembers inputs" in behaviour(unspared)
    for edited in (rejudge({"checks": [checks[0], checks[2]]}, [0, 2]),  # a trial skipped
                   rejudge({}, [0, 1]),  # a spare the parent never wrote
                   rejudge({"checks": checks[:1]}, [0])):  # fewer than the required
        assert "unseen-input check covered" in behaviour(edited), behaviour(edited)
    # a spare the first calls did not call for: one more call on new inputs for the fastest
    unwarranted = rejudge(timing_of([1.0, 1.0, 1.0]), [0, 1, 2])
    assert "did not call for" in behaviour(unwarranted), behaviour(unwarranted)


def test_the_candidates_run_calls_private_copies_of_the_worker_timer_and_witness():
    """``worker._private_namespace``: the worker, ``validate.timer``, ``validate.placement``,
    ``validate.measure`` and ``grade.witness`` as the candidate's run sees them are copies. Names rebound on the modules,
    members added to their classes and containers filled (red-team rounds 9-10: a one-shot
    ``_set_grad_enabled``, a two-shot ``_range_exit``, properties on ``Timer`` slowing its clock
    for one read) change nothing the copies call, and every reference between them is to a
    copy."""
    import time

    from kernelmill.grade import witness
    from kernelmill.grade.worker import call
    from kernelmill.grade.worker.guards import originals
    from kernelmill.grade.worker.guards.private import _package_modules, _private_namespace
    from kernelmill.validate import late_read, measure, placement, stream_gate
    from kernelmill.validate import timer as T
    from kernelmill.validate import timing_graph

    copies = _private_namespace()
    assert set(copies) == {m.__name__ for m in [*_package_modules(), late_read, measure,
                                                placement, stream_gate, T, timing_graph,
                                                *_package_modules(witness.__name__)]}
    # what the timer re-exports from placement is placement's copy's, its class rebuilt there
    assert copies[T.__name__]["PlacementTurns"] is copies[placement.__name__]["PlacementTurns"]
    assert copies[T.__name__]["PlacementTurns"] is not placement.PlacementTurns
    assert copies[T.__name__]["placed_copies"].__globals__ is copies[placement.__name__]
    # the witness's own modules too: its session reader runs beside the submission as well
    assert "kernelmill.grade.witness.events" in copies
    assert copies[witness.__name__]["read_events"] is not witness.read_events
    private = copies[call.__name__]
    timer_class, witness_class = private["T"].Timer, private["Witness"]
    assert timer_class is not T.Timer and witness_class is not witness.Witness
    # the timer's graph capture (``validate.timing_graph``, its base) is that module's copy's
    graphs = copies[timing_graph.__name__]
    assert timer_class.__bases__ == (graphs["TimingGraphs"],)
    assert timer_class._per_call_ms.__globals__ is graphs is not vars(timing_graph)
    assert private["_Run"] is not call._Run and private["sync"] is not measure.synchronize
    # what the timer imports from measure is measure's copy's
    assert copies[T.__name__]["synchronize"] is copies[measure.__name__]["synchronize"]
    # a class's base defined in another module of the package is that module's copy's
    assert private["_Run"].__bases__[0] is copies[call._Probes.__module__]["_Probes"]
    # a static method's and a context manager's globals are the copies' too
    launch = vars(witness_class)["launch"].__func__
    assert launch.__globals__["_record_function"].__wrapped__.__globals__ is \
        launch.__globals__ is not vars(witness)
    assert private["_Run"].invoke.__globals__ is private
    # the public timer's clock slowed, a property added, the worker's grad switch rebound
    real_clock, real_grad = T._perf_counter, call._set_grad_enabled
    try:
        T._perf_counter = lambda: time.perf_counter() * 0.1
        T.Timer.host_ms = property(lambda self: 0.0, lambda self, value: None)
        call._set_grad_enabled = originals._set_grad_enabled = None
        timer = timer_class(lambda: time.sleep(0.002), "cpu", warmup=1)
        timer.prepare()
        assert timer.host_ms >= 1.5, timer.host_ms  # its own clock, its own attribute
        assert min(timer.round(3)) >= 1.5
        assert private["_set_grad_enabled"] is real_grad
    finally:
        T._perf_counter = real_clock
        call._set_grad_enabled = originals._set_grad_enabled = real_grad
        del T.Timer.host_ms


def test_the_private_op_trace_dispatches_through_its_own_copy(monkeypatch):
    """``TorchDispatchMode`` wraps each subclass's ``__torch_dispatch__`` in torch's lazy
    Dynamo-disable wrapper, which calls the function it was given: the public module's, reading
    the public module's globals. The private copy of the op trace dispatches through the copy of
    the function itself: the public module's helpers rebound by a submission for its calls (the
    host read of an input's element, the key to an answer cache, made invisible) change nothing
    it counts. It turns Dynamo's frame hook off itself, as torch's wrapper did: a
    ``torch.compile``d function run under it does not have the dispatch frame compiled by the
    submission's backend, whose code would run there untraced (review of the change)."""
    import torch
    from kernelmill.grade.worker.guards.private import _private_namespace
    from kernelmill.grade.worker.observers import optrace

    private = _private_namespace()[optrace.__name__]
    dispatch = vars(private["_OpTrace"])["__torch_dispatch__"]
    assert dispatch.__globals__ is private and not hasattr(dispatch, "__wrapped__")
    x = torch.randn(64)
    watched = optrace._spans([x])
    public, copy = optrace._OpTrace(watched), private["_OpTrace"](watched)
    monkeypatch.setattr(optrace, "_type", lambda value: None)  # no argument is a tensor
    monkeypatch.setattr(optrace, "_spans", lambda values: [])  # no output is a copy's
    for trace in (public, copy):
        with trace:
            float(x[3])  # an input's element read on the host
            x.clone()
    assert public.input_reads == 0 and not public.copy_spans  # the public one is blinded
    assert copy.input_reads == 1 and copy.copy_spans
    monkeypatch.undo()
    ran = []

    def backend(graph, example_inputs):
        def run(*inputs):
            ran.append([float(t[3]) for t in inputs if type(t) is torch.Tensor and t.numel() > 3])
            return graph.forward(*inputs)
        return run

    compiled = torch.compile(lambda value: value * 2, backend=backend)
    trace = private["_OpTrace"](optrace._spans([x]))
    with trace:
        y = compiled(x)
    assert torch.equal(y, x * 2) and not ran and trace.ops == ["aten.mul.Tensor"]


def test_the_private_copies_defaults_are_the_copies_too(monkeypatch):
    """A class or function of the copied modules bound as a default argument is the copy's in
    the private namespace: the late read's unpickler (``late_read.read_part``'s
    ``_unpickler``), whose ``find_class`` a submission could otherwise replace on the public
    class to run its own code while an unseen trial's part is read. No private function's
    defaults lead to a function of a public copied module. The read builds neither the public
    slot classes nor the names a part commonly holds (a dtype, ``torch.Size``) as
    ``sys.modules`` has them at the read (``late_read._PART_GLOBALS``)."""
    import os
    import types

    import torch
    from kernelmill.grade.worker.guards.private import _private_namespace
    from kernelmill.validate import late_read
    from kernelmill.validate.tensor_slots import write_part

    copies = _private_namespace()
    public = {id(vars(__import__("sys").modules[name])) for name in copies}
    for name, space in copies.items():
        for key, value in space.items():
            functions = [value] if type(value) is types.FunctionType else \
                [f for f in vars(value).values() if type(f) is types.FunctionType] \
                if isinstance(value, type) and value.__module__ == name else []
            for function in functions:
                defaults = [*(function.__defaults__ or ()),
                            *(function.__kwdefaults__ or {}).values()]
                for default in defaults:
                    reached = [default] + ([f for f in vars(default).values()
                                            if type(f) is types.FunctionType]
                                           if isinstance(default, type) else [])
                    assert not any(type(f) is types.FunctionType and
                                   id(f.__globals__) in public for f in reached), (name, key)
    called = []
    monkeypatch.setattr(late_read._PartUnpickler, "find_class",
                        lambda self, module, name: called.append(name))
    x, size_value = torch.randn(16), torch.Size([2, 3])
    part = os.memfd_create("kernelmill-late", 0)
    try:
        size = write_part(part, {"inputs": [x, 3, size_value, torch.float16]},
                          lambda t: iter([t.view(torch.uint8)]))
        data = bytearray(os.pread(part, size, 0))
    finally:
        os.close(part)
    # nor does it build the public slot classes, whose ``__new__`` a submission may replace
    # (review of the change: ``tensor_slots`` is no copied module)
    from kernelmill.validate import tensor_slots

    for kind in (tensor_slots.TensorSlot, late_read._LateSlot):
        monkeypatch.setattr(kind, "__new__", staticmethod(
            lambda cls, *args: called.append(cls.__name__) or tuple.__new__(cls, *args)))
    # nor the names a part commonly holds as ``sys.modules`` has them now
    monkeypatch.setattr(torch, "Size", lambda *args: called.append("Size"))
    monkeypatch.setattr(torch, "float16", "a submission's object")
    back = copies[late_read.__name__]["read_part"](memoryview(data), size)
    assert torch.equal(back["inputs"][0], x) and back["inputs"][1:] == [3, size_value,
                                                                       x.half().dtype]
    assert not called


def test_a_late_part_holds_only_what_its_reading_builds_without_a_lookup(monkeypatch):
    """The late read builds only the names of its own table (``late_read._PART_GLOBALS``:
    slots, dtypes, ``torch.Size``, ``torch.device``, a few builtins, each built in C or a class
    of its own): a part that names anything else (a NumPy array's reconstructor, whose
    function reads its own module's names when called, where a submission may have rebound
    them to see the trial) is refused by the worker without a lookup, and first by the grader
    (``tensor_slots.part_fault``), which checks every part it hands over with an unpickler
    that knows only that table, so a part that names ``os.system`` runs nothing in the
    grader either; the pickle opcodes that look objects up with no name (``copyreg``'s
    extension cache) are refused too."""
    import copyreg
    import pickle
    import posix
    import types

    import numpy
    import torch
    from kernelmill.grade.worker.guards.private import _private_namespace
    from kernelmill.validate import late_read
    from kernelmill.validate.payload_files import LatePart, _LateFile
    from kernelmill.validate.tensor_slots import (
        SlotError,
        file_part_structure,
        part_fault,
        write_part,
    )

    # a structure that names ``os.system``, made before it is rebound to tell whether it ran
    evil = pickle.dumps(_Reduces(posix.system, ("true",)))
    ran = []
    monkeypatch.setattr(posix, "system", lambda *args: ran.append(("system", args)))
    values = numpy.arange(6, dtype=numpy.float32).reshape(2, 3)
    fine = {"inputs": [torch.ones(4), 3, 0.5, "x", None, torch.Size([2, 3]), torch.float16,
                       torch.device("cpu"), (1, [2.0]), {"k": torch.zeros(2)}, complex(1, 2),
                       slice(1, 3), range(4), bytearray(b"ab"), b"cd"]}
    late = _LateFile([fine], ahead=False)  # everything a trial's inputs commonly hold
    late.close()
    os.close(late.fd)
    for held, why in ((values, "numpy"), (types.SimpleNamespace(a=1), "types.SimpleNamespace")):
        with pytest.raises(SlotError, match=why):
            _LateFile([{"inputs": [torch.ones(4), held]}], ahead=False)
    # a trusted run's part file, read off the file (the structure's pickle) as it is handed on
    part = os.memfd_create("kernelmill-late", 0)
    try:
        size = write_part(part, {"inputs": [torch.ones(4), values]},
                          lambda t: iter([t.view(torch.uint8)]))
        structure = file_part_structure(part, size)
        data = bytearray(os.pread(part, size, 0))
        made = LatePart(os.dup(part), size)  # as the grader holds it, handed on as it is
        with pytest.raises(SlotError, match="numpy"):
            _LateFile([made], ahead=False)
        assert not made.checked
        made.close()
    finally:
        os.close(part)
    assert "numpy" in part_fault(structure, late_read._PART_GLOBALS)
    # nothing of the structure that names ``os.system`` runs in the grader
    assert "posix.system" in part_fault(evil, late_read._PART_GLOBALS) and not ran
    # a state set on a class the read builds (BUILD on the slot class: its ``__new__`` for
    # every later part) is refused by its opcode, and the check changes nothing of the
    # grader's: it builds stand-ins, so a huge ``range`` in a size costs it nothing either
    build = (b"\x80\x04ckernelmill.validate.tensor_slots\nTensorSlot\n"
             b"N}\x8c\x03tag\x94K\x01s\x86b.")
    assert "BUILD" in part_fault(build, late_read._PART_GLOBALS)
    assert not hasattr(late_read._LateSlot, "tag")
    huge = pickle.dumps(_Reduces(torch.Size, (range(10 ** 12),)))
    assert part_fault(huge, late_read._PART_GLOBALS) is None  # (a real size: terabytes)
    # an extension code, which the worker's C unpickler would look up in a cache a submission
    # can fill, is refused by its opcode
    monkeypatch.setitem(copyreg._extension_registry, (__name__, "_Reduces"), 0x7ffe)
    monkeypatch.setitem(copyreg._inverted_registry, 0x7ffe, (__name__, "_Reduces"))
    coded = pickle.dumps(_Reduces, protocol=pickle.HIGHEST_PROTOCOL)
    assert "EXT" in part_fault(coded, late_read._PART_GLOBALS)
    # the worker's reading (its private copy) refuses what the grader would have, and looks
    # nothing up: every name the part holds rebound as a submission's import would
    reading = _private_namespace()[late_read.__name__]
    called = []
    monkeypatch.setattr(numpy, "dtype", lambda *args: called.append("dtype"))
    monkeypatch.setattr(numpy._core.numeric, "_frombuffer",
                        lambda *args: called.append("_frombuffer"))
    with pytest.raises(RuntimeError, match="may not hold"):
        reading["read_part"](memoryview(data), size)
    assert not called and not ran


class _Reduces:
    """Pickles as a call of ``fn`` on ``args`` (a structure naming any function)."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def _held_within(value, copied) -> list:
    """What a value of the private namespace leads to (``copied``: the copied modules' names):
    a function's defaults, closure cells, wrapped function and attributes, a method's or
    property's functions, a partial's parts, a container's items, a copied class's members and
    bases."""
    import functools
    import types

    kind = type(value)
    if kind is types.FunctionType:
        cells = []
        for cell in value.__closure__ or ():
            try:
                cells.append(cell.cell_contents)
            except ValueError:  # an empty cell
                pass
        return [*(value.__defaults__ or ()), *(value.__kwdefaults__ or {}).values(),
                getattr(value, "__wrapped__", None), *vars(value).values(), *cells]
    if kind in (staticmethod, classmethod, types.MethodType):
        return [value.__func__]
    if kind is property:
        return [value.fget, value.fset, value.fdel]
    if kind is functools.partial:
        return [value.func, *value.args, *value.keywords.values()]
    if kind in (list, tuple, set, frozenset):
        return list(value)
    if kind in (dict, types.MappingProxyType):
        return [*value.keys(), *value.values()]
    if isinstance(value, type) and value.__module__ in copied:
        members = [v for k, v in vars(value).items() if k not in ("__dict__", "__weakref__")]
        return members + list(value.__bases__)
    return []


def test_nothing_the_private_namespace_holds_leads_back_to_a_public_copied_module():
    """The family of the two tests above, walked whole: from every name of every private copy,
    through functions' defaults, closure cells and wrapped functions, methods, properties,
    partials, classes' members and bases, containers and read-only tables, nothing reached is a
    function reading a public copied module's globals, a class defined there, or the public
    module itself (any of them a place where a submission's rebinding would be called)."""
    import sys
    import types

    from kernelmill.grade.worker.guards.private import _private_namespace

    copies = _private_namespace()
    public_spaces = {id(vars(sys.modules[name])) for name in copies}
    public = {id(sys.modules[name]) for name in copies} | {
        id(value) for name in copies for value in vars(sys.modules[name]).values()
        if isinstance(value, type) and value.__module__ == name}
    found, seen = [], set()
    stack = [(value, f"{name}.{key}", 0) for name, space in copies.items()
             for key, value in space.items() if key != "__builtins__"]
    while stack:
        value, path, depth = stack.pop()
        if value is None or id(value) in seen or depth > 12:
            continue
        seen.add(id(value))
        if id(value) in public or type(value) is types.FunctionType and \
                id(value.__globals__) in public_spaces:
            found.append(path)
            continue
        stack.extend((item, path, depth + 1) for item in _held_within(value, copies))
    assert not found, found


def test_the_private_timer_gates_only_behind_its_own_gate(monkeypatch):
    """The unseen check's replays wait behind a stream gate (``validate.stream_gate``) whose
    closing and opening run between the new inputs' load and the timed span: code of a
    submission's there could read those inputs and fill an answer cache outside every call
    (review of the gate). The candidate's run reaches the gate only through its private copy:
    a gate put in the public module's list, or methods set on the public class, are never
    called; the private timer takes no gate but its own module's class; and a gate's methods
    cannot be shadowed on the instance (``__slots__``)."""
    import ctypes

    from kernelmill.grade.worker import tasks
    from kernelmill.grade.worker.guards.private import _private_namespace
    from kernelmill.validate import stream_gate
    from kernelmill.validate import timer as T

    called = []

    class Fake:
        closed = False

        def close(self, stream):
            called.append("fake close")
            return True

        def open(self):
            called.append("fake open")

    copies = _private_namespace()  # made before the candidate's import, as in the worker
    monkeypatch.setattr(stream_gate, "_SHARED", [Fake()])
    monkeypatch.setattr(stream_gate.StreamGate, "close", Fake.close)
    gates, timer_ns = copies[stream_gate.__name__], copies[T.__name__]
    assert timer_ns["_shared_gate"] is gates["shared"] is not stream_gate.shared
    assert copies[tasks.__name__]["shared_gate"] is gates["shared"]
    assert timer_ns["StreamGate"] is gates["StreamGate"] is not stream_gate.StreamGate
    assert gates["shared"]() is None  # no CUDA here: none made, the public one never taken
    # a private timer's once, its CUDA calls stubbed, with a public gate and with its own
    trace = []
    for name in ("_cuda_synchronize", "_event_record", "_event_wait"):
        monkeypatch.setitem(timer_ns, name, lambda *a, _n=name: trace.append(_n))
    monkeypatch.setitem(timer_ns, "_event_elapsed", lambda start, end: 1.0)
    monkeypatch.setitem(timer_ns, "_graph_replay", lambda graph: trace.append("replay"))
    monkeypatch.setitem(timer_ns, "_stream_handle", lambda: 0)
    timer = timer_ns["Timer"](lambda: None, "cuda", gate=True)
    timer.method, timer.graph, timer._events = "cuda_graph", object(), (object(), object())
    timer.output = "out"
    timer._gate = stream_gate._SHARED[0]
    assert timer.once(lambda: None, whole=True) == (1.0, "out")
    assert called == [] and trace == ["_cuda_synchronize", "_event_record", "replay",
                                      "_cuda_synchronize", "_event_record", "_event_wait"]
    word = ctypes.c_uint32(0)
    waits = []
    own = gates["StreamGate"](lambda *args: waits.append(args) or 0, word, 4096)
    timer._gate, trace[:] = own, []
    assert timer.once(lambda: None, whole=True) == (1.0, "out")
    assert waits == [(0, 4096, 1, 0)] and word.value == 1 and not own.closed
    assert trace == ["_cuda_synchronize", "_event_record", "replay", "_event_record",
                     "_event_wait"]  # no synchronize behind the gate: it would never end
    with pytest.raises(AttributeError):
        own.open = lambda: None
    # a replay that raises leaves no stream waiting: the gate is opened on the way out
    monkeypatch.setitem(timer_ns, "_graph_replay", lambda graph: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        timer.once(lambda: None, whole=True)
    assert word.value == 2 and not own.closed
    assert called == []


def test_the_late_parts_are_read_through_functions_bound_before_the_import(monkeypatch):
    """The unseen check's new inputs come as late parts, read while the submission's objects
    live in the worker (review of the gate, row 12): a function looked up at call time and
    rebound for that one call (the harness's reader, ``torch.frombuffer``, ``mmap.mmap``, the
    ``array`` module the descriptor's receipt uses, the control pipe's reader) would see the
    trial's bytes or its file. The private copy of ``validate.late_read``, bound before the
    import, reads the part right with every one of those rebound afterwards and calls none;
    the slot class its structure names is not looked up by name; its dtypes cannot be written;
    a signal that comes while the part waits on the late socket is handled only once it is
    read (a handler could peek at the socket for the part's descriptor: review 46); a late
    socket whose descriptor was pointed at another file is refused."""
    import _socket
    import mmap
    import os
    import pickle
    import signal
    import socket
    import types

    from kernelmill.grade.worker.guards.private import _private_namespace
    from kernelmill.validate import harness_worker, late_read, tensor_slots
    from kernelmill.validate.payload_files import _LateFile

    parts = [{"inputs": [torch.arange(1 << 16, dtype=torch.float32) * (i + 1)], "seed": i}
             for i in range(2)]
    late = _LateFile(parts)
    for event in late._written:
        assert event.wait(10)
    asked = []
    said, told = os.pipe()

    peeked = []
    raw_socket, receipt, dup, close = _socket.socket, tensor_slots.recv_fds, os.dup, os.close

    def peek(signum, frame):  # the submission's handler: is a descriptor waiting there?
        probe = raw_socket(fileno=dup(late.fd))
        try:
            _data, fds = receipt(probe, 16, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            peeked.append(len(fds))
            for fd in fds:
                close(fd)
        except BlockingIOError:
            peeked.append(0)
        finally:
            probe.close()

    def parent_report(value):  # the parent's side: hands the part over, then says so
        asked.append(value["late"])
        late.release(value["late"])
        signal.raise_signal(signal.SIGUSR1)  # a signal comes while the part waits there
        os.write(told, f"late {value['late']}\n".encode())

    monkeypatch.setattr(harness_worker, "_late", {"fd": late.fd, "table": late.table})
    monkeypatch.setattr(harness_worker, "_control", harness_worker._make_receiver(said))
    monkeypatch.setattr(harness_worker, "report", parent_report)
    copies = _private_namespace()  # made before the candidate's import, as in the worker
    reading = copies[late_read.__name__]
    assert copies["kernelmill.grade.worker.probes"]["late_payload"] is reading["late_payload"]
    reading["bind"]()
    assert late_read._BOUND == []  # the public list holds nothing: only the copy was bound

    seen = []

    def spy(name):
        return lambda *args, **kwargs: seen.append(name)

    # the submission's import: every name the reading once looked up, rebound
    monkeypatch.setattr(torch, "frombuffer", spy("frombuffer"))
    monkeypatch.setattr(mmap, "mmap", spy("mmap"))
    monkeypatch.setattr(os, "dup", spy("dup"))
    monkeypatch.setattr(os, "read", spy("read"))
    monkeypatch.setattr(pickle, "loads", spy("loads"))
    monkeypatch.setattr(socket, "_socket", types.SimpleNamespace(socket=spy("_socket")))
    monkeypatch.setitem(sys.modules, "array", types.SimpleNamespace(array=spy("array")))
    monkeypatch.setattr(tensor_slots, "_replaced", spy("_replaced"))
    monkeypatch.setattr(tensor_slots, "recv_fds", spy("recv_fds"))
    monkeypatch.setattr(harness_worker, "_control", spy("_control"))
    monkeypatch.setattr(harness_worker, "report", spy("report"))
    for name in ("read_part", "map_part", "late_payload", "_received"):
        monkeypatch.setattr(late_read, name, spy(name))
    monkeypatch.setattr(late_read, "_BOUND", [{"fd": None, "table": (), "receive": None,
                                               "report": spy("public _BOUND")}])
    monkeypatch.setattr(tensor_slots, "TensorSlot", type("TensorSlot", (tuple,), {
        "__new__": lambda cls, *args: seen.append("TensorSlot") or tuple.__new__(cls, *args)}))
    with pytest.raises(TypeError):
        late_read._DTYPES["float32"] = torch.float64
    monkeypatch.setattr(late_read, "_DTYPES", {"float32": spy("dtype")})
    monkeypatch.setitem(vars(tensor_slots), "NotImplemented", spy("NotImplemented"))
    handler = signal.signal(signal.SIGUSR1, peek)
    try:
        for index in (1, 0):
            trial = reading["late_payload"](index)
            assert trial["seed"] == index
            assert torch.equal(trial["inputs"][0], parts[index]["inputs"][0])
        assert reading["late_payload"](2) is None  # no such part: nothing asked
        assert peeked == [0, 0]  # handled, but only after the part was taken
        spare = raw_socket()
        os.dup2(spare.fileno(), late.fd)  # the late socket's number now names another file
        with pytest.raises(RuntimeError, match="replaced"):
            reading["late_payload"](0)
        spare.close()
    finally:
        signal.signal(signal.SIGUSR1, handler)
        late.close()
        os.close(said)
        os.close(told)
    assert asked == [1, 0] and seen == []


def test_no_private_function_reads_the_live_builtins_or_holds_a_writable_default():
    """Every function of the private copies takes its builtins from the copies' own (taken
    when they are made), never from the ``builtins`` module a submission can write to; and none
    has a list, dict or set as a default (a default is the public function's object, which the
    copy shares: review 46 found a dtype table there)."""
    import builtins
    import types

    from kernelmill.grade.worker.guards.private import _private_namespace

    copies = _private_namespace()
    checked = 0
    for space in copies.values():
        assert space["__builtins__"] is not vars(builtins)
        for value in list(space.values()):
            members = vars(value).values() if isinstance(value, type) else (value,)
            for member in members:
                function = getattr(member, "__func__", member)
                if type(function) is not types.FunctionType or function.__globals__ is not space:
                    continue
                checked += 1
                assert function.__builtins__ is space["__builtins__"], function.__qualname__
                defaults = [*(function.__defaults__ or ()),
                            *(function.__kwdefaults__ or {}).values()]
                assert not [d for d in defaults if type(d) in (list, dict, set)], \
                    function.__qualname__
    assert checked > 200


def test_the_private_copy_covers_every_module_of_the_worker_package():
    """Every module file under grade/worker/ is loaded with the package (a fresh interpreter
    that imports only the package) and so copied by ``_private_namespace``: a module left out
    would be one whose names a submission could rebind under the candidate's run."""
    from kernelmill.grade import worker

    root = Path(worker.__file__).parent
    files = {".".join(("kernelmill.grade.worker", *path.relative_to(root).with_suffix("").parts))
             .removesuffix(".__init__") for path in root.rglob("*.py")}
    done = subprocess.run(
        [sys.executable, "-c", "import json, kernelmill.grade.worker\n"
         "from kernelmill.grade.worker.guards.private import _package_modules\n"
         "print(json.dumps([module.__name__ for module in _package_modules()]))"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert set(json.loads(done.stdout.strip().splitlines()[-1])) == files


def test_the_last_output_is_held_alike_whoever_else_holds_it():
    """Red-team round 19 told scored calls apart by its last output's reference count (the
    timer keeps one more): ``_held_alike`` levels each object's count, so a forward reads the
    same number whether none, one or three others hold the output or its tensors."""
    import sys

    import torch
    from kernelmill.grade.worker.call import _held_alike

    def read(value):
        return sys.getrefcount(value), sys.getrefcount(value[0]), sys.getrefcount(value[1])

    seen = set()
    for others in (0, 1, 3):
        previous = (torch.zeros(2), torch.ones(2))
        holders = [previous, previous[0]] * others
        held = _held_alike(previous)
        seen.add(read(previous))
        assert held and len(holders) == 2 * others
    assert len(seen) == 1, seen


def test_the_extension_loaders_are_wrapped_for_a_source_that_never_names_them(tmp_path):
    """``load_inline`` reached through a name computed at run time is the wrapped loader too,
    which loads only what the compile worker built (here nothing: the text names no extension,
    so none was built). A submission that compiled its own native code at import (on a GPU a
    compiler may run until the first call) would load code whose text nobody scanned."""
    from kernelmill.grade import grader as G

    reference = (FIXTURES / "submissions" / "ref_scale_add.py").read_text()
    honest = (FIXTURES / "submissions" / "honest_scale_add.py").read_text()
    probe = honest.replace("class ModelNew", textwrap.dedent('''\
        import importlib
        _module = importlib.import_module("torch.utils." + "cpp_" + "ext" + "ension")
        _loader = getattr(_module, "load_" + "in" + "line")
        if not _loader.__module__.startswith("kernelmill."):
            raise RuntimeError("the loader is not wrapped")
        try:
            _loader(name="km_probe", cpp_sources="int f() { return 1; }", functions=["f"])
        except ImportError as exc:  # built nowhere it may be loaded from
            REFUSED = str(exc)
        except Exception as exc:  # noqa: BLE001 (no compiler may run)
            REFUSED = type(exc).__name__
        else:
            raise RuntimeError("an unscanned extension loaded")


        class ModelNew'''), 1)
    grader = G.Grader("cpu", policy=Policy(time=False, trials=1, static_first=False),
                      cache_root=str(tmp_path))
    verdict = grader.grade(reference, probe)
    # imported without an error: the loader was the wrapped one, and it loaded nothing
    assert verdict["error"] is None and verdict["compiled"], verdict["error"]
    assert verdict["hacks"] == ["forbidden_api"]  # the computed import, from the static scan


@pytest.mark.parametrize("snippet, needle", [
    # a class pattern's keyword is an attribute read of the subject (red-team round 21)
    ("match torch.cuda.graphs:\n    case object(gc=g):\n        pass", "reaches module gc"),
    ("match x:\n    case [object(__dict__=d)]:\n        pass", "uses .__dict__"),
    # the clock module as a library's attribute, and the clocks by their _ns names
    ("c = torch.distributed.distributed_c10d.time", "reaches module time"),
    ("t = clock.thread_time_ns()", "uses .thread_time_ns"),
    ("n = collector.get_count()", "uses .get_count"),
])
def test_static_scan_reads_pattern_keywords_and_every_clock(snippet, needle):
    """Between two forwards the grader's own work left a different garbage-collector count and
    CPU time on each path (scored, checked, unseen): a round-21 answer read ``gc`` through a
    class pattern and did half the work where the count said it was timed."""
    findings = static.scan("import torch\n" + snippet + "\n")
    assert any(needle in f for f in findings), findings


def test_an_objects_own_time_attribute_is_not_the_clock_module():
    assert static.scan("class A:\n    def f(self):\n        return self.time\n") == []


def test_the_zygotes_listing_of_watched_modules_serves_only_owners_left_as_they_were():
    """The zygote lists what the snapshot watches once (``zygote_warm``); a forked worker reuses
    an owner's entries only while its namespace holds the same values, so what changed after
    the fork (the worker's own hooks) is listed as it is now, and the snapshot is the one a
    fresh listing takes."""
    import json as json_module

    from kernelmill.grade.worker.guards import patches as worker

    def ids(snapshot):
        return {(id(owner), name, id(value)) for owner, name, value in snapshot[0]}

    dumps = json_module.dumps
    worker.zygote_warm()
    try:
        json_module.dumps = lambda *a, **k: "{}"  # rebound after the listing (a hook, say)
        warm = worker.snapshot_modules()
        assert (id(json_module), "dumps", id(json_module.dumps)) in ids(warm)
        worker._WARM.clear()
        assert ids(warm) == ids(worker.snapshot_modules())
        json_module.dumps = dumps  # put back: to the snapshot, a patch
        assert worker.patched_functions(warm) == ["json.dumps"]
        # a class a module gained after the listing is watched as a fresh listing watches it
        worker.zygote_warm()

        class Later(json_module.JSONEncoder):
            def encode(self, o):
                return "{}"

        Later.__module__ = "json"
        json_module.Later = Later
        owners = [(id(owner), lister) for owner, lister, _listed in worker._owners()]
        assert (id(Later), worker._class_members) in owners
        worker._WARM.clear()
        worker._WARM_CLASSES.clear()
        assert owners == [(id(owner), lister) for owner, lister, _listed in worker._owners()]
    finally:
        json_module.dumps = dumps
        vars(json_module).pop("Later", None)
        worker._WARM.clear()
        worker._WARM_CLASSES.clear()


def test_the_snapshots_own_part_is_kernelmills_and_the_builtins_bindings():
    """``snapshot_modules(with_own=True)`` makes the part checked at every timing report in the
    same pass: exactly the entries and module shapes whose owner is kernelmill's or builtins,
    those listed by the zygote (``zygote_warm``, as a forked worker finds them) among them."""
    from kernelmill.grade.worker.guards import patches

    patches.zygote_warm()
    try:
        snapshot, own = patches.snapshot_modules(with_own=True)
        warm_owned = [o for o, _lister, warm in patches._owners()
                      if warm and patches._owned_by_us(o)]
    finally:
        patches._WARM.clear()
        patches._WARM_CLASSES.clear()
    entries, _originals, shapes = snapshot
    assert len(warm_owned) > 20  # kernelmill's classes and modules, from the zygote's listing
    assert own[0] == tuple(e for e in entries if patches._owned_by_us(e[0]))
    assert own[2] == tuple(m for m in shapes if patches._owned_by_us(m[0]))
    assert own[1] == () and len(own[0]) > 100 and len(own[0]) < len(entries) / 4
    assert patches.patched_functions(own) == []


HOOKED_ALIASES = """
import json, sys, types
import torch
def main(payload):
    from kernelmill.grade.worker.observers import host_memory as H
    listed = len(H._WARM_ALIASES)
    reused = []
    still = H._still_warm
    def counted(warm, owner):  # how many modules' listings the rebind reuses
        found = still(warm, owner)
        reused.append(found is not None)
        return found
    H._still_warm = counted
    case = payload["case"]
    if case == "renamed":  # a listed module's name renamed, its values left in place
        dlpack = sys.modules["torch.utils.dlpack"]
        items = [("renamed" if k == "to_dlpack" else k, v) for k, v in vars(dlpack).items()]
        vars(dlpack).clear()
        vars(dlpack).update(items)
    if case == "retargeted":  # a hooked name bound to a function a listed module binds too
        torch.from_numpy = json.dumps
    # bound after the zygote's listing: a new module, and a listed one given a new name
    late = types.ModuleType("late_alias")
    late.numpy_view = torch._C._to_dlpack
    sys.modules["late_alias"] = late
    json.from_numpy_alias = torch.from_numpy
    originals = {id(site[3]): site[3] for site in H._hook_sites()}
    def bound():  # every module name still bound to a function the hooks replace
        return sorted(f"{n}.{k}" for n, m in list(sys.modules.items())
                      if isinstance(m, types.ModuleType)
                      for k, v in list(vars(m).items()) if originals.get(id(v), originals) is v)
    before = bound()
    H._install_host_access_hooks()
    return {"listed": listed, "before": before, "after": bound(), "reused": sum(reused),
            "late": late.numpy_view is H._ORIGINALS.get("late_alias.numpy_view", (0, 0, 1))[2],
            "json": json.from_numpy_alias is torch.from_numpy}
"""


@pytest.mark.parametrize("case", ["plain", "renamed", "retargeted"])
def test_every_alias_of_a_hooked_function_is_hooked_in_a_warm_worker(case):
    """A forked worker rebinds the aliases the zygote listed and looks through the namespaces of
    the modules changed since (or new): no module is left binding a function the host-access
    hooks replace (``torch.utils.dlpack.to_dlpack`` is ``torch._C._to_dlpack``), whether it
    was there at the zygote's listing or bound after it, under a name renamed since (its
    value in place), or where a hooked name was bound to another module's function (the
    zygote's listings then serve no module)."""
    from kernelmill.validate.harness import run_in_worker

    result = run_in_worker("kernelmill.validate.harness:run_source",
                           {"source": HOOKED_ALIASES, "case": case}, timeout_s=60, device="cpu")
    assert result.ok, result.error
    value = result.value
    assert result.warm and value["listed"] > 1000, value["listed"]
    assert "late_alias.numpy_view" in value["before"] and \
        "json.from_numpy_alias" in value["before"]
    assert any(name.startswith("torch.utils.dlpack.") for name in value["before"])
    if case == "renamed":
        assert "torch.utils.dlpack.renamed" in value["before"]
    if case == "retargeted":
        assert "json.dumps" in value["before"]
    assert value["after"] == [] and value["late"] and value["json"], value
    # the listings served every module left as the zygote saw it, and none once the hooked
    # functions were not the zygote's
    assert (value["reused"] == 0) if case == "retargeted" else (value["reused"] > 1000), value


@pytest.mark.parametrize("snippet, needle", [
    # a positional class pattern reads the names in __match_args__, computable at run time
    # (red-team round 22: with a metaclass's __instancecheck__, a getattr by computed name)
    ("match torch.cuda.graphs:\n    case C(g):\n        pass", "positional class pattern"),
    ("class Yes(type):\n    pass", "is a metaclass"),
    ("class S(metaclass=M):\n    pass", "has a metaclass"),
    ("class S:\n    __match_args__ = ('x',)", "names __match_args__"),
    ("S = M('S', (), {'__match_args__': ('x',)})", "names __match_args__"),
    ("S = type('S', (), {})", "type with three arguments"),
    # a keyword read nested in a sequence pattern: the clock module whatever its subject
    ("match [torch.distributed]:\n    case [object(time=t)]:\n        pass", "reaches module time"),
])
def test_static_scan_judges_every_read_a_class_pattern_can_make(snippet, needle):
    findings = static.scan("import torch\n" + snippet + "\n")
    assert any(needle in f for f in findings), findings


def test_a_builtin_class_pattern_that_matches_itself_is_not_a_read():
    assert static.scan("def f(n):\n    match n:\n        case int(v):\n            return v\n") == []


def test_a_launch_counts_only_if_its_grid_has_a_program():
    """Red-team round 25 kept one Triton launch a call with a grid of zero programs while it
    served a cached answer: a launch counts once it ran, and only if its grid had a program
    (a callable grid's result is read as Triton calls it, once)."""
    import numpy as np

    from kernelmill.grade.worker.observers.launches import _any_program, _GridSeen

    assert _any_program([(4,)]) and _any_program([(2, 3, 1)]) and _any_program([8])
    assert not _any_program([(0,)]) and not _any_program([(4, 0)]) and not _any_program([0])
    assert not _any_program([(np.int64(0),)]) and _any_program([(np.int64(3),)])
    assert _any_program([])  # not known: counted, as before
    # an extent that is no integer is not read: not counted (a 0-d tensor worth 0 ran nothing)
    assert not _any_program([(torch.tensor(0),)]) and not _any_program([(1.0,)])

    # a subclass of int is not read either (red-team round 26: ``Z(0)`` whose comparisons lie)
    class Z(int):
        def __gt__(self, other):
            return True

    assert not _any_program([(Z(0),)]) and not _any_program([(Z(5),)])

    class FakeNumpy:  # a class that only says it is NumPy's
        __module__ = "numpy"

        def __index__(self):
            return 0

        def __int__(self):
            return 7

    assert not _any_program([(FakeNumpy(),)])
    shape: list = []
    calls = []
    grid = _GridSeen(lambda meta: calls.append(meta) or (meta["n"] // 1024,), shape)
    assert grid({"n": 512}) == (0,) and len(calls) == 1 and not _any_program(shape)


def test_a_ghost_call_that_is_right_without_its_kernels_is_a_hack():
    """The ghost calls skip the candidate's Triton launches; one on the inputs of the call before
    (``ghost_seen``) catches a forward that serves the answer it gave last, unless the answer
    sits where the call before returned its own (an honest kept output buffer)."""
    from kernelmill.grade.judge import _ghost_check

    answer = torch.arange(4.0)
    trials = [{"outputs": [answer]}]

    def judged(ghost, key="ghost_seen", policy=None):
        hacks, checks = [], {}
        _ghost_check(ghost, key, trials, policy or Policy(), None, checks,
                     lambda code, why: hacks.append((code, why)), True)
        return [code for code, _ in hacks], checks

    right, wrong = [answer.clone()], [torch.full((4,), float("nan"))]
    cached = {"trial": 0, "skipped": 1, "ext_calls": 0, "reuses_previous": False,
              "outputs": right}
    assert judged(cached)[0] == ["ghost_kernels"]
    assert judged({**cached, "outputs": wrong})[0] == []
    # the kept buffer of an honest forward: not judged on the inputs of the call before
    assert judged({**cached, "reuses_previous": True})[0] == []
    assert judged({**cached, "reuses_previous": True}, key="ghost")[0] == ["ghost_kernels"]
    # unless that memory was filled with NaN before the ghost call: then an answer there was
    # put back by something other than the kernels
    assert judged({**cached, "reuses_previous": True, "previous_poisoned": True})[0] == \
        ["ghost_kernels"]
    # nothing launched at all and still right; an extension's calls are not skipped
    assert judged({**cached, "skipped": 0})[0] == ["ghost_kernels"]
    assert judged({**cached, "skipped": 0, "ext_calls": 2})[0] == []
    assert judged({**cached, "skipped": 0}, policy=Policy(require_custom_kernel=False))[0] == []
    assert judged({**cached, "trial": 5})[0] == [] and judged(None)[0] == []


def test_the_call_befores_outputs_are_poisoned_in_place_before_a_ghost_call():
    """Every byte behind the last call's output tensors becomes 0xFF (NaN in floating point, -1
    in integers), the whole storage of a view included, so a kept buffer holds no answer."""
    from kernelmill.grade.worker.probes import _poison_outputs

    kept = torch.arange(12.0)
    view, counts = kept[2:6], torch.arange(5)
    assert _poison_outputs((view, counts)) is True
    assert torch.isnan(kept).all() and (counts == -1).all()
    half = torch.ones(3, dtype=torch.float16)
    assert _poison_outputs(half) and torch.isnan(half).all()
    assert _poison_outputs(None) is False and _poison_outputs((1, "a")) is False


def test_a_cpu_ghost_calls_fresh_memory_holds_no_earlier_answer():
    """On the CPU a tensor's memory comes from malloc, whose freed blocks are merged, split and
    handed back in no order a few poisoned blocks can rely on: an honest kernel's skipped launch
    once left its ``empty_like`` holding the answer a freed block kept. Within the ghost call every
    block handed out comes filled with all-one bytes instead, whatever its size; after it,
    memory is handed out as it was."""
    from kernelmill.grade.worker.probes import _MALLOPT, _fresh_host_memory_filled

    if _MALLOPT is None:
        pytest.skip("the C library has no mallopt (not glibc)")
    for n in (512, 4096, 65536, 1 << 20):
        answers = [torch.full((n,), 7.0) for _ in range(16)]
        del answers
        with _fresh_host_memory_filled():
            fresh = [torch.empty(n) for _ in range(16)]
            counts = torch.empty(n, dtype=torch.int64)
        assert all(torch.isnan(t).all() for t in fresh), n
        assert (counts == -1).all(), n
        del fresh, counts
    kept = torch.full((16384,), 7.0)
    place = kept.data_ptr()
    del kept
    again = torch.empty(16384)
    if again.data_ptr() == place:  # the same block back: as it was left (bar malloc's own
        assert (again == 7.0).float().mean() > 0.99  # few words at its start), not filled
    with _fresh_host_memory_filled(False):
        assert not torch.isnan(torch.zeros(4096)).any()


def test_reading_a_floating_point_inputs_elements_on_the_host_is_host_compute():
    """Red-team round 25 keyed a cache of its last answer on 8 input values read with
    ``.item()`` (within the scalar-read allowance). An element of a floating-point input of
    more than one element read on the host, by any route to ``_local_scalar_dense``, is
    counted; a scalar read of anything else is not."""
    from kernelmill.grade.worker.observers.optrace import _OpTrace, _spans

    x, y, index = torch.randn(64), torch.randn(64), torch.arange(8)
    tracer = _OpTrace(_spans([x, y]))
    with tracer:
        x[3].item()
        float(y[0])
        bool(x[1] > 0)  # a comparison's truth carries a bit of the input: a read since round 27
        index[2].item()
        # a copy of the inputs' elements is read as the inputs (red-team round 26)
        sampled = x[::16].clone()
        sampled[1].item()
        moved = torch.empty(4)
        moved.copy_(y[:4])
        moved[0].item()
    assert tracer.input_reads == 5
    assert any("_local_scalar_dense" in op for op in tracer.ops)

    # red-team round 27: an element carried by any op is watched, not only by a copy op: a
    # fill of a buffer of the forward's own (``fill_.Tensor``), ``lift_fresh_copy``, a view of
    # the carried copy, a bit cast, and a storage handed to ``set_``
    tracer = _OpTrace(_spans([x, y]))
    with tracer:
        kept = torch.zeros(6)
        kept[0].fill_(x[7])
        kept[0].item()
        lifted = torch.ops.aten.lift_fresh_copy(x[7::16])
        lifted[1].item()
        lifted.view(torch.int32)[2].item()
        alias = torch.empty(0).set_(lifted.untyped_storage())
        del lifted
        alias[0].item()
        own = torch.arange(4.0)  # memory of its own, never given an input's value
        own[1].item()
    assert tracer.input_reads == 4


def test_every_copy_op_the_taxonomy_allows_marks_an_output_made_by_copy():
    """An output made by a copy (not by a kernel) is ``output_by_copy``; the worker's list of
    copy ops covers every ATen copy the op taxonomy allows (``lift_fresh_copy`` was missing)."""
    from kernelmill.core.taxonomy import COPY_OPS
    from kernelmill.grade.worker.observers.optrace import _COPY_OPS, _OpTrace, _spans

    # composite names (contiguous, to, type_as) reach the dispatcher as _to_copy or clone
    assert {op for op in COPY_OPS if op not in ("contiguous", "to", "type_as", "_copy")} \
        <= _COPY_OPS
    kept = torch.randn(16)
    tracer = _OpTrace()
    with tracer:
        out = torch.ops.aten.lift_fresh_copy(kept)
    assert _spans([out])[0] in tracer.copy_spans


def test_the_op_traces_tables_cannot_be_emptied_or_rebound_from_its_module(monkeypatch):
    """In the candidate's run the trace's dispatch method reads the public module's globals
    (torch wraps it): its tables are immutable and bound into the methods that read them, so
    emptying or rebinding them there changes nothing the trace sees."""
    import kernelmill.grade.worker.observers.optrace as optrace

    with pytest.raises(AttributeError):
        optrace._COPY_OPS.clear()
    with pytest.raises(TypeError):
        optrace._GEMM_INNER["mm"] = None
    monkeypatch.setattr(optrace, "_COPY_OPS", frozenset())
    monkeypatch.setattr(optrace, "_GEMM_INNER", {})
    monkeypatch.setattr(optrace, "_FLOP_FORMULAS", {})
    kept, a = torch.randn(16), torch.randn(8, 1)
    tracer = optrace._OpTrace()
    with tracer:
        out = kept.clone()
        torch.mm(a, torch.randn(1, 8))
    assert optrace._spans([out])[0] in tracer.copy_spans
    assert tracer.thin_gemms and tracer.flops > 0


def test_memory_a_carried_value_left_is_not_watched_once_its_tensor_is_gone():
    """What an op wrote from the inputs is watched while the memory it wrote is held: the
    allocator hands that memory out again, and a flag an honest forward reads there later is
    no key to the inputs. A view of it keeps the watch (the storage lives on)."""
    import gc

    from kernelmill.grade.worker.observers.optrace import _OpTrace, _spans

    x = torch.randn(1024)
    tracer = _OpTrace(_spans([x]))
    with tracer:
        carried = x * 2.0
        view = carried[3:5]
        assert tracer._touches_watched(carried)
        entries = len(tracer.derived)
        del carried
        gc.collect()
        assert tracer._touches_watched(view)  # the memory is still held
        del view
        gc.collect()
    assert entries >= 1 and all(ref() is None for _lo, _hi, ref in tracer.derived)


def test_captured_calls_that_launch_unalike_fail_the_graph_check():
    """The timed graph's kernels are split into calls by count; a forward that launches more,
    smaller pieces in some captured calls and none in another keeps that split even while a
    call does nothing. Each captured call's launches are counted at capture: any two captured
    calls that launched differently fail."""
    from kernelmill.grade.judge import _graph_calls_even
    from kernelmill.grade.worker.probes import _uneven_launches

    assert _uneven_launches([(1, 0)] * 9) == {} and _uneven_launches([(2, 0)]) == {}
    off = _uneven_launches([(3, 0), (3, 0), (0, 0), (3, 0)])["even_launches_off"]
    assert off == {"call": 2, "found": [0, 0], "first": [3, 0]}
    facts = {"method": "cuda_graph", "calls": 4, "even_calls_us": [50.0, 50.0, 50.0, 50.0],
             "even_overlap_us": 0.0, "even_launches_off": off}
    hacks, checks = [], {}
    _graph_calls_even(facts, Policy(), checks, lambda code, why: hacks.append((code, why)))
    assert hacks and "when captured" in hacks[0][1] and not checks["graph_calls_even"]["passed"]


def test_interpreted_launches_from_several_threads_take_turns():
    """Triton's interpreter patches triton.language for the length of a launch: two threads
    launching at once unpatched each other ("Did you forget to add @triton.jit"), so a
    submission's own thread could end its run in whatever stage it was, losing what had been
    observed (a background thread's hack went unreported). Behind the launch hook they take
    turns."""
    code = textwrap.dedent("""
        import os, threading
        os.environ["TRITON_INTERPRET"] = "1"
        import torch, triton, triton.language as tl
        from kernelmill.grade.worker.observers.launches import _install_triton_hook
        _install_triton_hook()

        @triton.jit
        def scale_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
            o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = o < n
            tl.store(out_ptr + o, tl.load(x_ptr + o, mask=m) * 2.0 + tl.load(y_ptr + o, mask=m),
                     mask=m)

        x, y, errors = torch.randn(4096), torch.randn(4096), []

        def loop():
            for _ in range(30):
                out = torch.empty_like(x)
                try:
                    scale_add[(4,)](x, y, out, 4096, BLOCK=1024)
                    assert torch.equal(out, 2.0 * x + y)
                except Exception as exc:
                    errors.append(repr(exc)[:120])

        threads = [threading.Thread(target=loop) for _ in range(3)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print(len(errors), errors[:1])
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[0] == "0", run.stdout


def test_compute_under_a_copys_name_outside_the_calls_is_stray():
    """An op the submission defines as an overload of a copy (``aten::copy_.mine``) is named
    ``aten::copy_`` by the profiler, a copy's name; its compute runs nested inside it. Outside
    the calls every op counts, nested ones too (a review's case: run from a hook between calls,
    it computed unseen). The harness's own copies, clones and conversions stay copies."""
    from kernelmill.grade.policy import compute_ops
    from kernelmill.grade.witness import Witness

    def stray_compute(work) -> list:
        x = torch.randn(64, 64)
        witness = Witness("cpu")
        witness.start()
        with witness.call():
            (x * 2).sum()
        work(x)
        witness.stop()
        assert witness.per_call() is not None and witness.error is None
        return compute_ops(sorted(witness.stray), [])

    def harness(x):  # what the harness runs between calls: loads, looks, keeps
        buffer = torch.empty_like(x)
        buffer.copy_(x)
        x.to(torch.float64).clone().contiguous()
        x.t().reshape(-1).view(torch.int32)
        buffer.fill_(0.0)

    assert stray_compute(harness) == []
    lib = torch.library.Library("aten", "FRAGMENT")
    try:
        lib.define("copy_.kmtest(Tensor a, Tensor b) -> Tensor")
        lib.impl("copy_.kmtest", lambda a, b: (a @ b).relu(), "CompositeExplicitAutograd")
        ran = stray_compute(lambda x: torch.ops.aten.copy_.kmtest(x, x))
    finally:
        lib._destroy()
    assert {"aten.mm", "aten.relu"} <= {".".join(op.split(".")[:2]) for op in ran}, ran


def test_a_mode_left_by_a_scored_call_cannot_answer_the_input_check():
    """A forward that marks its inputs in scored calls and pushes a torch-function mode before
    it returns, to answer the check between timed calls with the bytes sent (its copies go
    through ``Tensor.to``), popping it in its next call (a review's case: modes were read
    around checked calls, after the import and at the end only). The check's copies run with
    no torch-function handler, and a mode active there is reported."""
    import types

    from kernelmill.grade.worker.call import _Run, _unchanged_fact
    from torch.overrides import TorchFunctionMode

    sent = torch.randn(4096)
    marked = sent.clone()
    marked[7] = 1e6  # the scored calls' mark

    class Answer(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.to:
                return sent.clone()  # "the bytes sent"
            return func(*args, **(kwargs or {}))

    with Answer():
        assert _unchanged_fact(marked, sent)["same"] is False
        run = types.SimpleNamespace(changed_while_timed=[], trials=[{"inputs": [sent]}],
                                    placements=[[sent.clone()]])
        _Run.check_timed_inputs(run)
    assert run.changed_while_timed and "mode was active" in run.changed_while_timed[0]
    assert _unchanged_fact(marked, sent)["same"] is False
    assert _unchanged_fact(sent.clone(), sent)["same"] is True


@pytest.mark.parametrize("answer", ["go", "stop"])
def test_a_compile_steps_aside_and_waits_at_its_point(monkeypatch, answer):
    """The compile wrapper (``launches._install_compile_aside``), while the task has it on: the
    ``aside`` report (its writer synchronises the device first), the compile, then the point's
    report and the parent's answer before anything else; a ``stop`` there is kept for the task
    (checked, not timed). Off, while a graph is captured, or within an aside: Triton's own."""
    import sys

    from kernelmill.grade.worker.guards.originals import _ORIGINALS
    from kernelmill.grade.worker.observers import launches as L
    from kernelmill.validate.harness_worker import ASIDE_REPORTS, FRAME_EVENT
    from triton.runtime import jit

    monkeypatch.setattr(jit.JITFunction, "_do_compile", jit.JITFunction._do_compile)
    monkeypatch.setitem(_ORIGINALS, "JITFunction._do_compile", None)
    monkeypatch.setitem(L.COMPILE_ASIDE, "on", None)
    order = []
    hook_on = [True]
    sys.addaudithook(lambda event, args: order.append(bytes(args[1]).decode())
                     if hook_on[0] and event == FRAME_EVENT else None)
    capturing = [False]
    assert L._install_compile_aside(lambda: None, lambda: capturing[0], lambda: 0)
    wrapper = jit.JITFunction._do_compile

    class NotAKernel:  # Triton's compile fails on it at once: the point is still reached
        @property
        def device_caches(self):
            order.append("compile")
            raise LookupError("no such device")

    def compile_once():
        with pytest.raises(LookupError):
            wrapper(NotAKernel(), "key", None, 0, {}, None, {}, False)

    compile_once()  # off: Triton's own, nothing reported
    assert order == ["compile"]
    order.clear()
    stopped, depth = [False], [0]
    L.COMPILE_ASIDE["on"] = {"receive": lambda: order.append("answer") or answer + "\n",
                             "stopped": stopped, "depth": depth}
    capturing[0] = True
    compile_once()
    assert order == ["compile"]  # a graph being captured: no synchronize, no aside
    capturing[0] = False
    order.clear()
    compile_once()
    hook_on[0] = False
    assert order == [ASIDE_REPORTS[0].decode(), "compile", ASIDE_REPORTS[1].decode(),
                     "answer"], order
    assert stopped == [answer != "go"] and depth == [0]
