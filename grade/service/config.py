"""``kernelmill serve``'s settings, apart from the service (no torch to read them: the CLI
builds its parser from the defaults here)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..policy import Policy


@dataclass
class ServeConfig:
    """``kernelmill serve``'s settings (each is a flag of the same name)."""
    dataset: str | None = None  # served problems: folder, parquet, JSONL or Hub id
    split: str | None = None  # one split of the dataset (default: every split)
    device: str = "auto"  # auto, cpu, cuda
    backend: str = "ray"  # ray: one actor per GPU of the cluster; local: this process's slots
    address: str | None = None  # Ray cluster to join (default: start a local Ray)
    actors: int | None = None  # CPU actors (default: the cluster's CPUs less one)
    # slots one actor grades in at once, a group of n taking n/2 of them (default on a GPU: the
    # batch's per-GPU slots, one per core of its share, at most 16; 1 on CPU)
    per_actor: int | None = None
    running: int | None = None  # CUDA: worker processes an actor runs at once
    queue: int = 4096  # jobs waiting at most; beyond it 429 + Retry-After
    group: int = 8  # most submissions of one problem graded together
    # a group not yet full waits this long from its first submission for more of its problem
    # (submissions in requests of their own, as per-sample reward calls send them)
    group_wait_s: float = 0.25
    deadline_s: float = 1800.0  # a request's default deadline (it may ask for another)
    max_attempts: int = 2  # dispatches of a job whose actor died, then an error
    reward: str = "composite"
    cache: str | None = None  # verdict cache file (JSONL) shared with `kernelmill grade`
    max_wait_s: float = 60.0  # the longest long-poll
    max_submissions: int = 10_000  # per request
    policy: Policy = field(default_factory=Policy)
    token: str | None = None  # bearer token (default: KERNELMILL_TOKEN)
