"""docs/results/starts.py (docs/results.md §9): memory by risk with the start counted, the
workload's profile against the pooled level; one run as the evaluator scores it, the cells and
the table from stored runs, and results.md's table held to the committed one."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from markdown_tables import rows_after

RESULTS_SCRIPT = "starts.py"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def st(results_script):
    return results_script


def test_one_run_scores_every_policy_with_the_start_served(st):
    doc = st.run_one("dlcorpus", "profile", 0)
    assert doc["executions"] > 0 and doc["windows"] > 0 and doc["start"] == "profile"
    assert set(doc["policies"]) == set(st.POLICIES)
    # the corpus's resumed jobs: a part 2 after its part 1 ended on the held-out side or not
    assert 0 <= doc["from_profile"] <= doc["executions"]
    assert doc["static_peak"] > 1.0                         # the clairvoyant constant's cost
    assert all(v == pytest.approx(1.0) for v in doc["policies"]["oracle"]["vs_oracle_risk"]
               .values())
    pooled = st.run_one("dlcorpus", "pooled", 0)
    assert pooled["from_profile"] == 0 and pooled["windows"] == doc["windows"]


def _doc(seed, start, auto, others, floor=None):
    def pol(v):
        return {"risk_share": 0.02, "vs_oracle_risk": {str(s): v for s in (0.01, 0.02, 0.05)},
                "floor": {}, "at_floor": {}}
    p = {n: pol(v) for n, v in others.items()}
    p["auto"] = pol(auto)
    if floor is not None:
        p["auto"]["vs_oracle_risk"]["0.01"] = math.inf
        p["auto"]["floor"]["0.01"], p["auto"]["at_floor"]["0.01"] = floor
    return {"label": "synthetic-reruns", "start": start, "seed": seed, "window": 40,
            "seconds": 1.0, "executions": 60, "windows": 1000, "from_profile": 45,
            "static_peak": 1.5, "policies": p}


def test_cells_say_where_a_share_is_unreachable(st):
    base = {"adaptive-max": 1.5, "adaptive-stat": 1.4, "vpa": 1.6, "krr": 1.45}
    runs = [_doc(0, "profile", 1.2, base), _doc(1, "profile", 1.3, base, floor=(0.03, 2.5))]
    assert st.cell(runs, "auto", 0.02) == "1.250 ± 0.050"
    assert st.cell(runs, "auto", 0.01) == "unreachable at 1 of 2: floor 3.00 % at 2.500"
    assert st.gap_words(runs, 0.01) == "not comparable (a floor at some seed)"


def test_the_table_gives_the_gap_to_the_cheapest_baseline(st, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(st, "OUT", tmp_path)
    base = {"adaptive-max": 1.5, "adaptive-stat": 1.4, "vpa": 1.6, "krr": 1.45}
    for seed, auto in enumerate((1.26, 1.24, 1.25)):
        for start in ("profile", "pooled"):
            (tmp_path / f"synthetic-reruns-{start}-s{seed}.json").write_text(
                json.dumps(_doc(seed, start, auto, base)))
    assert st.cmd_table() == 0
    out = capsys.readouterr().out
    assert "45 of them started from their workload's profile" in out
    assert "the clairvoyant static peak 1.500" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("- profile start"))
    assert "at 1 % -10.7 % ± 0.4 %: cheaper beyond one s.e." in line     # 1.25 / 1.4 - 1
    assert "auto realised 2.00 %" in line


def test_the_clustered_ratio_counts_a_workload_once(st):
    # two workloads: x (two runs) and y; the ratio of sums, its error from the workloads' sums
    ratio, se = st.clustered_ratio([1.0, 1.0, 2.0], [2.0, 2.0, 2.0], ["x", "x", "y"])
    assert ratio == pytest.approx(4 / 6)
    resid = [2 - 4 / 6 * 4, 2 - 4 / 6 * 2]
    assert se == pytest.approx(math.sqrt(2 * sum(r * r for r in resid)) / 6)
    # the same runs as three workloads: a different error, the same ratio
    alone = st.clustered_ratio([1.0, 1.0, 2.0], [2.0, 2.0, 2.0], ["x", "z", "y"])
    assert alone[0] == pytest.approx(ratio) and alone[1] != pytest.approx(se)
    assert math.isnan(st.clustered_ratio([1.0, 2.0], [1.0, 1.0], ["x", "x"])[1])


def _clustered_doc(seed, auto, base, groups):
    d = _doc(seed, "profile", 1.0, {n: 1.0 for n in base})
    d["groups"] = groups
    for name, per in {"auto": auto, **base}.items():
        d["policies"][name]["by_execution"] = {str(s): per for s in (0.01, 0.02, 0.05)}
    return d


def test_the_clustered_verdict_needs_every_baseline_beaten_beyond_its_error(st):
    groups = ["a", "a", "b", "c", "d"]
    far = {n: [2.0, 2.0, 2.0, 2.0, 2.0] for n in st.BASELINES}
    auto = [1.0, 1.1, 0.9, 1.0, 1.2]
    runs = [_clustered_doc(0, auto, far, groups), _clustered_doc(1, auto, far, groups)]
    assert st.clustered_words(runs, 0.02).startswith(
        "below all four beyond one cluster-robust s.e. at 2 of 2 seeds")
    close = dict(far, vpa=[1.05, 1.0, 1.0, 0.95, 1.25])   # one baseline within noise
    runs[1] = _clustered_doc(1, auto, close, groups)
    words = st.clustered_words(runs, 0.02)
    assert words.startswith("below all four beyond one cluster-robust s.e. at 1 of 2 seeds")
    assert "(closest: vpa " in words
    del runs[1]["policies"]["krr"]["by_execution"]["0.02"]     # a floor there
    assert st.clustered_words(runs, 0.02) == "not comparable (a floor at some seed)"
    assert st.clustered_words([_doc(0, "profile", 1.0, far)], 0.02) is None   # older runs


def _table_after(text: str, heading: str) -> list[list[str]]:
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(heading))
    return rows_after(lines[at:], "| policy | start |")


def test_results_md_quotes_the_committed_table():
    """results.md §9 quotes starts.md's synthetic table cell for cell (re-made by run.sh)."""
    committed = _table_after((REPO / "docs" / "results" / "starts.md").read_text(),
                             "### Synthetic DL jobs, each re-run 4 times")
    quoted = _table_after((REPO / "docs" / "results.md").read_text(),
                          "Synthetic DL jobs, each re-run 4 times (docs/results/starts.md")
    assert committed and committed == quoted


def test_run_sh_writes_the_same_rerun_jobs(st):
    """starts.py writes the re-run jobs itself when run.sh has not: with run.sh's arguments."""
    run_sh = (REPO / "docs" / "results" / "run.sh").read_text()
    assert "$A " + " ".join(st.RERUN_ARGS) + "\n" in run_sh
    assert "docs/results/starts.py table > $R/starts.md" in run_sh
