"""The grading service's job table and dispatcher, without HTTP or real grading: idempotency by
verdict key, a full queue refusing a request whole, groups by problem, a dead actor's jobs
requeued once then answered as an error, deadlines, and no job answered twice."""
from __future__ import annotations

import asyncio
import re
import time
from collections import Counter

import pytest

pytest.importorskip("prometheus_client", reason="the serve extra: pip install -e '.[serve]'")

from kernelmill.grade.service.actors import ActorLost
from kernelmill.grade.service.core import ServeConfig, Service
from kernelmill.grade.service.jobs import Entry, JobTable, QueueFull


def entry(key: str, problem: str = "p") -> Entry:
    return Entry(key=key, problem=problem, payload={"source": key, "problem_id": problem})


def test_same_key_is_one_job_and_a_full_queue_refuses_the_request_whole():
    async def go():
        table = JobTable(max_queued=4, group_size=2)
        ids = table.submit([entry("a"), entry("b"), entry("a"), entry("c", "q")], 60)
        assert ids[0] == ids[2] and len(set(ids)) == 3 and table.queued == 3
        assert [[j.key for j in g] for g in table.groups] == [["a", "b"], ["c"]]
        assert table.submit([entry("b")], 60) == [ids[1]]  # idempotent across requests
        with pytest.raises(QueueFull) as refused:
            table.submit([entry("d"), entry("e")], 60)
        assert refused.value.retry_after >= 1
        assert table.queued == 3 and len(table.jobs) == 3 and "d" not in table.by_key
        assert table.deduplicated == 2
    asyncio.run(go())


def test_requeued_once_then_an_error_and_a_late_result_is_dropped():
    async def go():
        answered = Counter()
        table = JobTable(max_attempts=2, on_answer=lambda job: answered.update([job.id]))
        (job_id,) = table.submit([entry("a")], 60)
        group = await table.take()
        table.requeue(group, "actor 0 lost")
        assert table.jobs[job_id].status == "queued" and table.requeued == 1
        group = await table.take()
        table.requeue(group, "actor 1 lost")
        job = table.jobs[job_id]
        assert job.status == "error" and "gave up after 2 attempts" in job.error
        assert not table.finish(job, {"reward": 1.0}) and table.late == 1
        assert answered == {job_id: 1} and table.queued == table.running == 0
        # an error leaves the index: the same submission is graded again when asked
        (again,) = table.submit([entry("a")], 60)
        assert again != job_id and table.jobs[again].status == "queued"
    asyncio.run(go())


def test_a_job_past_its_deadline_is_answered_as_an_error_once():
    async def go():
        table = JobTable()
        (job_id,) = table.submit([entry("a")], 0.01)
        await asyncio.sleep(0.02)
        assert table.expire() == 1 and table.expire() == 0
        view = (await table.wait([job_id], 1))[0]
        assert view["status"] == "error" and "deadline" in view["error"]["message"]
        assert table.queued == 0
        with pytest.raises(asyncio.TimeoutError):  # nothing to take: the expired job is gone
            await asyncio.wait_for(table.take(), 0.05)
    asyncio.run(go())


def test_submissions_of_one_problem_in_requests_of_their_own_join_its_queued_group():
    """A trainer sending each sample in a request of its own gets its problem's samples graded
    as groups: a request's jobs join the problem's newest group still queued, up to the group
    size; never another problem's, nor a group already taken."""
    async def go():
        table = JobTable(group_size=3)
        for key in ("a", "b"):
            table.submit([entry(key)], 60)
        table.submit([entry("x", "q")], 60)
        table.submit([entry("c"), entry("d")], 60)  # one joins, one opens the next group
        assert [[j.key for j in g] for g in table.groups] == [["a", "b", "c"], ["x"], ["d"]]
        assert table.joined == 2 and table.queued == 5
        first = await asyncio.wait_for(table.take(), 2)
        assert [j.key for j in first] == ["a", "b", "c"]
        table.submit([entry("e")], 60)
        assert [[j.key for j in g] for g in table.groups] == [["x"], ["d", "e"]]
        table.submit([entry("f", "q")], 60)
        assert [j.key for j in await asyncio.wait_for(table.take(), 2)] == ["x", "f"]
        assert [j.key for j in await asyncio.wait_for(table.take(), 2)] == ["d", "e"]
        # a group whose jobs all expired leaves the queue; nothing joins it after
        table.submit([entry("g", "r")], 0.01)
        await asyncio.sleep(0.02)
        table.expire()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(table.take(), 0.05)
        (late,) = table.submit([entry("h", "r")], 60)
        taken = await asyncio.wait_for(table.take(), 2)
        assert [j.id for j in taken] == [late] and not table.groups
    asyncio.run(go())


