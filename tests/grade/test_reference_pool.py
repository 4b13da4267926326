"""The reference's time pooled over a problem's windows (``KERNELMILL_REFERENCE_TIME=pooled``):
a verdict divides by the median of its own window's reference time and the kept ones; a window
is kept only where its CI was within the limit and none of its members was flagged."""
import statistics

import pytest
from conftest import FIXTURES
from kernelmill.core.errors import KernelmillError
from kernelmill.grade.checks.timing import timing_fields
from kernelmill.grade.grader import Grader
from kernelmill.grade.policy import Policy
from kernelmill.grade.reference_pool import (
    POOL_KEPT,
    POOL_VAR,
    SAMPLE_AFTER,
    SAMPLE_EVERY,
    ReferencePool,
    may_keep,
    pool_mode,
    pool_views,
    window_sample,
)

SUBMISSIONS = FIXTURES / "submissions"
# every window's reference time within the limit on a loaded host: each is kept
TIMING = {"min_reps": 6, "max_reps": 40, "warmup": 1, "cap_ms": 300, "ci_limit_pct": 1000.0}


def read(name: str) -> str:
    return (SUBMISSIONS / f"{name}.py").read_text()


def window(ref_ms: float, cand_ms: float = 1.0, ci: float = 0.5, method: str = "cuda_graph",
           **fields) -> dict:
    return {"error": None, "ci_limit_pct": 5.0, **fields, "participants": {
        "reference": {"method": method, "reps": 30, "ci_pct": ci, "ms": ref_ms},
        "candidate": {"method": method, "reps": 30, "ci_pct": 0.3, "ms": cand_ms}}}


def test_the_mode_is_window_unless_asked_and_a_wrong_value_names_the_choices(monkeypatch):
    monkeypatch.delenv(POOL_VAR, raising=False)
    assert pool_mode() == "window"
    monkeypatch.setenv(POOL_VAR, "pooled")
    assert pool_mode() == "pooled"
    monkeypatch.setenv(POOL_VAR, "median")
    with pytest.raises(KernelmillError, match="window, pooled"):
        pool_mode()


def test_a_window_gives_a_sample_only_with_a_time_a_method_and_a_ci_within_its_limit():
    assert window_sample(window(2.0)) == {"ms": 2.0, "method": "cuda_graph"}
    assert window_sample(window(2.0, ci=6.0)) is None  # wider than the window's 5%
    assert window_sample({**window(2.0), "error": {"message": "x"}}) is None
    assert window_sample(window(0.0)) is None
    # rounds left unsettled while the clocks were held: the timing is not precise, not kept
    assert window_sample(window(2.0, held_unsettled=True)) is None
    no_ci = window(2.0)
    no_ci["participants"]["reference"]["ci_pct"] = None
    assert window_sample(no_ci) is None
    assert window_sample(None) is None


def test_the_pool_is_the_median_of_the_kept_times_and_the_windows_own():
    pool = ReferencePool(kept=3)
    key = pool.key("source", "gpu0", "cuda_graph", 1)
    assert pool.pooled(key, None) is None
    assert pool.pooled(key, {"ms": 2.0})["ms"] == 2.0
    for ms in (1.0, 1.1, 5.0):
        pool.keep(key, {"ms": ms})
    got = pool.pooled(key, {"ms": 1.2})
    assert got["ms"] == pytest.approx(statistics.median([1.0, 1.1, 5.0, 1.2]))
    assert got["windows"] == 4 and got["spread_pct"] == pytest.approx(4.0 / got["ms"] * 100,
                                                                       rel=1e-3)
    pool.keep(key, {"ms": 1.3})  # the oldest (1.0) goes: three kept at most
    assert pool.pooled(key, None)["ms"] == pytest.approx(1.3)
    # another problem, GPU, method or kind of window keeps its own
    for other in (pool.key("other", "gpu0", "cuda_graph", 1),
                  pool.key("source", "gpu1", "cuda_graph", 1),
                  pool.key("source", "gpu0", "cuda_events", 1),
                  pool.key("source", "gpu0", "cuda_graph", 8)):
        assert other != key and pool.pooled(other, None) is None
    assert pool.key("source", "gpu0", "cuda_graph", 2) == pool.key("source", "gpu0",
                                                                 "cuda_graph", 8)
    assert POOL_KEPT >= 3


def test_a_kept_window_is_forgotten_once_older_than_the_pools_age():
    now = [1000.0]
    pool = ReferencePool(max_age_s=60.0, clock=lambda: now[0])
    key = pool.key("source", None, "perf_counter", 1)
    pool.keep(key, {"ms": 5.0})
    now[0] += 30
    pool.keep(key, {"ms": 1.0})
    assert pool.pooled(key, None)["windows"] == 2
    now[0] += 40  # the first is 70 s old now
    assert pool.pooled(key, {"ms": 1.2}) == {"ms": pytest.approx(1.1), "windows": 2,
                                             "spread_pct": pytest.approx(0.2 / 1.1 * 100,
                                                                         rel=1e-3)}
    now[0] += 31
    assert pool.pooled(key, None) is None


