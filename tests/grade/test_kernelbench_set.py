"""The KernelBench answer set (benchmarks/kernelbench_set): the loader finds every answer and
its problem file, and two answers match their references at shrunken sizes under the Triton
interpreter (benchmarks/kernelbench_set/check_cpu.py checks them all)."""
import ast
import json
import sys

from conftest import ROOT

import pytest

sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "kernelbench_set"))
import check_cpu  # noqa: E402
import grade_reports  # noqa: E402
import grade_sets  # noqa: E402
import grade_timeline  # noqa: E402
import grade_throughput  # noqa: E402


@pytest.fixture(scope="module")
def kernelbench():
    try:
        return grade_sets.find_kernelbench()
    except SystemExit:
        pytest.skip("no KernelBench problems folder beside or inside the checkout")


def test_loader_finds_answers_with_their_problems(kernelbench):
    pairs = grade_sets.kernelbench_answers(kernelbench)
    assert len(pairs) >= 24
    assert {p.parent.name for _, p in pairs} == {"level1", "level2", "level3"}
    for answer, problem in pairs:
        assert problem.is_file()
        tree = ast.parse(answer.read_text())
        assert any(isinstance(node, ast.ClassDef) and node.name == "ModelNew"
                   for node in tree.body), answer.name


@pytest.mark.parametrize("stem", ["level1_95_CrossEntropyLoss",
                                  "level2_14_Gemm_Divide_Sum_Scaling"])
def test_answer_matches_reference_at_small_sizes(kernelbench, stem):
    answer = grade_sets.KERNELBENCH_SET / f"{stem}.py"
    status, detail = check_cpu.check(answer, kernelbench)
    assert status == "ok", detail


def test_shrink_keeps_derived_sizes_consistent():
    source = "batch = 4096\ndim = 8192\nsmall = 3\nshape = (dim, 1)\nscale = 2.0\n"
    shrunk = check_cpu.shrink(source)
    namespace: dict = {}
    exec(shrunk, namespace)
    assert namespace["batch"] <= 72 and namespace["dim"] <= 72 and namespace["small"] == 3
    assert namespace["shape"] == (namespace["dim"], 1) and namespace["scale"] == 2.0
    assert "x, y = 2, " in check_cpu.shrink("x, y = 2, 4096\n")
    assert check_cpu.shrink("h = w = 256\n", {"h": 5}) == "h = w = 5\n"


def test_the_throughput_report_says_where_the_unseen_check_went(tmp_path, capsys):
    """The benchmark's report of a grade: the parent's hand-overs of the unseen parts and the
    worker's steps for each, and their medians over the grades."""
    rows = [{"submission_id": f"s{i}", "problem_id": "p", "wall_s": 10.0 + i,
             "profile": {"late_write_ms": [40.0 + i, 42.0],
                         "unseen_steps_ms": {"late": [60.0, 61.0], "load": [20.0, 21.0 + i],
                                             "observe": [5.0, 5.0]}}} for i in range(3)]
    out = tmp_path / "verdicts.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    grade_reports.report_slowest_and_median(out)
    printed = capsys.readouterr().out
    assert "parent's hand-overs [42.0, 42.0]" in printed  # the slowest grade's own
    assert "late=121.0 load=42.0 observe=10.0 parent hand-over=83.0" in printed


def _per_problem_lines(tmp_path, capsys, rows: list[dict], prefix: str) -> list[str]:
    """The per-problem report's indented lines that start with ``prefix``, for these verdict
    rows, stripped."""
    out = tmp_path / "verdicts.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    grade_reports.report_per_problem(out)
    return [line.strip() for line in capsys.readouterr().out.splitlines()
            if line.startswith(f"    {prefix}")]


def test_the_per_problem_report_opens_an_unseen_check_that_holds_much_of_its_window(
        tmp_path, capsys):
    """A problem whose unseen check held a quarter of its window or more gets a line of where
    each member's check went (its steps over its trials, medians), how many took spares and
    what their trigger read (the first new call against the fastest timed one, with how many
    checks were gated); one whose check is small gets none."""
    def row(problem, unseen, loads, spares, first=0.2, gated=None):
        calls = {"unseen": [first] + [0.2] * spares, "seen": [0.2, 0.19, 0.21], "required": 1}
        if gated is not None:
            calls["gated"] = gated
        return {"submission_id": problem, "problem_id": problem, "wall_s": 5.0,
                "profile": {"window_ms": 1000.0,
                            "phases_ms": {"warm": 100.0, "rounds": 200.0, "unseen": unseen},
                            "unseen_steps_ms": {"late": [1.0] * (1 + spares), "load": loads,
                                                "seen": [380.0]},
                            "unseen_calls_ms": calls}}
    rows = [row("heavy", 880.0, [75.0], 0, 0.19, True), row("heavy", 900.0, [80.0], 0, 0.2, False),
            row("spared", 300.0, [40.0, 40.0, 40.0], 2, 0.228), row("light", 70.0, [20.0], 0)]
    out = tmp_path / "verdicts.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    grade_reports.report_per_problem(out)
    lines = capsys.readouterr().out.splitlines()
    opened = [line.strip() for line in lines if line.startswith("    unseen check")]
    assert opened == [
        ("unseen check 89% of the window; a member's steps, median ms: late=1 load=78 seen=380; "
         "spares taken in 0 of 2 checks; new inputs read 1.000-1.053x the timed ones "
         "(gated in 1 of 2)"),
        ("unseen check 30% of the window; a member's steps, median ms: late=3 load=120 seen=380; "
         "spares taken in 1 of 1 checks; new inputs read 1.200-1.200x the timed ones")], lines


