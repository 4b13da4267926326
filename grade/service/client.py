"""A plain Python client of the grading service (standard library only), with retries.

    from kernelmill.grade.service.client import ServiceClient
    client = ServiceClient("http://HOST:8100")  # token: KERNELMILL_TOKEN
    views = client.grade([{"submission_id": "a", "problem_id": "p1", "source": code}])
    views[0]["status"], views[0]["verdict"]["reward"]

A refused request (429) waits the ``Retry-After`` the service gave; a connection that fails, or
a 502/503/504, is retried with exponential backoff and jitter. Submitting again is safe: the
service answers the same submission with the same job (idempotency by verdict key). A 4xx
other than 429 is the caller's mistake and raises ``ServiceError`` at once.
"""
from __future__ import annotations

import json
import os
import random
import time
import urllib.error
import urllib.parse
import urllib.request

RETRY_STATUS = (502, 503, 504)


class ServiceError(Exception):
    """The service refused the request, or could not be reached after every retry."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class ServiceClient:
    """url: the service's base URL. token: bearer token (default ``KERNELMILL_TOKEN``).
    retries: attempts after the first for a failed connection or a 5xx; a 429 is waited out
    until ``give_up_s``. backoff_s/max_backoff_s: the first and the longest pause. timeout_s:
    one HTTP exchange (a long-poll adds its wait)."""

    def __init__(self, url: str | None = None, *, token: str | None = None, retries: int = 6,
                 backoff_s: float = 0.5, max_backoff_s: float = 30.0, timeout_s: float = 60.0,
                 give_up_s: float = 3600.0):
        url = url or os.environ.get("KERNELMILL_SERVICE") or "http://127.0.0.1:8100"
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get("KERNELMILL_TOKEN")
        self.retries, self.backoff_s, self.max_backoff_s = retries, backoff_s, max_backoff_s
        self.timeout_s, self.give_up_s = timeout_s, give_up_s
        self.refused = 0  # 429s waited out (what a benchmark or a test reads)

    # -- HTTP ------------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: dict | None = None,
                wait_s: float = 0.0) -> dict:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        started, failures = time.monotonic(), 0
        while True:
            request = urllib.request.Request(self.url + path, data=data, headers=headers,
                                             method=method)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s + wait_s) as answer:
                    return json.loads(answer.read())
            except urllib.error.HTTPError as exc:
                text = exc.read().decode(errors="replace")
                if exc.code == 429 and time.monotonic() - started < self.give_up_s:
                    self.refused += 1
                    time.sleep(_retry_after(exc.headers.get("Retry-After")))
                    continue
                if exc.code not in RETRY_STATUS or failures >= self.retries:
                    raise ServiceError(f"{method} {path}: {exc.code} {_message(text)}",
                                       exc.code) from None
            except (urllib.error.URLError, OSError) as exc:
                if failures >= self.retries:
                    raise ServiceError(f"{method} {self.url}{path}: {exc}") from None
            failures += 1
            pause = min(self.max_backoff_s, self.backoff_s * 2 ** (failures - 1))
            time.sleep(pause * (0.5 + random.random() / 2))

    # -- the API ---------------------------------------------------------------------------------
    def submit(self, submissions: list[dict], deadline_s: float | None = None) -> list[str]:
        body: dict = {"submissions": submissions}
        if deadline_s is not None:
            body["deadline_s"] = deadline_s
        return self.request("POST", "/grade", body)["jobs"]

    def jobs(self, ids: list[str], wait_s: float = 0.0) -> list[dict]:
        return self.request("POST", "/jobs:wait", {"ids": ids, "wait": wait_s},
                            wait_s=wait_s)["jobs"]

    def job(self, job_id: str, wait_s: float = 0.0) -> dict:
        query = urllib.parse.urlencode({"wait": wait_s})
        return self.request("GET", f"/jobs/{urllib.parse.quote(job_id)}?{query}", wait_s=wait_s)

    def wait(self, ids: list[str], timeout_s: float | None = None, poll_s: float = 30.0
             ) -> list[dict]:
        """The jobs once every one is answered (``done`` or ``error``), long-polling; with
        ``timeout_s`` those still open then come back as they are."""
        views: dict[str, dict] = {}
        open_ids = list(dict.fromkeys(ids))
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while open_ids:
            left = poll_s if end is None else min(poll_s, end - time.monotonic())
            for view in self.jobs(open_ids, max(0.0, left)):
                views[view["id"]] = view
            open_ids = [i for i in open_ids if views[i]["status"] not in ("done", "error")]
            if end is not None and time.monotonic() >= end:
                break
        return [views[i] for i in ids]

    def grade(self, submissions: list[dict], deadline_s: float | None = None,
              timeout_s: float | None = None) -> list[dict]:
        """Submit and wait: one job view per submission, in order."""
        return self.wait(self.submit(submissions, deadline_s), timeout_s)

    def health(self) -> dict:
        return self.request("GET", "/health")


def _retry_after(value: str | None) -> float:
    try:
        return max(0.05, min(60.0, float(value)))
    except (TypeError, ValueError):
        return 1.0


def _message(text: str) -> str:
    try:
        return str(json.loads(text).get("error", text))
    except (ValueError, AttributeError):
        return text[:200]


def score(view: dict) -> float | None:
    """The reward of a job view: None where it does not apply (the service could not grade it,
    or the reference cannot run)."""
    verdict = view.get("verdict") or {}
    if view.get("status") != "done" or verdict.get("reference_failed") or \
            verdict.get("reward") is None:
        return None
    return float(verdict["reward"])
