"""On the GPU: composed problems are real work (the composer's size targeting holds)."""
from __future__ import annotations

import random
import statistics

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


def _eager_ms(source: str) -> float:
    namespace: dict = {"__name__": "kernelmill_gpu_timing"}
    exec(compile(source, "<problem>", "exec"), namespace)  # noqa: S102 — composed here
    torch.manual_seed(0)
    model = namespace["Model"](*namespace["get_init_inputs"]()).cuda()
    inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in namespace["get_inputs"]()]
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(*inputs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    del model, inputs
    torch.cuda.empty_cache()
    return statistics.median(times)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_composed_problems_take_between_a_fraction_and_tens_of_milliseconds():
    from kernelmill.synth.checks import Rejected, vet_source
    from kernelmill.synth.composer import Composer, CompositionError
    from kernelmill.synth.emit import emit_source

    composer = Composer()
    timings = []
    for i in range(40):
        if len(timings) == 16:
            break
        try:
            comp = composer.draw(random.Random(i))
            source, name = emit_source(comp, composer)
            vet_source(source, name=name)
        except (CompositionError, Rejected):
            continue
        timings.append((_eager_ms(source), comp.estimated_ms, name))
    inside = [t for t in timings if 0.2 <= t[0] <= 40.0]
    assert len(inside) >= 0.75 * len(timings), timings