def test_the_per_problem_report_says_how_groups_shared_their_reference_runs(tmp_path, capsys):
    """In groups: the members a reference run served, its CPU per member and each budget's
    memory wait, medians per problem; singles get no such line."""
    def row(problem, group, shared, cpu, host, device):
        return {"submission_id": problem, "problem_id": problem, "wall_s": 5.0,
                "profile": {"group": group, "reference_shared_by": shared,
                            "cpu_s": {"reference": cpu},
                            "admission_waits_s": {"host": host, "device": device}}}
    rows = [row("gemm", 8, 8, 0.5, 0.0, 18.0), row("gemm", 8, 8, 0.7, 2.0, 20.0),
            row("norm", 8, 1, 3.3, 106.0, 0.0), row("alone", 1, 1, 2.0, 0.0, 0.0)]
    lines = _per_problem_lines(tmp_path, capsys, rows, "reference runs")
    assert lines == [
        ("reference runs: 8 members a run, CPU 0.60 s a member; memory waits: host 1.00 s, "
         "device 19.00 s"),
        ("reference runs: 1 members a run, CPU 3.30 s a member; memory waits: host 106.00 s, "
         "device 0.00 s")], lines


def test_the_throughput_report_says_where_the_grades_in_flight_were():
    """Grades in flight by stage over a phase's steady part (Little's law): two grades at once
    for 100 s, each 4 s of reference forward then 6 s of candidate timing, the last 2 s of the
    grade in its judge and 1 s before its worker in the parent's other work."""
    rows = [{"profile": {"began_at": 1000.0 + 10 * k + 5 * lane, "reference_s": 4.0,
                         "candidate_s": 9.0, "judge_s": 2.0,
                         "reference_stages_s": {"reference forward": 4.0},
                         "stages_s": {"timing": 6.0}}}
            for k in range(10) for lane in range(2)]
    seconds, held = grade_timeline.in_flight(rows, share=(0.2, 0.8))
    assert 60 < seconds < 70
    assert abs(sum(held.values()) - 2.6) < 0.15, held  # 13 s of each 10 s lane
    assert abs(held["reference: reference forward"] - 0.8) < 0.1
    assert abs(held["candidate: timing other"] - 1.2) < 0.1
    assert abs(held["parent judge"] - 0.4) < 0.1 and abs(held["parent other"] - 0.2) < 0.1
    # the reference's forward split by its parts where the run gave them
    for row in rows:
        row["profile"]["reference_forward_s"] = {"stepped_aside": 1.0, "written": 2.5,
                                                 "other": 0.5}
    _seconds, held = grade_timeline.in_flight(rows, share=(0.2, 0.8))
    assert "reference: reference forward" not in held or \
        held["reference: reference forward"] < 0.01
    assert abs(held["reference: forward written"] - 0.5) < 0.1, held
    assert abs(held["reference: forward stepped_aside"] - 0.2) < 0.1
    # the timing stage split: the wait for the group's last member, then the window's
    for row in rows:
        row["profile"].update(ready_ms=1000.0, last_ready_ms=2000.0, exclusive_wait_ms=1500.0,
                              window_ms=2500.0)
    _seconds, held = grade_timeline.in_flight(rows, share=(0.2, 0.8))
    assert abs(held["candidate: timing for the last ready"] - 0.2) < 0.05, held
    assert abs(held["candidate: timing window"] - 0.5) < 0.05
    assert abs(held["candidate: timing other"] - 0.2) < 0.05
    # a stage's seconds with the workers stopped for other windows, apart from the stage's own
    for row in rows:
        row["profile"]["stages_s"] = {"forward": 4.0, "timing": 2.0}
        row["profile"]["stepped_aside_by_stage"] = {"forward": 3.0}
    _seconds, held = grade_timeline.in_flight(rows, share=(0.2, 0.8))
    assert abs(held["candidate: stepped aside"] - 0.6) < 0.05, held
    assert abs(held["candidate: forward"] - 0.2) < 0.05


