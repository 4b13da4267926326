"""The warm one-call check (timing setting ``single_warm``): where the timer replays a graph of
several calls, a second one-call check on a hidden trial of its own, after the check on inputs
just loaded, its inputs read into the L2 cache first. Only the scored bound reads its time; the
other bounds that take the one-call check's read the first. A real CPU grade (no graph, so no
such check), its facts then edited as a CUDA run's would read; and the bound itself on the
readings an H100 gave a 1M-element scale-add."""
import dataclasses

from test_single_check import SHORT_WINDOW, judged_scale_add

from kernelmill.grade.checks.probes import check_trials
from kernelmill.grade.judge import _scored_device_work, judge
from kernelmill.grade.policy import Policy


def test_the_warm_check_keeps_one_more_trial_and_only_with_the_setting():
    """``Policy.hidden_spares`` draws one more hidden trial with ``single_warm`` (on unless false),
    and ``check_trials`` keeps the last two of a graph of several calls for the checks, the
    warm one's last, where two trials go past the required ones (the first check alone where
    one does)."""
    assert Policy(unseen_spares=3).hidden_spares == 4  # on by default
    assert Policy(unseen_spares=3, timing_settings={"single_warm": True}).hidden_spares == 4
    assert Policy(unseen_spares=3, timing_settings={"single_warm": False}).hidden_spares == 3
    graph = {"method": "cuda_graph", "calls": 4}
    assert check_trials(graph, 6, 2) == [5]
    assert check_trials(graph, 6, 2, warm=True) == [4, 5]
    assert check_trials(graph, 3, 2, warm=True) == [2]  # one past the required: the first
    assert check_trials(graph, 2, 2, warm=True) == []
    assert check_trials(graph, 3, 2) == [2]
    assert check_trials({**graph, "calls": 1}, 6, 2, warm=True) == []
    assert check_trials({"method": "events", "calls": 4}, 6, 2, warm=True) == []


def test_the_warm_check_is_held_to_its_trial_and_its_answer_compared(tmp_path, monkeypatch):
    """With ``single_warm`` the one-call check is made on the last hidden trial but one and the
    warm check on the last, their parts written in that order after the unseen check's; each
    answer compared. Either left out, the two swapped, a warm check without the setting, or one
    whose answer is another trial's: not made as asked, or wrong."""
    policy = Policy(trials=2, unseen_trials=1, unseen_trials_ungraphed=1, unseen_spares=3,
                    timing_settings={**SHORT_WINDOW, "single_warm": True})
    args, kwargs = judged_scale_add(tmp_path, monkeypatch, policy)
    facts, window = args[2].value, kwargs["window"]
    assert facts["unseen"].get("single") is None and facts["unseen"].get("single_warm") is None
    made = len(facts["unseen"]["checks"])
    hidden = [t for t in args[0]["trials"] if t["usable"] and t.get("hidden")]
    assert 1 <= made < len(hidden) == 5  # one unseen trial, three spares, the warm check's
    cold, warm = len(hidden) - 2, len(hidden) - 1
    parts = (*range(made), cold, warm)
    graphed = {**facts["unseen"], "method": "cuda_graph", "calls": 4,
               "even_calls_us": [5.0] * 4, "even_overlap_us": 0.0,
               "unseen_device_us": [4.8], "unseen_calls_us": [[4.8] * 4]}

    def rejudge(single, hot, released=parts, judged=args[0]) -> dict:
        unseen = {**graphed, "single": single, "single_warm": hot}
        run = dataclasses.replace(args[2], value=dict(facts, unseen=unseen))
        return judge(judged, args[1], run, *args[3:],
                     **{**kwargs, "window": dict(window, late_released=list(released))})

    right = {"hidden": cold, "outputs": hidden[cold]["outputs"], "busy_us": 5.0, "ms": 0.012}
    hot = {"hidden": warm, "outputs": hidden[warm]["outputs"], "busy_us": 4.0, "ms": 0.010,
           "warmed_bytes": 1 << 20}
    passed = rejudge(right, hot)
    assert passed["correct"] and not passed["hacks"], passed.get("hack_details")
    assert passed["checks"][f"unseen_single:{cold}"]["passed"] is True
    assert passed["checks"][f"unseen_single_warm:{warm}"]["passed"] is True
    # a warm call far under the replays' first calls is no reading apart (the scored bound
    # holds it at 0.3 of them), while the check on inputs just loaded is
    assert not rejudge(right, {**hot, "busy_us": 1.2, "ms": 0.004})["hacks"]
    assert "hang together" in rejudge({**right, "busy_us": 1.2}, hot)["hack_details"].get(
        "timing_behaviour", "")
    wrong = rejudge(right, {**hot, "outputs": hidden[0]["outputs"]})
    assert "timing_behaviour" in wrong["hacks"] and not wrong["correct"]
    assert wrong["checks"][f"unseen_single_warm:{warm}"]["passed"] is False
    for single, warm_check, released in (
            (right, None, parts), (right, None, parts[:-1]), (None, hot, parts),
            ({**right, "hidden": warm}, {**hot, "hidden": cold}, parts),
            (right, hot, (*range(made), warm, cold)), (right, hot, parts[:-1]),
            (right, {**hot, "busy_us": 40.0}, parts), (right, {**hot, "ms": None}, parts),
            (right, [warm], parts)):
        edited = rejudge(single, warm_check, released)
        assert "timing_behaviour" in edited["hacks"] and not edited["correct"], (
            single, warm_check, released)
    # without the setting the last trial is the only check's, and a warm one is not asked for
    off = dataclasses.replace(kwargs["policy"],
                              timing_settings={**SHORT_WINDOW, "single_warm": False})
    record = {**args[0], "trials": args[0]["trials"][:-1]}  # (as drawn without the setting)
    unseen = {**graphed, "single": {**right, "hidden": cold}}
    for extra, caught in (({}, False), ({"single_warm": {**hot, "hidden": cold}}, True)):
        run = dataclasses.replace(args[2], value=dict(facts, unseen={**unseen, **extra}))
        verdict = judge(record, args[1], run, **{**kwargs, "policy": off, "window": dict(
            window, late_released=[*range(made), cold])})
        assert ("timing_behaviour" in verdict["hacks"]) is caught, verdict.get("hack_details")


