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


def env_choice(var: str, choices: tuple[str, ...]) -> str:
    """The environment switch ``var``: its value, or its first choice where it is unset or
    empty; any other value is an error naming the choices (a typo must not quietly run the
    default arm of an A/B)."""
    import os

    value = os.environ.get(var) or choices[0]
    if value not in choices:
        raise KernelmillError(f"{var}={value!r}: expected one of {', '.join(choices)}")
    return value
