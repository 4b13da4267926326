"""The registry of the judge's checks: every hack code, every layer, one decorator.

A check is one small function that reads the typed facts (``grade.facts``) and the judge's own
derived state (``checks.context.Context``) and returns findings ``(code, detail)``. It declares
the hack code it emits, the threat it answers (a row ``T-NN`` of docs/THREAT_MODEL.md), its
layer (how strong the evidence is) and, where a policy switch turns it on, the switch's name.
The driver (``grade.judge``) runs the enabled checks in registration order and records what
they found; the first detail of each code is the one ``hack_details`` keeps.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum


class HackCode(str, Enum):
    """Every hack code a verdict can carry (any one makes it incorrect, reward 0)."""

    FORBIDDEN_API = "forbidden_api"  # the source reaches for introspection, processes, files
    KERNELGUARD = "kernelguard"  # GPU MODE's rule-based detector calls the source hacked
    CHANNEL_TAMPER = "channel_tamper"  # unauthenticated, extra or self-requested frames
    LEAKED_PROCESS = "leaked_process"  # a process escaped its group / outlived forward
    FILE_TAMPER = "file_tamper"  # a guarded file changed while the run ran (grade.grader)
    TENSOR_SUBCLASS = "tensor_subclass"  # forward returned a torch.Tensor subclass
    OUTPUT_ALIASES_INPUT = "output_aliases_input"  # the output shares storage with an input
    INPUT_MUTATED = "input_mutated"  # an input differs after the call from the parent's copy
    CACHED_OUTPUT = "cached_output"  # a call returned an earlier call's bytes (other inputs)
    INCONSISTENT = "inconsistent"  # the same inputs gave different answers
    BACKGROUND_THREAD = "background_thread"  # a thread started in forward or alive after it
    PATCHED_FUNCTION = "patched_function"  # harness functions replaced, a torch mode left on
    NO_CUSTOM_KERNEL = "no_custom_kernel"  # no Triton launch or extension call in a forward
    TORCH_COMPUTE = "torch_compute"  # library compute beyond the policy's allowance
    TIMING_BEHAVIOUR = "timing_behaviour"  # behaves differently when timed or on new inputs
    IMPOSSIBLE_SPEED = "impossible_speed"  # faster than the memory roofline allows
    HOST_COMPUTE = "host_compute"  # tensor elements handed to Python / host memory
    GHOST_KERNELS = "ghost_kernels"  # right answer with the candidate's launches skipped
    TRACE_EVADED = "trace_evaded"  # the dispatch-key state changed, the op witness lost calls
    NOT_GENERAL = "not_general"  # right on the problem's own draws, wrong on another state/range
    LOW_PRECISION = "low_precision"  # within the absolute floor, off at the output's own scale

    def __str__(self) -> str:
        return self.value


class Layer(str, Enum):
    """How strong a check's evidence is (docs/THREAT_MODEL.md, "Strength")."""

    STATIC = "static"  # read from the source before anything runs
    PROCESS = "process"  # enforced or observed by the operating system / the parent process
    DEVICE = "device"  # what ran on the GPU (profiler kernel records, device clocks)
    BEHAVIOURAL = "behavioural"  # the parent's own comparison of answers and times
    BEST_EFFORT = "best_effort"  # observed inside the candidate's interpreter

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Finding:
    """What one check found: a hack code and a detail for people."""

    code: HackCode
    detail: str


@dataclass(frozen=True)
class Check:
    name: str
    code: HackCode
    threat: str
    layer: Layer
    scope: str  # "source" | "failed" | "call" | "run" | "timing"
    fn: Callable[..., Iterable[Finding]]
    switch: str | None = None  # a Policy switch that must be on (``Policy.switch``)


CHECKS: dict[str, Check] = {}


def register(code: HackCode, *, threat: str, layer: Layer, scope: str,
             switch: str | None = None) -> Callable:
    """Register a check under its function's name (the order of registration is the order the
    driver runs checks of one scope in)."""
    def wrap(fn: Callable) -> Callable:
        if fn.__name__ in CHECKS:
            raise ValueError(f"check {fn.__name__} registered twice")
        CHECKS[fn.__name__] = Check(fn.__name__, HackCode(code), threat, Layer(layer), scope,
                                    fn, switch)
        return fn
    return wrap


def collect(code: HackCode, run: Callable[[Callable[[str, str], None]], object]) -> list[Finding]:
    """The findings of a helper written against a ``hack(code, detail)`` callback."""
    found: list[Finding] = []
    run(lambda got, detail: found.append(Finding(HackCode(got), detail)))
    bad = [f.code for f in found if f.code != code]
    if bad:
        raise AssertionError(f"a check declared {code} and found {bad}")
    return found


def checks_of(scope: str) -> list[Check]:
    return [check for check in CHECKS.values() if check.scope == scope]
