"""``kernelmill serve``: the grading service (``pip install -e '.[serve,ray]'``).

    kernelmill serve [--dataset D] [--device auto|cpu|cuda] [--port P] [--address RAY_ADDRESS]

One grading actor per GPU of the Ray cluster (a local Ray when no address is given), or
``--actors N`` on CPU; ``--backend local`` grades in this process's slots without Ray.
Set ``KERNELMILL_TOKEN`` before listening beyond 127.0.0.1.
"""
from __future__ import annotations

import argparse
import os
import sys

from kernelmill.core.errors import KernelmillError

from ..policy import PRESETS, Policy
from ..rewards import REWARDS
from .config import ServeConfig


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    policy = Policy(preset=args.policy, trials=args.trials, time=not args.no_time,
                    timeout_s=args.timeout)
    return ServeConfig(dataset=args.dataset, split=args.split, device=args.device,
                       backend=args.backend, address=args.address, actors=args.actors,
                       per_actor=args.per_actor, running=args.running, queue=args.queue, group=args.group,
                       group_wait_s=args.group_wait,
                       deadline_s=args.deadline, reward=args.reward, cache=args.cache,
                       policy=policy)


def _cmd_serve(args: argparse.Namespace) -> int:
    from .app import _starlette, serve
    from .metrics import _prometheus

    _starlette()  # each missing extra is one line now, not a failed start-up later
    _prometheus()
    config = config_from_args(args)
    if config.backend == "ray":
        from kernelmill.validate.ray_backend import _import_ray

        _import_ray()
    if args.host not in ("127.0.0.1", "localhost", "::1") and \
            not os.environ.get("KERNELMILL_TOKEN"):
        raise KernelmillError(f"serve: listening on {args.host} without KERNELMILL_TOKEN; set "
                              "a token (the service runs untrusted code)")
    print(f"kernelmill: serving on http://{args.host}:{args.port}/ ({config.backend}, "
          f"device {config.device})", file=sys.stderr, flush=True)
    from .core import Service  # the grader (torch) only once it serves

    serve(Service(config), args.host, args.port)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    defaults = ServeConfig()
    p = subparsers.add_parser(
        "serve", help="grade submissions over HTTP for RL trainers (Ray actors per GPU)",
        description="A grading service: POST /grade answers job ids at once, GET /jobs/ID "
                    "(or POST /jobs:wait) the verdicts; GET /health, GET /metrics. "
                    "KERNELMILL_TOKEN sets the bearer token.")
    p.add_argument("--dataset", help="served problems: a dataset folder, parquet file, records "
                   "or rows JSONL, or a Hub id (without it, submissions carry their reference)")
    p.add_argument("--split", help="only this split of the dataset")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8100, help="port (8100)")
    p.add_argument("--backend", choices=("ray", "local"), default=defaults.backend,
                   help="ray: one actor per GPU of the cluster (default); local: this "
                   "process's slots, no Ray")
    p.add_argument("--address", help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--actors", type=int, help="CPU actors (default: the cluster's CPUs less one)")
    p.add_argument("--per-actor", type=int, help="slots one actor grades in at once, a group of "
                   "n members taking n/2 (default on a GPU: one per core of its share of the "
                   "host, at most 16; 1 on CPU)")
    p.add_argument("--running", type=int, help="CUDA: worker processes one actor runs at once")
    p.add_argument("--queue", type=int, default=defaults.queue,
                   help=f"jobs waiting at most, then 429 (default {defaults.queue})")
    p.add_argument("--group", type=int, default=defaults.group, help="most submissions of one "
                   f"problem graded together, from one request or several (default "
                   f"{defaults.group})")
    p.add_argument("--group-wait", type=float, default=defaults.group_wait_s,
                   help="seconds a group not yet full waits for more of its problem before it "
                   f"is graded (default {defaults.group_wait_s})")
    p.add_argument("--deadline", type=float, default=defaults.deadline_s,
                   help=f"a request's default deadline, seconds ({defaults.deadline_s:.0f})")
    p.add_argument("--cache", help="verdict cache file (JSONL), as kernelmill grade keeps")
    p.add_argument("--reward", choices=sorted(REWARDS), default=defaults.reward)
    p.add_argument("--policy", choices=PRESETS, default="library")
    p.add_argument("--trials", type=int, default=3, help="fresh-input trials (default 3)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per worker run")
    p.add_argument("--no-time", action="store_true", help="skip timing (correctness only)")
    p.set_defaults(func=_cmd_serve)
