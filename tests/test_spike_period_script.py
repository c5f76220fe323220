"""docs/results/spike_period_probe.py (docs/results.md §7): the state of a window is read from
the windows before it only, consecutive spike windows are one spike, "not due" is fewer windows
since the last spike than the shortest gap seen, and the aggregate rows partition the windows."""

from __future__ import annotations

from markdown_tables import rows_after

RESULTS_SCRIPT = "spike_period_probe.py"


def test_states_come_from_the_windows_before_and_a_run_of_spikes_is_one_spike(results_script):
    sp = results_script
    maxima = [1.0, 10.0, 5.0, 5.0, 10.0, 5.0, 10.0, 5.0]
    got = [tuple(s) for s in sp.spike_states(maxima)]
    assert got == [
        (1, None, 10.0),    # w1: after the first window (a spike of its own), a new high
        (1, None, 0.5),     # w2: w0-w1 were one spike (consecutive), so no gap yet
        (2, None, 0.5),
        (3, None, 1.0),     # w4: the second spike, 3 windows after the last
        (1, 3, 0.5),        # w5: shortest gap 3, one window since: not due
        (2, 3, 1.0),        # w6: not due, and the spike comes anyway
        (1, 2, 0.5),        # w7: the gap w4 -> w6 is 2
    ]
    due = [sp.not_due(s) for s in sp.spike_states(maxima)]
    assert due == [False, False, False, False, True, True, True]


def test_state_labels_cap_the_counts(results_script):
    sp = results_script
    assert sp.state_label(sp.WindowState(7, 9, 1.0)) == ("4+", "5+")
    assert sp.state_label(sp.WindowState(2, None, 1.0)) == ("2", "none")
    assert sp.state_label(sp.WindowState(3, 4, 1.0)) == ("3", "4")


def test_window_maxima_drop_the_incomplete_window(results_script):
    assert results_script.window_maxima([1, 3, 2, 5, 9], 2).tolist() == [3.0, 5.0]


def test_the_aggregate_rows_partition_the_windows_after_a_spike(results_script):
    rows, n_exec = results_script.tabulate("dlcorpus")
    every = len(rows["every window after a spike"])
    assert n_exec > 0 and every > 0
    assert len(rows["not due"]) + len(rows["due, or no gap seen"]) == every
    assert sum(len(v) for k, v in rows.items() if isinstance(k, tuple)) == every


def test_an_unknown_data_set_is_one_line(results_script, capsys):
    assert results_script.main(["--sets", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'nope'" in err[0]


def test_the_committed_tables_are_reproduced(results_script, shared_data, monkeypatch):
    """docs/results/spike-period.md's real data sets, re-run (the synthetic jobs are run.sh's
    file; the table for them comes from the same code)."""
    from pathlib import Path

    sp = results_script
    committed = (Path(__file__).resolve().parent.parent / "docs" / "results" /
                 "spike-period.md").read_text()
    _, opts, window, label = sp.risk.SETS["gcd-1h"]
    monkeypatch.setitem(sp.risk.SETS, "gcd-1h",
                        (shared_data / "gcd_vms" / "GCD_VMs.tar.gz", opts, window, label))
    for name in ("dlcorpus", "gcd-1h"):
        fresh = sp.table(name)
        assert fresh in committed, name


def test_a_missing_data_set_is_one_line_naming_its_path(results_script, tmp_path, monkeypatch,
                                                        capsys):
    sp = results_script
    _, opts, window, label = sp.risk.SETS["alibaba"]
    monkeypatch.setitem(sp.risk.SETS, "alibaba", (tmp_path / "gone", opts, window, label))
    assert sp.main(["--sets", "alibaba"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path / "gone") in err[0], err


def test_results_md_quotes_the_committed_spike_table():
    """docs/results.md §7's summary is spike-period.md's, cell for cell (a figure edited by
    hand, or a spike-period.md regenerated without the summary, fails here)."""
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parent.parent / "docs"
    committed: dict = {}
    section = None
    for ln in (docs / "results" / "spike-period.md").read_text().splitlines():
        if ln.startswith("### "):
            section = ln[4:].split(" (")[0]
            every = re.search(r"([\d,]+) windows after a spike", ln).group(1)
            committed[section] = {"every": every, "low": 0}
        elif section and ln.startswith("| **not due**"):
            cells = [c.strip() for c in ln.strip("|").split("|")]
            committed[section]["not due"] = f"{cells[2]}, {cells[4]}"
        elif section and re.match(r"\| \d", ln):
            cells = [c.strip() for c in ln.strip("|").split("|")]
            if int(cells[2].replace(",", "")) >= 100 and float(cells[4]) < 1:
                committed[section]["low"] += 1
    words = {0: "none", 1: "one", 2: "two", 3: "three", 4: "four"}
    lines = (docs / "results.md").read_text().splitlines()
    rows = rows_after(lines, "| data set | windows after a spike |")
    for name, every, not_due, low in rows:
        sec = next(s for s in committed if s.startswith(name.split(" (")[0]))
        assert every == committed[sec]["every"], name
        assert not_due == committed[sec]["not due"], name
        assert low.split(" (")[0] == words[committed[sec]["low"]], name
    assert len(rows) == 5
