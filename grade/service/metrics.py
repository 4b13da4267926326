"""The service's Prometheus metrics (``GET /metrics``), in a registry of its own.

Gauges read the job table and the pool when scraped (queue depth, jobs running, actors alive,
each actor's groups in flight); counters and the latency histogram are updated as jobs are
answered, once per job, by outcome (``grade.outcome``: correct, incorrect, hacked, error, plus
``not_applicable`` for a reference that cannot run and ``service_error`` for a job the service
could not grade).
"""
from __future__ import annotations

from kernelmill.core.errors import KernelmillError

from ..outcome import outcome

BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900)


def _prometheus():
    try:
        import prometheus_client
    except ImportError:
        raise KernelmillError("kernelmill serve needs the serve extra: "
                              "pip install -e '.[serve]'") from None
    return prometheus_client


class Metrics:
    def __init__(self, table, busy: list[int], alive) -> None:
        prom = _prometheus()
        self.prom = prom
        self.registry = prom.CollectorRegistry()
        r = self.registry
        prom.Gauge("kernelmill_queue_depth", "jobs waiting for an actor",
                   registry=r).set_function(lambda: table.queued)
        prom.Gauge("kernelmill_jobs_running", "jobs being graded",
                   registry=r).set_function(lambda: table.running)
        prom.Gauge("kernelmill_actors", "grading actors alive", registry=r).set_function(alive)
        self.busy = prom.Gauge("kernelmill_actor_busy", "slots of an actor taken by the "
                               "groups it grades", ["actor"], registry=r)
        self._busy = busy
        self.verdicts = prom.Counter("kernelmill_verdicts", "jobs answered, by outcome",
                                     ["outcome"], registry=r)
        self.latency = prom.Histogram("kernelmill_job_seconds", "submit to answer, seconds",
                                      buckets=BUCKETS, registry=r)
        for q in (50, 95):  # over the last 2,048 answers, for a dashboard without PromQL
            prom.Gauge(f"kernelmill_job_seconds_p{q}", f"submit to answer, p{q} of recent jobs",
                       registry=r).set_function(lambda q=q: table.percentile(q / 100) or 0.0)
        self.submitted = prom.Counter("kernelmill_jobs_submitted", "submissions received",
                                      registry=r)
        self.deduplicated = prom.Counter("kernelmill_jobs_deduplicated", "submissions "
                                         "answered by an existing job (same verdict key)",
                                         registry=r)
        self.rejected = prom.Counter("kernelmill_requests_rejected", "requests refused with "
                                     "429 (queue full)", registry=r)
        self.requeued = prom.Counter("kernelmill_jobs_requeued", "jobs run again after their "
                                     "actor died", registry=r)

    def answered(self, job) -> None:
        if job.status == "error":
            kind = "service_error"
        elif (job.verdict or {}).get("reference_failed"):
            kind = "not_applicable"
        else:
            kind = outcome(job.verdict or {})
        self.verdicts.labels(kind).inc()
        if job.finished is not None:
            self.latency.observe(job.finished - job.submitted)

    def text(self) -> bytes:
        for index, count in enumerate(self._busy):
            self.busy.labels(str(index)).set(count)
        return self.prom.generate_latest(self.registry)

    content_type = "text/plain; version=0.0.4; charset=utf-8"
