"""docs/results/frontier.py (the trade-off behind docs/results.md §3): its table points are the
evaluator's own scores, on the held-out executions and on the train executions the tables were
fitted on, and its summary reads them correctly."""

from __future__ import annotations

import pytest

from ai4dl.method import synthetic

RESULTS_SCRIPT = "frontier.py"


@pytest.fixture(scope="module")
def frontier_script(results_script):
    return results_script


def test_points_are_the_evaluators_scores_and_the_summary_reads_them(frontier_script, capsys,
                                                                   monkeypatch):
    fr = frontier_script
    monkeypatch.setattr(fr, "PRICES", fr.PRICES[::4])     # the same code path, fewer fits
    traces, _ = synthetic.generate(30, seed=5)
    r, out = fr.frontier(traces, 40, 0)
    R = r.config.resources
    assert [t for t, *_ in out] == list(fr.TARGETS)
    train = r.train_data
    train_windows = sum(-(-len(u) // 40) - 1 for u in train.usage)
    for t, s, rows, coef, s_train in out:
        assert len(rows) == len(fr.REACTIVE) + len(fr.TABLES) * (1 + len(fr.PRICES)) + 1
        assert coef.shape == (len(fr.ESTIMATORS), len(R))
        # the train-side scores: every reactive and table point, over the train executions
        assert set(s_train) == {"oracle", *(lab for lab, fam in rows if fam != "combined")}
        assert all(sc.scored_windows == train_windows for v in s_train.values() for sc in v)
        for j in range(len(R)):
            # the rule's point and the reactive rows are what `ai4dl evaluate` reports
            for name in fr.TABLES:
                assert s[f"{name} (the rule)"][j].vs_oracle_at[t] == \
                    r.scores[name][j].vs_oracle_at[t]
                assert s[f"{name} (the rule)"][j].short_windows_at[t] == \
                    r.scores[name][j].short_windows_at[t]
            for name in fr.REACTIVE:
                assert s[name][j].vs_oracle_at[t] == r.scores[name][j].vs_oracle_at[t]
            for sc in (s, s_train):
                ga, gw = fr.gaps(sc, "adaptive-max", j, t)
                assert gw == 0.0 and ga >= 0.0
    # the printed summary: one row per (resource, target, seed), its counts from gaps()
    monkeypatch.setattr(fr, "load_traces", lambda path: traces)
    monkeypatch.setattr(fr, "frontier", lambda *a: (r, out))
    assert fr.main(["synthetic.csv", "--window", "40", "--seeds", "0"]) == 0
    text = capsys.readouterr().out
    summary = [line for line in text.splitlines() if line.startswith("| cpu |")
               or line.startswith("| memory |")]
    assert len(summary) == len(R) * len(fr.TARGETS)
    t, s, rows, _, s_train = out[0]
    pts = [lab for lab, fam in rows if fam in fr.TABLES]
    meet = sum(1 for lab in pts if max(fr.gaps(s, lab, 0, t)) <= 0)
    assert f"| {R[0]} | {t:.0%} | 0 | {meet} of {len(pts)} |" in summary[0]
    ga, gw = fr.gaps(s, "phase-headroom (the rule)", 0, t)
    ta, tw = fr.gaps(s_train, "phase-headroom (the rule)", 0, t)
    assert f"{ga:+.2%}, {gw:+.1%} ({ta:+.2%}, {tw:+.1%}) |" in summary[0]
    meet_train = sum(1 for lab in pts if max(fr.gaps(s_train, lab, 0, t)) <= 0)
    assert summary[0].endswith(f"| {meet_train} of {len(pts)} | {fr.corner(s_train, pts, 0, t)[1]} |")
