"""The RNG state every forward starts from: the grade's own seed, by the generators' own methods,
with no Python of torch's run once the candidate's code may run."""
from __future__ import annotations

import torch

from .guards.originals import _cpu_generator, _cuda_seed_all, _Generator, _generator_seed, _type
from .observers.counts import _observed

_CUDA_GENERATORS: list = []  # CUDA's generators, bound before the candidate's import


def _bind_cuda_generators() -> None:
    """Keep CUDA's generators (``torch.cuda.default_generators``, filled when CUDA starts) for
    ``_manual_seed``: called before the candidate's import, after CUDA started."""
    generators = torch.cuda.default_generators
    _CUDA_GENERATORS[:] = [g for g in generators if _type(g) is _Generator] \
        if _type(generators) is tuple else []


def forward_seed(init_seed: int) -> int:
    """The RNG seed every forward of a grade starts from, the reference's and the candidate's
    alike: the grade's own (secret, fresh per submission), never a trial's. A seed per trial
    would tell the candidate which inputs a call has (a key for an answer cache)."""
    return int(init_seed) + 1


def _manual_seed(seed: int) -> None:
    """``torch.manual_seed`` for the CPU and CUDA generators alone, by the generators' own
    method: torch's also seeds every other backend, a privateuse1 backend's module among them,
    which a submission can add (and compute PyTorch's answer in such a module's
    ``manual_seed_all``, called before each observed call's range opens). No Python of torch's
    runs: ``torch.cuda.is_initialized`` reads a module global a submission can rebind."""
    seed = int(seed)
    _generator_seed(_cpu_generator, seed)
    if _CUDA_GENERATORS or _observed()["armed"]:
        # once a candidate's code may run, only the generators bound before its import: an
        # attribute of ``torch.cuda`` read here, before the call's range opens, can run a module
        # ``__getattr__`` of the submission's making that computes the answer with PyTorch
        for generator in _CUDA_GENERATORS:
            _generator_seed(generator, seed)
        return
    generators = torch.cuda.default_generators  # filled when CUDA starts (a C call)
    if _type(generators) is not tuple:
        return  # rebound: CUDA's generators are not seeded, for no one's benefit
    if not generators:
        # before CUDA starts, queued as torch queues it; never once a candidate's code may run
        # (torch's queue takes a lock looked up on torch.cuda, which a submission can rebind
        # to run PyTorch before each observed call)
        if not _observed()["armed"]:
            _cuda_seed_all(seed)
        return
    for generator in generators:
        if _type(generator) is _Generator:
            _generator_seed(generator, seed)
