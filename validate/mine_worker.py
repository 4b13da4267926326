"""Worker side of ``kernelmill mine`` (runs inside this package's harness workers): torch and
the standard library only.

``probe_batch``: for each job, build the gathered code, construct the candidate from the guessed
arguments and run its forward at probe size on the CPU, repairing the guesses from the error
messages (channel widths, ranks, missing config fields, constructor argument alternatives, a
tuple of tensors where a tensor was unpacked, the range of index inputs), as
pytorch-jit-paritybench's ``deduce_parameters`` does; then check determinism (same seeds twice,
another forward seed: RNG in forward) and that the output depends on the inputs.

Sizing on the meta device and the smoke run are ``mine_sizing``. What the probe reads from
its errors to repair the guesses (``config_value``, the width and rank hints) is
``mine_hints``; building on the meta device (``meta_build``) is ``mine_meta``: both still
importable from this module.

Each job has its own time limit (SIGALRM); a job that is not interrupted by it (a hang inside
C code) ends the worker, and the parent reruns the batch's jobs one by one.
"""
from __future__ import annotations

import os
import random
import re
import signal
import sys
import time
from typing import Any

import torch
from kernelmill.core.input_templates import TEMPLATES

from .measure import load_namespace
from .mine_hints import (  # noqa: F401 (moved here from this module; importable as before)
    _CONFIG_VALUES,
    _NDIM,
    _head_dim,
    _rank_hints,
    _unpacked,
    _width_hints,
    config_value,
)
from .mine_meta import _VALUE_WRITES, _MetaBuild, meta_build  # noqa: F401 (moved, as above)

MAX_ATTEMPTS = 16
# the most parameter and buffer elements a candidate may hold at its guessed constructor
# arguments (1 GiB of float32), counted on the meta device before anything is allocated:
# initializing more took one probe 23 s of CPU (a whole model with 12 G parameters)
MAX_MODULE_ELEMENTS = 2 ** 28
RUNNING_STATS = "_mined_running_stats"  # the helper the probe job's code defines (render.py)


class JobTimeout(BaseException):
    """Raised by SIGALRM inside a job (a BaseException: ``except Exception`` in mined code
    does not swallow it)."""


class TooLarge(Exception):
    """The candidate, built on the meta device, holds more than ``MAX_MODULE_ELEMENTS``
    elements at its constructor arguments (a rejection: too large to be one problem)."""


class NoTensorInput(Exception):
    """The candidate's forward takes no tensor input: nothing for a kernel to compute on (a
    rejection, counted with the abstract and unsupported ones)."""


def _alarm(signum, frame):
    raise JobTimeout()


def _mark(stage: str) -> None:
    from .harness_worker import mark_stage

    mark_stage(stage[:150])


def _seed(seed: int) -> None:
    # the CPU generator alone: ``torch.manual_seed`` also queues CUDA seeding with a captured
    # traceback, a third of the probe's time on many small forwards
    torch.default_generator.manual_seed(seed)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:240] if text else ''}"


def classify(exc: BaseException) -> str:
    """A countable rejection label for an exception raised while probing."""
    text = str(exc).lower()
    if isinstance(exc, JobTimeout):
        return "probe timeout"
    if isinstance(exc, MemoryError) or "can't allocate memory" in text or \
            "out of memory" in text:
        return "probe OOM"
    if isinstance(exc, (ImportError, ModuleNotFoundError)):
        return "missing dependency"
    if isinstance(exc, NameError):
        return "unresolved name"
    if isinstance(exc, (NotImplementedError, NoTensorInput)):
        return "abstract or unsupported"
    if isinstance(exc, TooLarge):
        return "too large"
    return "probe failed"


def _flat(out: Any, path: str = "") -> list[tuple[str, torch.Tensor]]:
    if isinstance(out, torch.Tensor):
        return [(path, out)]
    if isinstance(out, (list, tuple)):
        return [x for i, item in enumerate(out) for x in _flat(item, f"{path}[{i}]")]
    if isinstance(out, dict):
        return [x for k, v in out.items() if isinstance(k, str) for x in _flat(v, f"{path}[{k!r}]")]
    return []


