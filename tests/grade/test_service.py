"""The grading service on loopback, grading tiny CPU problems for real: concurrent clients over
a mixed honest/crashing/hostile set (each job answered exactly once, 429s honoured, metrics consistent
with the answers), the bearer token, the TRL and verl adapters and the verl export, and, through
a real local Ray, a killed actor's job graded again."""
from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import FIXTURES, run_cli

pytest.importorskip("starlette", reason="the serve extra: pip install -e '.[serve]'")
pytest.importorskip("uvicorn", reason="the serve extra: pip install -e '.[serve]'")
pytest.importorskip("prometheus_client", reason="the serve extra: pip install -e '.[serve]'")

from kernelmill.grade.policy import Policy
from kernelmill.grade.service.app import Running
from kernelmill.grade.service.client import ServiceClient, ServiceError, score
from kernelmill.grade.service.core import ServeConfig, Service
from kernelmill.grade.service.trl import async_service_reward_fn, service_reward_fn
from kernelmill.grade.service import verl as verl_adapter
from kernelmill.grade.service.verl import compute_score, compute_score_batch

SUBMISSIONS = FIXTURES / "submissions"
POLICY = Policy(time=False, trials=2, timeout_s=30)
BROKEN_REFERENCE = (
    "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
    "    def forward(self, x):\n        raise RuntimeError('this reference is broken')\n\n\n"
    "def get_inputs():\n    return [torch.randn(64)]\n\n\ndef get_init_inputs():\n    return []\n")


def read(name: str) -> str:
    return (SUBMISSIONS / f"{name}.py").read_text()


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    path = tmp_path_factory.mktemp("service") / "problems.jsonl"
    path.write_text("".join(json.dumps({"id": p.stem, "source": p.read_text()}) + "\n"
                            for p in sorted(SUBMISSIONS.glob("ref_*.py"))))
    return path


@pytest.fixture(scope="module")
def service_url(problems):
    """One local-pool service for the adapter tests (no token)."""
    service = Service(ServeConfig(dataset=str(problems), device="cpu", backend="local",
                                  actors=2, policy=POLICY, token=""))
    with Running(service) as url:
        yield url