def test_the_report_says_what_of_a_grade_its_candidate_worker_spent_before_its_inputs():
    """A grade's latency (medians) and the candidate worker's stages before it needs its
    inputs (start, CUDA context, confinement, the guards' setup; not the wait for the GPU's
    hold), each grade's counted up to its reference phase, as a share of both phases."""
    def row(reference, early, wait=0.0):
        return {"profile": {"admission_wait_s": wait, "reference_s": reference,
                            "candidate_s": 8.0,
                            "stages_s": {"start": 0.5, "cuda init": early - 1.0, "setup": 0.5,
                                         "run target": 3.0, "forward": 2.0}}}

    # two grades whose 2 s before the inputs fit their 4 s reference phase, one whose 3 s
    # do not fit its 1 s one
    rows = [row(4.0, 2.0, wait=1.0), row(4.0, 2.0), row(1.0, 3.0, wait=5.0)]
    latency = grade_timeline.before_inputs(rows)
    assert latency["admission_s"] == 1.0 and latency["reference_s"] == 4.0
    assert latency["candidate_s"] == 8.0 and latency["before_inputs_s"] == 2.0
    assert abs(latency["overlap_share"] - (2 + 2 + 1) / (12 + 12 + 9)) < 1e-9
    assert latency["started_early"] == 0 and latency["payload_wait_s"] is None
    assert grade_timeline.before_inputs([{"profile": {"reference_s": 1.0}}]) is None
    # workers started beside their reference run (``KERNELMILL_EARLY_CANDIDATES``) say so
    rows[0]["profile"]["stages_s"]["payload wait"] = 1.5
    rows[2]["profile"]["stages_s"]["payload wait"] = 0.5
    latency = grade_timeline.before_inputs(rows)
    assert latency["started_early"] == 2 and latency["payload_wait_s"] == 1.0


def test_the_report_says_whether_the_gpus_windows_or_the_grades_set_the_pace():
    """Two grades at once, each 4 s of reference forward, then 1 s waiting for the GPU alone
    and a 1 s window: windows are held 1 s of every 5 s lane-period (lanes offset so their
    windows never meet), asked for 1 s more, and the GPU is free of windows the rest."""
    rows = [{"profile": {"began_at": 1000.0 + 10 * k + 5 * lane, "reference_s": 4.0,
                         "candidate_s": 6.0, "judge_s": 0.0,
                         "reference_stages_s": {"reference forward": 4.0},
                         "stages_s": {"timing": 6.0}, "ready_ms": 0.0, "last_ready_ms": 0.0,
                         "exclusive_wait_ms": 1000.0, "window_ms": 1000.0}}
            for k in range(10) for lane in range(2)]
    states = grade_timeline.window_states(rows, share=(0.2, 0.8))
    assert abs(states["held"] - 0.2) < 0.03, states
    assert abs(states["asked"] - 0.2) < 0.03, states
    assert abs(states["none"] - 0.6) < 0.03, states
    # windows back to back: each grade's window asked for while the other lane's is held
    for row in rows:
        row["profile"].update(exclusive_wait_ms=4000.0, window_ms=5000.0,
                              reference_s=0.0, candidate_s=10.0)
        row["profile"]["reference_stages_s"] = {}
        row["profile"]["stages_s"] = {"timing": 10.0}
    states = grade_timeline.window_states(rows, share=(0.2, 0.8))
    assert states["held"] > 0.95 and states["none"] < 0.05, states
    assert grade_timeline.window_states([]) == {}


def test_windows_are_split_by_whether_another_worker_made_its_cuda_context_meanwhile():
    """Grade A's candidate starts its CUDA context (1 s) while grade B's window times the GPU:
    B's window is beside an init; A's own init, and its wait for the lock before it, do not
    count for A's window, nor does an init that ended before B's window."""
    def row(began, precise, init_s, wait_s=0.0):
        stages = {"cuda init wait": wait_s, "cuda init": init_s, "timing": 3.0} if wait_s else \
            {"cuda init": init_s, "timing": 3.0}
        return {"timing": {"precise": precise},
                "profile": {"began_at": began, "reference_s": 0.0, "candidate_s": 5.0,
                            "judge_s": 0.0, "stages_s": stages, "ready_ms": 0.0,
                            "last_ready_ms": 0.0, "exclusive_wait_ms": 0.0,
                            "window_ms": 1000.0}}

    # B: init 0-1, timing 1-4 (its window 1-2); A: init 1.2-2.2 (inside B's window)
    b, a = row(1000.0, False, 1.0), row(1001.2, True, 1.0)
    counts = grade_timeline.windows_beside_inits([b, a])
    assert counts == {"beside": [1, 1], "apart": [1, 0]}, counts
    # A waited for the lock through B's window and made its context after it: both apart
    a = row(1000.2, True, 1.0, wait_s=1.9)  # wait 0.2-2.1, init 2.1-3.1, window 3.1-4.1
    counts = grade_timeline.windows_beside_inits([b, a])
    assert counts == {"beside": [0, 0], "apart": [2, 1]}, counts
    assert grade_timeline.windows_beside_inits([{"profile": {}}]) == {}


