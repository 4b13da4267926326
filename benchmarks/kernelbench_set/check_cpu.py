"""Check the KernelBench answers on CPU under the Triton interpreter, at shrunken sizes.

    TRITON_INTERPRET=1 python benchmarks/kernelbench_set/check_cpu.py [--kernelbench PATH]
                                                                     [--only SUBSTRING ...]

For each answer: its problem's source with every top-level integer constant over 64 shrunk to
a small value (distinct per name, so a swapped dimension fails), the reference Model and the
answer's ModelNew built from the same init inputs (the reference's state_dict loaded into
ModelNew, as the grader does), a forward of each on the problem's inputs and on the same inputs
redrawn as randn * 4, compared with the grader's default fp32 ``torch.allclose`` tolerance.
CUDA (``load_inline``) answers need a GPU and are listed as skipped.
"""
from __future__ import annotations

import argparse
import ast
import os
import sys
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ATOL, RTOL = 1e-4, 1e-4  # the grader's default fp32 tolerance


# Sizes set outright where the generic shrink leaves too much work for the interpreter (it
# leaves constants of 64 and under, like these problems' channel counts).
OVERRIDES = {
    "level2/67_Conv2d_GELU_GlobalAvgPool.py": {"batch_size": 3, "height": 21, "width": 17},
    "level2/71_Conv2d_Divide_LeakyReLU.py": {"batch_size": 2, "height": 19, "width": 23},
    "level3/3_DeepNarrowMLP.py": {"hidden_layer_sizes": [45] * 5},
}


def shrink(source: str, overrides: dict | None = None, cap: int = 64) -> str:
    """Every top-level integer constant (``N = ...``, ``A = B = ...``, ``H, W = 256, 256``)
    whose value exceeds ``cap`` set to a small value derived from its name (33..72), and every
    name in ``overrides`` to its value there (any literal); other assignments (tuples, lists, floats) left as
    they are, so sizes derived from the shrunk names follow them."""
    overrides = overrides or {}
    lines = source.splitlines()
    namespace: dict = {}

    def small(name, value):
        if name in overrides:
            return overrides[name]
        if isinstance(value, int) and not isinstance(value, bool) and value > cap:
            return 33 + zlib.crc32(name.encode()) % 40
        return value

    for node in ast.parse(source).body:
        if not isinstance(node, ast.Assign) or node.lineno != node.end_lineno:
            continue
        try:
            value = eval(compile(ast.Expression(node.value), "<size>", "eval"), {}, namespace)
        except Exception:  # noqa: BLE001 - not a plain constant: leave it
            continue
        if all(isinstance(target, ast.Name) for target in node.targets):
            names = [target.id for target in node.targets]
            new = small(names[0], value)
            if new is not value:
                lines[node.lineno - 1] = " = ".join(names) + f" = {new!r}"
            namespace.update(dict.fromkeys(names, new))
        elif (len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple)
              and all(isinstance(e, ast.Name) for e in node.targets[0].elts)
              and isinstance(value, tuple) and len(value) == len(node.targets[0].elts)):
            names = [e.id for e in node.targets[0].elts]
            new = tuple(small(n, v) for n, v in zip(names, value))
            lines[node.lineno - 1] = ", ".join(names) + " = " + ", ".join(map(repr, new))
            namespace.update(zip(names, new))
    return "\n".join(lines) + "\n"


def check(answer: Path, kernelbench: Path, seed: int = 0) -> tuple[str, str]:
    import torch

    from_answer = answer.read_text()
    if "load_inline" in from_answer:
        return "skipped", "CUDA load_inline answer (needs a GPU)"
    problem = problem_of(answer)
    reference: dict = {"__name__": "reference"}
    source = shrink((kernelbench / problem).read_text(), OVERRIDES.get(problem))
    exec(compile(source, problem, "exec"), reference)
    candidate: dict = {"__name__": "candidate"}
    exec(compile(from_answer, str(answer), "exec"), candidate)
    torch.manual_seed(seed)
    init = reference["get_init_inputs"]()
    model = reference["Model"](*init)
    new = candidate["ModelNew"](*init)
    new.load_state_dict(model.state_dict())
    inputs = reference["get_inputs"]()
    shapes = " ".join("x".join(map(str, t.shape)) for t in inputs if isinstance(t, torch.Tensor))
    # the problem's own inputs, then every float input redrawn as randn * 4 (both signs, larger
    # values: a problem whose inputs keep an activation on one side still tests both)
    spread = [torch.randn_like(t) * 4 if isinstance(t, torch.Tensor) and t.is_floating_point()
              else t for t in inputs]
    errors = []
    for probe in (inputs, spread):
        with torch.no_grad():
            expected = model(*probe)
            got = new(*probe)
        if got.shape != expected.shape:
            return "FAIL", f"shape {tuple(got.shape)} != {tuple(expected.shape)} (inputs {shapes})"
        errors.append((got - expected).abs().max().item())
        if not torch.allclose(got, expected, atol=ATOL, rtol=RTOL):
            return "FAIL", f"max abs error {errors[-1]:.2e} (inputs {shapes})"
    return "ok", f"max abs error {errors[0]:.2e}, {errors[1]:.2e} spread (inputs {shapes})"


def problem_of(answer: Path) -> str:
    for line in answer.read_text().splitlines():
        if line.startswith("# problem: "):
            return line.split(": ", 1)[1].strip()
    raise SystemExit(f"{answer}: no '# problem: levelN/FILE.py' line")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernelbench", help="KernelBench problems folder (level1/ level2/ ...)")
    parser.add_argument("--only", nargs="*", help="answers whose name contains one of these")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("set TRITON_INTERPRET=1 (the answers run under the Triton interpreter)")
    sys.path.insert(0, str(HERE.parent))
    from grade_sets import find_kernelbench, kernelbench_answers

    kernelbench = find_kernelbench(args.kernelbench)
    failed = 0
    for answer, problem in kernelbench_answers(kernelbench):
        if args.only and not any(s in answer.stem for s in args.only):
            continue
        start = time.monotonic()
        try:
            status, detail = check(answer, kernelbench)
        except Exception as exc:  # noqa: BLE001 - report and go on
            status, detail = "FAIL", f"{type(exc).__name__}: {str(exc)[:200]}"
        failed += status == "FAIL"
        print(f"{status:8} {answer.stem:58} {time.monotonic() - start:5.1f}s  {detail}",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