def test_a_group_not_yet_full_waits_for_more_of_its_problem_then_goes():
    """With ``group_wait_s``, a group opened by a one-submission request and not yet full is
    held back from its first submission until it fills or the wait is over, while the groups
    behind it go; a group a request sent whole, or a requeued one, goes at once."""
    async def go():
        table = JobTable(group_size=3, group_wait_s=0.3)
        table.submit([entry("a")], 60)
        started = time.monotonic()
        taking = asyncio.ensure_future(table.take())
        await asyncio.sleep(0.05)
        assert not taking.done()
        table.submit([entry("b")], 60)
        await asyncio.sleep(0.05)
        assert not taking.done()
        table.submit([entry("c"), entry("d")], 60)  # full: goes now
        group = await asyncio.wait_for(taking, 1)
        assert [j.key for j in group] == ["a", "b", "c"] and time.monotonic() - started < 0.25
        # "d" came with "c" in one request: not held; neither is a whole request of another
        assert [j.key for j in await asyncio.wait_for(table.take(), 0.1)] == ["d"]
        table.submit([entry("x", "q"), entry("y", "q")], 60)
        assert [j.key for j in await asyncio.wait_for(table.take(), 0.1)] == ["x", "y"]
        # a held group does not hold back the ready ones behind it
        began = time.monotonic()
        table.submit([entry("e")], 60)
        table.submit([entry("f", "r"), entry("g", "r")], 60)
        assert [j.key for j in await asyncio.wait_for(table.take(), 0.1)] == ["f", "g"]
        group = await table.take()  # no more come: "e" alone, once its wait is over
        assert [j.key for j in group] == ["e"] and time.monotonic() - began >= 0.3
        table.requeue(group, "actor lost")  # a requeued group is not held back
        assert [j.key for j in await asyncio.wait_for(table.take(), 0.1)] == ["e"]
        # a group is taken only once there is room for it; its problem joins it meanwhile
        room = [False]
        table.submit([entry("h", "s")], 60)
        taking = asyncio.ensure_future(table.take(lambda members: room[0]))
        await asyncio.sleep(0.35)
        table.submit([entry("i", "s")], 60)
        assert not taking.done()
        room[0] = True
        table.work.set()
        assert [j.key for j in await asyncio.wait_for(taking, 0.1)] == ["h", "i"]
    asyncio.run(go())


def test_per_sample_requests_reach_the_actors_as_one_group():
    """verl's per-sample reward calls in parallel: eight requests of one submission each are
    graded as one group of the service's size."""
    async def go():
        pool = FakePool()
        service = Service(ServeConfig(device="cpu", group=8, group_wait_s=0.5), pool=pool)
        await service.start()
        try:
            ids = []
            for i in range(8):
                ids += service.submit([{"reference": "class Model: pass\n",
                                        "source": f"sample {i}"}])
                await asyncio.sleep(0.01)
            views = await service.table.wait(ids, 10)
        finally:
            await service.stop()
        assert [v["status"] for v in views] == ["done"] * 8
        assert [sources for _i, sources in pool.calls] == [[f"sample {i}" for i in range(8)]]
        assert service.health()["joined"] == 7
    asyncio.run(go())


class FakePool:
    """Two actors that answer at once; a source containing ``die`` kills its actor every
    time, ``die-once`` the first time only."""

    size, per_actor = 2, 1

    def __init__(self):
        self.calls: list[tuple[int, list[str]]] = []

    async def start(self):
        pass

    async def grade(self, index, group):
        sources = [entry["source"] for entry in group]
        self.calls.append((index, sources))
        if any("die-once" in s for s in sources) and \
                sum("die-once" in s for _i, c in self.calls for s in c) == 1:
            raise ActorLost(f"actor {index} lost")
        if any(s.startswith("die ") for s in sources):
            raise ActorLost(f"actor {index} lost")
        await asyncio.sleep(0.01)
        return [{"compiled": True, "correct": True, "hacks": [], "error": None, "reward": 1.0}
                for _ in group]

    def alive(self):
        return 2

    def close(self):
        pass