def test_only_the_scored_bound_reads_the_warm_check():
    """A 1M-element scale-add on an H100: scored 2.79 µs (its inputs in the L2 cache), the
    one-call check 5.3 µs on inputs just loaded, the warm check 2.9. Held to the check alone it
    reads 0.53 and is flagged; with the warm check it passes. A scored call at half the warm
    check (a timing graph computing halves) is still flagged (by the fresh calls' bound: the
    1 µs floor leaves the warm bound none at this size), and one at a third is under the warm
    check's bound; on a larger kernel the warm bound alone catches 0.62 of the work. The warm
    time moves no other bound: the calls on seen inputs are held to the least of the fresh
    calls and the check on inputs just loaded as before, and a warm check slower than that
    check is not read."""
    fresh = [{"kind": "fresh", "trial": t, "busy_us": 5.4} for t in range(3)]
    repeat = [{"kind": "repeat", "trial": 0, "busy_us": 5.2}]

    def bound(calls, scored_us, warm_us, warmed=1 << 21):
        hacks, checks = {}, {}
        _scored_device_work(calls, scored_us / 1e3, checks,
                            lambda code, why: hacks.setdefault(code, why), [6.4, 6.3],
                            None, 1, 5.3, 1, 1.0, warmed, warm_us)
        return hacks.get("timing_behaviour", ""), checks

    flagged, checks = bound(fresh + repeat, 2.79, None)
    assert "one-call graph's call" in flagged and not checks["scored_vs_one_call_us"]["passed"]
    flagged, checks = bound(fresh + repeat, 2.79, 2.9)
    assert not flagged and checks["scored_vs_one_call_us"]["passed"]
    assert "2 MiB of them read into the L2 cache" in checks["scored_vs_one_call_us"]["detail"]
    assert bound(fresh + repeat, 1.45, 2.9)[0]  # halves: under the fresh calls' bound
    assert not bound(fresh + repeat, 1.0, 2.9)[1]["scored_vs_one_call_us"]["passed"]
    # a warm check slower than the cold one is not read (the faster of the two is), nor one
    # where the worker said it read nothing into the cache
    assert "one-call graph's call" in bound(fresh + repeat, 2.79, 8.0)[0]
    assert "one-call graph's call" in bound(fresh + repeat, 2.79, 2.9, 0)[0]
    # a warm reading is held where the cold one is, at 0.3 of the first calls alone (6.3 µs):
    # a report of 0.1 µs takes the bound no lower than a report of the other could
    checks = bound(fresh + repeat, 2.79, 0.1)[1]
    assert "call 1.89 µs" in checks["scored_vs_one_call_us"]["detail"], checks
    # a larger kernel whose scored calls do 0.62 of the warm check's work: that bound alone
    # catches it (the fresh calls' bound, half of 40 µs, does not)
    big = [{"kind": "fresh", "trial": t, "busy_us": 40.0} for t in range(3)]
    hacks, checks = {}, {}
    _scored_device_work(big, 0.0225, checks, lambda code, why: hacks.setdefault(code, why),
                        [41.0, 40.5], None, 1, 40.0, 1, 1.0, 1 << 22, 36.0)
    assert not checks["scored_vs_one_call_us"]["passed"]
    assert checks["scored_vs_checked_device_us"]["passed"]
    assert "4 MiB of them read into the L2 cache" in checks["scored_vs_one_call_us"]["detail"]
    # a repeat call doing a quarter of the work: held to the fresh calls and the cold check as
    # without the warm one (which, read there, would have lowered that bound to 0.45 µs)
    cheap = fresh + [{"kind": "repeat", "trial": 0, "busy_us": 1.4}]
    assert "answers remembered" in bound(cheap, 5.3, 2.9)[0]
    assert "answers remembered" in bound(cheap, 5.3, None)[0]


