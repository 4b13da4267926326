"""The prompt a model is given for one problem: chat messages built from the reference source.

``prompt_messages(reference, backend)`` returns ``[{"role": "system", ...}, {"role": "user",
...}]``, the conversational format TRL's ``GRPOTrainer`` and ``SFTTrainer`` take. The published
dataset carries it as the ``prompt`` column (Triton) and ``prompt_cuda`` (CUDA C++ through
``torch.utils.cpp_extension.load_inline``); the SFT export uses the same messages, so a model
trained on one sees the same request in the other.

The template, in order:

1. system: the role (an expert GPU kernel engineer) and the backend;
2. user, the reference: the PyTorch program between ```` ```python ```` fences;
3. user, the task: write ``ModelNew`` with the same constructor and ``forward`` signature that
   computes the same outputs (within the dataset's tolerance) faster, doing the main computation
   in custom kernels of that backend, not by calling PyTorch operators;
4. user, the output format: one fenced Python block, a complete module (imports, kernels,
   ``ModelNew``) and nothing after it. The grader (``grade.trl.extract_code``) takes the last
   fenced Python block of the answer.

``TEMPLATE_VERSION`` changes whenever the wording does, so rows made by different versions can
be told apart (the dataset card states it).
"""
from __future__ import annotations

TEMPLATE_VERSION = 1
BACKENDS = ("triton", "cuda")

_SYSTEM = ("You are an expert GPU kernel engineer. You rewrite PyTorch programs as custom {what} "
           "that compute the same result faster.")

_WHAT = {
    "triton": "Triton kernels (`import triton`, `import triton.language as tl`, `@triton.jit`)",
    "cuda": ("CUDA C++ kernels compiled at import time with "
             "`torch.utils.cpp_extension.load_inline`"),
}

_USER = """Here is a PyTorch reference program. `Model` is the computation, `get_inputs()` returns \
its inputs and `get_init_inputs()` its constructor arguments.

```python
{reference}
```

Task: write a class `ModelNew(nn.Module)` with the same constructor arguments and the same \
`forward` signature as `Model`, whose outputs match `Model`'s (same shapes and dtypes, values \
within a small tolerance) for any inputs `get_inputs()` could produce, and which runs faster. Do \
the main computation in {what}; do not call the PyTorch operators of the reference for it. \
Parameters must be created in `__init__` the way `Model` creates them (same names and shapes), \
so that `ModelNew` loads `Model`'s weights.

Output format: answer with one fenced code block ```python ... ``` holding a complete Python \
module: the imports, the {kernels} and `class ModelNew`. Do not define `get_inputs` or \
`get_init_inputs`. Write nothing after the code block."""

_KERNELS = {"triton": "Triton kernels", "cuda": "CUDA source strings, the `load_inline` call"}


def prompt_messages(reference: str, backend: str = "triton") -> list[dict[str, str]]:
    """The chat messages asking for a ``backend`` kernel that replaces ``reference``."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r} (one of {', '.join(BACKENDS)})")
    what = _WHAT[backend]
    return [{"role": "system", "content": _SYSTEM.format(what=what)},
            {"role": "user", "content": _USER.format(reference=reference.rstrip("\n"), what=what,
                                                     kernels=_KERNELS[backend])}]


def prompt_column(backend: str) -> str:
    """The dataset column holding the prompts of ``backend`` (``prompt`` is Triton's)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r} (one of {', '.join(BACKENDS)})")
    return "prompt" if backend == "triton" else f"prompt_{backend}"
