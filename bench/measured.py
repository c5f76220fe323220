"""What every benchmark does when it measured nothing (issue 44): no table, one line naming why
on stderr, exit status 1. A table of zeros (0 pods served, an empty input, a refused model)
reads as a result; this cannot."""

from __future__ import annotations

import sys


def refuse(script: str, why: str) -> int:
    """Say why ``script`` measured nothing; the exit status to return (1)."""
    print(f"{script}: measured nothing, no table: {why}", file=sys.stderr)
    return 1
