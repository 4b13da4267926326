"""The trusted parent's judgement: compare a candidate run with the reference run, find hacks.

Inputs are the two ``WorkerResult``s (the reference's inputs and outputs never entered the
candidate's process except the inputs themselves) and the static scan. Everything numeric is
recomputed here from raw tensors; nothing the candidate process concluded is believed.

Hack codes (any one makes the verdict incorrect with reward 0):

``forbidden_api``       the source reaches for introspection, processes, threads, files, patching
``channel_tamper``      unauthenticated or extra frames on the result channel, or a frame asked
                        for by the submission's code (a second run, its own report)
``leaked_process``      a process of the run escaped its process group / outlived forward
``tensor_subclass``     forward returned a ``torch.Tensor`` subclass (lazy or disguised result)
``output_aliases_input``  the output shares storage with an input
``input_mutated``       an input differs after the call from the parent's copy
``cached_output``       a call returned the bytes of an earlier call made on other inputs
``inconsistent``        the same inputs gave different answers (state kept between calls)
``background_thread``   a thread was started during forward or is alive after it
``patched_function``    timing/comparison/copy functions replaced, or a torch mode left active
``no_custom_kernel``    a forward call launched no Triton kernel and called no extension
``torch_compute``       PyTorch compute ops in forward beyond the policy's allowance
``timing_behaviour``    fewer launches while timed than while checked, wrong answers then (the
                        replayed CUDA graph included), or a time below the parent's clock, or
                        right and fast only on inputs seen before (new ones shown while timed)
``impossible_speed``    faster than the device's memory bandwidth allows for the problem's bytes
``host_compute``        tensor elements handed to Python in forward (map_/apply_/tolist/bytes),
                        or device-to-host copies beyond the scalar-read allowance
``ghost_kernels``       forward rerun with the candidate's Triton launches skipped still gave the
                        right answer: its kernels did not compute it
``trace_evaded``        the dispatch-key state changed inside forward, or the op witness (the
                        profiler session over every call) was stopped or lost calls
``kernelguard``         GPU MODE's rule-based detector (optional ``kernelguard``) calls the
                        source hacked (``grade.static.kernelguard_findings``)
"""
from __future__ import annotations

import math
import re
import statistics
from typing import Any

import torch
from kernelmill.core.devices import device_peaks
from kernelmill.core.record import Verdict
from kernelmill.validate.harness import WorkerResult
from kernelmill.validate.harness_worker import ChannelTamperError, ResultGuardError
from kernelmill.validate.measure import tensor_digest
from kernelmill.validate.window import verdict_timing

from .policy import (
    LIBRARY_KERNEL,
    VENDOR_KERNEL,
    Policy,
    compute_ops,
    custom_ops,
    op_base,
    qualified_op,
    reference_compute_ops,
)
from .static import KERNELGUARD_PREFIX, VENDOR_PREFIX, kernel_base, qualified_kernel_name
from .witness import UNATTRIBUTED, op_qualname

COMPILE_STAGES = ("startup", "import target", "run target", "setup", "import", "init",
                  "compile")
# The stages of the candidate's calls, where no process may start (on CUDA the first call may
# still run Triton's ptxas: every kernel a forward uses must compile there)
CALL_STAGES = ("forward", "forward refill", "forward repeat", "timing")
# A reported mean per-call time below this fraction of what the parent's own clock saw in a
# back-to-back loop is not believed. Graph replays back to back take the graph's time; CPU calls
# on shared cores are noisier (a forged report is off by orders of magnitude).
CLOCK_MARGIN = {"cuda_graph": 0.5, "perf_counter": 0.05}
# The device each timing method belongs to. A candidate's worker that reports a method unknown
# here, or one of another device than the reference's in the same window, is flagged: its report
# chose the wall-clock margin (an unknown method had none, so any speed passed; red-team round 5
# claimed 132x for PyTorch's own matmul that way).
METHOD_DEVICE = {"cuda_graph": "cuda", "cuda_events": "cuda", "perf_counter": "cpu"}


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def bitwise_equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
        return False
    if not isinstance(a, torch.Tensor):
        return a == b
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_flat_bytes(a),
                                                                       _flat_bytes(b))


class Unchanged:
    """Is an input after forward the one the parent sent? The worker sends whether its bytes
    are those sent (``{"same": bool, "dtype", "shape"}``), a digest (``measure.tensor_digest``)
    or the value; each sent tensor is digested here once, where a digest came."""

    def __init__(self):
        self._digests: dict[int, tuple[torch.Tensor, dict]] = {}

    def __call__(self, before: Any, after: Any) -> bool:
        if not (isinstance(before, torch.Tensor) and isinstance(after, dict)):
            return bitwise_equal(before, after)
        if "same" in after:
            return after["same"] is True and after.get("dtype") == str(before.dtype) and \
                after.get("shape") == list(before.shape)
        if id(before) not in self._digests:  # the tensor is kept: its id stays its own
            self._digests[id(before)] = (before, tensor_digest(before.detach().cpu()))
        return self._digests[id(before)][1] == after


def compare(expected: list, got: list | None, atol: float, rtol: float, *,
            count: bool = True) -> tuple[bool, str]:
    """Do ``got`` outputs match ``expected`` within tolerance? (ok, reason when not).
    ``count=False``: the answer alone, settled at the first element found off (a ghost call's
    output, garbage in every element when honest, is not compared to its end in float64)."""
    if got is None:
        return False, "no tensor outputs"
    if len(expected) != len(got):
        return False, f"{len(got)} outputs, expected {len(expected)}"
    for index, (e, g) in enumerate(zip(expected, got)):
        if not isinstance(e, torch.Tensor):
            ok = isinstance(g, (int, float, bool)) and math.isclose(float(g), float(e),
                                                                    rel_tol=rtol, abs_tol=atol)
            if not ok:
                return False, f"output {index}: {g!r} != {e!r}"
            continue
        if not isinstance(g, torch.Tensor):
            return False, f"output {index} is {type(g).__name__}, not a tensor"
        if tuple(g.shape) != tuple(e.shape):
            return False, f"output {index} shape {tuple(g.shape)}, expected {tuple(e.shape)}"
        if g.dtype != e.dtype:
            return False, f"output {index} dtype {g.dtype}, expected {e.dtype}"
        if not (e.is_floating_point() or e.is_complex()):
            if not torch.equal(g, e):
                return False, f"output {index}: {int((g != e).sum())} elements differ"
            continue
        if e.is_complex():
            e, g = torch.view_as_real(e.resolve_conj()), torch.view_as_real(g.resolve_conj())
        bad, worst = _off_elements(e.reshape(-1), g.reshape(-1), atol, rtol, count)
        if bad and not count:
            return False, f"output {index}: elements off (max abs error {worst:.3g} among the first)"
        if bad:
            return False, (f"output {index}: {bad}/{e.numel()} elements off "
                           f"(max abs error {worst:.3g}, atol {atol:g}, rtol {rtol:g})")
    return True, ""


COMPARE_CHUNK = 1 << 22  # elements per pass: bounded temporaries, cache-sized work


