"""A grading server, so that a trainer on one machine grades on another's GPUs.

    python -m kernelmill.grade.serve --device cuda --port 8100 [--host 0.0.0.0]

``POST /`` with ``{"reference", "candidate", "record"?, "reward"?}`` (JSON) answers the verdict
as JSON, graded exactly as ``make_reward_fn`` grades locally (``trl.local_grader``: isolated
workers, timing-timeout fallback, CPU sizes). A reference that cannot run answers
``{"reference_failed": true, "error": ...}``. Requests run in parallel, spread over the device's
slots (one per GPU), each grade admitted on its GPU's and the host's memory as a batch's is.
The client is ``make_reward_fn(grader="http://HOST:8100/")`` or ``KERNELMILL_GRADER=
http://HOST:8100/`` for the default ``reward_fn``.

The server grades untrusted code the way ``kernelmill grade`` does; it listens on 127.0.0.1
unless told otherwise, and has no authentication: expose it only on a private network. For
many trainers or GPUs, with a queue, a token and metrics, ``kernelmill serve``
(``grade/service/``) is the service.
"""
from __future__ import annotations

import argparse
import itertools
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kernelmill.core.devices import device_slots
from kernelmill.core.record import Verdict

from .grader import ReferenceError
from .policy import Policy
from .trl import local_grader

log = logging.getLogger("kernelmill")
MAX_BODY = 8 << 20


def make_server(host: str = "127.0.0.1", port: int = 8100, *, device: str = "auto",
                policy: Policy | None = None, workers: int | None = None) -> ThreadingHTTPServer:
    grade = local_grader(device, policy)
    slots = device_slots(grade.device, workers)
    turn = itertools.count()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 — http.server's naming
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 < length <= MAX_BODY:
                    raise ValueError(f"body of {length} bytes (1 to {MAX_BODY} accepted)")
                body = json.loads(self.rfile.read(length))
                reference, candidate = body["reference"], body["candidate"]
                if not (isinstance(reference, str) and isinstance(candidate, str)):
                    raise TypeError("reference and candidate must be strings")
            except (ValueError, KeyError, TypeError) as exc:
                return self._answer(400, {"error": {"stage": "request", "message": str(exc)}})
            with lock:
                slot = slots[next(turn) % len(slots)]
            try:
                verdict = grade(reference, candidate, record=body.get("record"),
                                reward=str(body.get("reward") or "composite"),
                                slot_env=slot.get("env"), slot=slot)
            except ReferenceError as exc:
                verdict = Verdict.failure("reference", str(exc), reward=None,
                                          reference_failed=True).to_dict()
            except Exception as exc:  # noqa: BLE001 — the client hears why, the server goes on
                return self._answer(500, {"error": {"stage": "server",
                                                    "message": f"{type(exc).__name__}: {exc}"}})
            self._answer(200, verdict)

        def _answer(self, status: int, payload: dict) -> None:
            data = json.dumps(payload, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 — the base's name
            log.debug(format % args)

    return ThreadingHTTPServer((host, port), Handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelmill.grade.serve",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8100, help="port (8100)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (auto)")
    parser.add_argument("--workers", type=int, help="parallel slots (default: one per GPU)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="kernelmill: %(message)s")
    server = make_server(args.host, args.port, device=args.device, workers=args.workers)
    print(f"kernelmill: grading on {args.device} at http://{args.host}:{server.server_port}/",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
