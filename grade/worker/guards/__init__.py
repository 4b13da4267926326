"""The worker's in-process guards, best effort: they run in the candidate's own interpreter.

The only code of the worker that hooks the interpreter, rebinds or seals: the originals bound
before any candidate import (``originals``), the audit hook that refuses code compiled at run
time and the interpreter's internals and keeps the observers' counts out of every module's reach
(``audit``), the snapshot of every module's functions that shows a patch (``patches``), and the
private copies of the worker package the candidate's run calls (``private``). What the operating
system or the device enforces lives elsewhere (``validate.sandbox``, ``grade.witness``).
"""