def test_the_held_host_share_reads_each_held_stages_wall_less_its_stops_against_its_cpu():
    rows = [{"profile": {"stages_s": {"start": 0.5, "setup": 0.3, "forward": 3.0 + k,
                                      "timing": 2.0, "ghost": 1.0, "result": 0.4},
                         "stages_cpu_s": {"start": 0.4, "setup": 0.25, "forward": 2.0,
                                          "timing": 0.5, "ghost": 0.2, "result": 0.4},
                         "stepped_aside_by_stage": {"forward": 1.0 + k}}} for k in range(3)]
    share = grade_timeline.held_host_share(rows)
    # the forward's stops for other windows are not held; start, timing and what follows the
    # GPU work's end (the result) are not counted
    assert share["forward"] == (2.0, 2.0) and share["ghost"] == (1.0, 0.2)
    assert set(share) == {"setup", "forward", "ghost", "total"}
    assert share["total"] == (3.3, 2.45)
    assert grade_timeline.held_host_share([{"profile": {}}]) == {}


def test_verdicts_ending_in_waves_read_bursty_and_evenly_spaced_ones_do_not():
    def rows(ends):
        return [{"profile": {"began_at": end - 10.0, "reference_s": 4.0, "candidate_s": 6.0}}
                for end in ends]

    even = grade_timeline.verdict_waves(rows([100.0 + 2 * k for k in range(40)]))
    assert abs(even["gap_median_s"] - 2.0) < 1e-9 and even["burstiness"] < -0.9, even
    # waves of 8 ends within 0.1 s, 16 s apart
    waves = grade_timeline.verdict_waves(
        rows([100.0 + 16 * w + 0.01 * k for w in range(5) for k in range(8)]))
    assert waves["burstiness"] > 0.5 and waves["gap_median_s"] < 0.05, waves
    assert waves["gap_max_s"] > 15, waves
    assert grade_timeline.verdict_waves(rows([1.0, 2.0])) == {}
    assert grade_timeline.verdict_waves([{"profile": {"began_at": 1.0}}] * 5) == {}


def test_the_in_flight_report_names_the_slots_and_a_pass_too_short_for_them(
        tmp_path, capsys, monkeypatch):
    from kernelmill.grade import admitted

    rows = [{"profile": {"began_at": 1000.0 + 10 * k, "reference_s": 4.0, "candidate_s": 9.0,
                         "judge_s": 2.0, "reference_stages_s": {"reference forward": 4.0},
                         "stages_s": {"timing": 6.0}}} for k in range(10)]
    out = tmp_path / "verdicts.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(admitted, "_SLOTS_PER_GPU", {0: 16})
    grade_timeline.report_in_flight(out, 24)
    printed = capsys.readouterr().out
    assert "(slots: 16)" in printed and "gave its 16 slots 24 grades" in printed
    grade_timeline.report_in_flight(out, 64, 8)
    assert "gave its 16 slots 8 groups" in capsys.readouterr().out
    grade_timeline.report_in_flight(out, 40)
    assert "fewer than two" not in capsys.readouterr().out


def test_validated_records_give_the_sets_problems_their_tolerance(tmp_path, monkeypatch, capsys):
    """``--records``: a problem whose source a validated record holds is graded with that
    record's validation (its calibrated tolerance); the report names those the validator
    rejected; a truncated record line is left out, not a crash."""
    problem = tmp_path / "level2" / "14_Gemm.py"
    problem.parent.mkdir()
    problem.write_text("import torch\n# a problem\n")
    other = tmp_path / "level2" / "18_Other.py"
    other.write_text("import torch\n# another problem\n")
    answer = grade_sets.KERNELBENCH_SET / "level2_14_Gemm_Divide_Sum_Scaling.py"
    monkeypatch.setattr(grade_sets, "kernelbench_answers",
                        lambda root: [(answer, problem), (answer, other)])
    records = tmp_path / "audit.jsonl"
    records.write_text(
        json.dumps({"source": problem.read_text(),
                    "validation": {"passed": True, "atol": 0.0054, "rtol": 0.0054}}) + "\n" +
        json.dumps({"source": other.read_text(),
                    "validation": {"passed": False, "atol": 1e-3, "rtol": 1e-3,
                                   "checks": {"no_dead_ops": {"passed": False}}}}) + "\n" +
        '{"source": "trunc')
    found = grade_sets.validated_records([str(records)])
    assert len(found) == 2
    (tmp_path / "out").mkdir()
    problems, _subs, n = grade_sets.build_kernelbench_set(tmp_path / "out", tmp_path,
                                                                "cuda", 1, found)
    rows = [json.loads(line) for line in problems.read_text().splitlines()]
    assert rows[0]["validation"]["atol"] == 0.0054 and n == 2
    grade_sets.report_validation(problems)
    assert "2 of 2 problems graded at their validated tolerance; rejected by the validator: " \
        f"{answer.stem} (no_dead_ops)" in capsys.readouterr().out


