"""Reading a markdown table that a document quotes, for the tests that hold docs/results.md's
copies to the tables its scripts write."""

from __future__ import annotations


def rows_after(lines: list[str], header: str) -> list[list[str]]:
    """The cells of each body row of the first table whose header line starts with
    ``header`` (StopIteration when none does): the rows after its separator line, up to the
    first line that is not a table row."""
    head = next(i for i, ln in enumerate(lines) if ln.startswith(header))
    rows = []
    for ln in lines[head + 2:]:
        if not ln.startswith("| "):
            break
        rows.append([c.strip() for c in ln.strip("|").split("|")])
    return rows
