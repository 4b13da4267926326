"""Peak device memory of a problem, estimated without real compute (worker side).

``estimate_problem(payload)`` builds the problem's model and inputs on the meta device (shapes and
dtypes only, no storage) and runs one forward under ``LiveBytes``, a TorchDispatchMode that keeps
the bytes of every live storage (a weakref finalizer per tensor releases them) and their peak.
The result splits into parameters and buffers, inputs, outputs and the forward's peak; the
parent (``admission``) turns it into what each validation worker needs (``probe_bytes``,
``replay_bytes``), because the probe holds several copies (input clones, an fp64 model and
forward, a perturbed model) at once.

A model whose constructor reads a value (``.item()`` on a tensor it made) is built again on the
host, with real tensors, and moved to the meta device whole for its forward (``built_on``). An
op without a meta kernel, a data-dependent shape in the forward (``.item()``, ``nonzero``), or a
source that builds tensors outside the meta device makes the estimate ``unknown``
(``method: "unknown"`` and the reason); the parent then counts the problem as large.

``LiveBytes`` also works on real tensors, so tests compare the estimate with what a real CPU run
keeps alive. Imports only torch and the standard library (and ``measure``, ``timer``).
"""
from __future__ import annotations

import weakref
from typing import Any

CONTEXT_BYTES = 600 << 20  # a CUDA context, cuBLAS workspace and allocator slack per worker
# What a CPU worker holds resident besides its tensors (measured on this 2-core
# machine, 4 seeds: 0.16 GiB once forked from the warm zygote, 0.27-0.39 GiB at the end of a
# probe whose tensors were estimated at 0.03-0.07 GiB), with room for larger libraries' buffers.
HOST_BASE_BYTES = 512 << 20


def _storage_key(t) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage._cdata, storage.nbytes()


