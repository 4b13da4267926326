"""Run problem and candidate sources in isolated workers and measure them (the execution harness).

Kept free of imports: worker processes import modules of this package and must load only torch,
triton, numpy and the standard library.
"""
