"""The early answer: a strided sample of each checked call's outputs, sent to the parent before
the timing window, so an answer already wrong is not timed (``grade.compare.sample_mismatch``).

Only the decision to time rides on it, never the verdict: the parent judges the outputs the
worker returns at its end. A worker that sends a false sample only loses its own timing (its
answer called wrong) or is timed and then judged on the outputs it returns (called right)."""
from __future__ import annotations

import math
from typing import Any

import torch

from .guards.originals import _Tensor, _type

SAMPLE_ELEMENTS = 2048  # per output of a call: a JSON report of tens of KB


def output_sample(outputs: list | None) -> list[dict] | None:
    """``[{"shape", "dtype", "stride", "values"}]``: every ``stride``-th element of each output
    flattened (complex as real pairs), from the first; None where there is nothing to sample."""
    if outputs is None:
        return None
    sampled = []
    for tensor in outputs:
        if _type(tensor) is not _Tensor:
            return None
        flat = tensor.reshape(-1)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        stride = max(1, -(-flat.numel() // SAMPLE_ELEMENTS))
        part = flat[::stride]
        values: list[Any]
        if part.is_floating_point():
            values = [v if math.isfinite(v) else repr(v) for v in part.double().tolist()]
        else:
            values = part.long().tolist()
        sampled.append({"shape": list(tensor.shape), "dtype": str(tensor.dtype),
                        "stride": stride, "values": values})
    return sampled


def early_answer(calls: list[dict]) -> list[dict]:
    """The sample of every fresh checked call, with its trial."""
    return [{"trial": call["trial"], "outputs": output_sample(call.get("outputs"))}
            for call in calls if call.get("kind") == "fresh"]