class _Probe:
    def __init__(self, job: dict):
        self.job = job
        self.ns: dict[str, Any] = {"__name__": "kernelmill_mined"}
        self.dims = dict(job["dims"])
        self.target = "same"  # a target input: shaped like the prediction, or class indices
        self.high = 0  # index inputs draw below this (0: below the feature width)
        self.last = 0  # a tuple input's last dimension (0: the module's head width)
        self.filled = False  # config fields left None were given sizes
        self.stats = 0  # normalization layers given running statistics
        self.model: Any = None
        self.specs: list[dict] = []  # the inputs made (in the forward's order)
        self.spare: list[dict] = []  # optional inputs, made once the forward fails without

    def build_namespace(self) -> None:
        _mark(f"mine import {self.job['key']}")
        # a registered module, as the validator loads a problem (dataclasses look their
        # module up in sys.modules)
        self.ns = load_namespace(self.job["code"], "mined")

    # ------------------------------------------------------------------ constructor
    def construct(self) -> tuple[Any, list[tuple[str, bool, str]]]:
        job = self.job
        target = self.ns[job["target"]]
        if job["kind"] == "function":
            return target, [(p["name"], True, p["options"][0]) for p in job["init"]]
        choice = [0] * len(job["init"])
        last: BaseException | None = None
        for _ in range(MAX_ATTEMPTS):
            chosen = [(p["name"], p["kw"], p["options"][i]) for p, i in zip(job["init"], choice)]
            try:
                self._fits(target, chosen)
                args, kwargs = self._arguments(chosen)
                _seed(0)
                model = target(*args, **kwargs)
                return model, chosen
            except JobTimeout:
                raise
            except Exception as exc:
                last = exc
                message = str(exc)
                missing = re.search(r"object has no attribute '(\w+)'", message)
                if missing and "MinedConfig" in message and "CONFIG" in self.ns:
                    name = missing.group(1)
                    self.ns["CONFIG"][name] = eval(config_value(name))
                    job.setdefault("config_added", []).append(name)
                    job.setdefault("config_set", {})[name] = config_value(name)
                    continue
                if "NoneType" in message and self.fill_none():
                    continue
                # move the argument the message names, or one of the type it complains about
                # ("... not float"), else the first that has alternatives
                named = [i for i, p in enumerate(job["init"]) if re.search(
                    rf"\b{re.escape(p['name'])}\b", message)]
                wrong = re.search(r"not (float|str|int|NoneType|bool|tuple)", message)
                if wrong:
                    kinds = {"float": r"^-?\d+\.\d*$", "str": r"^'", "int": r"^-?\d+$",
                             "NoneType": r"^None$", "bool": r"^(True|False)$",
                             "tuple": r"^\("}
                    named += [i for i, (_, _, e) in enumerate(chosen)
                              if re.match(kinds[wrong.group(1)], e) and i not in named]
                order = named + [i for i in range(len(choice)) if i not in named]
                for i in order:
                    if choice[i] + 1 < len(job["init"][i]["options"]):
                        choice[i] += 1
                        break
                else:
                    raise
        raise last  # type: ignore[misc]

    def fill_none(self) -> bool:
        """Give the config fields left None that have a size by their name (a None default
        the package's config derives later: head_dim from the hidden size) those sizes;
        whether any was."""
        if "CONFIG" not in self.ns or self.filled:
            return False
        self.filled = True
        derived = {k: config_value(k) for k, v in self.ns["CONFIG"].items()
                   if v is None and config_value(k) != "None"}
        self.ns["CONFIG"].update({k: eval(v) for k, v in derived.items()})
        self.job.setdefault("config_set", {}).update(derived)
        return bool(derived)

    def _arguments(self, chosen: list[tuple[str, bool, str]]) -> tuple[list, dict]:
        args, kwargs = [], {}
        for name, kw, expr in chosen:
            value = eval(expr, self.ns)
            if kw:
                kwargs[name] = value
            else:
                args.append(value)
        return args, kwargs

    def _fits(self, target, chosen: list[tuple[str, bool, str]]) -> None:
        """Build the candidate on the meta device first (no memory, no initialization) and
        raise ``TooLarge`` when it holds more than ``MAX_MODULE_ELEMENTS`` elements. A
        constructor the meta device cannot run (it reads a tensor's values) is built as it is,
        and its errors are the real constructor's."""
        state = random.getstate()  # a constructor drawing from Python's random draws alike
        try:
            with meta_build():
                args, kwargs = self._arguments(chosen)
                model = target(*args, **kwargs)
        except JobTimeout:
            raise
        except Exception:  # noqa: BLE001 — decided by the real constructor
            return
        finally:
            random.setstate(state)
        try:
            # a lazy module's parameters have no size before its first forward
            held = sum(t.numel() for t in (*model.parameters(), *model.buffers())
                       if not torch.nn.parameter.is_lazy(t)) \
                if isinstance(model, torch.nn.Module) else 0
        except Exception:  # noqa: BLE001 — a module that cannot be counted: built as it is
            return
        if held > MAX_MODULE_ELEMENTS:
            raise TooLarge(f"{held:,} parameter and buffer elements at these constructor "
                           f"arguments (the limit is {MAX_MODULE_ELEMENTS:,})")

    # ------------------------------------------------------------------ inputs
    def make(self, spec: dict, template: str, width: int, seed: int):
        if spec["kind"] == "mask":
            return None
        gen = torch.Generator().manual_seed(seed)
        if spec["kind"] == "tuple":  # a (cos, sin) pair: the template's C is the head width
            shape = [self.last if d == "C" else self.dims[d] for d in TEMPLATES[template]]
            return tuple(torch.randn(shape, generator=gen) for _ in range(spec["count"]))
        if spec["kind"] == "long":
            shape = [self.dims["BATCH"], self.dims["SEQ_LEN"]] if template != "1d" \
                else [self.dims["BATCH"]]
            return torch.randint(0, max(2, self.high or width), shape, generator=gen)
        shape = [width if d == "C" else self.dims[d] for d in TEMPLATES[template]]
        if spec["kind"] == "target" and self.target == "index":
            return torch.randint(0, max(2, width), [n for n, d in zip(shape, TEMPLATES[template])
                                                    if d != "C"], generator=gen)
        if spec["kind"] == "prob":
            return torch.rand(shape, generator=gen)
        return torch.randn(shape, generator=gen)

    def forward(self, model, inputs: list, seed: int, specs: list[dict] = ()):
        _seed(seed)
        keywords = {s["name"]: x for s, x in zip(specs, inputs) if s.get("optional")}
        inputs = [x for s, x in zip(specs, inputs) if not s.get("optional")] \
            + inputs[len(specs):]
        with torch.no_grad():
            if self.job["kind"] == "function":
                kwargs = {n: eval(e, self.ns) for n, _, e in self.init}
                return model(*inputs, **kwargs, **keywords)
            return model(*inputs, **keywords)

    def build(self):
        """The candidate (constructed, eval mode, running statistics drawn)."""
        model, self.init = self.construct()
        if isinstance(model, torch.nn.Module):
            model.eval()
            # the rendered problem draws running statistics (BatchNorm) the same way: the
            # probe's checks see the module the problem will hold
            if callable(self.ns.get(RUNNING_STATS)):
                self.stats = int(self.ns[RUNNING_STATS](model))
        return model

    def repair(self, exc: Exception, inputs: list) -> bool:
        """Change what the next try of the same shapes builds or makes, from the error of a
        forward: whether anything changed (else the shapes are what to change)."""
        message = str(exc)
        specs = self.specs
        if re.search(r"too small|can't be greater than actual input|"
                     r"larger than .*input", message) and self.dims["HEIGHT"] < 256:
            for d in ("HEIGHT", "WIDTH", "SEQ_LEN"):
                self.dims[d] *= 2
            return True
        if any(s["kind"] == "target" for s in specs) and self.target == "same" and \
                re.search(r"Long|Int|index|class|target", message):
            self.target = "index"
            return True
        missing = re.search(r"'MinedConfig' object has no attribute '(\w+)'", message)
        if missing and "CONFIG" in self.ns and missing.group(1) not in self.ns["CONFIG"]:
            # a field only the forward reads (``config.output_attentions``)
            name = missing.group(1)
            self.ns["CONFIG"][name] = eval(config_value(name))
            self.job.setdefault("config_added", []).append(name)
            self.job.setdefault("config_set", {})[name] = config_value(name)
            self.model = self.build()
            return True
        if "NoneType" in message and self.fill_none():  # fields left None, read in forward
            self.model = self.build()
            return True
        if self.spare and "NoneType" in message:
            # an optional tuple of tensors the forward needs after all (rotary
            # ``position_embeddings=None`` unpacked)
            specs += self.spare
            self.spare = []
            return True
        unpacked = re.search(r"(too many|not enough) values to unpack \(expected (\d+)", message)
        index = _unpacked(exc, inputs) if unpacked else None
        if index is not None and specs[index]["kind"] == "float" and \
                1 < int(unpacked.group(2)) <= 4:
            specs[index] = {**specs[index], "kind": "tuple", "count": int(unpacked.group(2))}
            return True
        if not self.high and any(s["kind"] == "long" for s in specs) and re.search(
                r"out of range|out of bounds|must be smaller than num_classes", message):
            self.high = 2  # indices into a small table (experts, classes)
            return True
        return False

    def search(self):
        """The first forward that runs: (output, inputs, template, width), trying input
        layouts and widths and repairing from the errors."""
        ranks = list(self.specs[0]["ranks"])
        widths = list(dict.fromkeys([*self.job.get("channel", []), 16, 3, 32, 64, 8]))
        tried: set[tuple[str, int, int]] = set()
        # (template, width, a tuple input's last dimension: 0 for the module's head width)
        queue = [(r, w, 0) for w in widths[:1] for r in ranks] + \
            [(r, w, 0) for w in widths[1:] for r in ranks]
        _mark(f"mine forward {self.job['key']}")
        last: BaseException | None = None
        attempts = 0
        while queue and attempts < MAX_ATTEMPTS:
            current = queue.pop(0)
            if current in tried:
                continue
            tried.add(current)
            attempts += 1
            template, width, self.last = current
            if not self.last and any(s["kind"] == "tuple" for s in [*self.specs, *self.spare]):
                self.last = _head_dim(self.model, self.ns, width)
            inputs = [self.make(s, template, width, 1 + i) for i, s in enumerate(self.specs)]
            try:
                return self.forward(self.model, inputs, 7, self.specs), inputs, template, width
            except JobTimeout:
                raise
            except Exception as exc:  # noqa: BLE001 — repaired from its message
                last = exc
                if self.repair(exc, inputs):
                    tried.discard(current)
                    queue.insert(0, current)
                    continue
                message = str(exc)
                hints = _width_hints(message, width)
                front = [(template, w, current[2]) for w in hints]
                if any(s["kind"] == "tuple" for s in self.specs):
                    front += [(template, width, w) for w in _width_hints(message, self.last)]
                front += [(r, width, current[2]) for n in _rank_hints(message) for r in ranks
                          if _NDIM[r] == n]
                front += [(r, w, current[2]) for w in hints for r in ranks if r != template]
                queue = [q for q in front if q not in tried] + queue
        raise last or RuntimeError("no input shape fits")

    def run(self) -> dict:
        start = time.monotonic()
        self.stage = "import"
        self.build_namespace()
        _mark(f"mine construct {self.job['key']}")
        self.stage = "constructor"
        self.model = model = self.build()
        self.stage = "forward"
        self.specs = [dict(s) for s in self.job["inputs"] if not s.get("optional")]
        self.spare = [dict(s) for s in self.job["inputs"] if s.get("optional")]
        if not self.specs:
            raise NoTensorInput("forward takes no tensor input")
        out, inputs, template, width = self.search()
        model, specs, stats = self.model, self.specs, self.stats
        flat = _flat(out)
        if not flat:
            return {"ok": False, "reason": "no tensor output",
                    "detail": f"forward returned {type(out).__name__}"}
        path, first = next(((p, t) for p, t in flat if t.is_floating_point()), flat[0])
        if first.is_floating_point() and not torch.isfinite(first).all():
            return {"ok": False, "reason": "non-finite output", "detail": path or "output"}
        _mark(f"mine determinism {self.job['key']}")
        again = _flat(self.forward(model, inputs, 7, specs))
        other_seed = _flat(self.forward(model, inputs, 8, specs))
        same = len(again) == len(flat) and all(torch.equal(a, b) for (_, a), (_, b) in
                                               zip(flat, again))
        if not same:
            return {"ok": False, "reason": "nondeterministic",
                    "detail": "two forwards with the same seeds differ"}
        if not all(torch.equal(a, b) for (_, a), (_, b) in zip(flat, other_seed)):
            return {"ok": False, "reason": "nondeterministic",
                    "detail": "forward draws random numbers (output depends on the RNG seed)"}
        if first.is_floating_point() and not torch.isfinite(first).all():
            return {"ok": False, "reason": "non-finite output", "detail": path or "output"}
        other = [self.make(s, template, width, 11 + i) for i, s in enumerate(specs)]
        if any(s["kind"] != "mask" for s in specs):
            moved = _flat(self.forward(model, other, 7, specs))
            if moved and moved[0][1].shape == first.shape and torch.equal(
                    dict(moved).get(path, moved[0][1]), first):
                return {"ok": False, "reason": "input-independent",
                        "detail": "output unchanged by other inputs"}
        n_params = sum(p.numel() for p in model.parameters()) \
            if isinstance(model, torch.nn.Module) else 0
        return {"ok": True, "init": self.init, "template": template, "width": width,
                "dims": self.dims, "target": self.target,
                "inputs": [{k: s[k] for k in ("name", "kind", "count", "optional") if k in s}
                           for s in specs],
                "high": self.high, "last": self.last,
                "output": path, "out_shape": list(first.shape), "out_dtype": str(first.dtype),
                "n_outputs": len(flat), "n_params": int(n_params),
                "config_added": self.job.get("config_added", []), "running_stats": stats,
                "config_set": self.job.get("config_set", {}),
                "seconds": round(time.monotonic() - start, 4)}