def _off_elements(e: torch.Tensor, g: torch.Tensor, atol: float, rtol: float,
                  count: bool = True) -> tuple[int, float]:
    """How many elements of ``g`` are off ``e`` (|g - e| <= atol + rtol * |e| in float64;
    non-finite values match only exactly: NaN for NaN, the same infinity), and the largest
    finite error among them. A first pass in the tensors' own precision (float32 at least)
    settles every element that passes with room to spare; only the rest are checked in
    float64, so an honest output is compared in one cheap pass. Without ``count`` the first
    unsure elements of a chunk are checked first, and an element off there ends the count."""
    work = torch.float64 if e.dtype == torch.float64 else torch.float32
    bad, worst = 0, None
    for start in range(0, e.numel(), COMPARE_CHUNK):
        ec = e[start:start + COMPARE_CHUNK].to(work)
        gc = g[start:start + COMPARE_CHUNK].to(work)
        room = ec.abs().mul_(rtol).add_(atol)
        if work == torch.float32:
            room.mul_(1 - 1e-5)  # float32 rounding of the bound and the difference
        # NaN compares false here, an infinite bound (an infinite reference) is never room:
        # both go to the exact pass
        unsure = ~(((gc - ec).abs_() <= room) & (room < math.inf))
        if not bool(unsure.any()):
            continue
        if not count:
            at = int(unsure.to(torch.uint8).argmax())  # the first unsure element
            near = slice(at, at + FIRST_UNSURE)
            found, largest = _exact_off(ec[near][unsure[near]], gc[near][unsure[near]], atol,
                                        rtol)
            if found:
                return found, largest if largest is not None else float("nan")
        found, largest = _exact_off(ec[unsure], gc[unsure], atol, rtol)
        bad += found
        if largest is not None:
            worst = max(worst or 0.0, largest)
        if found and not count:
            break
    return bad, float("nan") if worst is None else worst


FIRST_UNSURE = 1024  # unsure elements checked first when only the answer counts


def _exact_off(e: torch.Tensor, g: torch.Tensor, atol: float, rtol: float
               ) -> tuple[int, float | None]:
    """The float64 pass over elements the first pass left unsure: how many are off, and the
    largest finite error among them (None: no finite one)."""
    e64, g64 = e.double(), g.double()
    same_special = (torch.isnan(e64) & torch.isnan(g64)) | (torch.isinf(e64) & (e64 == g64))
    diff = (g64 - e64).abs()
    close = torch.isfinite(e64) & torch.isfinite(g64) & (diff <= atol + rtol * e64.abs())
    off = ~(same_special | close)
    found = int(off.sum())
    if not found:
        return 0, None
    finite = diff[off & torch.isfinite(diff)]
    return found, float(finite.max()) if finite.numel() else None


def usable_trials(reference: dict) -> tuple[list[dict], list[dict]]:
    """The reference's usable trials: (checked ones, hidden ones). A hidden trial's inputs are
    shown to the candidate only once, inside its timing window (``Policy.unseen_trials``)."""
    usable = [t for t in reference.get("trials") or [] if t["usable"]]
    return ([t for t in usable if not t.get("hidden")], [t for t in usable if t.get("hidden")])


def reference_fault(reference: dict) -> str | None:
    """Why a reference run cannot be graded against (its forward returned something other than
    tensors: None, an int, nothing), or None. That is the problem's fault, never a candidate's."""
    for index, trial in enumerate(reference.get("trials") or []):
        outputs = trial.get("outputs") or []
        kinds = [type(o).__name__ for o in outputs if not isinstance(o, torch.Tensor)]
        if not outputs or kinds:
            what = ", ".join(kinds) if kinds else "no output"
            return (f"reference forward returned {trial.get('structure')} ({what}) on trial "
                    f"{index}; a problem's forward must return tensors")
    return None


def bandwidth_gbs(info: dict) -> float | None:
    """Peak DRAM bandwidth: from the device's memory clock and bus width when torch reports
    them, else the device table (``core.devices.PEAKS``); None for a device it does not know
    (no bound rather than a wrong one)."""
    if info.get("bandwidth_gbs"):
        return float(info["bandwidth_gbs"])
    name = info.get("name")
    if not name:
        return None
    peaks, source = device_peaks(name)
    return peaks["bandwidth"] / 1e9 if source.startswith("table:") else None


def roofline_ms(reference: dict, record: dict | None) -> float | None:
    validation = (record or {}).get("validation") or {}
    if validation.get("roofline_ms"):
        return float(validation["roofline_ms"])
    info = reference.get("info", {})
    if not str(info.get("device", "")).startswith("cuda"):
        return None
    bandwidth = bandwidth_gbs(info)
    if not bandwidth:
        return None
    trial = reference["trials"][0]
    tensors = [*trial["inputs"], *trial["outputs"], *reference.get("state_dict", {}).values()]
    nbytes = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    return nbytes / (bandwidth * 1e9) * 1e3