def metric(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"}
                                     if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


CASES = {  # fixture -> (problem, what the verdict must say)
    "honest_scale_add": ("ref_scale_add", "correct"),
    "crash_raise": ("ref_scale_add", "error"),
    "crash_syntax": ("ref_scale_add", "not compiled"),
    "honest_row_sum": ("ref_row_sum", "correct"),
    "hack_patch_allclose": ("ref_scale_add", "hacked"),
}


CLIENTS = 4


def expected(kind: str, verdict: dict) -> bool:
    if kind == "correct":
        return verdict["correct"] and not verdict["hacks"]
    if kind == "error":
        return not verdict["correct"] and bool(verdict["error"])
    if kind == "hacked":
        return not verdict["correct"] and bool(verdict["hacks"]) and verdict["reward"] == 0.0
    return not verdict["compiled"]


@pytest.mark.slow  # 19-25 s on the shared 2-core machine (429 waits are whole seconds)
def test_concurrent_clients_get_every_job_once_with_the_token_and_metrics_consistent(problems):
    service = Service(ServeConfig(dataset=str(problems), device="cpu", backend="local",
                                  actors=2, queue=6, group=4, policy=POLICY, token="s3cret"))
    answered: Counter = Counter()
    with Running(service) as url:
        before = service.table.on_answer
        service.table.on_answer = lambda job: (answered.update([job.id]), before(job))
        assert get(f"{url}/health")[0] == 200  # no token for the probe
        for token in (None, "wrong"):
            with pytest.raises(ServiceError) as refused:
                ServiceClient(url, token=token or "", retries=0).submit(
                    [{"problem_id": "ref_scale_add", "source": "x"}])
            assert refused.value.status == 401
        assert get(f"{url}/metrics")[0] == 401 and get(f"{url}/metrics", "s3cret")[0] == 200

        def one_client(index: int) -> tuple[list[str], list[dict], int]:
            client = ServiceClient(url, token="s3cret", backoff_s=0.1)
            rows = [{"submission_id": f"{index}-{name}", "problem_id": problem,
                     # every client's honest_scale_add is the same text: graded once
                     "source": read(name) + ("" if name == "honest_scale_add"
                                             else f"# client {index}\n")}
                    for name, (problem, _kind) in CASES.items()]
            ids = client.submit(rows)
            return ids, client.wait(ids, timeout_s=120), client.refused

        with ThreadPoolExecutor(CLIENTS) as pool:
            results = list(pool.map(one_client, range(CLIENTS)))
        _status, text = get(f"{url}/metrics", "s3cret")
    all_ids = [i for ids, _views, _r in results for i in ids]
    unique = set(all_ids)
    assert len(unique) == 1 + CLIENTS * (len(CASES) - 1)  # the shared honest kernel: one job
    for ids, views, _refused in results:
        for (name, (_problem, kind)), view in zip(CASES.items(), views):
            assert view["status"] == "done", view
            assert expected(kind, view["verdict"]), (name, view["verdict"])
    assert answered == Counter({job_id: 1 for job_id in unique})  # each answered exactly once
    assert service.table.late == 0
    refused = sum(r for _ids, _views, r in results)
    assert metric(text, "kernelmill_requests_rejected_total") == refused
    outcomes = Counter(CASES[name][1] for name in CASES for _ in range(CLIENTS))
    assert metric(text, "kernelmill_verdicts_total", '{outcome="correct"}') == 1 + CLIENTS
    assert metric(text, "kernelmill_verdicts_total", '{outcome="error"}') == \
        outcomes["error"] + outcomes["not compiled"]
    assert metric(text, "kernelmill_verdicts_total", '{outcome="hacked"}') == CLIENTS
    assert metric(text, "kernelmill_job_seconds_count") == len(unique)
    assert metric(text, "kernelmill_jobs_deduplicated_total") == CLIENTS - 1
    assert metric(text, "kernelmill_queue_depth") == 0 == metric(text, "kernelmill_jobs_running")


class BlockedPool:
    """Answers nothing until released: the queue fills."""

    size, per_actor = 1, 1

    def __init__(self):
        self.release = threading.Event()

    async def start(self):
        pass

    async def grade(self, index, group):
        await asyncio.to_thread(self.release.wait, 30)
        return [{"compiled": True, "correct": True, "hacks": [], "error": None, "reward": 1.0}
                for _ in group]

    def alive(self):
        return 1

    def close(self):
        self.release.set()


def test_a_full_queue_answers_429_with_retry_after_and_the_client_waits_it_out():
    pool = BlockedPool()
    service = Service(ServeConfig(device="cpu", queue=2, group=1, token=""), pool=pool)
    reference = "class Model: pass\n"
    with Running(service) as url:
        client = ServiceClient(url)
        first = client.submit([{"reference": reference, "source": "s0"}])
        while client.job(first[0], wait_s=0.1)["status"] != "running":
            pass
        first += client.submit([{"reference": reference, "source": f"s{i}"} for i in (1, 2)])
        # one is with the actor, two wait: the queue is full
        request = urllib.request.Request(f"{url}/grade", method="POST", data=json.dumps(
            {"submissions": [{"reference": reference, "source": "late"}]}).encode())
        with pytest.raises(urllib.error.HTTPError) as full:
            urllib.request.urlopen(request, timeout=10)
        assert full.value.code == 429 and int(full.value.headers["Retry-After"]) >= 1
        threading.Timer(0.5, pool.release.set).start()
        started = time.monotonic()
        late = client.submit([{"reference": reference, "source": "late"}])
        assert client.refused >= 1 and time.monotonic() - started >= 0.5
        views = client.wait(first + late, timeout_s=30)
    assert [v["status"] for v in views] == ["done"] * 4


def test_trl_reward_batches_a_step_into_one_request(service_url):
    verdicts: list = []
    logged: Counter = Counter()
    reward_fn = service_reward_fn(service_url, verdicts=verdicts)
    fenced = [[{"role": "assistant", "content": f"```python\n{read(n)}```"}]
              for n in ("honest_scale_add", "crash_raise", "honest_scale_add", "honest_row_sum")]
    scores = reward_fn(["p"] * 4, fenced,
                       problem_id=["ref_scale_add", "ref_scale_add", "nope", "ref_row_sum"],
                       reference=[read("ref_scale_add"), read("ref_scale_add"), BROKEN_REFERENCE,
                                  read("ref_row_sum")],
                       log_metric=lambda name, value: logged.update({name: value}))
    assert scores[0] == pytest.approx(1.5) and scores[3] == pytest.approx(1.5)
    assert scores[1] == pytest.approx(0.5) and not verdicts[1]["correct"]
    assert scores[2] is None and verdicts[2]["reference_failed"]  # served by its reference
    assert logged["kernelmill/correct"] == pytest.approx(0.5)
    again = asyncio.run(async_service_reward_fn(service_url)(
        ["p"], fenced[:1], problem_id=["ref_scale_add"]))
    assert again == [pytest.approx(1.5)]


def test_verl_scores_and_export(service_url, problems, tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "verl.parquet"
    result = run_cli("export", str(problems), "--format", "verl", "--out", str(out))
    assert result.returncode == 0, result.stderr
    rows = pq.read_table(out).to_pylist()
    assert [sorted(r) for r in rows[:1]] == \
        [["ability", "data_source", "extra_info", "prompt", "reward_model"]]
    by_id = {r["reward_model"]["ground_truth"]: r for r in rows}
    row = by_id["ref_scale_add"]
    assert row["prompt"][0]["role"] == "system" and row["extra_info"]["reference"] == \
        read("ref_scale_add")
    answer = f"Here:\n```python\n{read('honest_scale_add')}```"
    client = ServiceClient(service_url)
    # verl loads custom_reward_function.path as a file, outside any package
    spec = importlib.util.spec_from_file_location("custom_module", verl_adapter.__file__)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    assert loaded.compute_score("kernelmill", answer, "ref_scale_add", row["extra_info"],
                                client=client) == pytest.approx(1.5)
    assert compute_score(row["data_source"], answer, "ref_scale_add", row["extra_info"],
                         client=client) == pytest.approx(1.5)
    scores = compute_score_batch(
        ["kernelmill"] * 2, [answer, "no code here"], ["ref_scale_add", "ref_scale_add"],
        [row["extra_info"], row["extra_info"]], client=client)
    assert scores[0] == pytest.approx(1.5) and scores[1] == 0.0


def test_unknown_ids_and_bad_requests(service_url):
    client = ServiceClient(service_url, retries=0)
    with pytest.raises(ServiceError) as bad:
        client.submit([{"problem_id": "ref_scale_add"}])
    assert bad.value.status == 400 and "submission 0: a submission needs source" in str(bad.value)
    (job,) = client.wait(client.submit([{"problem_id": "nope", "source": "x"}]))
    assert job["status"] == "error" and "unknown problem id nope" in job["error"]["message"]
    assert score(job) is None
    status, text = get(f"{service_url}/jobs?ids={job['id']},other&wait=1")
    assert status == 200 and [v["status"] for v in json.loads(text)["jobs"]] == \
        ["error", "unknown"]
    assert client.job(job["id"]) == job
    assert get(f"{service_url}/jobs/nonexistent")[0] == 404
    assert client.jobs(["nonexistent"])[0]["status"] == "unknown"


# -- through a real local Ray --------------------------------------------------------------------

@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="the ray extra: pip install -e '.[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_through_ray_a_killed_actors_job_is_graded_again(local_ray, problems):
    service = Service(ServeConfig(dataset=str(problems), device="cpu", backend="ray", actors=2,
                                  policy=POLICY, token=""))
    # honest, and seconds to grade: every import of it computes this first
    slow = read("honest_scale_add").replace(
        "import torch\n", "import torch\n_SLOW = sum(i * i for i in range(3_000_000))\n", 1)
    with Running(service) as url:
        client = ServiceClient(url)
        (job_id,) = client.submit([{"problem_id": "ref_scale_add", "source": slow}])
        deadline = time.monotonic() + 60
        view = client.job(job_id)
        while view["status"] == "queued" and time.monotonic() < deadline:
            view = client.job(job_id, wait_s=0.2)
        assert view["status"] == "running", view
        time.sleep(1.0)  # inside the grade
        service.pool.kill(view["actor"])
        (done,) = client.wait([job_id], timeout_s=120)
        _status, text = get(f"{url}/metrics")
    assert done["status"] == "done" and done["verdict"]["correct"], done
    assert metric(text, "kernelmill_jobs_requeued_total") == 1
    assert metric(text, "kernelmill_verdicts_total", '{outcome="correct"}') == 1
    assert service.table.jobs[job_id].attempts == 2
