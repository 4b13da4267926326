"""The reference's time pooled over a problem's windows on one GPU (``KERNELMILL_REFERENCE_TIME=
pooled``; off by default: ``window``, each speedup divides by its own window's reference).

Every window times the reference beside the candidates as before. With the pool on, a
verdict's ``reference_ms`` is the median of its own window's reference time and those of the
last ``POOL_KEPT`` windows of the same problem on the same GPU, with the same timing method and
the same kind of window (a single's, a group's), that were kept within ``POOL_MAX_AGE_S``; the
window's own time stays in the verdict (``timing.reference_window_ms``). A window's time is
kept only once its members were judged, none flagged for a hack and none failed (a member that
slowed the reference in its own window would raise the speedups of every later grade), and only
where its reference's graph was captured, its CI was within the window's limit and its rounds
were settled where the clocks were held. One window's reference time moves with the reference
worker's process and the GPU's state of that moment: copies of one Triton fp16 GEMM graded as
singles beside 15 other grades moved 5.5-10% apart where their candidate times moved about 1%,
the reference's (cuBLAS) about 6% (H100). A median over windows moves less, and no single
window decides it.

``KERNELMILL_REFERENCE_TIME=sampled`` pools the same way, and once ``SAMPLE_AFTER`` windows of
a problem are kept it times the reference only in every ``SAMPLE_EVERY``-th window: in the
others the reference's worker warms the clocks and witnesses them across the unseen checks, and
the rounds hold the candidates alone (``run_window``'s ``unscored``), so the window is shorter
by the reference's turns.

The price: a window's alternating rounds cancel what slows the whole window (its clocks, its
heat) from the ratio, and a pooled ratio keeps only the candidate's side of it. So both modes
stay off until a GPU A/B over problem kinds shows them steadier without moving the medians.
Pools are per grading process (a ``Grader``), per timing method and per kind of window; a
problem's first windows (none or one kept) get little from it.
"""
from __future__ import annotations

import hashlib
import statistics
import threading
import time
from collections import deque

from kernelmill.core.errors import env_choice

POOL_VAR = "KERNELMILL_REFERENCE_TIME"
POOL_MODES = ("window", "pooled", "sampled")
POOL_KEPT = 8  # kept windows per problem, GPU, method and kind of window
# A kept window older than this is forgotten: the GPU's state drifts (its clocks, its heat, what
# else runs on it), and a problem seen again after a while is timed against its own window and
# the windows of its new visit, not an hour-old median (a dataset of thousands of problems comes
# back to each one an epoch later).
POOL_MAX_AGE_S = 600.0
# ``sampled``: once this many windows of a problem are kept (on a GPU, of a kind), a window times
# the reference only every ``SAMPLE_EVERY``-th time, to keep the pool fresh; in the others its
# worker only warms the clocks and witnesses them across the unseen checks.
SAMPLE_AFTER = 4
SAMPLE_EVERY = 4


def pool_mode() -> str:
    """``KERNELMILL_REFERENCE_TIME``: ``window`` (unset), ``pooled`` or ``sampled``; another
    value is an error that names the choices (one line from the CLI)."""
    return env_choice(POOL_VAR, POOL_MODES)


def window_sample(window: dict | None) -> dict | None:
    """A window's reference time as a pool takes it (``{ms, method}``), or None: no reference
    time, no method, a graph that failed to capture, a CI wider than the window's limit (or
    none read), or rounds left
    unsettled while a policy held the clocks back (``held_unsettled``: a kernel at the power
    cap reads fast then; the verdict's timing is not ``precise`` either)."""
    if not window or window.get("error") or window.get("held_unsettled"):
        return None
    ref = (window.get("participants") or {}).get("reference") or {}
    if ref.get("capture_error"):  # timed call by call where its graph failed: not kept
        return None
    ms, method, ci = ref.get("ms"), ref.get("method"), ref.get("ci_pct")
    limit = window.get("ci_limit_pct")
    if type(ms) not in (int, float) or not ms > 0 or not isinstance(method, str) or \
            type(ci) not in (int, float) or type(limit) not in (int, float) or ci > limit:
        return None
    return {"ms": float(ms), "method": method}