def judge(reference: dict, ref_run: WorkerResult, cand_run: WorkerResult, *, policy: Policy,
          findings: list[str], record: dict | None = None, window: dict | None = None,
          own_kernels: frozenset | None = None) -> dict:
    """The verdict (without reward): compiled, correct, hacks, timings, checks, error.

    ``window`` is the parent's timing window (``validate.window.run_window``) in which the
    reference and this candidate were timed; speedups come only from it. ``own_kernels``: the
    ``__global__`` functions the candidate's source defines (``static.declared_kernels``)."""
    hacks: dict[str, str] = {}
    checks: dict[str, dict] = {}
    verdict: dict[str, Any] = {"compiled": False, "correct": False, "hacks": [],
                               "speedup_vs_eager": None, "speedup_vs_inductor": None,
                               "error": None, "stage_reached": "parsed", "checks": checks,
                               "timings": {}, "sandbox": cand_run.sandbox}

    def hack(code: str, detail: str) -> None:
        hacks.setdefault(code, detail)

    guard = [f for f in findings if f.startswith(KERNELGUARD_PREFIX)]
    vendor = [f for f in findings if VENDOR_PREFIX in f]
    own = [f for f in findings if f not in guard and f not in vendor]
    # a vendor call is judged by its class (a cuDNN call in a GEMM problem is not allowed)
    vendor = [f for f in vendor if not policy.allows_vendor_kernel(
        f.split(VENDOR_PREFIX, 1)[1].split()[-1], reference.get("ops", []))]
    if own and policy.static_scan:
        hack("forbidden_api", "; ".join(own[:5]))
    if guard and policy.static_scan:
        hack("kernelguard", "; ".join(guard[:3]))
    if vendor and policy.static_scan:
        hack("torch_compute", f"vendor-library calls in native source ({policy.preset} "
             f"policy): {'; '.join(f.split(VENDOR_PREFIX, 1)[1].strip() for f in vendor[:3])}")
    if cand_run.tampered:
        hack("channel_tamper", "frames on the result channel failed authentication")
    if cand_run.leaked_processes:
        hack("leaked_process", f"{cand_run.leaked_processes} process(es) escaped the group")

    facts = cand_run.value if cand_run.ok else None
    if facts is None:
        error = _explained(cand_run.error or {"stage": "?", "message": "no result"})
        verdict["error"] = error
        message = str(error.get("message") or "")
        if message.startswith(f"{ResultGuardError.__name__}: "):
            hack("patched_function", message.split(": ", 1)[1][:300])
        if message.startswith(f"{ChannelTamperError.__name__}: "):
            hack("channel_tamper", message.split(": ", 1)[1][:300])
        reached = [s for s, _ in cand_run.stages]
        verdict["compiled"] = bool(set(reached) & {"forward", "forward refill", "timing"}) or \
            error.get("stage") not in COMPILE_STAGES
        if verdict["compiled"]:
            verdict["stage_reached"] = "constructed"
        elif "init" in reached:
            verdict["stage_reached"] = "parsed"
        return _finish(verdict, hacks)

    verdict["compiled"] = True
    verdict["confinement"] = facts.get("confinement")
    verdict["downgrades"] = downgrades(facts.get("confinement"))
    if (facts.get("witness") or {}).get("unavailable"):
        verdict["downgrades"].append(f"op witness: {facts['witness']['unavailable']}")
    verdict["stage_reached"] = "ran"
    trials, hidden = usable_trials(reference)
    ref_device = reference["trials"][0]["device_types"]
    calls = facts["calls"]
    shaped = True
    all_correct = True
    unchanged = Unchanged()
    for call in calls:
        trial = trials[call["trial"]]
        name = f"{call['kind']}:{call['trial']}"
        if call.get("subclass"):
            other = [t for t in call["types"] if t != "torch.Tensor"]
            hack("tensor_subclass", f"{name} returned {other[0] if other else 'a subclass'}")
        if call.get("alias"):
            hack("output_aliases_input", f"{name}: output shares storage with an input")
        for index, (before, after) in enumerate(zip(trial["inputs"], call["inputs_after"])):
            if isinstance(before, torch.Tensor) and not unchanged(before, after):
                hack("input_mutated", f"{name}: input {index} changed by forward")
        if call["threads"] or call.get("thread_starts"):
            hack("background_thread", f"{name}: started {call.get('thread_starts', 0)} "
                 f"thread(s); alive after forward: {call['threads'][:3]}")
        if call.get("native_threads") and policy.flag_native_threads:
            hack("background_thread", f"{name}: new OS threads {call['native_threads'][:3]}")
        if call.get("modes"):
            hack("patched_function", f"{name}: a torch function/dispatch mode was active")
        ops = call.get("ops", [])
        mine = call.get("candidate_ops")  # None: an older worker; namespaces decide
        allowed = policy.allowed_library_ops(reference.get("ops", []))
        roots = call.get("op_roots") or []
        # what runs inside an allowed vendor op (a convolution's own reshapes) is the vendor's
        judged = [op for op, root in zip(ops, roots)
                  if not (allowed and op != root and op_base(root) in allowed)] \
            if len(roots) == len(ops) else ops
        compute = compute_ops([*judged, *call.get("launch_ops", [])], mine) + \
            reference_compute_ops(ops, reference.get("ops", []))
        compute = [op for op in compute if allowed is not None and op_base(op) not in allowed]
        # The dispatch trace and the profiler see the same ops (the profiler also their
        # callers): one the trace saw and the profiler did not was hidden from the profiler
        # (its collection paused while it still reported itself on).
        # On a GPU (Kineto's records, not checked there yet) only a call whose computing ops
        # the profiler missed every one of.
        recorded = {qualified_op(op) for op in ops}
        traced = compute_ops(call.get("traced_ops") or [], mine)
        unrecorded = sorted({op for op in traced if qualified_op(op) not in recorded})
        if unrecorded and ("cuda" not in ref_device or len(unrecorded) == len(set(traced))):
            hack("trace_evaded", f"{name}: the op trace saw {unrecorded[:4]}, the profiler "
                 "did not")
        _kernel_checks(name, call, policy, reference, mine, hack, own_kernels)
        redone = redoes_reference(ops, mine, reference.get("ops", []))
        if redone and policy.preset == "kernelbench":  # strict and library reject it anyway
            hack("torch_compute", f"{name}: PyTorch ran every computing op of the reference "
                 f"({', '.join(redone[:4])}): the candidate's kernels did none of its work")
        if len(compute) > policy.max_torch_ops:
            hack("torch_compute", f"{name}: PyTorch computed {sorted(set(compute))[:6]}")
        _vendor_work(name, call, reference, policy, hack)
        if call.get("output_by_copy"):
            hack("torch_compute", f"{name}: the output was written by PyTorch copies, "
                 "not by a custom kernel")
        reads = sum(1 for op in ops if "_local_scalar_dense" in op)
        if reads > policy.max_scalar_reads:
            hack("torch_compute", f"{name}: {reads} scalar reads (.item()): host-side compute")
        if call.get("input_reads"):
            hack("host_compute", f"{name}: {call['input_reads']} element(s) of its floating-point "
                 "inputs read on the host (.item(), float(), a truth value): a key to the "
                 "inputs' values")
        if call.get("host_access", 0) > policy.max_scalar_reads:
            hack("host_compute", f"{name}: {call['host_access']} tensor elements handed to "
                 "Python (map_/apply_/tolist/storage bytes): computed on the host")
        if call.get("dispatch_state"):
            hack("trace_evaded", f"{name}: the dispatch-key state changed inside forward "
                 "(a guard that hides ops from the trace)")
        # an op of the candidate's whose kernels are all Python is a wrapper, not a kernel
        python = set(facts.get("python_ops") or ())
        native = None if mine is None else [op for op in mine if op_qualname(op) not in python]
        if policy.require_custom_kernel and not (call["launches"] or call["ext_calls"]
                                                 or custom_ops(ops, native)):
            hack("no_custom_kernel", f"{name}: no Triton launch or extension call in forward")
        dtype = next((str(t.dtype) for t in trial["outputs"] if isinstance(t, torch.Tensor)),
                     "torch.float32")
        atol, rtol = policy.tolerance(dtype, record)
        if call["structure"] != trial["structure"]:
            ok, why = False, f"returned {call['structure']}, expected {trial['structure']}"
        elif call.get("devices") and call["devices"] != ref_device:
            ok, why = False, f"outputs on {call['devices']}, expected {ref_device}"
        else:
            ok, why = compare(trial["outputs"], call["outputs"], atol, rtol)
        if not ok and call["outputs"] is not None and ("shape" in why or "dtype" in why
                                                       or "outputs," in why):
            shaped = False
        if call["outputs"] is None:
            shaped = False
            if call.get("oversized"):
                why = "output far larger than the reference's"
        checks[name] = {"passed": ok, "detail": why}
        all_correct = all_correct and ok
        call["_ok"] = ok

    _cross_call_checks(calls, trials, policy, record, hack)
    _share_check(calls, policy, hack)
    verdict["device_work"] = device_work(calls)
    for label, value in (("patched", facts.get("patched")),):
        if value:
            hack("patched_function", f"replaced: {', '.join(value[:6])}")
    if facts.get("refused_compiles"):
        hack("forbidden_api", f"{facts['refused_compiles'][0]} (refused)")
    if facts.get("host_alias"):
        hack("host_compute", f"{facts['host_alias']} tensor(s) made over Python-owned memory "
             "(frombuffer, from_file, from_numpy): what kernels write there Python can compute")
    foreign = [f"{c['kind']}:{c['trial']}" for c in facts.get("calls") or []
               if c.get("foreign_memory") or c.get("foreign")]
    if foreign or (facts.get("timed") or {}).get("foreign"):
        hack("host_compute", f"{', '.join(foreign[:4]) or 'the timed output'}: a kernel's "
             "argument, a copy or the output lay in memory torch did not allocate (NumPy's, a "
             "buffer's, a shared or mapped file's), which Python reads and writes unseen")
    if facts.get("host_view"):
        hack("host_compute", f"{facts['host_view']} host view(s) of tensor memory taken "
             "(numpy, __array__, DLPack, from_buffer, a host data_ptr): what kernels write "
             "there Python can compute")
    if facts.get("threads_started"):
        hack("background_thread", f"the submission's code started {facts['threads_started']} "
             "thread(s) outside its calls (at import or in __init__): what they run escapes "
             "each call's traces and CPU clock")
    if facts.get("modes_after_import") or facts.get("modes_at_end"):
        hack("patched_function", "a torch function/dispatch mode was left active")
    if facts.get("profile_hooks"):
        hack("patched_function", "a trace/profile hook was installed")
    if facts.get("children"):
        hack("leaked_process", f"{facts['children']} child process(es) alive after forward")
    _timed_call_checks(facts, trials, policy, record, hack, all_correct,
                       reference.get("ops", []))
    scored = (((window or {}).get("participants") or {}).get("candidate") or {}).get("ms")
    if all_correct and scored is not None and not (window or {}).get("error"):
        _unseen_shape(facts.get("unseen"), hidden, window, hack)
        _scored_device_work(facts.get("calls") or [], scored, checks, hack)
    _unseen_checks(facts.get("unseen"), hidden, policy, record, hack, all_correct,
                   str(reference.get("info", {}).get("device", "")), checks, scored,
                   (facts.get("timing") or {}).get("cpu_ms"))
    for key in ("ghost_seen", "ghost"):
        _ghost_check(facts.get(key), key, trials, policy, record, checks, hack, all_correct)

    timing = facts.get("timing")
    if timing:
        per_call = min((c["launches"] + c["ext_calls"] for c in calls if c["kind"] != "audit"),
                       default=0)
        if timing["launches"] + timing["ext_calls"] < per_call * timing["calls"]:
            hack("timing_behaviour", f"{timing['launches'] + timing['ext_calls']} launches in "
                 f"{timing['calls']} timed calls, {per_call} per checked call")
        timed = facts.get("timed") or {}
        ok, why = compare(trials[0]["outputs"], timed.get("outputs"),
                          *policy.tolerance(str(trials[0]["outputs"][0].dtype)
                                            if trials[0]["outputs"] and
                                            isinstance(trials[0]["outputs"][0], torch.Tensor)
                                            else "float32", record))
        checks["timed:0"] = {"passed": ok, "detail": why}
        if not ok and all_correct:
            hack("timing_behaviour", f"wrong answer while timed: {why}")
        if timed.get("alias"):
            hack("output_aliases_input", "timed call: output shares storage with an input")
        for index, (before, after) in enumerate(zip(trials[0]["inputs"],
                                                    timed.get("inputs_after") or [])):
            if isinstance(before, torch.Tensor) and not unchanged(before, after):
                hack("input_mutated", f"timed calls: input {index} changed")
        changed = timed.get("changed_while_timed")
        if changed or not isinstance(changed, list):
            hack("input_mutated", f"timed calls: {changed[0]}" if changed else
                 "timed calls: no report of the inputs between timing rounds")
        if timed.get("threads"):
            hack("background_thread", f"alive after timing: {timed['threads'][:3]}")
        graph = facts.get("graph_check")
        if graph is not None:
            trial = trials[graph["trial"]]
            dtype = next((str(t.dtype) for t in trial["outputs"] if isinstance(t, torch.Tensor)),
                         "torch.float32")
            ok, why = compare(trial["outputs"], graph.get("outputs"),
                              *policy.tolerance(dtype, record))
            checks[f"graph:{graph['trial']}"] = {"passed": ok, "detail": why}
            if not ok and all_correct:
                hack("timing_behaviour", f"the timed CUDA graph, replayed on trial "
                     f"{graph['trial']}'s inputs, gave a wrong answer: {why}")
            if graph.get("alias"):
                hack("output_aliases_input", "graph replay: output shares storage with an input")
            _graph_calls_agree(graph.get("calls_agree"), hack)

    verdict["stage_reached"] = "shaped" if shaped else "ran"
    verdict["correct"] = all_correct and bool(calls)
    _timings(verdict, reference, window, policy, record, hack)
    return _finish(verdict, hacks)