def test_pooled_views_divide_by_the_pool_and_keep_the_windows_own_time():
    pool = ReferencePool()
    views = {0: window(2.0, members=2), 1: window(2.0, cand_ms=0.5, members=2)}
    key, sample = pool_views(pool, "src", None, views)
    assert sample == {"ms": 2.0, "method": "cuda_graph"}
    for ms in (2.2, 2.4, 2.6):
        pool.keep(key, {"ms": ms})
    pool_views(pool, "src", None, views)
    reference = {"trials": [{"inputs": [], "outputs": []}], "info": {"device": "cpu"},
                 "eager": {"ms": 1.0}, "inductor": {"ms": 0.5}}
    verdict = {"correct": True}
    timing_fields(verdict, reference, views[1])
    pooled = statistics.median([2.0, 2.2, 2.4, 2.6])
    assert verdict["timing"]["reference_ms"] == pytest.approx(pooled)
    assert verdict["timing"]["reference_window_ms"] == 2.0
    assert verdict["timing"]["reference_windows"] == 4
    assert verdict["timings"]["eager_ms"] == pytest.approx(pooled)
    # Inductor's time scales with the eager time it divides by
    assert verdict["timings"]["inductor_ms"] == pytest.approx(pooled / 2)


def test_a_window_is_kept_only_where_no_member_was_flagged_or_failed():
    clean = {"correct": True, "hacks": [], "error": None}
    assert may_keep([clean, {**clean, "correct": False}])  # a wrong answer left before rounds
    assert not may_keep([clean, {**clean, "hacks": ["torch_compute"]}])
    # failed in its timing stage or its checks after the window: it may have queued work there
    assert not may_keep([clean, {**clean, "error": {"stage": "timing", "message": "gone"}}])


def test_the_verdict_cache_tells_the_modes_apart(monkeypatch):
    from kernelmill.grade.batch import verdict_key

    monkeypatch.delenv(POOL_VAR, raising=False)
    window_key = verdict_key("code", "problem", "cuda:0", Policy())
    monkeypatch.setenv(POOL_VAR, "pooled")
    assert verdict_key("code", "problem", "cuda:0", Policy()) != window_key
    # and compiles stepped aside (``timed_window.compile_aside``), where they are
    monkeypatch.delenv(POOL_VAR)
    monkeypatch.setenv("KERNELMILL_COMPILE_ASIDE", "off")
    assert verdict_key("code", "problem", "cuda:0", Policy()) == window_key
    monkeypatch.setenv("KERNELMILL_COMPILE_ASIDE", "on")
    assert verdict_key("code", "problem", "cuda:0", Policy()) != window_key


def test_a_wide_window_leans_on_the_pool_only_once_enough_windows_were_kept():
    pool = ReferencePool()
    wide = {0: window(9.0, ci=50.0)}
    assert pool_views(pool, "src", None, wide) is None and "reference_pool" not in wide[0]
    key = pool.key("src", None, "cuda_graph", 1)
    for ms in (2.0, 2.1):
        pool.keep(key, {"ms": ms})
    assert pool_views(pool, "src", None, wide) is None and "reference_pool" not in wide[0]
    pool.keep(key, {"ms": 2.2})
    assert pool_views(pool, "src", None, wide) is None  # not kept: too wide
    assert wide[0]["reference_pool"]["ms"] == pytest.approx(2.1)
    assert wide[0]["reference_pool"]["windows"] == 3
    # a member that left the window gets nothing; the others still do
    views = {0: {**window(2.0), "error": {"participant": "candidate", "message": "left"}},
             1: window(2.0)}
    assert pool_views(pool, "src", None, views) is not None
    assert "reference_pool" not in views[0] and "reference_pool" in views[1]


