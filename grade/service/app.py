"""The service's HTTP front end: an ASGI app (Starlette) served by uvicorn.

    POST /grade      {"submissions": [{"submission_id", "source", "problem_id" | "reference",
                      "record"?}, ...], "deadline_s"?}  ->  {"jobs": [id, ...]} at once
    GET  /jobs/{id}?wait=S            ->  {"id", "status", "verdict", "error"?}
    GET  /jobs?ids=a,b&wait=S         ->  {"jobs": [...]}  (waits until all are answered or S)
    POST /jobs:wait {"ids": [...], "wait": S}  ->  the same, for many ids
    GET  /health                      ->  actors, queue, p50/p95 (no token needed)
    GET  /metrics                     ->  Prometheus text

``status`` is ``queued``, ``running``, ``done`` (``verdict`` holds the grader's verdict) or
``error`` (the service could not grade it: ``error.message`` says why). A full queue answers
429 with ``Retry-After``; with ``KERNELMILL_TOKEN`` set every route but ``/health`` wants
``Authorization: Bearer <token>``. The service grades untrusted code as ``kernelmill grade``
does: give it a token before it listens beyond 127.0.0.1.
"""
from __future__ import annotations

import contextlib
import hmac
import json
import socket
import threading

from kernelmill.core.errors import KernelmillError

from .core import Service
from .jobs import QueueFull

MAX_BODY = 256 << 20


def _starlette():
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise KernelmillError("kernelmill serve needs the serve extra: "
                              "pip install -e '.[serve]'") from None


class Routes:
    """The handlers, each a small method over the service."""

    def __init__(self, service: Service):
        from starlette.responses import JSONResponse, Response

        self.service, self.json, self.response = service, JSONResponse, Response

    def refuse(self, status: int, message: str, headers: dict | None = None):
        return self.json({"error": message}, status_code=status, headers=headers)

    def guarded(self, handler):
        """``handler`` behind the bearer token (when the service has one)."""
        async def route(request):
            token = self.service.token
            given = request.headers.get("authorization", "").encode()
            if token and not hmac.compare_digest(given, f"Bearer {token}".encode()):
                return self.refuse(401, "a bearer token is required (Authorization: Bearer "
                                   "...)", {"WWW-Authenticate": "Bearer"})
            try:
                return await handler(request)
            except ValueError as exc:
                return self.refuse(400, str(exc))
        return route

    @staticmethod
    async def body(request) -> dict:
        if int(request.headers.get("content-length") or 0) > MAX_BODY:
            raise ValueError(f"body over {MAX_BODY} bytes")
        try:
            data = json.loads(await request.body())
        except ValueError:
            raise ValueError("the body is not JSON") from None
        if not isinstance(data, dict):
            raise ValueError("the body is a JSON object")
        return data

    def wait_s(self, value) -> float:
        try:
            return min(self.service.config.max_wait_s, max(0.0, float(value or 0)))
        except (TypeError, ValueError):
            raise ValueError(f"wait must be a number of seconds, not {value!r}") from None

    async def grade(self, request):
        data = await self.body(request)
        try:
            ids = self.service.submit(data.get("submissions"), data.get("deadline_s"))
        except QueueFull as exc:
            self.service.metrics.rejected.inc()
            return self.json({"error": str(exc), "retry_after": exc.retry_after},
                             status_code=429, headers={"Retry-After": str(exc.retry_after)})
        return self.json({"jobs": ids})

    async def job(self, request):
        seconds = self.wait_s(request.query_params.get("wait"))
        (view,) = await self.service.table.wait([request.path_params["job_id"]], seconds)
        return self.refuse(404, "no such job") if view is None else self.json(view)

    async def many(self, ids, seconds: float):
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError("ids must be a list of job ids")
        views = await self.service.table.wait(ids, seconds)
        return self.json({"jobs": [v or {"id": i, "status": "unknown"}
                                   for i, v in zip(ids, views)]})

    async def jobs_get(self, request):
        ids = [i for i in request.query_params.get("ids", "").split(",") if i]
        return await self.many(ids, self.wait_s(request.query_params.get("wait")))

    async def jobs_wait(self, request):
        data = await self.body(request)
        return await self.many(data.get("ids"), self.wait_s(data.get("wait")))

    async def health(self, request):
        return self.json(self.service.health())

    async def metrics(self, request):
        metrics = self.service.metrics
        return self.response(metrics.text(), media_type=metrics.content_type)


def create_app(service: Service):
    """The ASGI app; its lifespan starts the service (actors, dispatcher) and stops it."""
    _starlette()
    from starlette.applications import Starlette
    from starlette.routing import Route

    routes = Routes(service)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    return Starlette(routes=[
        Route("/grade", routes.guarded(routes.grade), methods=["POST"]),
        Route("/jobs:wait", routes.guarded(routes.jobs_wait), methods=["POST"]),
        Route("/jobs/{job_id}", routes.guarded(routes.job), methods=["GET"]),
        Route("/jobs", routes.guarded(routes.jobs_get), methods=["GET"]),
        Route("/health", routes.health, methods=["GET"]),
        Route("/metrics", routes.guarded(routes.metrics), methods=["GET"]),
    ], lifespan=lifespan)


def serve(service: Service, host: str = "127.0.0.1", port: int = 8100) -> None:
    """Serve until interrupted."""
    _starlette()
    import uvicorn

    uvicorn.run(create_app(service), host=host, port=port, log_level="warning",
                loop="asyncio", lifespan="on", timeout_graceful_shutdown=5)


class Running:
    """A service on a loopback port in a thread of this process (tests, benchmarks, notebooks):
    ``with Running(service) as url: ...``."""

    def __init__(self, service: Service, host: str = "127.0.0.1", port: int = 0,
                 start_timeout_s: float = 300.0):
        self.service, self.host, self.port = service, host, port
        self.start_timeout_s = start_timeout_s
        self.server = None
        self.thread: threading.Thread | None = None
        self.url = ""

    def __enter__(self) -> str:
        _starlette()
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.url = f"http://{self.host}:{sock.getsockname()[1]}"
        config = uvicorn.Config(create_app(self.service), log_level="warning", loop="asyncio",
                                lifespan="on", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       name="kernelmill-serve", daemon=True)
        self.thread.start()
        waited = 0.0
        while not self.server.started:
            if not self.thread.is_alive():
                raise KernelmillError("serve: the service did not start (see the log above)")
            if waited > self.start_timeout_s:
                raise KernelmillError(f"serve: not up after {self.start_timeout_s:.0f}s")
            self.thread.join(0.05)
            waited += 0.05
        return self.url

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(30)