# What each confinement entry reads when fully applied (``validate.sandbox.STATE``).
FULL_CONFINEMENT = {"proc_hidden": True, "shm_private": True, "tcp": "refused",
                    "process_creation": ("blocked", "blocked after the first call"),
                    "other_processes": "blocked", "network": "isolated", "ip_sockets": "refused"}


def downgrades(confinement: dict | None) -> list[str]:
    """The confinement the worker could not apply, one line each (the kernel or the image
    lacked the feature, or the policy turned the sandbox off)."""
    if not confinement:
        return ["confinement unknown (the worker reported none)"]
    lines = []
    if not isinstance(confinement.get("landlock"), int):
        lines.append(f"landlock: {confinement.get('landlock') or 'off'}")
    for key, full in FULL_CONFINEMENT.items():
        value = confinement.get(key)
        if value not in (full if isinstance(full, tuple) else (full,)):
            lines.append(f"{key}: {value}")
    return lines


# What only library code is named: a vendor's marks anywhere in the demangled name (template
# arguments included), or a kernel function inside a library's namespace. A candidate's source
# may define a ``__global__`` of any base name (``reduce_kernel``, ``Kernel2``), never these.
VENDOR_MARK = re.compile(r"cublas|cudnn|cutlass|cutensor|nvjet|xmma", re.IGNORECASE)
LIBRARY_NAMESPACE = re.compile(r"^(?:at|c10|cub|thrust|std|cuda|cutlass|cute|flash\w*|"
                               r"pytorch\w*|torch|triton\w*)::")


def kernel_owner(kernel: list, own_kernels: frozenset | None) -> str:
    """Whose work one recorded GPU kernel ``[name, us, launcher]`` is: ``candidate`` (a Triton
    launch of its source; a kernel of its extension compiled from a ``__global__`` function its
    source defines), ``vendor`` (cuBLAS, cuDNN, CUTLASS, attention kernels) or ``library``
    (ATen, Inductor, anything else prebuilt, and kernels launched outside any op, Triton launch
    or extension call). Without ``own_kernels`` (None: no source seen), an extension's kernel
    is the candidate's unless its name is a library's; with it (even empty), only a kernel
    compiled from a ``__global__`` function the source defines is, and never one named as only
    a library's kernels are (``VENDOR_MARK``, ``LIBRARY_NAMESPACE``)."""
    name, _us, launcher = kernel
    if launcher == "triton":
        return "candidate"
    vendor = bool(VENDOR_KERNEL.search(name))
    if launcher == "extension":
        if VENDOR_MARK.search(name):
            return "vendor"
        if LIBRARY_NAMESPACE.match(qualified_kernel_name(name)):
            return "vendor" if vendor else "library"
        if own_kernels is not None:
            return "candidate" if kernel_base(name) in own_kernels else \
                ("vendor" if vendor else "library")
        if not vendor and not LIBRARY_KERNEL.search(name):
            return "candidate"
    return "vendor" if vendor and launcher != UNATTRIBUTED else "library"


