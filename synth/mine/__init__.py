"""kernelmill.synth.mine: problems mined from real PyTorch code, read with libcst, never imported.

- ``sources``: a SOURCE (installed package name, folder, git checkout) -> its files, version and
  license, without importing the package.
- ``index``: every file read with libcst into its top-level definitions and imports; names
  resolved across the package's files (re-exports followed).
- ``candidates``: ``nn.Module`` subclasses with a forward, and tensor functions worth a problem.
- ``gather``: everything a candidate reaches at module level, into one self-contained source.
- ``spec``: first guesses of constructor arguments and inputs (defaults, names, config defaults).
- ``render``: the KernelBench-format source from gathered code and a probed spec; sizing ladders.

Probing runs in the validate harness's confined workers, so the worker side
(``kernelmill.validate.mine_worker``: repair the guesses from the errors, check determinism;
``kernelmill.validate.mine_sizing``: estimate eager time on the meta device) and the stage
(``kernelmill.validate.mining``) sit in validate/, above synth in the layers.
"""
