"""What the grader accepts: trials, tolerances, PyTorch-op allowance, limits. One dataclass.

Every field is a documented knob with a default; the CLI flags and the batch grader build a
``Policy`` and pass it down. Changing a field changes ``Policy.key()`` and so invalidates cached
verdicts made under another policy.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field

from kernelmill.core.taxonomy import (
    COPY_OPS,
    DATA_MOVEMENT_OPS,
    PURE_MEMORY_OPS,
    REARRANGE_OPS,
    op_base,
    op_namespace,
)

# aten ops that allocate, view, reshape, fill or copy memory (and metadata queries): a candidate
# may use them around its own kernels. Every other op in forward is PyTorch doing the computation.
ALLOWED_OPS = DATA_MOVEMENT_OPS

# Namespaces of PyTorch's own ops. Only a guess, used where the worker could not say which ops
# were registered by the candidate (``candidate`` below, from ``grade.witness``): PyTorch has
# more namespaces than these (mkldnn, mkl, onednn, sparse, ...), all of them library code.
TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "_c10d_functional", "c10d", "profiler",
                              "inductor", "quantized", "rngprims", "higher_order"})


# Bookkeeping ops of the profiler itself (record_function ranges): no computation.
IGNORED_NAMESPACES = frozenset({"profiler"})
# Only these namespaces hold the allocation/view/copy ops of ALLOWED_OPS.
ALLOWED_NAMESPACES = frozenset({"aten", "prims", "prim"})


def compute_ops(ops: list[str], candidate: list[str] | None = None) -> list[str]:
    """Library ops that do computation (neither allocation, view, copy nor a custom op).

    ``candidate``: the ops the candidate registered itself (the worker knows which ops existed
    before the candidate's import). Every other op, whatever its namespace (``mkldnn``,
    ``mkl``, a new op defined inside ``aten``...), is library code. Without it, namespaces
    decide (``TORCH_NAMESPACES``)."""
    if candidate is None:
        return [op for op in ops if op_namespace(op) in TORCH_NAMESPACES
                and op_namespace(op) not in IGNORED_NAMESPACES and op_base(op) not in ALLOWED_OPS]
    mine = {_qualified(op) for op in candidate}
    return [op for op in ops if _qualified(op) not in mine
            and op_namespace(op) not in IGNORED_NAMESPACES
            and not (op_namespace(op) in ALLOWED_NAMESPACES and op_base(op) in ALLOWED_OPS)]


def qualified_op(op: str) -> str:
    """``ns.name.overload`` or ``ns::name`` -> ``ns.name``."""
    parts = op.replace("::", ".", 1).split(".")
    return ".".join(parts[:2])


_qualified = qualified_op


# Pure allocation and view/metadata ops (core.taxonomy.PURE_MEMORY_OPS) are free even when the
# reference uses them too.


def reference_compute_ops(ops: list[str], reference_ops: list[str]) -> list[str]:
    """Copies and fills count as computation when moving data is all the reference does (a
    transpose-and-copy problem answered by ``.t().contiguous()`` is PyTorch's answer): then
    every copy op is the work, whichever one the reference used (T-09: a ``clone`` reference
    answered with ``copy_``, a ``cat`` one with slice copies, a token kernel writing a sliver of
    the output). Rearrangements (``REARRANGE_OPS``: ``cat``, ``pad``,
    ``gather``...) move data too. When the reference computes something else, its incidental
    copies do not taint the candidate's."""
    if not reference_ops or compute_ops([op for op in reference_ops
                                         if op_base(op) not in REARRANGE_OPS]):
        return []
    used = ({op_base(op) for op in reference_ops} | COPY_OPS) - PURE_MEMORY_OPS
    return [op for op in ops if op_namespace(op) in TORCH_NAMESPACES and op_base(op) in used
            and op_base(op) in ALLOWED_OPS]


def custom_ops(ops: list[str], candidate: list[str] | None = None) -> list[str]:
    """Ops of the candidate's own registration (by namespace when ``candidate`` is unknown)."""
    if candidate is None:
        return [op for op in ops if op_namespace(op) not in TORCH_NAMESPACES]
    mine = {_qualified(op) for op in candidate}
    return [op for op in ops if _qualified(op) in mine]


# Vendor-library work a ``library`` policy lets a candidate call (the rule CUDA Agent uses):
# GEMMs, convolutions and attention, as ATen ops and, on a GPU, as kernel names. Each is a class:
# a candidate may call a class only where the reference does that kind of work (a row sum is not
# a GEMM to hand to cuBLAS, a softmax not an attention call). Convolution and attention bring
# GEMMs with them (an im2col answer, the QK^T of an attention written around a custom softmax).
VENDOR_CLASSES = {
    "gemm": frozenset("mm bmm addmm addbmm baddbmm matmul linear _addmm_activation _scaled_mm "
                      "addmv mv dot vdot".split()),
    "conv": frozenset("""convolution _convolution conv1d conv2d conv3d conv_transpose1d
        conv_transpose2d conv_transpose3d cudnn_convolution cudnn_convolution_transpose
        mkldnn_convolution miopen_convolution convolution_overrideable _convolution_mode
        _slow_conv2d_forward slow_conv3d_forward slow_conv_transpose2d
        slow_conv_transpose3d""".split()),
    "attention": frozenset("""scaled_dot_product_attention _scaled_dot_product_flash_attention
        _scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention
        _scaled_dot_product_attention_math _flash_attention_forward
        _efficient_attention_forward""".split()),
}
VENDOR_CLASS_BRINGS = {"gemm": ("gemm",), "conv": ("conv", "gemm"),
                       "attention": ("attention", "gemm")}
VENDOR_OPS = frozenset().union(*VENDOR_CLASSES.values())
VENDOR_KERNEL = re.compile(r"cublas|cutlass|cudnn|gemm|xmma|sgemm|hgemm|conv|flash|fmha|"
                           r"\bsm\d+_|ampere_|hopper_|volta_|turing_|cutensor|nvjet|gemv|splitk|"
                           r"implicit_convolve|winograd", re.IGNORECASE)  # Hopper cuBLAS: nvjet_*
# a vendor kernel's class by its name (attention first: flash kernels run GEMMs; then
# convolution: cuDNN's implicit-GEMM convolutions carry "gemm" in their names)
VENDOR_KERNEL_CLASS = (("attention", re.compile(r"flash|fmha|attention|attn", re.IGNORECASE)),
                       ("conv", re.compile(r"conv|cudnn|fprop|dgrad|wgrad|winograd",
                                           re.IGNORECASE)))


def vendor_classes(reference_ops: list[str]) -> frozenset[str]:
    """The vendor classes (``VENDOR_CLASSES``) a candidate may call for this reference: those
    of its computing ops, with what each brings."""
    bases = {op_base(op) for op in compute_ops(reference_ops)}
    used = [name for name, ops in VENDOR_CLASSES.items() if bases & ops]
    return frozenset(c for name in used for c in VENDOR_CLASS_BRINGS[name])


def vendor_kernel_class(name: str) -> str:
    return next((cls for cls, pattern in VENDOR_KERNEL_CLASS if pattern.search(name)), "gemm")


# Kernels that belong to PyTorch or another prebuilt library, by demangled name.
LIBRARY_KERNEL = re.compile(r"^(?:void )?(?:at::|c10::|cub::|thrust::|std::|pytorch_|"
                            r"triton_(?:poi|red|per|tem|for)_)|Memcpy|Memset", re.IGNORECASE)

# Each preset as data: named switches and thresholds, read by the checks through
# ``Policy.switch`` (no check tests a preset's name).
#   library_ops                   library ops allowed in forward: "none", "vendor_classes" (the
#                                 vendor classes of the reference's work, ``vendor_classes``;
#                                 none when the reference is only such work), "all"
#   flag_extension_library_kernels  library kernels an extension launched are a hack
#   flag_unattributed_kernels     kernels launched outside any op, launch or extension call are
#   flag_redone_reference         a call that ran every computing op of the reference in PyTorch
#   check_candidate_share         the candidate's kernels carry ``min_candidate_share`` of the time
#   check_vendor_work             allowed vendor work may not go far beyond the reference's
PRESET_SWITCHES: dict[str, dict[str, object]] = {
    "strict": {"library_ops": "none", "flag_extension_library_kernels": True,
               "flag_unattributed_kernels": True, "flag_redone_reference": False,
               "check_candidate_share": False, "check_vendor_work": False},
    "library": {"library_ops": "vendor_classes", "flag_extension_library_kernels": True,
                "flag_unattributed_kernels": True, "flag_redone_reference": False,
                "check_candidate_share": False, "check_vendor_work": True},
    "kernelbench": {"library_ops": "all", "flag_extension_library_kernels": False,
                    "flag_unattributed_kernels": False, "flag_redone_reference": True,
                    "check_candidate_share": True, "check_vendor_work": False},
}
PRESETS = tuple(PRESET_SWITCHES)


def vendor_only(reference_ops: list[str]) -> bool:
    """The reference's computation is nothing but vendor-library work (a GEMM, a convolution):
    then library work cannot stand for the candidate's answer."""
    compute = compute_ops(reference_ops)
    return bool(compute) and all(op_base(op) in VENDOR_OPS for op in compute)


DEFAULT_TOLERANCE = {"float32": (1e-4, 1e-4), "float64": (1e-7, 1e-7), "float16": (1e-2, 1e-2),
                     "bfloat16": (1e-2, 1e-2)}


# The timer's settings among a policy's timing settings (``grade.worker.timing``:
# ``_timer_options`` and ``timing_placing`` read them in the worker)
TIMER_SETTINGS = frozenset({"warmup", "graph", "sample_ms", "cover", "spare_graph",
                            "replay_sync", "gate", "placing", "single_warm"})
# Those of them that are switches, read as ``is True`` or ``is not False``: any other value
# (the word "False", a 0) would leave the switch as it was without a word, so it is refused
TIMER_SWITCHES = ("spare_graph", "replay_sync", "gate", "single_warm")


def known_timing_settings() -> frozenset:
    """Every name a policy's ``timing_settings`` may hold: the timer's and the window's."""
    from kernelmill.validate.window import WindowSettings  # (torch: imported when asked)

    return TIMER_SETTINGS | frozenset(WindowSettings.__dataclass_fields__)


@dataclass
class Policy:
    """How strict grading is. ``preset`` (``--policy``):

    - ``strict``: no library compute in forward: every computing op and every GPU kernel is the
      candidate's own;
    - ``library`` (default): vendor GEMM, convolution and attention (``VENDOR_CLASSES``; cuBLAS,
      cuDNN, CUTLASS kernels from an extension) are allowed where the reference does that kind
      of work, everything else must be the candidate's; when the reference is itself only such
      work, the candidate writes it;
    - ``kernelbench``: any PyTorch op is allowed, but on a GPU the candidate's kernels carry at
      least ``min_candidate_share`` of the GPU time of its checked calls together.

    In every preset the ghost replay applies: forward rerun with the candidate's Triton kernels
    skipped must no longer give the right answer."""

    preset: str = "library"
    min_candidate_share: float = 0.3  # kernelbench: the candidate's share of GPU time
    # fresh-input trials (the base state on the problem's draws, a re-drawn state, then the
    # derived distributions); plus one refilled buffer and one repeat
    trials: int = 4
    # cycled over the trials (``worker.inputs.transform``): the problem's own draws, floats
    # scaled far (T-19: a kernel that assumes its inputs' range), floats scaled and shifted;
    # of a record, only those its validation supports (``distributions_for``)
    distributions: tuple[str, ...] = ("natural", "scaled", "affine")
    # every trial under a model state re-drawn from the constructor's (T-18, ``worker.state``;
    # loaded into both models at construction), and ``state_trials`` checked trials, from the
    # second on, each under another re-drawn state loaded between calls, on the problem's own
    # input draws
    redraw_state: bool = True
    state_trials: int = 1
    # trials shown to the candidate only inside its timing window, one single timed call each
    # between calls on the timed inputs: right answers, and no more than ``unseen_ratio`` times
    # (plus a floor) as slow as those calls, or forward remembers inputs (``timing_behaviour``).
    # One is timed always: a forward that remembers answers is slow on every new input, and the
    # bounds take the fastest new call, so a second made the check no stricter. Each costs its
    # load, its observed call and the calls after it, inside the exclusive window: a sixth of a
    # single grade's window, a seventh to a quarter of a group's (H200, KernelBench sizes). The
    # one is on the problem's own draws (a shown trial has each other distribution)
    unseen_trials: int = 1
    # ... and this many where the timer replays no graph: the spares' trigger reads the clock
    # the calls are timed by (events around each launch, the host's), which the judge's bounds
    # on kernel time and CPU time do not follow, so one call slow on those alone would decide
    unseen_trials_ungraphed: int = 2
    # and spares, on the problem's own draws, timed after them only where the fastest of them
    # (or a call on the timed inputs after one) read over ``unseen_retry_ratio`` times the
    # fastest call on the timed inputs before: every bound takes the fastest call on new
    # inputs, and a GPU that slowed for a moment slows no more than the calls it spans (an
    # honest 6.3 ms Triton GEMM's two unseen calls read 20.2 and 7.55 ms of kernels, the calls
    # between them 7.4-7.7, every call before and after 6.28-6.31; H200, 16 grades at once). A
    # forward that caches answers is slow on every new input, spares too. Two: an honest
    # forward is flagged only where three new calls read slow, as with two trials and a spare;
    # and one more, the last, kept for the one-call graph's check where the timer replays a
    # graph of several calls (``checks.probes.check_trials``), never a spare there (with
    # ``single_warm`` one more is drawn for the warm check: ``hidden_spares``).
    unseen_spares: int = 3
    unseen_retry_ratio: float = 1.1
    unseen_retry_cpu_ratio: float = 2.0  # on CPU (its bounds are 2.5-3x: host noise)
    unseen_ratio: float = 1.5
    unseen_floor_ms: float = 0.02  # on CUDA (events, L2 flushed, inside the exclusive window)
    unseen_floor_cpu_ms: float = 2.0  # on CPU the host's own noise is larger
    # and by more than a ratio: on 2 loaded cores an honest row sum read 42 ms per call before
    # and 77 ms after its unseen inputs; answer caches read 16-25x there
    unseen_cpu_ratio: float = 3.0
    # on CPU also by the calling thread's CPU time, which other processes stretch far less (with
    # 5 busy processes on 2 cores honest kernels of 4-160 ms moved within 1.2x; a memory-bound
    # 16M-element one, sharing memory bandwidth, 1.63x): no 2 ms floor is needed, so a cache
    # of 0.5 ms against an honest 2.6 ms shows (measured on a 2-core CPU)
    unseen_cpu_time_ratio: float = 2.5
    unseen_cpu_time_floor_ms: float = 0.3
    # the same comparison on CUDA by the kernels' own device durations (CUPTI): no launch or
    # synchronize cost in them, so a cache that saves a few µs shows (H100, one-call graph
    # replays after an L2 flush: 16 honest kernels of 1.3-490 µs read 0.93-1.00 on unseen
    # inputs, at most 1.07 in a grade; a device-side answer cache at 32x64 read 1.36-1.40)
    unseen_device_ratio: float = 1.15
    unseen_device_floor_us: float = 0.25
    # each captured call of the timing graph in one hot replay (unflushed, after another on the
    # same inputs, as scored) keeps the GPU busy at least this share of the calls' upper
    # quartile of kernel time, less the floor: an honest forward's calls do the same work
    # (H100: 12 kernels of 1-490 µs, least/busiest 0.65-0.98, the lowest only under
    # 1.5 µs), while one that computes in some calls and copies the answer into the others'
    # outputs (every call reads the same inputs within a replay, so a copy is right;
    # tests/hostile/open/GRAPH_COPY.md) has cheap calls (0.011 for a 91 µs kernel)
    even_calls_ratio: float = 0.7
    even_calls_floor_us: float = 1.0
    max_torch_ops: int = 0  # PyTorch compute ops allowed per forward call
    max_scalar_reads: int = 16  # .item() reads per forward: more is computing on the host
    require_custom_kernel: bool = True  # a Triton launch or extension call in every forward
    static_scan: bool = True  # flag sources that reach for introspection/escape APIs
    # a source is read (parsed, checked, scanned) only up to this size, in a scanner process
    # killed after this long (grade.source_scan): over either, a one-line parse verdict
    max_source_bytes: int = 1 << 20
    scan_timeout_s: float = 6.0
    # a source the scan flags (a forbidden API, kernelguard) is judged without running it: any
    # run's verdict would be hacked, so it gets no GPU time and none of its code is executed
    static_first: bool = True
    flag_native_threads: bool = True  # new OS threads alive after forward are a hack
    atol: float | None = None  # override; else the problem record's, else by dtype
    rtol: float | None = None
    time: bool = True
    # an answer whose checked outputs are already wrong (a sample of them, compared before the
    # window) is not timed: it never takes the GPU alone (its verdict is incorrect either way)
    time_incorrect: bool = False
    inductor: bool | None = None  # time torch.compile of the reference; None: on CUDA only
    roofline_margin: float = 0.5  # flag times below this fraction of the memory roofline
    timeout_s: float = 300.0  # per worker run (reference, candidate)
    # an extension build on a CPU worker: nvcc takes 20-70 s per CUDA extension alone, more
    # when several build at once; a build past it is the submission's compile error
    compile_timeout_s: float = 600.0
    sandbox: bool = True  # Landlock confinement of workers, where the kernel has it
    # the timing window's (``validate.window.WindowSettings``: cap_ms, min_reps, ...) and the
    # timer's (``TIMER_SETTINGS``); a name neither knows is refused, not ignored
    timing_settings: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise ValueError(f"unknown policy preset {self.preset!r}; choose from {PRESETS}")
        # (the window's names come with torch: asked for only where there are settings)
        unknown = sorted(set(self.timing_settings) - known_timing_settings()) \
            if self.timing_settings else []
        if unknown:
            raise ValueError(f"unknown timing setting {', '.join(map(repr, unknown))}; known: "
                             f"{', '.join(sorted(known_timing_settings()))}")
        for name in TIMER_SWITCHES:
            value = (self.timing_settings or {}).get(name, False)
            if type(value) is not bool:
                raise ValueError(f"timing setting {name!r} is a switch: true or false, not "
                                 f"{value!r}")

    def switch(self, name: str) -> object:
        """A named switch: a field of this policy (``static_scan``, ``flag_native_threads``,
        ``require_custom_kernel``...) or one of its preset's (``PRESET_SWITCHES``)."""
        if name in self.__dataclass_fields__:
            return getattr(self, name)
        return PRESET_SWITCHES[self.preset][name]

    def allowed_library_ops(self, reference_ops: list[str]) -> frozenset | None:
        """Library op names (bases) allowed in forward; None: every op (``library_ops="all"``)."""
        library = self.switch("library_ops")
        if library == "all":
            return None
        if library == "vendor_classes" and not vendor_only(reference_ops):
            return frozenset().union(*(VENDOR_CLASSES[c] for c in vendor_classes(reference_ops)))
        return frozenset()

    def allows_vendor_kernel(self, name: str, reference_ops: list[str]) -> bool:
        """This vendor kernel (by its name's class) is allowed."""
        library = self.switch("library_ops")
        if library == "all":
            return True
        return library == "vendor_classes" and not vendor_only(reference_ops) and \
            vendor_kernel_class(name) in vendor_classes(reference_ops)

    def key(self) -> str:
        data = json.dumps(asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(data.encode()).hexdigest()[:12]

    def use_inductor(self, device: str) -> bool:
        return device.startswith("cuda") if self.inductor is None else self.inductor

    def distributions_for(self, record: dict | None = None) -> tuple[str, ...]:
        """``distributions`` less those the record's validation marks unsupported (the
        reference not finite, or its float32 noise too near the tolerance, under them:
        ``validate.distributions``). The problem's own draws, and a distribution the record
        did not measure, stay; a record without the field keeps them all."""
        wanted = self.distributions or ("natural",)
        measured = ((record or {}).get("validation") or {}).get("distributions")
        if not isinstance(measured, dict):
            return wanted
        kept = tuple(d for d in wanted if d == "natural" or not isinstance(measured.get(d), dict)
                     or measured[d].get("supported") is not False)
        return kept or ("natural",)

    def retry_ratio(self, device: str) -> float:
        """The unseen check's trigger for its spares on ``device`` (``unseen_spares``)."""
        return self.unseen_retry_ratio if device.startswith("cuda") else \
            self.unseen_retry_cpu_ratio

    @property
    def single_warm(self) -> bool:
        """The timing setting ``single_warm``: a second one-call check, its inputs read into
        the L2 cache first, on a hidden trial of its own (``checks.probes.check_trials``); on
        unless set to false."""
        return (self.timing_settings or {}).get("single_warm") is not False

    @property
    def hidden_spares(self) -> int:
        """The hidden trials drawn after the unseen ones: the spares, and with ``single_warm``
        one more for the warm one-call check (the checks keep the last one or two of
        them where the timer replays a graph of several calls: ``checks.probes.check_trials``)."""
        return max(0, self.unseen_spares) + self.single_warm

    def unseen_required(self, hidden: int, graphed: bool = True) -> int:
        """Of ``hidden`` usable unseen trials, those the check times always (the rest are its
        spares); ``graphed``: where the timer replays a graph (``unseen_trials_ungraphed``
        where not)."""
        wanted = self.unseen_trials if graphed else max(self.unseen_trials,
                                                          self.unseen_trials_ungraphed)
        return min(hidden, max(0, wanted))

    def tolerance(self, dtype: str, record: dict | None = None) -> tuple[float, float]:
        validation = (record or {}).get("validation") or {}
        atol = self.atol if self.atol is not None else validation.get("atol")
        rtol = self.rtol if self.rtol is not None else validation.get("rtol")
        default = DEFAULT_TOLERANCE.get(dtype.replace("torch.", ""), (1e-4, 1e-4))
        return (float(atol) if atol is not None else default[0],
                float(rtol) if rtol is not None else default[1])