def test_a_set_is_cut_to_the_problems_a_pattern_finds(tmp_path):
    """``--match``: the problems whose id the pattern finds and every copy of their answers,
    the files rewritten (two runs then grade the same submissions)."""
    import re

    problems, subs, count = grade_sets.build_triton_set(tmp_path, "cpu", copies=2)
    ids = [json.loads(line)["id"] for line in problems.read_text().splitlines()]
    assert count == 2 * len(ids) > 4
    wanted = ids[:2]
    cut = grade_sets.only_matching((problems, subs, count),
                                         "^(" + "|".join(map(re.escape, wanted)) + ")$")
    assert cut[2] == 4
    assert [json.loads(line)["id"] for line in problems.read_text().splitlines()] == wanted
    kept = [json.loads(line) for line in subs.read_text().splitlines()]
    assert sorted({row["problem_id"] for row in kept}) == sorted(wanted)
    assert grade_sets.only_matching(cut, None) == cut


def test_the_throughput_report_takes_the_steady_rate_between_the_quarters(tmp_path):
    """``_first_line_watch`` notes when each verdict line arrives; ``_middle_rate`` is the rate
    between a quarter and three quarters of them: a slow start-up and a cut's slow last grades
    leave it alone, where the rate after the first verdict takes both in."""
    import time as _time

    out = tmp_path / "verdicts.jsonl"
    start = _time.monotonic()
    seen = grade_throughput._first_line_watch(out, start)
    _time.sleep(0.3)
    for _ in range(5):  # 5 verdicts, one per watcher poll or so
        with out.open("a") as handle:
            handle.write(json.dumps({"x": "y" * 100}) + "\n")
        _time.sleep(0.3)
    seen["stop"] = True
    arrivals = seen["arrivals"]
    assert seen["lines"] == 1 and arrivals[0][1] == 1 and arrivals[-1][1] == 5
    assert [n for _t, n in arrivals] == sorted({n for _t, n in arrivals})  # one per change

    steady = [(10.0 + 2.0 * i, i + 1) for i in range(16)]  # one every 2 s: 30 per minute
    slow_end = steady + [(60.0, 17), (90.0, 18)]  # two long grades at the cut
    assert grade_throughput._middle_rate(steady, 16)["per_minute_middle"] == 30.0
    assert grade_throughput._middle_rate(slow_end, 18)["per_minute_middle"] == 30.0
    after_first = grade_throughput._after_first({"s": 10.0, "lines": 1, "arrivals": slow_end},
                                                18, 90.0)
    assert after_first["per_minute_after_first"] < 15 < after_first["per_minute_middle"]
    assert grade_throughput._middle_rate(steady[:5], 5) == {}  # too few to say


