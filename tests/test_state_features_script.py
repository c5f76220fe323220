"""docs/results/state_features.py (docs/results.md §3): the state bit it adds is known at the
window's start, adding it changes nothing else in the table, and its summary counts the
evaluator's own scores."""

from __future__ import annotations

import numpy as np
import pytest

from ai4dl.method import synthetic
from ai4dl.policy.headroom import HeadroomPolicy

RESULTS_SCRIPT = "state_features.py"


@pytest.fixture(scope="module")
def sf(results_script):
    return results_script


@pytest.mark.parametrize("feature", ["peak-late", "new-high", "rising", "jumpy-history"])
def test_each_bit_is_known_at_the_windows_start(sf, feature):
    """The bit after window i reads windows 0..i only: the same on a truncated history, and
    the features do not all read the same thing."""
    rng = np.random.default_rng(3)
    win = rng.gamma(2.0, 1.0, size=(30, 12))
    full = sf.feature_value(feature, win)
    for i in (0, 1, 7, 29):
        assert sf.feature_value(feature, win[: i + 1])[i] == full[i]
    others = [sf.feature_value(f, win) for f in ("peak-late", "new-high", "rising") if
              f != feature]
    assert not all(np.array_equal(full, o) for o in others)


def test_jumpy_history_is_the_mean_upward_log_jump(sf):
    win = np.array([[1.0, 2.0], [1.0, 4.0], [1.0, 1.0], [1.0, 8.0]])   # maxima 2, 4, 1, 8
    expect = [0.0, np.log(2), np.log(2) / 2, (np.log(2) + np.log(8)) / 3]
    np.testing.assert_allclose(sf.feature_value("jumpy-history", win), expect)


def test_a_bit_that_is_always_zero_leaves_the_table_as_it_was(sf):
    """The bit is transparent: with the control bit and the phase index doubled, every
    state the data reaches holds the table fitted without it, and serves the same rows (the
    number of burstiness bins is held equal by min_windows)."""
    traces, _ = synthetic.generate(12, seed=5)
    usages = [np.asarray(ex.values, np.float64)[:, :1] for ex in traces]
    rng = np.random.default_rng(0)
    phases = [rng.integers(0, 3, len(u)) for u in usages]
    plain = HeadroomPolicy(target=0.95, min_windows=3).fit(usages, phases, 40, 3)
    wrapped = sf.fit_with_bit("control", 0.5, usages, phases, 40, 6, "r0", 0.95, min_windows=3)
    rows = sf.WithStateBit("control", [wrapped], [0.5], True, "control").allocate(
        usages[0], phases[0], 40, np.ones(1), 15.0)
    assert wrapped.bins_ == plain.bins_
    np.testing.assert_array_equal(wrapped.edges_, plain.edges_)
    np.testing.assert_array_equal(wrapped.multiplier_[:, 0::2], plain.multiplier_)
    np.testing.assert_array_equal(wrapped.estimator_[:, 0::2], plain.estimator_)
    np.testing.assert_array_equal(rows, plain.allocate(usages[0], phases[0], 40, np.ones(1),
                                                       15.0))


def test_summary_counts_the_evaluators_scores(sf, capsys, monkeypatch):
    traces, _ = synthetic.generate(30, seed=5)
    r, out = sf.run_seed(traces, 40, 0, features=("peak-late",))
    R = r.config.resources
    for t, s in out:
        for j in range(len(R)):
            for name in sf.TABLES:          # the tables as fitted today: `ai4dl evaluate`'s
                assert s[name][j].vs_oracle_at[t] == r.scores[name][j].vs_oracle_at[t]
                assert s[f"{name} + peak-late"][j].short_windows_at[t] >= 0
    monkeypatch.setattr(sf, "FEATURES", ("peak-late",))
    monkeypatch.setattr(sf, "load_traces", lambda path: traces)
    monkeypatch.setattr(sf, "run_seed", lambda *a: (r, out))
    assert sf.main(["synthetic.csv", "--window", "40", "--seeds", "0"]) == 0
    text = capsys.readouterr().out
    rows = {line.split(" |")[0]: line for line in text.splitlines()
            if line.startswith("| (as fitted") or line.startswith("| + peak-late")}
    assert len(rows) == 2
    met = {n: sum(max(sf.gaps(s, n + " + peak-late", 0, t)) <= 0 for t, s in out)
           for n in sf.TABLES}
    cells = rows["| + peak-late"].split(" | ")[1:3]
    assert [int(c) for c in cells] == [met[n] for n in sf.TABLES]