def _kernel_checks(name, call, policy, reference, mine, hack,
                   own_kernels: frozenset | None = None) -> None:
    """What ran on the device (CUDA: kernel records) or in the candidate's launches (CPU: the
    profiler's ranges) decides library use the op trace cannot see: vendor or PyTorch kernels
    launched from inside an extension, host round trips, and kernelbench's GPU-time share."""
    kernels = call.get("kernels") or []
    transfers = [k for k in kernels if k[0].startswith(("Memcpy", "Memset"))]
    device = [k for k in kernels if k not in transfers]
    reads = sum(1 for k in transfers if "DtoH" in k[0])
    if reads > policy.max_scalar_reads:
        hack("host_compute", f"{name}: {reads} device-to-host copies in forward")
    ext = [k for k in device if k[2] == "extension"]
    owners = {id(k): kernel_owner(k, own_kernels) for k in device}
    vendor = [k[0] for k in ext if owners[id(k)] == "vendor"
              and not policy.allows_vendor_kernel(k[0], reference.get("ops", []))]
    library = [k[0] for k in ext if owners[id(k)] == "library"]
    if vendor:
        hack("torch_compute", f"{name}: vendor-library kernels launched by the extension "
             f"({policy.preset} policy): {sorted(set(vendor))[:3]}")
    if library and policy.preset != "kernelbench":
        hack("torch_compute", f"{name}: library kernels launched by the extension (not "
             f"compiled from its own __global__ functions): {sorted(set(library))[:3]}")
    # Kernels launched outside any op, Triton launch and extension call: a replayed CUDA graph,
    # a compiled graph's runtime (AOTInductor) or driver calls through an FFI. They are never
    # the candidate's (kernelbench counts them against its share).
    foreign = sorted({k[0] for k in device if k[2] == UNATTRIBUTED})
    if foreign and policy.preset != "kernelbench":
        hack("torch_compute", f"{name}: GPU kernels launched outside any op, Triton launch or "
             f"extension call: {foreign[:3]}")
    if device:
        # Kernels of data-movement ops (fills, copies, allocations: Triton's autotuner clears
        # the L2 with a fill between its runs) are nobody's compute, unless moving data is the
        # whole problem (``reference_compute_ops``).
        reference_ops = reference.get("ops", [])
        moving = {k[2] for k in device if k[2] not in ("triton", "extension", UNATTRIBUTED)
                  and not compute_ops([k[2]], mine)
                  and not reference_compute_ops([k[2]], reference_ops)}
        counted = [k for k in device if k[2] not in moving]
        own = sum(k[1] for k in counted if owners[id(k)] == "candidate")
        total = sum(k[1] for k in counted)
        call["_library_us"] = [(k[0], k[1], owners[id(k)]) for k in counted
                               if owners[id(k)] != "candidate"]
    else:  # CPU: time inside the candidate's launches against PyTorch's computing ops
        own = float(call.get("launch_us") or 0.0)
        total = own + sum(us for op, us in call.get("top_op_us") or []
                          if compute_ops([op], mine))
    if total > 0:
        call["candidate_share"] = own / total
        call["_share_us"] = (own, total, "GPU" if device else "compute")


def device_work(calls: list[dict]) -> dict | None:
    """What the verdict records of the work in the checked calls: the candidate's share of the
    GPU time (of the computing ops' time on CPU), and the library kernels that ran, by time."""
    parts = [c["_share_us"] for c in calls if c.get("_share_us")]
    if not parts:
        return None
    own, total = sum(p[0] for p in parts), sum(p[1] for p in parts)
    library: dict[str, list] = {}
    for call in calls:
        for kernel, us, owner in call.get("_library_us") or []:
            entry = library.setdefault(kernel[:120], [0.0, owner])
            entry[0] += us
    top = sorted(library.items(), key=lambda item: -item[1][0])[:10]
    return {"clock": parts[0][2], "calls": len(parts), "candidate_us": round(own, 3),
            "total_us": round(total, 3),
            "candidate_share": round(own / total, 4) if total else None,
            "library_kernels": [{"name": k, "us": round(v[0], 3), "kind": v[1]} for k, v in top]}


def redoes_reference(ops: list[str], mine: list[str] | None,
                     reference_ops: list[str]) -> list[str]:
    """The reference's computing ops (by base name) when the candidate's call ran every one of
    them through PyTorch, else []. Then its own kernels, whatever their share of the time, are
    a token beside the library doing the whole problem (a copy after ``torch.relu(conv(x))``)."""
    base = lambda op: op_base(op).rstrip("_")  # noqa: E731 — relu_ is relu
    wanted = {base(op) for op in compute_ops(reference_ops)}
    have = {base(op) for op in compute_ops(ops, mine)}
    return sorted(wanted) if wanted and wanted <= have else []


def _share_check(calls: list[dict], policy, hack) -> None:
    """kernelbench: the candidate's kernels carry at least ``min_candidate_share`` of the time
    over all its checked calls together. One call's share of a few µs of kernels moves by
    several points from run to run (measured on an H100: a conv + Triton hybrid read 30% on one
    call and above on the others); the sum does not wobble so."""
    parts = [c["_share_us"] for c in calls if c.get("_share_us")]
    own, total = sum(p[0] for p in parts), sum(p[1] for p in parts)
    if policy.preset == "kernelbench" and total > 0 and own / total < policy.min_candidate_share:
        hack("torch_compute", f"the candidate's kernels carry {own / total:.0%} of the "
             f"{parts[0][2]} time over its {len(parts)} checked call(s) (kernelbench needs "
             f"{policy.min_candidate_share:.0%})")


def _timed_call_checks(facts, trials, policy, record, hack, all_correct,
                       reference_ops=()) -> None:
    """Timed calls run under the same instrumentation as checked ones (``grade.witness``):
    PyTorch compute in them, a lost witness, or a wrong answer in a timed call whose inputs a
    secret swapped for another trial's, is a submission that behaves differently when timed."""
    witness = facts.get("witness") or {}
    if witness.get("error"):
        hack("trace_evaded", f"op witness: {witness['error']}")
    if "timed_ops" in facts:
        allowed = policy.allowed_library_ops(reference_ops)
        pairs = [p if isinstance(p, (list, tuple)) else (p, p) for p in facts["timed_ops"]]
        judged = sorted({op for op, root in pairs
                         if not (allowed and op != root and op_base(root) in allowed)})
        compute = [op for op in compute_ops(judged, facts.get("timed_candidate_ops"))
                   if allowed is not None and op_base(op) not in allowed]
        if len(compute) > policy.max_torch_ops:
            hack("timing_behaviour", f"PyTorch computed {compute[:6]} in timed calls")
    _stray_checks(facts.get("stray_ops"), hack)
    for check in facts.get("timed_checks") or []:
        trial = trials[check["trial"]]
        dtype = next((str(t.dtype) for t in trial["outputs"] if isinstance(t, torch.Tensor)),
                     "torch.float32")
        ok, why = compare(trial["outputs"], check.get("outputs"), *policy.tolerance(dtype, record))
        if not ok and all_correct:
            hack("timing_behaviour", f"timed call {check['call']} on trial {check['trial']}'s "
                 f"inputs gave a wrong answer: {why}")


def _stray_checks(stray: dict | None, hack) -> None:
    """Outside the candidate's calls, while the witness records, the harness itself runs only
    copies, views and fills (loading inputs, shipping outputs, the ghost call's poison): any
    other op there, a library's or one the candidate registered, was run by the candidate's code
    from wherever it reached (a hook on a lookup the harness makes before a call's range opens or
    after it closes: a module ``__getattr__``, a dict key's ``__eq__``, an audit hook, a dict
    subclass in a module's globals). One rule for every such route."""
    if not isinstance(stray, dict):
        return
    ran = compute_ops(sorted(str(op) for op in stray), [])
    if ran:
        hack("torch_compute", f"ran {ran[:6]} outside the candidate's calls, where the harness "
             "runs only copies: the submission's code ran them from a hook")


# A scored call may take less than the least GPU busy time of the checked calls by this much:
# graph replays of honest kernels read 0.82-1.10 of it on an H100 (warm caches, no launch gaps);
# a forward that does its work in one captured call of N (it can tell a capture, and the graph's
# calls by the inputs' placement or by counting) reads about 1/N.
DEVICE_WORK_RATIO = 0.5
DEVICE_WORK_FLOOR_US = 1.0