def test_window_parts_read_as_shares_of_all_the_windows_time(tmp_path):
    """A part only some windows have (a graph captured again) counts what it cost over all of
    them; the witness's reading cost is read per verdict."""
    assert grade_reports.phase_shares({"rounds": [300.0, 300.0], "resize": [400.0]},
                                      [500.0, 1000.0]) == \
        {"rounds": 0.4, "resize": 0.267, "other": 0.333}
    assert grade_reports.phase_shares({}, []) == {}
    rows = [{"correct": True, "hacks": [],
             "profile": {"window_ms": 500.0 + 500 * k, "exclusive_wait_ms": float(k),
                         "phases_ms": {"rounds": 300.0, **({"resize": 400.0} if k else {})},
                         "witness": {"records": 1000 * (k + 1), "read_s": 0.1 * (k + 1)}}}
            for k in range(2)]
    # a window that reports no parts counts in neither side of the shares
    rows.append({"correct": True, "hacks": [],
                 "profile": {"window_ms": 9000.0, "exclusive_wait_ms": 7.0}})
    out = tmp_path / "verdicts.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = grade_reports.summarize(out)
    assert summary["window_phase_share"]["resize"] == 0.267, summary["window_phase_share"]
    assert summary["witness"] == {"records": 1500, "read_s": 0.15}, summary["witness"]
    # how the windows' turns settled (``settle_if``): one left unsettled, one settled after
    # the policy held the clocks back, and how many saw the clocks held
    rows[0]["timing"] = {"settled": False, "clocks_held_ms": 0.0}
    rows[1]["timing"] = {"settled": True, "settled_over": 1, "clocks_held_ms": 4.2}
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert grade_reports.summarize(out)["settled_by"] == {"unsettled": 1, "settled over": 1,
                                                          "clocks held": 1}
    # the windows that waited for shared work to step aside (one of three, 0.6 s), and each
    # reference run's longest stretch between the points where a window may go first
    rows[1]["profile"]["exclusive_drain_ms"] = 600.0
    rows[0]["profile"]["exclusive_drain_ms"] = 0.0
    rows[0]["profile"]["reference_stretch_s"], rows[1]["profile"]["reference_stretch_s"] = 0.2, 0.9
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = grade_reports.summarize(out)
    assert (summary["windows_drained"], summary["drain_s_total"]) == (1, 0.6), summary
    assert summary["reference_stretch_s"] == [0.55, 0.9]
    rows[0]["profile"]["longest_stretch_by_stage"] = {"setup": 0.1, "forward": 1.2}
    rows[1]["profile"]["longest_stretch_by_stage"] = {"forward": 0.4}
    rows[2]["profile"]["longest_stretch_by_stage"] = {"setup": 0.5}
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = grade_reports.summarize(out)
    assert summary["candidate_stretch_s"] == [0.5, 1.3]
    assert summary["candidate_stretch_stages"] == {"forward": 2, "setup": 1}
    # candidates whose compiles stepped aside (``KERNELMILL_COMPILE_ASIDE``), and for how long
    assert summary["compile_aside"] is None
    rows[0]["profile"]["compile_aside"] = {"times": 2, "s": 1.5}
    rows[2]["profile"]["compile_aside"] = {"times": 1, "s": 0.5}
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert grade_reports.summarize(out)["compile_aside"] == [2, 1.0, 2.0]
    # the memory admission's waits, per budget: the host's, then the GPU's
    assert grade_reports.summarize(out)["admission_waits_s"] == {}
    rows[0]["profile"]["admission_waits_s"] = {"host": 24.0, "device": 0.0}
    rows[1]["profile"]["admission_waits_s"] = {"host": 0.1, "device": 2.0}
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert grade_reports.summarize(out)["admission_waits_s"] == {"host": [12.05, 24.0, 24.1],
                                                                 "device": [1.0, 2.0, 2.0]}
    # the unseen checks that timed spare trials past their required one, and what those
    # spares' steps (asked for, loaded, looked at, the calls after) cost the windows
    rows[0]["profile"]["unseen_calls_ms"] = {"seen": [0.29], "unseen": [0.33, 0.29, 0.3],
                                             "required": 1}
    rows[0]["profile"]["unseen_steps_ms"] = {"late": [1.0, 10.0, 20.0], "load": [40.0] * 3,
                                             "observe": [20.0, 60.0, 70.0],
                                             "after": [2.0, 3.0, 4.0]}
    rows[1]["profile"]["unseen_calls_ms"] = {"seen": [0.29], "unseen": [0.29], "required": 1}
    rows[1]["profile"]["unseen_steps_ms"] = {"late": [1.0], "load": [40.0]}
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = grade_reports.summarize(out)
    assert (summary["checks_with_spares"], summary["unseen_checks"]) == (1, 2), summary
    assert summary["spare_s_total"] == 0.25  # 10 + 40 + 60 + 3, then 20 + 40 + 70 + 4 ms