def test_the_worker_makes_the_warm_check_last_and_reads_only_its_inputs_into_the_cache(
        monkeypatch):
    """``_Probes.unseen`` with ``single_warm`` (a graph of 4 calls, one unseen trial required,
    every spare asked for): the parts are asked in order, the check on inputs just loaded made
    on the last trial but one, the warm check on the last, and only the warm check's load reads
    its inputs into the cache; only its report carries ``warmed_bytes``. With one trial past
    the required, the check on inputs just loaded alone; without the setting, it on the last.
    The parent's ``unseen_shape`` finds each report made as asked."""
    from types import SimpleNamespace

    from kernelmill.grade.checks import probes as checks
    from kernelmill.grade.checks.probes import unseen_shape
    from kernelmill.grade.worker import probes

    asked: list = []
    monkeypatch.setattr(probes, "late_payload", lambda index: asked.append(index) or {
        "inputs": [f"hidden {index}"]})
    for module in (probes, checks):  # (the worker and the parent alike)
        monkeypatch.setattr(module, "reads_slow", lambda *args: True)
    first = {"inputs": ["timed"]}

    class Timer:
        graph, calls_per_sample, method, last_cpu_ms, _single = object(), 4, "cuda_graph", \
            None, (object(), None)
        scored_ms = None

        def once(self, fn, around, whole, flush):
            return 1.0, ["out"]

    def unseen(hidden: int, warm: bool) -> tuple[dict, list]:
        asked.clear()
        loads: list = []
        run = SimpleNamespace(hidden=hidden, hidden_required=1, hidden_required_ungraphed=1,
                              retry_ratio=1.1, trials=[first], pristine=first, buffers=[],
                              witness=SimpleNamespace(running=True, span=None),
                              single_warm=warm, warmed_bytes=None, changed_while_timed=[])

        def load(values, single=False, warm=False):
            if single:
                loads.append((values[0], warm))
            if warm:
                run.warmed_bytes = 1 << 20

        run.load, run.invoke = load, lambda: (["out"], None)
        run.observe = lambda *args, **kwargs: {"outputs": ["out"]}
        run._keep_replay = lambda timer: None
        run._single_check = lambda *args: probes._Probes._single_check(run, *args)
        run._mode_would_see_new_inputs = lambda: False
        probes._Probes.unseen(run, Timer())
        facts = run.unseen_facts
        hacks: dict = {}
        unseen_shape(facts, [{}] * hidden, {"late_released": list(asked)},
                     lambda code, why: hacks.setdefault(code, why), 1, 1.1, warm)
        assert not hacks, (hidden, warm, hacks)
        return facts, loads

    facts, loads = unseen(6, True)
    assert asked == [0, 1, 2, 3, 4, 5]
    assert loads == [("hidden 4", False), ("hidden 5", True)]
    assert facts["single"]["hidden"] == 4 and "warmed_bytes" not in facts["single"]
    assert facts["single_warm"] == {**facts["single_warm"], "hidden": 5,
                                    "warmed_bytes": 1 << 20}
    facts, loads = unseen(2, True)  # one trial past the required: the first check alone
    assert asked == [0, 1] and loads == [("hidden 1", False)] and "single_warm" not in facts
    facts, loads = unseen(6, False)
    assert loads == [("hidden 5", False)] and "single_warm" not in facts


def test_the_registered_bound_reads_the_warm_check_only_with_the_setting():
    """``scored_calls_do_the_work`` as the judge runs it, on the scale-add's H100 readings:
    the warm check's busy time and bytes read where the policy has ``single_warm``, and not
    where it has not (a report of one is then the worker's alone)."""
    from types import SimpleNamespace

    from kernelmill.grade.checks.probes import scored_calls_do_the_work

    unseen = {"unseen_device_us": [6.4, 6.3], "single": {"hidden": 4, "busy_us": 5.3},
              "single_warm": {"hidden": 5, "busy_us": 2.9, "warmed_bytes": 1 << 21}}
    calls = [{"kind": "fresh", "trial": t, "busy_us": 5.4} for t in range(3)]

    def flagged(settings: dict, facts: dict = unseen) -> bool:
        ctx = SimpleNamespace(all_correct=True, scored_ms=0.00279, checks={},
                              window={"participants": {"candidate": {"ms": 0.00279}}},
                              run={"unseen": facts, "calls": calls},
                              policy=Policy(timing_settings=settings))
        return bool(scored_calls_do_the_work(ctx))

    assert not flagged({"single_warm": True}) and not flagged({})  # on by default
    assert flagged({"single_warm": False})
    assert flagged({"single_warm": True}, {**unseen, "single_warm": {
        **unseen["single_warm"], "warmed_bytes": 0}})