class LiveBytes:
    """Counts the bytes of live tensor storages created while the mode is active (views count
    once), and the peak. ``track(t)`` adds tensors made before the mode started."""

    def __new__(cls):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        class _Live(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.live = 0
                self.peak = 0
                self._refs: dict[int, list[int]] = {}  # storage -> [nbytes, tensors holding it]
                self._seen: dict[int, Any] = {}  # id(tensor) -> weakref (tensors compare by value)
                self.written: set[tuple[int, int]] = set()  # storages an op wrote into

            def _release(self, key: int, ident: int) -> None:
                self._seen.pop(ident, None)
                entry = self._refs.get(key)
                if entry is None:
                    return
                entry[1] -= 1
                if entry[1] <= 0:
                    self.live -= entry[0]
                    del self._refs[key]

            def track(self, value: Any) -> None:
                for t in tree_leaves(value):
                    if not isinstance(t, torch.Tensor):
                        continue
                    seen = self._seen.get(id(t))
                    if seen is not None and seen() is t:
                        continue
                    try:
                        key, nbytes = _storage_key(t)
                    except (RuntimeError, NotImplementedError):  # sparse or other layouts
                        continue
                    self._seen[id(t)] = weakref.ref(t)
                    entry = self._refs.setdefault(key, [nbytes, 0])
                    if entry[1] == 0:
                        self.live += nbytes
                    entry[1] += 1
                    weakref.finalize(t, self._release, key, id(t))
                self.peak = max(self.peak, self.live)

            def bytes_of(self, value: Any) -> int:
                """Bytes of the distinct storages behind the tensors of ``value``."""
                sizes: dict[int, int] = {}
                for t in tree_leaves(value):
                    if isinstance(t, torch.Tensor):
                        try:
                            key, nbytes = _storage_key(t)
                        except (RuntimeError, NotImplementedError):
                            continue
                        sizes[key] = nbytes
                return sum(sizes.values())

            def reset_peak(self) -> None:
                self.peak = self.live

            def _note_writes(self, func, args, kwargs) -> None:
                """The storages ``func`` writes into, from its schema (in-place and out=)."""
                for k, arg in enumerate(func._schema.arguments):
                    info = arg.alias_info
                    if info is None or not info.is_write:
                        continue
                    value = args[k] if k < len(args) else kwargs.get(arg.name)
                    for t in tree_leaves(value):
                        if isinstance(t, torch.Tensor):
                            try:
                                self.written.add(_storage_key(t))
                            except (RuntimeError, NotImplementedError):
                                continue

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                self._note_writes(func, args, kwargs or {})
                out = func(*args, **(kwargs or {}))
                self.track(out)
                return out

        return _Live()


def _tensors(value: Any) -> list:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _widen(tensors: list) -> float:
    """How much larger the float tensors get in float64 (the probe's fp64 reference)."""
    sizes = [t.element_size() for t in tensors if t.is_floating_point()]
    return 8.0 / min(sizes) if sizes else 1.0


class BuildFailed(RuntimeError):
    """The problem's model could not be constructed there (``measure_forward``)."""


def measure_forward(ns: dict, seed: int = 0, device: str = "meta",
                    build_on: str | None = None) -> dict:
    """Build ``ns``'s model and inputs on ``device`` and run one forward under ``LiveBytes``.

    ``build_on``: construct the model there instead (real tensors; ``"cpu"``) and move it to
    ``device`` whole before the forward, for a model whose construction reads a value
    (``torch.linspace(...).item()`` in an ``__init__``), which a meta tensor has not.

    Returns ``{params_bytes, inputs_bytes, outputs_bytes, forward_peak_bytes, widen,
    tensor_inputs, mutates_inputs}`` (``mutates_inputs``: an op of the forward wrote into an
    input's storage, so the probe copies the inputs for every forward); raises when the problem
    cannot be built or run there."""
    import torch

    mode = LiveBytes()
    with torch.device(device), mode:
        torch.manual_seed(seed)
        try:
            with torch.device(build_on or device):
                init = ns["get_init_inputs"]()
                model = ns["Model"](*init)
        except Exception as exc:
            raise BuildFailed(f"{type(exc).__name__}: {exc}".splitlines()[0][:300]) from exc
        if build_on is not None:
            model = model.to(device)
            init = [v.to(device) if isinstance(v, torch.Tensor) else v for v in init]
        inputs = list(ns["get_inputs"]())
        state = [*model.parameters(), *model.buffers()]
        mode.track((state, inputs))  # tensors a source built outside the dispatcher's view
        for t in _tensors((state, inputs)):
            if t.device.type != torch.device(device).type:
                raise ValueError(f"a tensor was built on {t.device}, not {device}")
        params_bytes = mode.bytes_of(state)
        inputs_bytes = mode.bytes_of(inputs)
        input_keys = {_storage_key(t) for t in _tensors(inputs)}
        mode.reset_peak()
        with torch.no_grad():
            out = model(*inputs)
        outputs = _tensors(out)
        if not outputs:
            raise ValueError("forward returned no tensor")
        outputs_bytes = mode.bytes_of(outputs)
        peak = mode.peak
        # the probe's affine check fits each output against same-shaped float inputs (fp64)
        shapes = {tuple(t.shape) for t in _tensors(inputs) if t.is_floating_point()}
        affine = [mode.bytes_of([y]) for y in outputs
                  if y.is_floating_point() and y.numel() > 1 and tuple(y.shape) in shapes]
    return {"params_bytes": params_bytes, "inputs_bytes": inputs_bytes,
            "outputs_bytes": outputs_bytes, "affine_bytes": max(affine, default=0),
            "forward_peak_bytes": max(peak, params_bytes + inputs_bytes),
            "widen": _widen([*state, *_tensors(inputs)]),
            "tensor_inputs": len(_tensors(inputs)),
            "mutates_inputs": bool(mode.written & input_keys)}


def estimate_problem(payload: dict) -> dict:
    """Worker target: ``{method: "meta", ...measure_forward}`` or ``{method: "unknown", reason}``.

    Runs on the meta device only: start it as a CPU worker so CUDA is never touched."""
    from .measure import load_namespace

    seed = int(payload.get("seed", 0))

    def unknown(exc: BaseException, after: str = "") -> dict:
        return {"method": "unknown",
                "reason": (after + f"{type(exc).__name__}: {exc}".splitlines()[0])[:300]}

    try:
        ns = load_namespace(payload["source"], "estimate",
                            require=("Model", "get_inputs", "get_init_inputs"))
        return {"method": "meta", **measure_forward(ns, seed)}
    except BuildFailed as exc:  # a constructor that reads a value: built on the host
        built = exc
    except Exception as exc:  # noqa: BLE001 — no meta kernel, data-dependent shape, ...
        return unknown(exc)
    try:
        ns = load_namespace(payload["source"], "estimate",
                            require=("Model", "get_inputs", "get_init_inputs"))
        return {"method": "meta", "built_on": "cpu",
                **measure_forward(ns, seed, build_on="cpu")}
    except Exception as exc:  # noqa: BLE001 — its forward needs values too, or host tensors
        return unknown(exc, f"built on meta: {built}; on the host: ")


# -------------------------------------------------------- what each validation worker holds

STAT_BLOCK_BYTES = (1 << 24) * 8  # one fp64 block of ``checks.CHUNK`` elements
# Outputs at least this large are let go during the probe's fp64 forward and made again after
# it (``probe._calibrate``); smaller ones stay.
REMAKE_BYTES = 256 << 20
# The probe's liveness pass (``realcode.liveness``) keeps forward's activations for a backward:
# above this many bytes of inputs and outputs it is skipped (its check says so).
LIVENESS_MAX_BYTES = 256 << 20


def probe_bytes(est: dict, base: int = CONTEXT_BYTES) -> int | None:
    """Peak of ``probe.probe_problem``: the largest of its stages, in the parts of ``est``
    (parameters ``p``, inputs ``i``, outputs ``o``, the forward's own tensors ``act``, outputs
    included, and ``w``, how much larger floats get in fp64). Forwards run on the inputs
    themselves unless the forward writes into them (``mutates_inputs``: then each forward gets
    a copy, ``c``); the fp64 stage holds the fp64 inputs, model and forward, and the output only
    when it is smaller than ``REMAKE_BYTES`` (a larger one is made again after, beside the fp64
    output: ``fp64 compare``; the grading distributions keep it beside theirs); the checks
    add ``checks.CHUNK``-sized fp64 temporaries (``blocks``). ``tests/validate/test_memory.py``
    keeps the estimate above the measured peak. ``base``: what the worker holds besides
    tensors (a CUDA context; ``HOST_BASE_BYTES`` on CPU)."""
    if est.get("method") != "meta":
        return None
    p, i, o = est["params_bytes"], est["inputs_bytes"], est["outputs_bytes"]
    act = max(0, est["forward_peak_bytes"] - p - i)  # the forward's own tensors, outputs included
    w = est.get("widen", 2.0)
    c = 1 if est.get("mutates_inputs", True) else 0
    kept = 0 if o >= REMAKE_BYTES else o
    blocks = 8 * min(w * max(o, i, est.get("affine_bytes", o)), STAT_BLOCK_BYTES)
    per_input = 2 if est.get("tensor_inputs", 2) > 1 else 1
    stages = {
        "forward": p + (1 + c) * i + o + act,  # determinism and stochasticity too
        "rebuild": 2 * p + 2 * i + o + act,
        "fp64": p * (2 + w) + max(i * (1 + w), i * w + act * w) + kept,
        "fp64 compare": p + o * w + i + act,
        # each grading distribution: as the fp64 stage, then its fp64 output beside a scaled
        # draw's fp32 forward, with the probe's own output where it is kept
        "distributions": p + o * w + i + act + kept,
        "sensitivity": p + (2 + c) * i + per_input * o + act,
        "weights": 2 * p + (1 + c) * i + o + act,  # the ablations too
        "degeneracy": p + 2 * i + 2 * o,
        # realcode: a copy of the model (constants drawn again), both input draws, the output
        # and one more forward; the liveness pass adds a draw, saved activations and gradients
        "real code": 2 * p + (2 + c) * i + o + act
        + (i + 3 * act if i + o <= LIVENESS_MAX_BYTES else 0),
    }
    return int(max(stages.values()) + blocks) + base


def replay_bytes(est: dict, base: int = CONTEXT_BYTES) -> int | None:
    """Peak of ``replay.replay_problem`` (rebuild, one eager forward, Inductor's compiled forward
    and its autotuning buffers, and the timing). A forward whose output is larger than
    ``timer.GRAPH_OUTPUT_BYTES`` is timed without graphs, and the replay then holds live
    tensors only, with expandable segments keeping the allocator near them: the model and its
    inputs (a copy per forward when the forward writes into them, ``c``), the eager output kept
    for the Inductor check beside a forward's own tensors, and Inductor's temporaries, which
    need not match eager's (``o + 2 act``). A smaller forward is timed by CUDA graphs, whose
    private pools keep whole forwards reserved: ``p + 3 i + 2 o + 2 act``, measured on an H100
    (166 KernelBench replays: live-tensor peak over it median 0.76, max 1.49; the copy-free
    count ``p + i + o + 2 act`` had 35 of them over 1.35x, up to 2.1x)."""
    if est.get("method") != "meta":
        return None
    from .timer import GRAPH_OUTPUT_BYTES

    p, i, o = est["params_bytes"], est["inputs_bytes"], est["outputs_bytes"]
    act = max(0, est["forward_peak_bytes"] - p - i)
    if o > GRAPH_OUTPUT_BYTES:
        c = 1 if est.get("mutates_inputs", True) else 0
        return int(p + (1 + c) * i + o + 2 * act) + base
    return int(p + 3 * i + 2 * o + 2 * act) + base


def minimum_bytes(est: dict) -> int | None:
    """What one forward needs at the least: above this, no worker can run the problem."""
    if est.get("method") != "meta":
        return None
    return int(est["forward_peak_bytes"])


def device_memory(payload: dict) -> dict:
    """Worker target: free and total bytes of the worker's GPU (``torch.cuda.mem_get_info``)."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return {"free": int(free), "total": int(total), "name": torch.cuda.get_device_name()}


__all__ = ["CONTEXT_BYTES", "HOST_BASE_BYTES", "LiveBytes", "device_memory", "estimate_problem", "measure_forward",
           "minimum_bytes", "probe_bytes", "replay_bytes"]
