"""Errors that the CLI turns into one-line messages."""


class KernelmillError(Exception):
    """A user-facing failure: bad input, missing file, unusable option. Its text is one line."""


class ProblemError(KernelmillError):
    """A problem or candidate source that does not follow the KernelBench format."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        self.reason = message
        self.path = path
        self.line = line
        where = path or "<source>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")
