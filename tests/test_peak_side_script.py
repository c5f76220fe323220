"""docs/results/peak_side_probe.py (docs/results.md §7): a window's kind comes from its
execution's lifetime peak, the three parts of a policy's allocation add up to the scorer's own
figure at the matched share, and the committed table and results.md's copy of it are what the
code gives."""

from __future__ import annotations

import math
import re
from pathlib import Path

from markdown_tables import rows_after

RESULTS_SCRIPT = "peak_side_probe.py"
DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_window_kinds_read_the_lifetime_peak(results_script):
    ps = results_script
    # per-sample windows: before the first window at 0.9 x the peak, at it, after and below
    assert ps.window_kinds([1, 2, 10, 3, 9.5, 8.9], 1).tolist() == [0, 0, 1, 2, 1, 2]
    # windows of 2 (the last one partial): maxima 2, 10, 9.5
    assert ps.window_kinds([1, 2, 10, 3, 9.5], 2).tolist() == [0, 1, 1]
    # a flat series is at its peak from the first window
    assert ps.window_kinds([4, 4, 4], 1).tolist() == [1, 1, 1]
    assert ps.window_kinds([], 3).tolist() == []


def test_the_parts_add_up_to_the_scorers_figure_and_the_committed_table(results_script):
    """One run of the DL corpus, five split seeds: per seed and policy the three parts add up to
    the evaluator's allocation ÷ oracle at the matched 1 % (risk.md's figure), the kinds
    partition the scored windows, and the table is docs/results/peak-side.md's."""
    ps = results_script
    seeds = [0, 1, 2, 3, 4]
    runs = ps.runs_for("dlcorpus", seeds)
    for r in runs:
        assert math.isclose(r["shares"].sum(), 1.0)
        for name, got in r["policies"].items():
            assert math.isclose(got["parts"].sum(), got["scored"], rel_tol=1e-9), name
            assert (got["parts"] > 0).all(), name
    committed = (DOCS / "results" / "peak-side.md").read_text()
    assert ps.table("dlcorpus", seeds, runs) in committed


def test_bad_arguments_are_one_line(results_script, capsys):
    ps = results_script
    assert ps.main(["--sets", "nope"]) == 2
    assert ps.main(["--seeds", "0,x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "'nope'" in err[0] and "'0,x'" in err[1], err


def test_a_missing_data_set_is_one_line_naming_its_path(results_script, tmp_path, monkeypatch,
                                                        capsys):
    ps = results_script
    _, opts, window, label = ps.risk.SETS["alibaba"]
    monkeypatch.setitem(ps.risk.SETS, "alibaba", (tmp_path / "gone", opts, window, label))
    assert ps.main(["--sets", "alibaba", "--seeds", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path / "gone") in err[0], err


def test_results_md_quotes_the_committed_table():
    """docs/results.md §7's split is peak-side.md's, cell for cell (a figure edited by hand,
    or a peak-side.md regenerated without results.md, fails here)."""
    committed: dict = {}
    section = None
    for ln in (DOCS / "results" / "peak-side.md").read_text().splitlines():
        if ln.startswith("### "):
            section = ln[4:].split(" (")[0].split(":")[0]
        elif section and re.match(r"\| [a-z]", ln) and not ln.startswith("| policy"):
            cells = [c.strip() for c in ln.strip("|").split("|")]
            committed[section, cells[0]] = cells[1:]
    lines = (DOCS / "results.md").read_text().splitlines()
    rows = rows_after(lines, "| data set | policy | before the peak")
    for cells in rows:
        assert cells[2:] == committed[cells[0], cells[1]], cells
    assert len(rows) == len(committed) and len(rows) >= 6
