"""The service client's retries: a 503 and a dropped connection are retried with backoff, a 429
waits its Retry-After, a 400 is raised at once, and an unreachable service is one error after
the last retry."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kernelmill.grade.service.client import ServiceClient, ServiceError


def scripted(answers: list[tuple[int, dict, dict]]):
    """A loopback server answering POSTs with ``answers`` in turn (status, headers, body)."""
    seen: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 — http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(time.monotonic())
            status, headers, body = answers[min(len(seen), len(answers)) - 1]
            data = json.dumps(body).encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_503_then_429_then_success_and_a_400_at_once():
    server, seen = scripted([(503, {}, {"error": "busy"}),
                             (429, {"Retry-After": "1"}, {"error": "full"}),
                             (200, {}, {"jobs": ["a"]}),
                             (400, {}, {"error": "submission 0: a submission needs source"})])
    try:
        client = ServiceClient(f"http://127.0.0.1:{server.server_port}", backoff_s=0.05,
                               token="t")
        assert client.submit([{"problem_id": "p", "source": "x"}]) == ["a"]
        assert len(seen) == 3 and client.refused == 1
        assert seen[2] - seen[1] >= 0.95  # Retry-After honoured
        with pytest.raises(ServiceError, match="400 submission 0: a submission needs source"):
            client.submit([{"problem_id": "p"}])
        assert len(seen) == 4  # not retried
    finally:
        server.shutdown()
        server.server_close()


def test_an_unreachable_service_is_one_error_after_the_retries():
    client = ServiceClient("http://127.0.0.1:9", retries=2, backoff_s=0.05)  # discard port
    started = time.monotonic()
    with pytest.raises(ServiceError, match="127.0.0.1:9/grade"):
        client.submit([{"problem_id": "p", "source": "x"}])
    assert time.monotonic() - started >= 0.05  # backed off between attempts
