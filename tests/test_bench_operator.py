"""The operator benchmark's smoke run (bench/bench_operator.py at 50 pods, 2 windows): it serves
every pod it created on a real control plane, Prometheus and the operator, and prints its
table; and it refuses to print one when it measured nothing (issue 44: a model the operator
refused read "0 pods, 0 resized" in every window, and the script exited 0 with a table)."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))


def run(first_full, records, measured) -> dict:
    return {"op": {"first_full": first_full, "records": records, "measured": measured}}


def test_measured_nothing_names_why():
    from bench_operator import measured_nothing

    ok = run(0, [{"pods": 50, "resized": 50}] + [{"pods": 50, "resized": 2}] * 2,
             [{"pods": 50, "resized": 2}, {"pods": 50, "resized": 0}])
    assert measured_nothing(ok, 50) is None
    refused = run(None, [{"pods": 0, "resized": 0}] * 4, [])
    assert measured_nothing(refused, 50) == "no window served all 50 pods created (at most 0)"
    short = run(0, [{"pods": 50, "resized": 3}],
                [{"pods": 50, "resized": 1}, {"pods": 49, "resized": 0}])
    assert "1 of 2 measured windows served fewer than the 50 pods" in measured_nothing(short, 50)
    idle = run(0, [{"pods": 50, "resized": 0}] * 3, [{"pods": 50, "resized": 0}] * 2)
    assert "none of the 2 measured windows resized any pod" in measured_nothing(idle, 50)
    late = run(0, [{"pods": 50, "resized": 0}] * 3,
               [{"pods": 50, "resized": 0, "skipped": "{'window-deadline': 5}"},
                {"pods": 50, "resized": 0, "skipped": "{}"}])
    assert measured_nothing(late, 50) == (
        "none of the 2 measured windows resized any pod (in 1 of them the resizes waited for "
        "the next window (window-deadline): listing, querying and planning took the window)")


def test_a_first_window_that_resized_is_not_a_measured_one():
    """Every pod is new in the first full window, so it resizes them all; the table reports
    the windows after it, and those resized nothing: measured nothing."""
    from bench_operator import measured_nothing

    warm = run(0, [{"pods": 50, "resized": 50}] + [{"pods": 50, "resized": 0}] * 2,
               [{"pods": 50, "resized": 0}] * 2)
    assert measured_nothing(warm, 50) == ("none of the 2 measured windows resized any pod (a "
                                          "refused model serves nothing)")


def test_serving_refuses_a_plan_of_nothing():
    from operator_bench.serving import served_nothing, serving_table

    assert served_nothing(50, "auto", 50) is None
    assert served_nothing(50, "auto", 0) == ("spec.policy.kind auto: plan_window sized none of "
                                             "the 50 pods (a refused model serves nothing)")
    # no pod: said before any trace is read or model fitted (np.stack of nothing, before)
    assert serving_table(0, 10, ["phase"]) == ("--pods 0: no pod to plan", "")


@pytest.mark.parametrize("serving", [(), ("--serving",)], ids=["cluster", "serving"])
def test_no_pod_is_refused_before_anything_starts(serving, capsys):
    from bench_operator import main

    assert main(["--pods", "0", *serving]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "bench_operator: measured nothing, no table: --pods 0: no pod to serve\n"


def per_window_rows(stdout: str) -> list[list[str]]:
    """The per-window table's rows: | window | role | pods | resized | ... |."""
    return [cells for cells in ([c.strip() for c in line.strip().strip("|").split("|")]
                                for line in stdout.splitlines() if line.startswith("| "))
            if len(cells) >= 8 and cells[1] in ("warm-up", "first full", "measured")]


@pytest.mark.integration
def test_smoke_run_serves_every_pod_it_created(kube_cluster):   # the binaries are built
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_operator.py"),
                        "--pods", "50", "--windows", "2", "--window", "10", "--no-breakdown",
                        "--threads", "2", "--timeout", "420"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    assert "measured nothing" not in r.stderr
    assert "| pods | 50 |" in r.stdout
    rows = per_window_rows(r.stdout)
    measured = [cells for cells in rows if cells[1] == "measured"]
    # the table's measured windows: each served the 50 pods created, and they resized some
    assert len(measured) == 2 and all(cells[2] == "50" for cells in measured), r.stdout[-3000:]
    assert sum(int(cells[3]) for cells in measured) > 0, r.stdout[-3000:]
    # each window's own peak RSS (VmHWM reset at each window's line) and the RSS at its line
    assert all(float(cells[7]) >= float(cells[8]) > 50 for cells in measured), r.stdout[-3000:]
    assert [cells[2] for cells in rows if cells[1] == "first full"] == ["50"]


def test_per_window_rows_reads_the_table():
    from operator_bench.common import table

    text = table(["window", "role", "pods", "resized", "processing (s)", "histogram bucket",
                  "done after boundary (s)", "operator RSS (MiB)", "skipped"],
                 [["12:00:00", "first full", 50, 50, 1.0, "<= 2.5", 3.0, 120.0, "{}"],
                  ["12:00:10", "measured", 50, 4, 0.5, "<= 1", 2.0, 121.0, "{}"]])
    assert per_window_rows("| pods | 50 |  |\n" + text) == [
        ["12:00:00", "first full", "50", "50", "1.00", "<= 2.5", "3.00", "120.00", "{}"],
        ["12:00:10", "measured", "50", "4", "0.50", "<= 1", "2.00", "121.00", "{}"]]
