"""KernelBench's own eval, run as KernelBench runs it: in this process, one evaluation after
another, nothing isolated.

    python benchmarks/kernelbench_eval_child.py KERNELBENCH_CHECKOUT

Reads one job a line on stdin (``{"ref": source, "custom": source, "kwargs": {...}}``), calls
``kernelbench.eval.eval_kernel_against_ref`` and writes one JSON line a job to stdout: the
KernelExecResult's fields, or ``error`` (the exception's first line), and ``context_lost`` when
CUDA in this process is poisoned after it (then this process ends). Everything else written to
stdout (KernelBench's prints, compilers' output) goes to stderr.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import types

# LLM and network clients that kernelbench/__init__.py imports (through kernelbench.utils) and
# the eval never calls: each one missing from this environment is a stub module.
OPTIONAL = ("openai", "litellm", "dotenv", "tqdm", "requests")


def _stub(name: str) -> types.ModuleType:
    """A module whose every public attribute is a callable that raises, except ``load_dotenv``
    (kernelbench.utils calls it at import): a no-op."""
    def attribute(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr == "load_dotenv":
            return lambda *_a, **_k: False

        def unavailable(*_a, **_k):
            raise RuntimeError(f"{name}.{attr} is a stub here: the eval does not call it")
        return unavailable

    module = types.ModuleType(name)
    module.__getattr__ = attribute
    return module


def stub_missing(names=OPTIONAL) -> list[str]:
    """A stub in ``sys.modules`` for each of ``names`` that fails to import; the stubbed names."""
    stubbed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - any failure to import: the eval never uses it
            sys.modules[name] = _stub(name)
            stubbed.append(name)
    return stubbed


def result_row(result) -> dict:
    """A KernelExecResult (or None: KernelBench's 'retry' answer) as JSON-ready fields."""
    if result is None:
        return {"error": "eval returned None (a lock or missing-file error at compile: retry)"}
    metadata = {}
    for key, value in (getattr(result, "metadata", None) or {}).items():
        try:
            json.dumps(value)
            metadata[key] = value
        except (TypeError, ValueError):
            metadata[key] = str(value)
    return {"compiled": bool(result.compiled), "correctness": bool(result.correctness),
            "runtime": float(getattr(result, "runtime", -1.0)),
            "ref_runtime": float(getattr(result, "ref_runtime", -1.0)),
            "metadata": metadata}


def context_lost() -> str | None:
    """Why CUDA in this process can no longer be used (a sticky error: an illegal address, a
    device-side assertion), or None."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - any error here poisons what follows
        return (str(e).strip().splitlines() or [type(e).__name__])[0]
    return None


def main(checkout: str) -> int:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else printed, by Python or by a compiler, lands on stderr
    sys.path.insert(0, os.path.join(checkout, "src"))
    stub_missing()
    try:
        from kernelbench.eval import eval_kernel_against_ref
    except Exception as e:  # noqa: BLE001 - answered on every job
        failure = f"import kernelbench.eval: {type(e).__name__}: {e}".splitlines()[0]
        eval_kernel_against_ref = None
    for line in sys.stdin:
        job = json.loads(line)
        if eval_kernel_against_ref is None:
            row = {"error": failure}
        else:
            try:
                row = result_row(eval_kernel_against_ref(job["ref"], job["custom"],
                                                         **job["kwargs"]))
            except (Exception, SystemExit) as e:  # noqa: BLE001 - the row says what was raised
                text = str(e).strip().splitlines()
                row = {"error": f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")}
        lost = context_lost()
        if lost:  # the next evaluation needs a fresh process: the parent starts one
            row["context_lost"] = lost
        protocol.write(json.dumps(row) + "\n")
        if lost:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