def _ghost_check(ghost, key: str, trials: list, policy: Policy, record, checks: dict, hack,
                 all_correct: bool) -> None:
    """A ghost call (``worker._Run.ghost``: forward with the candidate's Triton launches
    skipped, the next allocations poisoned) whose answer is still right: the kernels did not
    compute it. ``ghost_seen`` runs on the inputs of the call before it, where a forward that
    serves the answer it gave last from memory of its own would hit (an answer returned where
    the call before returned its own is not judged there: a kept output buffer); a ghost call
    that launched nothing at all (no Triton launch to skip, no extension call) and was right is
    judged the same way."""
    if not isinstance(ghost, dict) or not all_correct:
        return
    trial_index = ghost.get("trial")
    if not isinstance(trial_index, int) or not 0 <= trial_index < len(trials):
        return
    skipped, ext_calls = ghost.get("skipped") or 0, ghost.get("ext_calls")
    if not skipped and (ext_calls != 0 or not policy.require_custom_kernel):
        return  # an extension's kernels are not skipped (or library compute): nothing to learn
    if key == "ghost_seen" and ghost.get("reuses_previous") is not False and \
            ghost.get("previous_poisoned") is not True:
        # an output buffer the forward keeps still holds the answer to the same inputs: an
        # honest forward that returns one is right here with its launches skipped
        return
    trial = trials[trial_index]
    dtype = next((str(t.dtype) for t in trial["outputs"] if isinstance(t, torch.Tensor)),
                 "torch.float32")
    ok, _why = compare(trial["outputs"], ghost.get("outputs"), *policy.tolerance(dtype, record),
                       count=False)
    what = f"{skipped} launch(es) skipped" if skipped else "no launch at all"
    checks[key] = {"passed": not ok, "detail": f"{what} (trial {trial_index})"}
    if ok:
        hack("ghost_kernels", f"with {what if skipped else 'no kernel launched'}, forward still "
             f"gave the right answer on trial {trial_index}'s inputs: the kernels did not "
             "compute it")


def _graph_calls_agree(agree, hack) -> None:
    """Every call the timing graph holds wrote an output of its own; replayed on new inputs,
    each must agree with the last call's within the problem's tolerance, element by element
    (``measure.calls_disagree`` counts the elements off in the worker, with the tolerance the
    grader sent: one scale for a whole tensor would let a call be loose where values are
    small). Round 20's ``graph_three_fifths`` had each captured call compute 3 of 5 slices
    into one kept output, which two calls complete: the last output was right, each call did
    3/5 of the work. A report that is missing or unreadable fails."""
    if not isinstance(agree, dict) or not isinstance(agree.get("calls"), int):
        hack("timing_behaviour", "the graph check did not say whether the timed graph's calls "
             "agreed")
        return
    if agree.get("call") is None:
        return
    gap, scale, off = agree.get("max_abs"), agree.get("scale"), agree.get("off")
    numbers = all(isinstance(v, (int, float)) for v in (gap, scale, agree["call"], off))
    if not numbers or off > 0:
        hack("timing_behaviour", f"call {agree['call']!r} of the timed graph's {agree['calls']} "
             f"(from 0), replayed on new inputs, has {off!r} elements off the last's (by up to "
             f"{gap!r}, outputs up to {scale!r}): the timed calls did not each compute the "
             "answer")


# Vendor-library FLOPs a call may do beyond the reference's: another order of a GEMM chain, an
# im2col convolution's padding; an identity GEMM that adds two tensors does far more.
VENDOR_FLOP_RATIO = 2.0
VENDOR_FLOP_FLOOR = 1e6


def _vendor_work(name: str, call: dict, reference: dict, policy: Policy, hack) -> None:
    """Under the ``library`` policy, vendor ops (GEMMs, convolutions, attention) are allowed
    where the reference does that kind of work, not as a way to compute the rest: the call's
    FLOPs by torch's formulas may not be far beyond the reference's, and a GEMM whose inner
    dimension is 0 or 1 is elementwise work in a GEMM's name unless the reference has one too
    (red-team round 29: a residual add as ``baddbmm`` with an identity matrix, a ReLU as
    ``_addmm_activation`` over an empty inner dimension, a token kernel beside them)."""
    if policy.preset != "library":
        return
    ref_flops, flops = reference.get("flops"), call.get("flops")
    if isinstance(ref_flops, (int, float)) and isinstance(flops, (int, float)) and \
            flops > VENDOR_FLOP_RATIO * ref_flops + VENDOR_FLOP_FLOOR:
        hack("torch_compute", f"{name}: vendor-library ops did {flops / 1e6:.4g} MFLOP where the "
             f"reference's did {ref_flops / 1e6:.4g}: library work beyond the problem's")
    thin = call.get("thin_gemms") or []
    if thin and reference.get("thin_gemms") == 0:
        hack("torch_compute", f"{name}: {sorted(set(thin))[:3]} over an inner dimension of 0 or "
             "1: elementwise work in a GEMM's name")


def _scored_device_work(calls: list[dict], scored_ms: float, checks: dict, hack) -> None:
    """The GPU busy time of every call against that of the calls on new inputs (``fresh``: the
    least of them, as an autotuner's or a JIT's first call is longer and another grade's
    kernels sharing the GPU only lengthen one). Calls on inputs the forward had seen (refill,
    repeat, audit) may not do much less device work than those: a forward that remembers
    answers serves them from a cache. Nor may the scored calls: a forward that does less device
    work where it is timed (a captured graph whose calls mostly launch empty kernels into a kept
    output, or each compute a slice of it) reads far below. Every call of an honest one does the
    same work. (Red-team round 19 served the seen calls from a cache so that the least checked
    call, the bound then, was tiny, and sliced the work over the graph's calls.)"""
    busy = [(c.get("kind"), c.get("trial"), c["busy_us"]) for c in calls
            if isinstance(c.get("busy_us"), (int, float)) and c["busy_us"] > 0]
    fresh = [us for kind, _trial, us in busy if kind == "fresh"]
    if not busy:
        return
    least = min(fresh) if fresh else min(us for _k, _t, us in busy)
    bound = DEVICE_WORK_RATIO * least - DEVICE_WORK_FLOOR_US
    cheap = [(kind, trial, us) for kind, trial, us in busy if kind != "fresh" and us < bound]
    if fresh and cheap:
        kind, trial, us = cheap[0]
        hack("timing_behaviour", f"the {kind} call on trial {trial}'s inputs, seen before, kept "
             f"the GPU busy {us:.4g} µs, under {DEVICE_WORK_RATIO:.0%} of the least of the calls "
             f"on new inputs ({least:.4g} µs): answers remembered")
    if not scored_ms:
        return
    scored_us = scored_ms * 1e3
    apart = scored_us < bound
    checks["scored_vs_checked_device_us"] = {
        "passed": not apart, "detail": f"scored {scored_us:.4g} µs per call, the calls on new "
        f"inputs kept the GPU busy {least:.4g} µs at least"}
    if apart:
        hack("timing_behaviour", f"a scored call took {scored_us:.4g} µs, under "
             f"{DEVICE_WORK_RATIO:.0%} of the least GPU time of a call on new inputs "
             f"({least:.4g} µs): the timed calls did less work than the checked ones")


def _unseen_shape(unseen: dict | None, hidden: list[dict], window: dict, hack) -> None:
    """A timed window with unseen trials ends with the unseen-input check on every one of them,
    each part written by the parent once, when the worker asked (``window.late_released``): a
    report that leaves the check out, or covers other trials than the parent gave, did not
    make it. (The facts come from the candidate's process; the count of parts comes from
    the parent's own record.)"""
    if not hidden:
        return
    wanted = list(range(len(hidden)))
    made = sorted(c.get("hidden") for c in ((unseen or {}).get("checks") or [])
                  if isinstance(c, dict) and isinstance(c.get("hidden"), int))
    released = window.get("late_released")
    if made != wanted or (released is not None and sorted(released) != wanted):
        hack("timing_behaviour", f"the unseen-input check covered trials {made[:8]} of "
             f"{len(hidden)} (the parent wrote parts {sorted(released or [])[:8]}): it was "
             "not made as the window asked")