def test_a_grader_pools_the_reference_over_its_windows_and_keeps_none_beside_a_hack(
        monkeypatch):
    """Graded on the host: three singles of one answer divide by the median of their windows'
    reference times so far; a group whose member was flagged, or failed in the window, keeps
    nothing for the next."""
    monkeypatch.setenv(POOL_VAR, "pooled")
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    grader = Grader("cpu", policy=policy)
    reference, honest = read("ref_scale_add"), read("honest_scale_add")
    singles = [grader.grade(reference, honest) for _ in range(3)]
    for verdict in singles:
        assert verdict["correct"] and not verdict["hacks"], verdict.get("error")
    own = [v["timing"]["reference_window_ms"] for v in singles]
    for n, verdict in enumerate(singles, 1):
        assert verdict["timing"]["reference_windows"] == n
        assert verdict["timing"]["reference_ms"] == pytest.approx(statistics.median(own[:n]))
        assert verdict["speedup_vs_eager"] == pytest.approx(
            verdict["timing"]["reference_ms"] / verdict["timing"]["candidate_ms"])
    flagged, timed = grader.grade_group(reference, [read("hack_try_fallback"), honest])
    assert flagged["hacks"] and timed["correct"] and not timed["hacks"]
    assert timed["timing"]["reference_windows"] == 1  # groups keep their own
    # a member that fails once it is in the window's rounds (its 40th call): no hack, an error
    leaver = honest.replace("out = torch.empty_like(x)",
                            "global CALLS\n        CALLS += 1\n        if CALLS == 40:\n"
                            "            raise RuntimeError('gone')\n"
                            "        out = torch.empty_like(x)").replace(
        "class ModelNew", "CALLS = 0\n\n\nclass ModelNew")
    left, stayed = grader.grade_group(reference, [leaver, honest])
    assert left["error"] and not left["hacks"] and stayed["correct"], left["error"]
    after = grader.grade_group(reference, [honest, honest])
    assert after[0]["timing"]["reference_windows"] == 1  # nothing kept beside either
    # off (the default): the window's own time, as it was
    monkeypatch.delenv(POOL_VAR)
    plain = Grader("cpu", policy=policy).grade(reference, honest)
    assert "reference_windows" not in plain["timing"] and plain["speedup_vs_eager"]


def test_a_batch_pools_the_reference_over_copies_of_one_problem(tmp_path, monkeypatch):
    """``grade_file`` (what ``kernelmill grade`` and the throughput benchmark run) keeps one
    grader per setting, so copies graded one after another share the problem's pool."""
    import json

    from kernelmill.core.store import read_jsonl
    from kernelmill.grade.batch import grade_file

    monkeypatch.setenv(POOL_VAR, "pooled")
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "ref_scale_add", "source": read("ref_scale_add")})
                        + "\n")
    submissions = tmp_path / "submissions.jsonl"
    submissions.write_text("".join(json.dumps(
        {"submission_id": f"honest#{i}", "problem_id": "ref_scale_add",
         "source": read("honest_scale_add")}) + "\n" for i in range(3)))
    out = tmp_path / "verdicts.jsonl"
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    grade_file(problems, submissions, out, device="cpu", workers=1, policy=policy,
               cache_path=False)
    rows = list(read_jsonl(out))
    assert len(rows) == 3 and all(r["correct"] and not r["hacks"] for r in rows), rows
    assert sorted(r["timing"]["reference_windows"] for r in rows) == [1, 2, 3]



def test_sampled_times_the_reference_until_enough_windows_are_kept_then_every_few():
    pool = ReferencePool()
    wants = []
    for _ in range(SAMPLE_AFTER):  # nothing kept yet: every window times it, and is kept
        wants.append(pool.wants_reference("src", None, 1))
        pool.keep(pool.key("src", None, "perf_counter", 1), {"ms": 1.0})
    wants += [pool.wants_reference("src", None, 1) for _ in range(2 * SAMPLE_EVERY)]
    assert wants == [True] * SAMPLE_AFTER + ([False] * (SAMPLE_EVERY - 1) + [True]) * 2
    # a group's windows, or another problem's, count on their own
    assert pool.wants_reference("src", None, 8) and pool.wants_reference("other", None, 1)


def test_a_sampled_grader_leaves_the_reference_untimed_once_the_pool_holds_enough(
        monkeypatch):
    """Graded on the host with ``sampled``: the first windows time the reference and are kept;
    the next one times the candidate alone and divides by the pool's median."""
    monkeypatch.setenv(POOL_VAR, "sampled")
    policy = Policy(timeout_s=60, timing_settings=TIMING, static_first=False)
    grader = Grader("cpu", policy=policy)
    reference, honest = read("ref_scale_add"), read("honest_scale_add")
    verdicts = [grader.grade(reference, honest) for _ in range(SAMPLE_AFTER + 1)]
    for verdict in verdicts:
        assert verdict["correct"] and not verdict["hacks"], verdict.get("error")
    own = [v["timing"]["reference_window_ms"] for v in verdicts]
    assert all(ms is not None for ms in own[:SAMPLE_AFTER]) and own[-1] is None, own
    last = verdicts[-1]
    assert last["timing"]["reference_windows"] == SAMPLE_AFTER
    assert last["timing"]["reference_ms"] == pytest.approx(statistics.median(own[:-1]))
    assert last["speedup_vs_eager"] == pytest.approx(
        last["timing"]["reference_ms"] / last["timing"]["candidate_ms"])
    # its rounds held the candidate alone: the reference's turns are none
    assert not (last["profile"]["round_medians_ms"] or {}).get("reference")
    assert (last["profile"]["round_medians_ms"] or {}).get("candidate")
