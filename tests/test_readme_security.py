"""Every line of the README's security section names a test, and every test it names exists
(a claim without its test, or a test renamed away, fails here)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEADING = "## Security: what a namespace owner can and cannot do"


def section() -> str:
    text = (REPO / "README.md").read_text()
    assert HEADING in text, "the README has no security section"
    body = text.split(HEADING, 1)[1]
    return body.split("\n## ", 1)[0]


def references(cell: str) -> list[tuple[str, str]]:
    """(file, test) for `tests/f.py::test_x` and the `::test_y` that follow it."""
    out, current = [], None
    for path, name in re.findall(r"`(tests/[\w/]+\.py)?::(\w+)`", cell):
        current = path or current
        assert current, f"{name!r} names no file: {cell!r}"
        out.append((current, name))
    return out


def test_every_line_names_a_test_that_exists():
    rows = [line for line in section().splitlines()
            if line.startswith("| **") or line.startswith("| a namespace")]
    claims = [r for r in rows if not r.startswith("| a namespace")]
    assert len(claims) >= 10
    for row in claims:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        refs = references(cells[-1])
        assert refs, f"a claim without its test: {cells[0][:80]}"
        for path, name in refs:
            source = (REPO / path).read_text()
            assert re.search(rf"^def {name}\(", source, re.M), f"{path}::{name} does not exist"


def test_the_reference_parser_reads_continuations():
    assert references("`tests/a.py::test_x`, `::test_y`, `tests/b.py::test_z`") == [
        ("tests/a.py", "test_x"), ("tests/a.py", "test_y"), ("tests/b.py", "test_z")]