def _eager_compile() -> None:
    """``torch.compile`` in a probed candidate (flex attention's mask and kernel helpers) runs
    eagerly: the probe asks whether the code runs, repeats and depends on its inputs, and
    compiling on the CPU took whole job time limits (inductor building C++ for one call).
    This worker process only probes."""
    os.environ["TORCHDYNAMO_DISABLE"] = "1"  # read when torch._dynamo is first imported
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.config.disable = True


def _with_limit(seconds: float, fn):
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def probe_batch(payload: dict) -> dict:
    """Worker target: ``{"results": [one dict per job]}`` (see the module docstring)."""
    torch.set_num_threads(1)
    _eager_compile()
    results = []
    for job in payload["jobs"]:
        probe = _Probe(job)
        started = time.monotonic()
        try:
            result = _with_limit(float(payload.get("job_s", 20.0)), probe.run)
        except (Exception, JobTimeout) as exc:  # noqa: BLE001 — every failure is a row
            reason = classify(exc)
            if reason == "probe failed":
                reason = f"probe failed: {getattr(probe, 'stage', 'import')}"
            result = {"ok": False, "reason": reason, "detail": _one_line(exc)}
        result["key"] = job["key"]
        result["seconds"] = round(time.monotonic() - started, 3)
        results.append(result)
    return {"results": results}