def test_the_dispatcher_regrades_a_lost_group_once_then_answers_an_error():
    async def go():
        pool = FakePool()
        service = Service(ServeConfig(device="cpu", group=4), pool=pool)
        await service.start()
        try:
            reference = "class Model: pass\n"
            ids = service.submit([{"reference": reference, "source": f"ok {i}"} for i in range(3)]
                                 + [{"reference": reference, "source": "die-once"},
                                    {"reference": "other", "source": "die always"}])
            views = await service.table.wait(ids, 10)
        finally:
            await service.stop()
        assert [v["status"] for v in views] == ["done"] * 4 + ["error"]
        assert "gave up after 2 attempts" in views[4]["error"]["message"]
        # one problem's four submissions went out as one group; lost once, graded again
        groups = [sources for _i, sources in pool.calls if "ok 0" in sources]
        assert groups == [["ok 0", "ok 1", "ok 2", "die-once"]] * 2
        text = service.metrics.text().decode()
        assert 'kernelmill_verdicts_total{outcome="correct"} 4.0' in text
        assert 'kernelmill_verdicts_total{outcome="service_error"} 1.0' in text
        assert "kernelmill_jobs_requeued_total 5.0" in text  # 4 once, the doomed one once
        assert float(re.search(r"^kernelmill_job_seconds_p95 (\S+)$", text, re.M).group(1)) > 0
        assert service.table.late == 0
    asyncio.run(go())


class CountingPool(FakePool):
    """Two actors of four slots each that record how many groups and members each grades at
    once."""

    per_actor = 4

    def __init__(self):
        super().__init__()
        self.now = [0, 0]
        self.most = [0, 0]
        self.members = [0, 0]
        self.most_members = [0, 0]

    async def grade(self, index, group):
        self.now[index] += 1
        self.members[index] += len(group)
        self.most[index] = max(self.most[index], self.now[index])
        self.most_members[index] = max(self.most_members[index], self.members[index])
        await asyncio.sleep(0.05)
        self.now[index] -= 1
        self.members[index] -= len(group)
        return await super().grade(index, group)


def test_an_actor_grades_in_its_slots_a_group_taking_half_its_members():
    """An actor grades several groups at once, up to its slots: a single takes one, a group of
    n members n/2 (rounded up), a group larger than the actor alone."""
    from kernelmill.grade.service.core import group_slots

    assert [group_slots(n, 16) for n in (1, 2, 3, 8)] == [1, 1, 2, 4]
    assert group_slots(40, 16) == 16 and group_slots(8, 1) == 1

    async def run(sources_by_problem, group):
        pool = CountingPool()
        service = Service(ServeConfig(device="cpu", group=group, group_wait_s=0), pool=pool)
        await service.start()
        try:
            ids = service.submit([{"reference": problem, "source": source}
                                  for problem, sources in sources_by_problem.items()
                                  for source in sources])
            views = await service.table.wait(ids, 10)
        finally:
            await service.stop()
        assert all(v["status"] == "done" for v in views)
        assert max(service.busy) == 0
        return pool

    singles = asyncio.run(run({f"p{i}": [f"s{i}"] for i in range(16)}, 8))
    assert singles.most == [4, 4] and len(singles.calls) == 16
    groups = asyncio.run(run({f"p{i}": [f"s{i} {j}" for j in range(8)] for i in range(4)}, 8))
    assert groups.most == [1, 1] and groups.most_members == [8, 8] and len(groups.calls) == 4
    pairs = asyncio.run(run({f"p{i}": [f"s{i} {j}" for j in range(4)] for i in range(4)}, 4))
    assert pairs.most == [2, 2] and pairs.most_members == [8, 8]


def test_a_local_host_on_a_gpu_grades_in_the_batchs_slots_at_once(monkeypatch):
    """One local host per GPU grades in as many threads as the batch grader's slots for it
    (one group at a time left the GPU idle between a grade's stages); hosts asked for by
    number, and CPU hosts, one group each."""
    import threading

    from kernelmill.grade.batch import default_slots_per_gpu
    from kernelmill.grade.policy import Policy
    from kernelmill.grade.service import actors

    gpu_slot = {"device": "cuda:0", "gpu": 0, "env": {"CUDA_VISIBLE_DEVICES": "0"}}
    monkeypatch.setattr(actors, "device_slots",
                        lambda device, workers=None: [dict(gpu_slot)] * (workers or 1))
    common = {"dataset": None, "split": None, "device": "cuda", "policy": Policy(),
              "reward": "composite"}
    assert actors.LocalPool(**common).per_actor == default_slots_per_gpu(1) >= 1
    assert actors.LocalPool(**common, actors=3).per_actor == 1
    assert actors.LocalPool(**common, per_actor=5).per_actor == 5

    at_once, most, lock = [0], [0], threading.Lock()

    class Host:
        def __init__(self, *args, **kwargs):
            pass

        def grade(self, group):
            with lock:
                at_once[0] += 1
                most[0] = max(most[0], at_once[0])
            time.sleep(0.1)
            with lock:
                at_once[0] -= 1
            return [{"reward": 1.0} for _ in group]

    monkeypatch.setattr(actors, "GradingHost", Host)

    async def go():
        pool = actors.LocalPool(**common, per_actor=3)
        await pool.start()
        try:
            await asyncio.gather(*(pool.grade(0, [{"source": str(i)}]) for i in range(6)))
        finally:
            pool.close()
    asyncio.run(go())
    assert most[0] == 3