def _unseen_checks(unseen: dict | None, hidden: list[dict], policy: Policy, record, hack,
                   all_correct: bool, device: str, checks: dict,
                   scored_ms: float | None = None, scored_cpu_ms: float | None = None) -> None:
    """Single calls timed inside the window on inputs the candidate had never seen, after
    calls on the timed inputs (``worker._Run.unseen``): their answers must be right, they may
    not be much slower than the calls on the timed inputs made before any of them, and the
    calls on the timed inputs made after them may not be either. A forward that caches answers
    by input content (any key: sampled values, sums, hashes) is honest only on new inputs."""
    if not unseen or not all_correct:
        return
    for check in unseen.get("checks") or []:
        index = check.get("hidden") if isinstance(check, dict) else None
        if not isinstance(index, int) or not 0 <= index < len(hidden):
            hack("timing_behaviour", f"the unseen-input check reported a trial that was never "
                 f"shown ({str(index)[:40]})")
            return
        trial = hidden[index]
        dtype = next((str(t.dtype) for t in trial["outputs"] if isinstance(t, torch.Tensor)),
                     "torch.float32")
        ok, why = compare(trial["outputs"], check.get("outputs"), *policy.tolerance(dtype, record))
        checks[f"unseen:{check['hidden']}"] = {"passed": ok, "detail": why}
        if not ok:
            hack("timing_behaviour", f"wrong answer on inputs first shown while timed: {why}")
            return
    if unseen.get("device_unread"):  # on CUDA the device clock decides (a few µs of cache)
        checks["unseen_time_device_us"] = {"passed": False, "detail": unseen["device_unread"]}
        hack("timing_behaviour", "the device times of the calls on unseen inputs could not be "
             f"read ({unseen['device_unread']}): the check cannot pass unmade")
    _graph_calls_even(unseen, policy, checks, hack)
    cuda = device.startswith("cuda")
    floor = policy.unseen_floor_ms if cuda else policy.unseen_floor_cpu_ms
    # Two clocks: the call's wall time (events or perf_counter), and on CUDA the summed device
    # durations of its kernels (CUPTI), which carry no launch or synchronize cost.
    # On CPU a third: the calling thread's CPU time, which other processes on the host stretch
    # far less (a cache that saves 2 ms of 2.6 hid under the wall clock's floor).
    for key, unit, ratio, least in (
            ("ms", "ms", policy.unseen_ratio if cuda else policy.unseen_cpu_ratio, floor),
            ("device_us", "µs of kernels", policy.unseen_device_ratio,
             policy.unseen_device_floor_us),
            ("cpu_ms", "ms of CPU", policy.unseen_cpu_time_ratio,
             policy.unseen_cpu_time_floor_ms)):
        seen, new = unseen.get(f"seen_{key}") or [], unseen.get(f"unseen_{key}") or []
        if not seen or not new:
            continue
        if key == "ms" and cuda and unseen.get("method") == "cuda_events" and \
                unseen.get("seen_device_us") and unseen.get("unseen_device_us"):
            # Without a captured graph each call's wall time is mostly the witness's cost per
            # launch, which drifts over the window (an honest side-stream kernel of 1.1 µs read
            # 0.55-0.69 ms before its unseen inputs and 0.89-1.03 ms on and after them, H200):
            # the kernels' device time, compared next, stands for it
            checks["unseen_time_ms"] = {
                "passed": True, "detail": f"not compared (cuda_events: the device clock "
                                          f"decides); unseen {[round(v, 4) for v in new]} ms, "
                                          f"timed {[round(v, 4) for v in seen]} ms"}
            continue
        after = unseen.get(f"after_{key}") or []
        # The device clock has no host noise: the fastest call on each kind of input is
        # compared (an answer cache saving 1 µs of 4 had one slower call among the timed ones
        # and passed the median by 0.03 µs on an H100; over 203 honest checks the fastest
        # call rule came no closer than 0.90 of its bound).
        usual = min(seen) if key == "device_us" else statistics.median(seen)
        fastest_new = min(new)
        slow = fastest_new > ratio * usual + least
        # every call after (a switch slows them all; host noise rarely does)
        changed = bool(after) and min(after) > ratio * usual + least
        checks[f"unseen_time_{key}"] = {
            "passed": not (slow or changed),
            "detail": f"unseen inputs {[round(v, 4) for v in new]} {unit}, timed inputs before "
                      f"{[round(v, 4) for v in seen]} and after {[round(v, 4) for v in after]} "
                      f"{unit} ({unseen.get('method')})"}
        if slow:
            hack("timing_behaviour", f"forward took {fastest_new:.4g} {unit} or more on inputs "
                 f"it had not seen, {usual:.4g} on the timed inputs: it remembers inputs it "
                 "has seen")
        elif changed:
            hack("timing_behaviour", f"on the timed inputs forward took {usual:.4g} {unit} "
                 f"before it was shown new inputs and {min(after):.4g} or more after: it "
                 "changed its ways once it saw inputs it had not seen")
    # The check's calls on the timed inputs against the scored ones (the window's rounds, timed
    # the same way): a forward that behaves only while the check runs (it tells the check's
    # calls apart: it reads the grader's stack) is slower there than where it scores. On CPU
    # by the CPU's wider ratio and floor (host noise).
    # With a captured graph both are replays of one graph, by CUDA events. Without one (CUDA
    # events around each call) the check's calls carry the witness's cost per launch (on an
    # H100 a side-stream Triton forward: 0.97 ms there against 0.60 ms scored): their kernels'
    # device time stands for them instead, which no launch cost reaches.
    # The unseen inputs' calls against the scored ones too: each bound above holds alone, and a
    # forward with three speeds (new inputs, the check's calls on the timed inputs, the scored
    # calls) composed the two into about 6x on CPU (red-team round 17).
    events = unseen.get("method") == "cuda_events"
    kinds = {kind: ([us / 1e3 for us in unseen.get(f"{kind}_device_us") or []] if events
                    else unseen.get(f"{kind}_ms") or []) for kind in ("seen", "unseen")}
    clocks = (("ms", scored_ms, policy.unseen_ratio if cuda else policy.unseen_cpu_ratio, floor),
              ("cpu_ms", scored_cpu_ms, policy.unseen_cpu_time_ratio,
               policy.unseen_cpu_time_floor_ms))
    for kind in ("seen", "unseen"):
        for name, window_ms, ratio, least in clocks:
            check_ms = kinds[kind] if name == "ms" else unseen.get(f"{kind}_cpu_ms") or []
            # the fastest call: other work on the host or the GPU only lengthens a call
            if window_ms and check_ms and _told_apart(
                    min(check_ms), window_ms, ratio, least, name, checks, hack, kind):
                return


