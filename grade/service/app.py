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


def create_app(service: Service):
    """The ASGI app; its lifespan starts the service (actors, dispatcher) and stops it."""
    _starlette()
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    def refuse(status: int, message: str, headers: dict | None = None):
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    def authorized(request) -> bool:
        if not service.token:
            return True
        given = request.headers.get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {service.token}".encode())

    def guarded(handler):
        async def route(request):
            if not authorized(request):
                return refuse(401, "a bearer token is required (Authorization: Bearer ...)",
                              {"WWW-Authenticate": "Bearer"})
            return await handler(request)
        return route

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

    def wait_s(value) -> float:
        try:
            return min(service.config.max_wait_s, max(0.0, float(value or 0)))
        except (TypeError, ValueError):
            raise ValueError(f"wait must be a number of seconds, not {value!r}") from None

    async def grade(request):
        try:
            data = await body(request)
            ids = service.submit(data.get("submissions"), data.get("deadline_s"))
        except ValueError as exc:
            return refuse(400, str(exc))
        except QueueFull as exc:
            service.metrics.rejected.inc()
            return JSONResponse({"error": str(exc), "retry_after": exc.retry_after},
                                status_code=429, headers={"Retry-After": str(exc.retry_after)})
        return JSONResponse({"jobs": ids})

    async def job(request):
        try:
            seconds = wait_s(request.query_params.get("wait"))
        except ValueError as exc:
            return refuse(400, str(exc))
        (view,) = await service.table.wait([request.path_params["job_id"]], seconds)
        return refuse(404, "no such job") if view is None else JSONResponse(view)

    async def many(ids, seconds):
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            return refuse(400, "ids must be a list of job ids")
        views = await service.table.wait(ids, seconds)
        return JSONResponse({"jobs": [v or {"id": i, "status": "unknown"}
                                      for i, v in zip(ids, views)]})

    async def jobs_get(request):
        ids = [i for i in request.query_params.get("ids", "").split(",") if i]
        try:
            return await many(ids, wait_s(request.query_params.get("wait")))
        except ValueError as exc:
            return refuse(400, str(exc))

    async def jobs_wait(request):
        try:
            data = await body(request)
            return await many(data.get("ids"), wait_s(data.get("wait")))
        except ValueError as exc:
            return refuse(400, str(exc))

    async def health(request):
        return JSONResponse(service.health())

    async def metrics(request):
        return Response(service.metrics.text(), media_type=service.metrics.content_type)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    return Starlette(routes=[
        Route("/grade", guarded(grade), methods=["POST"]),
        Route("/jobs:wait", guarded(jobs_wait), methods=["POST"]),
        Route("/jobs/{job_id}", guarded(job), methods=["GET"]),
        Route("/jobs", guarded(jobs_get), methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", guarded(metrics), methods=["GET"]),
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
