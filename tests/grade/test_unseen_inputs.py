"""Where the unseen-input check keeps trial 0's inputs, which it loads before each of its calls
on them inside the timing window (``grade.worker.probes._Probes``): placed before the window
(``before_window``), on the device or page-locked on the host by size, and as given where
neither copy can be made. On CPU, with the copies replaced by markers."""
from types import SimpleNamespace

import pytest
import torch
from kernelmill.grade.worker import probes


def _run(device: str = "cuda", hidden: int = 1, nbytes: int = 1 << 20) -> SimpleNamespace:
    run = SimpleNamespace(device=device, hidden=hidden, reserved=[],
                          trials=[{"seed": 1, "inputs": [torch.ones(nbytes // 4), 7]}])
    run.reserve_replay = run.reserved.append
    run.reserve_unseen_outputs = lambda timer: None
    run._on_device = lambda trial: probes._Probes._on_device(run, trial)
    return run


@pytest.fixture
def copies(monkeypatch):
    """The device and page-locked copies as markers (no CUDA here); ``made`` lists them."""
    made = []

    def to_device(values, device):
        made.append("device")
        return [("on", device, v) if isinstance(v, torch.Tensor) else v for v in values]

    def pinned(value):
        made.append("pinned")
        return ("pinned", value)

    monkeypatch.setattr(probes, "to_device", to_device)
    monkeypatch.setattr(probes, "_pinned", pinned)
    return made


def test_trial_0s_inputs_are_placed_by_size_before_the_window(copies, monkeypatch):
    monkeypatch.setattr(probes, "PRISTINE_BYTES", 4 << 20)
    monkeypatch.setattr(probes, "PINNED_PRISTINE_BYTES", 16 << 20)
    monkeypatch.setattr(probes, "SMALL_PRISTINE_BYTES", 1 << 20)
    timer = SimpleNamespace(graph=None)
    small = _run(nbytes=1 << 20)
    probes._Probes.before_window(small, timer)
    assert small.reserved == [timer] and small.pristine["inputs"][0][0] == "on"
    # page-locked up to its bound as the host allocator rounds it (a 9 MiB block holds 16)
    middle = _run(nbytes=9 << 20)
    probes._Probes.before_window(middle, timer)
    assert middle.pristine["inputs"][0][0] == "pinned" and middle.pristine["inputs"][1] == 7
    over = _run(nbytes=17 << 20)
    probes._Probes.before_window(over, timer)
    assert over.pristine is over.trials[0]
    assert copies == ["device", "pinned"]
    # no unseen trial: nothing kept; off CUDA: the trial as given
    none = _run(hidden=0)
    probes._Probes.before_window(none, timer)
    assert none.pristine is None
    cpu = _run(device="cpu")
    probes._Probes.before_window(cpu, timer)
    assert cpu.pristine is cpu.trials[0] and copies == ["device", "pinned"]


def test_an_input_of_the_page_locked_bound_with_small_ones_beside_it_is_page_locked(copies):
    """KernelBench's cross-entropy inputs at their size: 512 MiB of logits page-locked by the
    default bounds, the 256 KiB of targets beside them on the device (meta tensors: only their
    sizes are read), so the check loads neither from pageable pages inside the window; one
    large input more and none is copied."""
    run = _run()
    logits = torch.empty(32768, 4096, device="meta")
    targets = torch.empty(32768, dtype=torch.int64, device="meta")
    placed = probes._Probes._on_device(run, {"seed": 1, "inputs": [logits, targets, 3]})
    assert [value[0] for value in placed["inputs"][:2]] == ["pinned", "on"]
    assert placed["inputs"][2] == 3 and copies == ["pinned", "device"]
    over = {"seed": 1, "inputs": [logits, torch.empty(probes.SMALL_PRISTINE_BYTES // 4,
                                                      device="meta")]}
    assert probes._Probes._on_device(run, over) is over and copies == ["pinned", "device"]


def test_a_copy_that_cannot_be_made_leaves_the_trial_as_given(monkeypatch):
    def refused(*_args):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(probes, "to_device", refused)
    monkeypatch.setattr(probes, "_pinned", refused)
    monkeypatch.setattr(probes, "PRISTINE_BYTES", 4 << 20)
    for nbytes in (1 << 20, 9 << 20):
        run = _run(nbytes=nbytes)
        assert probes._Probes._on_device(run, run.trials[0]) is run.trials[0]


def test_the_next_power_of_two_is_what_a_page_locked_block_holds():
    assert [probes._next_power_of_two(n) for n in (0, 1, 3, 4, 5, 512 << 20, (512 << 20) + 1)] \
        == [1, 1, 4, 4, 8, 512 << 20, 1 << 30]


def test_unseen_outputs_go_into_host_memory_touched_before_the_window():
    """``reserve_unseen_outputs``: a block of host memory per output of each unseen trial that
    is always called (not the spares; with a graph of several calls, the one-call check's
    trial too), as the checked calls' outputs were shaped, up to
    ``HELD_UNSEEN_BYTES``; ``inputs.into_blocks`` copies a trial's outputs into its blocks, as
    host tensors of their own, or says they do not fit."""
    from kernelmill.grade.worker import inputs

    shapes = [((4, 8), torch.float32), ((3,), torch.int64)]
    run = SimpleNamespace(device="cuda", hidden=3, hidden_required=1, hidden_required_ungraphed=2,
                          last_shapes=shapes)
    probes._Probes.reserve_unseen_outputs(run, SimpleNamespace(graph=object(),
                                                               calls_per_sample=4))
    assert len(run.unseen_blocks) == 1 and [b.numel() for b in run.unseen_blocks[0]] == [128, 24]
    # the one-call check's
    assert {k: [b.numel() for b in v] for k, v in run.single_blocks.items()} == {
        "single": [128, 24]}
    run.single_warm = True  # and the warm one's, on a trial of its own where there is one
    probes._Probes.reserve_unseen_outputs(run, SimpleNamespace(graph=object(),
                                                               calls_per_sample=4))
    assert {k: [b.numel() for b in v] for k, v in run.single_blocks.items()} == {
        "single": [128, 24], "single_warm": [128, 24]}
    run.hidden = 2
    probes._Probes.reserve_unseen_outputs(run, SimpleNamespace(graph=object(),
                                                               calls_per_sample=4))
    # one trial past the required: the first check's alone (``check_trials``)
    assert list(run.single_blocks) == ["single"]
    run.hidden, run.single_warm = 3, False
    probes._Probes.reserve_unseen_outputs(run, SimpleNamespace(graph=object(),
                                                               calls_per_sample=1))
    assert len(run.unseen_blocks) == 1 and run.single_blocks == {}  # one call: no check
    probes._Probes.reserve_unseen_outputs(run, SimpleNamespace(graph=None))
    assert len(run.unseen_blocks) == 2  # without a graph two unseen trials are always called
    outputs = [torch.arange(32, dtype=torch.float32).reshape(4, 8), torch.tensor([1, 2, 3])]
    kept = inputs.into_blocks(outputs, run.unseen_blocks[0])
    assert all(torch.equal(a, b) for a, b in zip(kept, outputs))
    assert [k.untyped_storage().data_ptr() for k in kept] == \
        [b.untyped_storage().data_ptr() for b in run.unseen_blocks[0]]
    outputs[0] += 1  # the kept copy is its own
    assert float(kept[0][0, 0]) == 0.0
    # another shape, another count, or no blocks: not into them
    assert inputs.into_blocks([torch.zeros(5), outputs[1]], run.unseen_blocks[0]) is None
    assert inputs.into_blocks(outputs[:1], run.unseen_blocks[0]) is None
    assert inputs.into_blocks(outputs, None) is None
    # the bound, and off CUDA, no unseen trial or no outputs seen: none
    small = SimpleNamespace(**{**vars(run), "unseen_blocks": None})
    original = probes.HELD_UNSEEN_BYTES
    try:
        probes.HELD_UNSEEN_BYTES = 200
        probes._Probes.reserve_unseen_outputs(small, SimpleNamespace(graph=None))
        assert len(small.unseen_blocks) == 1
    finally:
        probes.HELD_UNSEEN_BYTES = original
    for changes in ({"device": "cpu"}, {"hidden": 0}, {"last_shapes": []}):
        other = SimpleNamespace(**{**vars(run), **changes})
        probes._Probes.reserve_unseen_outputs(other, SimpleNamespace(graph=None))
        assert other.unseen_blocks == []


def test_the_unseen_check_runs_with_the_collector_held_off(monkeypatch):
    """``_Probes.unseen``: through the whole check (every new input's load, its timed call, and
    the copies of its answer: an unseen replay's, the one-call check's), the cyclic collector
    is off, so no finaliser of the candidate's runs between a load and its span or between the
    span and the answer's copy (work launched there would count for no call); after it, it is
    as it was. The one-call check is made warm: its inputs loaded for it alone, no flush."""
    import gc

    seen: list = []
    parts = {0: {"inputs": ["hidden 0"]}, 1: {"inputs": ["hidden 1"]}}
    monkeypatch.setattr(probes, "late_payload", lambda index: parts.get(index))
    monkeypatch.setattr(probes, "reads_slow", lambda *args: False)
    first = {"inputs": ["timed"]}

    class Timer:
        graph, calls_per_sample, method, last_cpu_ms, _single = object(), 4, "cuda_graph", \
            None, (object(), None)
        scored_ms = None

        def once(self, fn, around, whole, flush):
            seen.append(("call", whole, flush, gc.isenabled()))
            return 1.0, ["out"]

    run = SimpleNamespace(hidden=2, hidden_required=1, hidden_required_ungraphed=1,
                          retry_ratio=None, trials=[first], pristine=first, buffers=[],
                          witness=SimpleNamespace(running=True, span=None))
    run.load = lambda values, single=False, warm=False: seen.append(
        ("load", values[0], single, gc.isenabled()))
    run.invoke = lambda: (["out"], None)

    def observe(*args, **kwargs):
        seen.append(("observe", gc.isenabled()))
        return {"outputs": ["out"]}

    run.observe = observe
    run._keep_replay = lambda timer: seen.append(("keep", gc.isenabled()))
    run._single_check = lambda *args: probes._Probes._single_check(run, *args)
    run._mode_would_see_new_inputs = lambda: probes._Probes._mode_would_see_new_inputs(run)
    run.changed_while_timed = []
    assert gc.isenabled()
    assert probes._Probes.unseen(run, Timer()) == 1
    assert gc.isenabled()
    loads = [s[1:3] for s in seen if s[0] == "load"]
    assert ("hidden 0", False) in loads and ("hidden 1", True) in loads
    assert not any(s[-1] for s in seen), seen  # off throughout
    assert [s[0] for s in seen].count("observe") == 2 and ("keep", False) in seen
    calls = [s for s in seen if s[0] == "call"]
    # the unseen replay (the timing graph, flushed), the one-call check (warm)
    assert ("call", True, True, False) in calls and calls[-2] == ("call", False, False, False)
    assert run.unseen_facts["single"]["hidden"] == 1
    # a collector the worker found off stays off
    gc.disable()
    try:
        seen.clear()
        run.pristine = first
        probes._Probes.unseen(run, Timer())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_mode_pushed_before_new_inputs_come_in_asks_for_none_and_is_reported():
    """A torch function mode left pushed would see every op on an unseen trial's inputs (their
    reading into tensors, their load's copy) outside any call: the check stops before asking
    for them and reports the timed calls changed; with none pushed it goes on."""
    from torch.overrides import TorchFunctionMode

    run = SimpleNamespace(changed_while_timed=[])
    assert not probes._Probes._mode_would_see_new_inputs(run) and run.changed_while_timed == []
    with TorchFunctionMode():
        assert probes._Probes._mode_would_see_new_inputs(run)
    assert run.changed_while_timed and "mode" in run.changed_while_timed[0]


def _timed_check(monkeypatch, first_reads: list[float],
                 scored_ms: float | None) -> SimpleNamespace:
    """``_Probes.unseen`` with its calls timed by the script ``first_reads`` (the calls on the
    timed inputs, in order; every other call 3.2 ms), one unseen trial, no spare."""
    reads = list(first_reads)
    parts = {0: {"inputs": ["hidden 0"]}}

    class Timer:
        graph, calls_per_sample, method, last_cpu_ms, _single = None, 1, "cuda_events", None, \
            None

        def once(self, fn, around, whole, flush):
            return (reads.pop(0) if around is not None and loaded[-1] == "timed" and reads
                    else 3.2), ["out"]

    timer = Timer()
    timer.scored_ms = scored_ms
    loaded: list = []
    first = {"inputs": ["timed"]}
    run = SimpleNamespace(hidden=1, hidden_required=1, hidden_required_ungraphed=1,
                          retry_ratio=1.1, trials=[first], pristine=first, buffers=[],
                          witness=SimpleNamespace(running=True, span=object()),
                          changed_while_timed=[])
    run.load = lambda values, single=False, warm=False: loaded.append(values[0])
    run.invoke = lambda: (["out"], None)
    run.observe = lambda *args, **kwargs: {"outputs": ["out"]}
    run._mode_would_see_new_inputs = lambda: False
    monkeypatch.setattr(probes, "late_payload", lambda index: parts.get(index))
    assert probes._Probes.unseen(run, timer) == 1
    return run


def test_calls_on_the_timed_inputs_that_read_slow_against_the_rounds_are_read_again(
        monkeypatch):
    """The unseen check opens with ``SEEN_FIRST`` calls on the timed inputs: its baseline, which
    the judge holds against the scored calls (a forward slow only in the check tells it apart)
    and the unseen calls against. Where they read over the spares' ratio against the window's
    own rounds (``Timer.scored_ms``: another process's work on the GPU for a moment), they are
    read once more before any unseen input, and the judge takes the fastest of all. Read as
    the rounds were, or with no rounds read, they are not."""
    slow = _timed_check(monkeypatch, [7.38, 5.88, 5.99], scored_ms=3.2)
    assert slow.unseen_facts["seen_ms"] == [7.38, 5.88, 5.99, 3.2, 3.2, 3.2]
    assert slow.unseen_facts["order"][:6] == ["seen"] * 6 and \
        slow.unseen_facts["order"][6] == "unseen"
    steady = _timed_check(monkeypatch, [3.21, 3.2, 3.22], scored_ms=3.2)
    assert steady.unseen_facts["seen_ms"] == [3.21, 3.2, 3.22]
    unread = _timed_check(monkeypatch, [7.38, 5.88, 5.99], scored_ms=None)
    assert unread.unseen_facts["seen_ms"] == [7.38, 5.88, 5.99]