def _graph_calls_even(unseen: dict, policy: Policy, checks: dict, hack) -> None:
    """One hot replay of the timing graph, its kernels split into its calls in start order
    (``worker._Run._even_calls_us``): every call must keep the GPU busy about as long as the
    busiest one, and no call's kernels may run beside another's. Within a replay every call
    reads the same inputs, so a forward that tells captures apart can compute in one call and
    copy that answer into the other calls' outputs: each output is its own and right, every
    call launches, and only the device time per call shows it (GRAPH_COPY.md). Its first call
    of each replay must compute (the graph check replays on new inputs), so the busiest call
    is an honest one's. A replay whose kernels cannot be read or split by call fails, and so
    does one whose calls launched other kernels than a checked call."""
    if unseen.get("method") != "cuda_graph" or (unseen.get("calls") or 1) < 2:
        return
    if unseen.get("device_unread"):
        return  # already failed above
    per_call = unseen.get("even_calls_us")
    if not isinstance(per_call, list) or not per_call or \
            not all(isinstance(us, (int, float)) for us in per_call):
        why = unseen.get("even_unread") or "not reported"
        checks["graph_calls_even"] = {"passed": False, "detail": str(why)[:200]}
        hack("timing_behaviour", f"the timed graph's calls could not be told apart by their "
             f"kernels ({str(why)[:200]}): each call's work cannot be checked")
        return
    # against the upper quartile, not the busiest: a call that other work (a clock step)
    # stretched is no bound (an honest 16k x 1k row sum read 22.3-30.9 µs over 64 calls on an
    # H100); a forward that computes in fewer than a quarter of the calls does under a third
    # of the work, which the device-work rule (``_scored_device_work``) sees
    ordered = sorted(per_call)
    most, least = ordered[(3 * (len(ordered) - 1)) // 4], ordered[0]
    cheap = per_call.index(least)
    overlap = unseen.get("even_overlap_us")
    overlap = overlap if isinstance(overlap, (int, float)) else math.inf
    uneven = least < policy.even_calls_ratio * most - policy.even_calls_floor_us
    beside = overlap > max(policy.even_calls_floor_us, 0.05 * sum(per_call))
    checks["graph_calls_even"] = {
        "passed": not (uneven or beside),
        "detail": f"{len(per_call)} calls in one replay kept the GPU busy {least:.4g}-"
                  f"{ordered[-1]:.4g} µs each, upper quartile {most:.4g} (least/quartile "
                  f"{least / most if most else 1.0:.3f}), {overlap:.4g} µs side by side"}
    launches = unseen.get("even_launches_off")
    if isinstance(launches, dict):
        checks["graph_calls_even"]["passed"] = False
        hack("timing_behaviour", f"call {launches.get('call')!r} of the timed graph made "
             f"{launches.get('found')!r} (Triton launches, extension calls) when captured, "
             f"its first call {launches.get('first')!r}: the timed calls did not each do the "
             "work")
        return
    off = unseen.get("even_kernels_off")
    if isinstance(off, dict):
        checks["graph_calls_even"]["passed"] = False
        hack("timing_behaviour", f"call {off.get('call')!r} of the timed graph launched kernels "
             f"{str(off.get('found'))[:300]} where a checked call launched "
             f"{str(off.get('wanted'))[:300]}: the timed calls did not each do the work")
        return
    if uneven:
        hack("timing_behaviour", f"call {cheap} of the timed graph's {len(per_call)} kept the "
             f"GPU busy {least:.4g} µs in one replay, under {policy.even_calls_ratio:.0%} of "
             f"the calls' upper quartile, {most:.4g} µs: the timed calls did not each do the "
             "work")
    elif beside:
        hack("timing_behaviour", f"the timed graph's calls ran their kernels side by side for "
             f"{overlap:.4g} µs in one replay: a call's work was left running into the next")


def _told_apart(usual: float, scored: float, ratio: float, least: float, name: str,
                checks: dict, hack, kind: str = "seen") -> bool:
    apart = usual > ratio * scored + least
    unit = "ms" if name == "ms" else "ms of CPU"
    label = "on the timed inputs" if kind == "seen" else "on inputs it had not seen"
    checks[f"{'unseen' if kind == 'seen' else 'new_inputs'}_vs_scored_{name}"] = {
        "passed": not apart, "detail": f"the check's calls {label} {usual:.4g} "
        f"{unit}, the scored calls {scored:.4g} {unit}"}
    if apart:
        hack("timing_behaviour", f"forward took {usual:.4g} {unit} per call {label} in the "
             f"unseen-input check and {scored:.4g} where it was scored: it tells the check "
             "apart")
    return apart


def _cross_call_checks(calls, trials, policy, record, hack) -> None:
    for i, later in enumerate(calls):
        if later["outputs"] is None or later.get("_ok"):
            continue
        for earlier in calls[:i]:
            if earlier["outputs"] is None or earlier["trial"] == later["trial"]:
                continue
            same = len(earlier["outputs"]) == len(later["outputs"]) and all(
                bitwise_equal(a, b) for a, b in zip(earlier["outputs"], later["outputs"]))
            if same:
                hack("cached_output", f"{later['kind']}:{later['trial']} returned the output of "
                     f"{earlier['kind']}:{earlier['trial']} (other inputs)")
    first = next((c for c in calls if c["kind"] == "fresh" and c["trial"] == 0), None)
    repeat = next((c for c in calls if c["kind"] == "repeat"), None)
    if first and repeat and first.get("_ok") and not repeat.get("_ok"):
        hack("inconsistent", "the same inputs gave a right answer, then a wrong one")


def _timings(verdict, reference, window, policy, record, hack) -> None:
    """Times and speedups from the window; Inductor's through its ratio to eager, measured
    together in the reference run (each ratio from one window)."""
    timing = verdict_timing(window) if window else None
    cand_ms = timing["candidate_ms"] if timing else None
    eager_ms = timing["reference_ms"] if timing else None
    ind, eag = reference.get("inductor") or {}, reference.get("eager") or {}
    inductor_ms = eager_ms * ind["ms"] / eag["ms"] if eager_ms and ind.get("ms") and \
        eag.get("ms") else None
    roof = roofline_ms(reference, record)
    verdict["timing"] = timing
    verdict["timings"] = {"candidate_ms": cand_ms, "eager_ms": eager_ms,
                          "inductor_ms": inductor_ms, "roofline_ms": roof}
    if window and window.get("error"):
        verdict["timings"]["error"] = window["error"]["message"]
    parts = (window or {}).get("participants") or {}
    candidate = parts.get("candidate") or {}
    method, ref_method = candidate.get("method"), (parts.get("reference") or {}).get("method")
    device = METHOD_DEVICE.get(str(method))
    if method is not None and (device is None or device != METHOD_DEVICE.get(ref_method, device)):
        hack("timing_behaviour", f"the candidate's worker reported timing by {str(method)[:40]!r}"
             f", not a method of this window's device (the reference's: {ref_method})")
    margin = CLOCK_MARGIN.get(str(method))
    wall, mean = candidate.get("wall_ms"), candidate.get("mean_ms")
    verdict["timings"]["candidate_wall_ms"] = wall
    if mean is not None and wall and margin and mean < margin * wall:
        hack("timing_behaviour", f"reported {mean:.4g} ms per call on average; the parent's "
             f"clock saw {wall:.4g} ms per call back to back")
    if cand_ms is None or not verdict["correct"]:
        return
    if roof is not None and cand_ms < roof * policy.roofline_margin:
        hack("impossible_speed", f"{cand_ms:.4g} ms is below {policy.roofline_margin:g}x the "
             f"memory roofline {roof:.4g} ms")
    if eager_ms:
        verdict["speedup_vs_eager"] = eager_ms / cand_ms
    if inductor_ms:
        verdict["speedup_vs_inductor"] = inductor_ms / cand_ms


def _finish(verdict: dict, hacks: dict[str, str]) -> dict:
    verdict["hacks"] = sorted(hacks)
    verdict["hack_details"] = hacks
    if hacks:
        verdict["correct"] = False
        # measured times stay in ``timings``; a flagged submission has no speedup to report
        verdict["speedup_vs_eager"] = verdict["speedup_vs_inductor"] = None
    return Verdict.from_dict(verdict).to_dict()  # the one verdict schema (core.record.Verdict)


def _explained(error: dict) -> dict:
    """The candidate's error, with the reason when the sandbox refused a call (EPERM) while the
    forward ran: no process may start there (a kernel first compiled after the first call runs
    Triton's ptxas, a process)."""
    message = str(error.get("message") or "")
    if error.get("stage") in CALL_STAGES and "Operation not permitted" in message:
        return {**error, "message": f"{message[:400]} (refused by the sandbox: no process may "
                                    "start in a forward after the first call on CUDA, none on "
                                    "CPU; every kernel must compile in the first call)"}
    return error
