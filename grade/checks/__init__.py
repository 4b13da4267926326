"""The judge's checks, one small registered function each (``registry.register``). The modules
are imported in the order their checks run within a scope; ``CHECKS`` lists them all."""
from . import source, calls, run, general, probes, timing  # noqa: F401,I001  (registration order)
from .registry import CHECKS, Check, Finding, HackCode, Layer, checks_of, register

__all__ = ["CHECKS", "Check", "Finding", "HackCode", "Layer", "checks_of", "register"]
