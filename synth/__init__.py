"""kernelmill.synth: make problem sources.

- ``catalog``: the typed op catalog (``data/ops.json``).
- ``composer`` + ``emit``: new problems as small dataflow graphs, printed as KernelBench source.
- ``mutators``: libcst codemods over existing sources (resize, dtype, op swaps, epilogues,
  reduction dims, conv/pool geometry, input distributions): the framework in ``mutator_base``,
  the codemods in ``op_mutators`` and ``setting_mutators``.
- ``resize`` scales size constants, from ``size_analysis`` (which constants, and the rules they
  keep) and ``size_estimate`` (the largest tensor, read statically).
- ``trace`` + ``degeneracy`` + ``checks``: full-size meta-device trace, the degeneracy rules, and
  the checks every synthesized source passes.
- ``llm``: proposals from an OpenAI-compatible endpoint.
- ``generate``: the stage (``synthesize``), ``cli``: ``kernelmill synth``; ``smoke``: CPU smoke run.

Nothing is imported here, so importing the package stays cheap.
"""
