"""Rewards from a verdict. Every scheme gives 0 to a submission flagged for any hack.

``composite`` (seed study 003)
    ``r = α·compiled + β·correct + γ·min(t_eager / t, r_max)·correct``, defaults α=0.5, β=1, γ=1,
    r_max=3: half a point for code that builds and runs, one for right answers, up to three more
    for speed over eager PyTorch. Range [0, 4.5].

``makora``
    ``σ(1[correct] + max(0, t_inductor / t) − 1.8)``: a sigmoid centred so that a correct kernel
    as fast as ``torch.compile`` scores σ(0.2) ≈ 0.55 and faster ones approach 1. When no Inductor
    time exists (CPU, or Inductor failed) the eager speedup stands in. Range (0, 1).

``staged``
    A ladder with one rung per stage the submission clears, so that partial progress is visible
    to the learner: 0 nothing usable; 0.1 it parses and defines ModelNew; 0.25 it imports and
    constructs; 0.4 forward returns without error; 0.55 outputs have the reference's structure,
    shapes and dtypes; 1.0 correct on every trial; plus ``0.5·clip(log2(speedup_vs_eager), 0, 2)``
    for speed. Range [0, 2].

A reward function takes the verdict dict (``compiled``, ``correct``, ``hacks``,
``speedup_vs_eager``, ``speedup_vs_inductor``, ``stage_reached``) and returns a float.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from kernelmill.core.errors import KernelmillError

STAGES = ("none", "parsed", "constructed", "ran", "shaped", "correct")


def composite(verdict: dict, *, alpha: float = 0.5, beta: float = 1.0, gamma: float = 1.0,
              r_max: float = 3.0) -> float:
    if verdict.get("hacks"):
        return 0.0
    compiled = 1.0 if verdict.get("compiled") else 0.0
    correct = 1.0 if verdict.get("correct") else 0.0
    speedup = verdict.get("speedup_vs_eager") or 0.0
    return alpha * compiled + beta * correct + gamma * min(max(speedup, 0.0), r_max) * correct


def makora(verdict: dict, *, centre: float = 1.8) -> float:
    if verdict.get("hacks"):
        return 0.0
    correct = 1.0 if verdict.get("correct") else 0.0
    speedup = verdict.get("speedup_vs_inductor")
    if speedup is None:
        speedup = verdict.get("speedup_vs_eager")
    speed = max(0.0, speedup or 0.0) if correct else 0.0
    return 1.0 / (1.0 + math.exp(-(correct + speed - centre)))


_LADDER = {"none": 0.0, "parsed": 0.1, "constructed": 0.25, "ran": 0.4, "shaped": 0.55,
           "correct": 1.0}


def staged(verdict: dict) -> float:
    if verdict.get("hacks"):
        return 0.0
    stage = verdict.get("stage_reached", "none")
    if verdict.get("correct"):
        stage = "correct"
    reward = _LADDER.get(stage, 0.0)
    speedup = verdict.get("speedup_vs_eager")
    if stage == "correct" and speedup:
        reward += 0.5 * min(max(math.log2(speedup), 0.0), 2.0)
    return reward


REWARDS: dict[str, Callable[[dict], float]] = {"composite": composite, "makora": makora,
                                               "staged": staged}


def get_reward(name: str) -> Callable[[dict], float]:
    try:
        return REWARDS[name]
    except KeyError:
        raise KernelmillError(f"unknown reward {name!r} (one of {', '.join(REWARDS)})") from None