class ReferencePool:
    """The kept reference times, per key (``key``), the last ``kept`` of each within
    ``max_age_s``; ``clock`` is ``time.monotonic`` (a test's own otherwise)."""

    def __init__(self, kept: int = POOL_KEPT, max_age_s: float = POOL_MAX_AGE_S,
                 clock=time.monotonic):
        self.kept, self.max_age_s, self.clock = kept, max_age_s, clock
        self._times: dict[tuple, deque] = {}  # key -> (when kept, ms)
        self._unscored: dict[tuple, int] = {}  # windows since a problem's reference was timed
        self._lock = threading.Lock()

    @staticmethod
    def key(source: str, gpu: str | None, method: str, members: int) -> tuple:
        """A problem (its graded source), the physical GPU (its lock path; None on CPU), the
        timing method and whether the window held a group."""
        return (hashlib.sha256(source.encode()).hexdigest()[:16], gpu, method, members > 1)

    def pooled(self, key: tuple, sample: dict | None) -> dict | None:
        """``{ms, windows, spread_pct}``: the median of the kept times and ``sample``'s (this
        window's, not kept yet), over how many windows, and their spread ((max - min) / median,
        %); None where there is no time at all."""
        since = self.clock() - self.max_age_s
        with self._lock:
            times = [ms for at, ms in self._times.get(key) or () if at >= since]
        if sample is not None:
            times.append(sample["ms"])
        if not times:
            return None
        median = statistics.median(times)
        return {"ms": median, "windows": len(times),
                "spread_pct": round((max(times) - min(times)) / median * 100, 3)}

    def wants_reference(self, source: str, gpu: str | None, members: int) -> bool:
        """``sampled``: whether the next window of ``source`` (on ``gpu``, of its kind) times
        the reference: while fewer than ``SAMPLE_AFTER`` windows of it are kept (for any one
        timing method), and every ``SAMPLE_EVERY``-th window after."""
        since = self.clock() - self.max_age_s
        family = self.key(source, gpu, "", members)
        with self._lock:
            fresh = max((sum(at >= since for at, _ in times) for key, times in
                         self._times.items() if (key[0], key[1], key[3]) ==
                         (family[0], family[1], family[3])), default=0)
            if fresh < SAMPLE_AFTER:
                return True
            count = self._unscored.get(family, 0) + 1
            self._unscored[family] = 0 if count >= SAMPLE_EVERY else count
            return count >= SAMPLE_EVERY

    def keep(self, key: tuple, sample: dict) -> None:
        """``sample``'s time kept for later windows of ``key`` (the oldest goes past ``kept``)."""
        with self._lock:
            self._times.setdefault(key, deque(maxlen=self.kept)).append(
                (self.clock(), sample["ms"]))


POOL_LEANS_ON = 3  # kept windows that stand in for a window whose own reference time is wide


def may_keep(verdicts: list[dict]) -> bool:
    """Whether a window's reference time may be kept, from its members' verdicts: none flagged
    for any hack, none failed (a member can queue device work in its turn and then fail, in
    the window or in its checks after it, where the checks of a finished run never look)."""
    return not any(v.get("hacks") or v.get("error") for v in verdicts)


def pool_views(pool: ReferencePool, source: str, gpu: str | None,
               views: dict) -> tuple[tuple, dict] | None:
    """Give each of a window's member views (``candidate_view``s of one window) the pooled
    reference time (``reference_pool``). Returns what to keep once its members are judged
    (``(key, sample)``), or None: the window's own reference time is not one to keep. A window
    whose own time is too wide to keep still gets the pool's where ``POOL_LEANS_ON`` or more
    windows were kept, as does one whose reference was not timed (``reference_unscored``,
    ``sampled``); one with no reference time gets none (it has no speedup either), nor does a
    member that left the window (its view's ``error``)."""
    view = next((v for v in views.values() if v and not v.get("error")), None)
    ref = ((view or {}).get("participants") or {}).get("reference") or {}
    unscored = bool((view or {}).get("reference_unscored"))
    if view is None or (ref.get("ms") is None and not unscored) or \
            not isinstance(ref.get("method"), str):
        return None
    key = pool.key(source, gpu, ref["method"], int(view.get("members") or 1))
    sample = None if unscored else window_sample(view)
    pooled = pool.pooled(key, sample)
    if pooled is not None and (sample is not None or pooled["windows"] >= POOL_LEANS_ON):
        for member in views.values():
            if member and not member.get("error"):
                member["reference_pool"] = pooled
    return (key, sample) if sample is not None else None
