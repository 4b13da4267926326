"""A max pool's picks held fixed across forwards. An unpool places values at the positions its
pool picked: positions, which the exact check does not count as a decision, though noise that
flips a window's maximum moves the value to another position by a whole step. The check's
noisy forwards are therefore given the clean forward's picks for the pools only an unpool reads
(``PoolPicks``), so that any jump left in the output comes from something else (a pole, a cut)."""
from __future__ import annotations


def returns_picks(out) -> bool:
    """Is ``out`` a pool's (values, integer picks) pair (``max_pool2d_with_indices``, the 1D,
    3D, adaptive and fractional ones)?"""
    import torch

    return (isinstance(out, tuple) and len(out) == 2
            and all(isinstance(t, torch.Tensor) for t in out)
            and out[0].is_floating_point() and not out[1].is_floating_point()
            and out[0].shape == out[1].shape)


def is_pool(name: str) -> bool:
    return "pool" in name


class PoolPicks:
    """A dispatch mode that numbers a forward's pools returning picks (``returns_picks``) in
    call order and, for the numbers in ``pins``, records their picks (``kept`` None: in the
    mode's ``kept``) or returns the given ones in their place (``kept``: number -> picks, used
    where shape, dtype and device match). The values stay the forward's own."""

    def __new__(cls, pins, kept: dict | None = None):
        from torch.utils._python_dispatch import TorchDispatchMode

        pins = frozenset(pins)
        recording = kept is None

        class Picks(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.calls = 0
                self.kept = {} if recording else dict(kept)

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if not (is_pool(func.overloadpacket.__name__) and returns_picks(out)):
                    return out
                number, self.calls = self.calls, self.calls + 1
                if number not in pins:
                    return out
                if recording:
                    self.kept[number] = out[1].clone()  # (a forward may shift its own in place)
                    return out
                given = self.kept.get(number)
                if given is None or given.shape != out[1].shape or \
                        given.dtype != out[1].dtype or given.device != out[1].device:
                    return out
                return out[0], given.clone()

        return Picks()


def pinned(picks: dict | None):
    """A context under which a forward's pools numbered in ``picks`` return those picks (none
    given: nothing changes)."""
    import contextlib

    return PoolPicks(picks, picks) if picks else contextlib.nullcontext()
