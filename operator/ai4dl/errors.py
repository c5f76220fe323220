"""Errors a user can act on. Each renders as one line; the CLI prints it without a traceback."""

from __future__ import annotations


class Ai4dlError(Exception):
    """Base for every error caused by input (files, models, flags), not by a bug."""


class TraceError(Ai4dlError):
    """A trace file cannot be read. Names the file and, where known, the row and column."""

    def __init__(self, message: str, *, path: str | None = None, row: int | None = None,
                 column: str | None = None):
        self.path, self.row, self.column, self.reason = path, row, column, message
        where = path or "<input>"
        if row is not None:
            where += f":{row}"
        if column is not None:
            where += f": column '{column}'"
        super().__init__(f"{where}: {message}")


class ModelError(Ai4dlError):
    """A model document is malformed or does not fit the data it is applied to."""


def one_line(err) -> str:
    """A pydantic ValidationError (from user input: a flag, a file, a resource's spec) as one
    line: the first invalid field and why, and how many more there are. Its own text spans
    several lines and names pydantic's internals (``1 validation error for PhaseModelSpec``),
    which tells a user nothing."""
    errors = err.errors()
    e = errors[0]
    msg = str(e.get("msg", "")).removeprefix("Value error, ")
    loc = ".".join(str(p) for p in e.get("loc", ()))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{loc + ': ' if loc else ''}{msg}{more}"