class RestartingPool(FakePool):
    """As ``RayPool``: a lost actor is ``recovering`` (not usable) until ``wait_recovered`` finds it
    answering again; actor 0 is lost on its first group."""

    def __init__(self):
        super().__init__()
        self.recovering: set[int] = set()
        self.lost_once = False

    def usable(self, index):
        return index not in self.recovering

    async def wait_recovered(self, index):
        await asyncio.sleep(0.05)  # Ray restarting it
        self.recovering.discard(index)

    async def grade(self, index, group):
        if index == 0 and not self.lost_once:
            self.lost_once = True
            self.recovering.add(index)
            raise ActorLost("actor 0 lost")
        await asyncio.sleep(0.02)
        return await super().grade(index, group)


def test_a_lost_actor_gets_groups_again_once_it_answers():
    """An actor lost and restarted is handed groups again once it answers, though another
    actor was usable all along (a GPU's slots are not left out for good)."""
    async def go():
        pool = RestartingPool()
        service = Service(ServeConfig(device="cpu", group=1, group_wait_s=0), pool=pool)
        await service.start()
        try:
            ids = service.submit([{"reference": f"p{i}", "source": f"s{i}"} for i in range(2)])
            await service.table.wait(ids, 5)
            await asyncio.sleep(0.2)
            ids = service.submit([{"reference": f"q{i}", "source": f"t{i}"} for i in range(8)])
            views = await service.table.wait(ids, 5)
        finally:
            await service.stop()
        assert all(v["status"] == "done" for v in views)
        assert pool.lost_once and not pool.recovering
        assert any(index == 0 for index, sources in pool.calls[2:])
    asyncio.run(go())


class SlowPool(FakePool):
    """Answers after ``delay`` seconds."""

    def __init__(self, delay: float):
        super().__init__()
        self.delay = delay

    async def grade(self, index, group):
        await asyncio.sleep(self.delay)
        return await super().grade(index, group)


def test_a_request_deadline_and_the_verdict_cache_across_restarts(tmp_path):
    cache = tmp_path / "verdicts.jsonl"

    async def serve_once(pool, deadline_s=None):
        service = Service(ServeConfig(device="cpu", cache=str(cache)), pool=pool)
        await service.start()
        try:
            ids = service.submit([{"reference": "class Model: pass\n", "source": "ok"}],
                                 deadline_s)
            return (await service.table.wait(ids, 10))[0]
        finally:
            await service.stop()

    late = asyncio.run(serve_once(SlowPool(2.0), deadline_s=0.3))
    assert late["status"] == "error" and "deadline of 0s passed while running" in \
        late["error"]["message"]
    graded = asyncio.run(serve_once(FakePool()))
    assert graded["status"] == "done" and not graded["verdict"].get("cached")
    pool = FakePool()
    again = asyncio.run(serve_once(pool))  # a new service, the same cache file
    assert again["status"] == "done" and again["verdict"]["cached"] and pool.calls == []


def test_the_serve_flags_reach_the_services_settings():
    from kernelmill.app.cli import build_parser
    from kernelmill.grade.service.cli import config_from_args

    args = build_parser().parse_args(["serve", "--group", "4", "--group-wait", "0.5",
                                      "--per-actor", "6"])
    config = config_from_args(args)
    assert (config.group, config.group_wait_s, config.per_actor) == (4, 0.5, 6)
    defaults = config_from_args(build_parser().parse_args(["serve"]))
    assert defaults.group_wait_s == ServeConfig().group_wait_s > 0 and defaults.per_actor is None


def test_retry_after_is_the_queue_at_the_pace_of_the_actors_slots():
    """Retry-After: the jobs ahead over how many the actors grade at once (each actor's slots,
    a group taking half its members of them), times one group's grade."""
    async def go():
        table = JobTable(max_queued=1000, group_size=8)
        table.submit([entry(f"k{i}", f"p{i // 8}") for i in range(64)], 60)
        table.grading_seconds.append(10.0)
        table.actors, table.per_actor = 2, 16  # 4 groups of 8 per actor: 64 jobs at once
        assert table.retry_after() == 10
        table.per_actor = 1  # one group per actor: 16 at once
        assert table.retry_after() == 40
        table.group_size = 1  # singles, one per slot
        assert table.retry_after() == 60  # 64 * 10 / 2, capped
    asyncio.run(go())