def test_a_window_ab_reads_each_arm_against_the_first_from_kept_verdicts(tmp_path):
    """``scripts/window_ab.py``: passes grouped into arms by their names' letters; each answer's
    median speedup per pass, each arm's shift against the base arm (N) beside the base arm's own
    pass-to-pass shift, the spread over copies by arm (of the speedups and of each side's
    times), and the windows' settling and parts; a
    line cut by a pass's deadline is skipped, and an archive reads as its folder."""
    import subprocess
    import tarfile

    waits = iter(range(100))  # each verdict its own window (a group's members share one)

    def verdict(sid: str, speedup: float, window_ms: float, **timing) -> dict:
        return {"submission_id": sid, "correct": True, "hacks": [],
                "speedup_vs_eager": speedup, "timing": timing,
                "profile": {"window_ms": window_ms, "exclusive_wait_ms": float(next(waits)),
                            "phases_ms": {"rounds": window_ms / 2, "unseen": window_ms / 4},
                            "cpu_s": {"candidate": 4.0, "reference": 2.0}}}

    passes = {"N1": [1.00, 1.02], "N2": [1.01, 1.01], "B1": [1.10, 1.20], "C1": [1.0, 1.0]}
    root = tmp_path / "kept"
    for name, speedups in passes.items():
        folder = root / f"window_verdicts_{name}"
        folder.mkdir(parents=True)
        # the windows' own reference times moved with the speedups, the candidate's did not
        # (C: windows whose reference took no turn, its time the pool's)
        rows = [verdict(f"gemm#{i}", s, 800.0, candidate_ms=1.0,
                        reference_window_ms=None if name[0] == "C" else s,
                        reference_ms=1.1, **({"settled": False} if name[0] == "B" else {}))
                for i, s in enumerate(speedups)]
        (folder / "verdicts.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows) + '{"submission_id": "cut')
    script = ROOT / "scripts" / "window_ab.py"
    with tarfile.open(tmp_path / "window_verdicts.tgz", "w:gz") as archive:
        archive.add(root / "window_verdicts_N1", "window_verdicts_N1")
        archive.add(root / "window_verdicts_N2", "window_verdicts_N2")
        archive.add(root / "window_verdicts_B1", "window_verdicts_B1")
        archive.add(root / "window_verdicts_C1", "window_verdicts_C1")
    for source in (root, tmp_path / "window_verdicts.tgz"):
        out = subprocess.run([sys.executable, str(script), str(source), "--json"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert list(result["arms"]) == ["N", "B", "C"]  # N, the default window's, is the base
        assert result["arms"]["N"]["passes"] == ["N1", "N2"]
        assert result["answers"]["gemm"] == {"N1": 1.01, "N2": 1.01, "B1": 1.15, "C1": 1.0}
        assert result["shift_pct"]["B"]["median_abs"] == round((1.15 / 1.01 - 1) * 100, 2)
        assert result["shift_pct"]["N passes"]["median_abs"] == 0.0
        assert result["arms"]["B"]["spread_max_pct"] == round(0.10 / 1.15 * 100, 2)
        assert result["arms"]["B"]["time_spread_pct"] == {
            "reference": {"median": round(0.10 / 1.15 * 100, 2),
                          "max": round(0.10 / 1.15 * 100, 2)},
            "candidate": {"median": 0.0, "max": 0.0}}
        assert result["arms"]["B"]["settled"] == {"unsettled": 2}
        assert result["arms"]["B"]["reference_untimed"] == 0
        assert result["arms"]["C"]["reference_untimed"] == 2
        assert list(result["arms"]["C"]["time_spread_pct"]) == ["candidate"]
        assert result["arms"]["N"]["settled"] == {"settled": 4}
        assert result["arms"]["N"]["shares"] == {"rounds": 0.5, "unseen": 0.25}
        assert result["arms"]["N"]["verdicts"] == 4 and result["arms"]["N"]["cpu_s"] == 6.0
    shown = subprocess.run([sys.executable, str(script), str(root)], capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0 and "speedup shift B:" in shown.stdout, shown.stderr
    (tmp_path / "nothing").mkdir()
    for missing, said in (("nothing", "no *_verdicts_"), ("gone.tgz", "no such file")):
        empty = subprocess.run([sys.executable, str(script), str(tmp_path / missing)],
                               capture_output=True, text=True, timeout=60)
        assert empty.returncode == 2 and said in empty.stderr, empty.stderr


def test_memory_fit_sets_each_problems_ask_beside_what_nvml_read(tmp_path):
    """``scripts/memory_fit.py``: per problem, the ask the default admission made of a worker
    (its estimate times the allocator's factor, plus the base) beside NVML's most reading of its
    candidates, and their ratio; the waits and reruns alone; a line cut by a deadline skipped."""
    import subprocess

    from kernelmill.grade.admitted import WORKER_BASE_BYTES
    from kernelmill.validate.admission import ALLOCATOR_FACTOR

    def verdict(problem: str, gib: float, mib: int | None, wait: float, alone=False) -> dict:
        # the allocator's marks: 0 MiB at init, the trials' tensors by the timing stage (which
        # raised the peak by 200 more), the same held at the end
        stages = [["init", 0, 0], ["forward", 10, 10], ["timing", mib - 1100, mib - 1100],
                  ["gpu done", mib - 1100, mib - 900]] if mib else None
        if problem == "norm" and stages:  # marks with the allocator's reserved MiB beside
            stages = [[*mark, mib - 800] for mark in stages]
        return {"submission_id": f"{problem}#0", "problem_id": problem,
                "profile": {"worker_device_gib": gib, "admission_wait_s": wait,
                            "device_mib": {"candidate": mib, "reference": None},
                            **({"candidate_allocator_mib": {"reserved": mib - 800,
                                                            "allocated": mib - 900,
                                                            "stages": stages}}
                               if mib else {}),
                            **({"rerun_alone": True} if alone else {})}}

    folder = tmp_path / "envab_verdicts_A1"
    folder.mkdir()
    rows = [verdict("conv", 8.0, 1500, 0.5), verdict("conv", 8.0, 1400, 20.0),
            verdict("norm", 2.0, 4000, 1.0, alone=True), verdict("norm", 2.0, None, 3.0)]
    # a mark a worker could not have sent (too short, not numbers) is left out, not fatal
    rows[1]["profile"]["candidate_allocator_mib"]["stages"] += [["short", 1], ["odd", "x", 2]]
    (folder / "v.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"cut')
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "memory_fit.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: line.split() for line in out.stdout.splitlines()[1:]
             if line.startswith(("conv", "norm"))}
    base = WORKER_BASE_BYTES / (1 << 30)
    conv_ask, norm_ask = 8.0 * ALLOCATOR_FACTOR + base, 2.0 * ALLOCATOR_FACTOR + base
    assert lines["conv"][1:6] == ["2", "8.00", f"{conv_ask:.2f}", "1450/1500",
                                  f"{1500 / 1024 / conv_ask:.2f}"]
    assert lines["conv"][6:] == ["650/550", "10.2/20.0", "0"]
    # a problem whose workers held more than they were admitted at: over 1, and its rerun
    assert lines["norm"][4:] == ["4000/4000", f"{4000 / 1024 / norm_ask:.2f}", "3200/3100",
                                 "2.0/3.0", "1"]
    assert float(lines["norm"][5]) > 1 > float(lines["conv"][5])
    # where the candidates' allocators held it: medians of the marks, the peak each stage raised
    stages = {line.split(":")[0]: line.split(": ", 1)[1] for line in out.stdout.splitlines()
              if line.startswith(("conv:", "norm:"))}
    assert stages["conv"] == "init 0 (+10), forward 10 (+340), timing 350 (+200), gpu done 350"
    assert stages["norm"] == ("init 0 r3200 (+10), forward 10 r3200 (+2890), "
                              "timing 2900 r3200 (+200), gpu done 2900 r3200")


def test_the_host_memory_benchmark_counts_each_memory_file_once_however_many_hold_it():
    """``benchmarks/grade_host_memory.py``'s reading: a memory file passed on to another
    worker is one file, whatever number of descriptors hold it; one closed is no longer
    counted; its cases are the fixtures' honest answers at their benchmark sizes."""
    import os

    import grade_host_memory

    _anon, before = grade_host_memory.process_memory()
    fd = os.memfd_create("kernelmill-test")
    os.ftruncate(fd, 8 << 20)
    os.pwrite(fd, b"\1" * (8 << 20), 0)  # its pages allocated
    again = os.dup(fd)
    try:
        _anon, held = grade_host_memory.process_memory()
        assert held - before == 8 << 20
    finally:
        os.close(fd)
        os.close(again)
    assert grade_host_memory.process_memory()[1] == before
    cases = grade_host_memory.cases()
    assert set(cases) == {"scale_add", "row_sum"}
    reference, answer = cases["scale_add"]
    assert "N = 1 << 24" in reference and "BLOCK=1 << 18" in answer


def test_the_per_problem_report_reads_the_scored_calls_against_the_one_call_check(
        tmp_path, capsys):
    """Each problem's scored calls over the one-call check's call, from the bound's own detail
    (made here by ``scored_device_work``): least and median over its members, how many read the
    warm check and how many were flagged; a problem without the check gets no line."""
    from kernelmill.grade.judge import _scored_device_work

    def row(problem, scored_us, one_us, warm_us=None):
        checks: dict = {}
        _scored_device_work([{"kind": "fresh", "trial": 0, "busy_us": one_us}], scored_us / 1e3,
                            checks, lambda code, why: None, [one_us * 1.2], None, 1, one_us, 1,
                            1.0, 1 << 21 if warm_us else None, warm_us)
        return {"submission_id": problem, "problem_id": problem, "wall_s": 5.0,
                "profile": {}, "checks": checks}
    rows = [row("scale_add", 2.79, 5.3), row("scale_add", 2.8, 5.2), row("scale_add", 2.8, 5.3, 2.9),
            row("gemm", 40.0, 41.0), row("plain", 1.0, 1.0)]
    rows[-1]["checks"] = {}
    lines = _per_problem_lines(tmp_path, capsys, rows, "scored over")
    assert lines == [
        ("scored over the one-call check (gemm): least 0.98, median 0.98 of 1 (the warm check "
         "read in 0, flagged in 0)"),
        ("scored over the one-call check (scale_add): least 0.53, median 0.54 of 3 (the warm "
         "check read in 1, flagged in 2)")], lines


def test_the_per_problem_report_says_where_the_window_captured_a_graph_again(tmp_path, capsys):
    """A problem whose windows captured a timing graph again (``phases_ms.resize``): how many
    of its windows, the capture's median ms, and each participant's calls per sample as
    prepared and as the window took them; a problem whose windows never did gets no line."""
    def row(problem, resize_ms=None, prepared=None, window=None):
        phases = {"rounds": 120.0, **({"resize": resize_ms} if resize_ms else {})}
        return {"submission_id": problem, "problem_id": problem, "wall_s": 5.0, "checks": {},
                "profile": {"phases_ms": phases,
                            "prepared_calls": {"reference": None, "candidate": prepared},
                            "calls_per_sample": {"reference": 1024, "candidate": window}}}
    rows = [row("gemm_256", 579.0, 512, 1024), row("gemm_256", 536.0, 512, 1024),
            row("gemm_256", 747.0, 256, 1024), row("gemm_256"), row("scale_add")]
    lines = _per_problem_lines(tmp_path, capsys, rows, "captured again")
    assert lines == [
        ("captured again in the window (gemm_256): 3 of 4, 579 ms at the median; calls "
         "prepared->window: candidate 256->1024 (1), candidate 512->1024 (2)")], lines
