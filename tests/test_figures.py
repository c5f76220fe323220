"""Figures a person reads (issue 28, item 6): the corpus demo draws the phases the programs
logged under the detected ones (the README promised it; the figure showed none), a heat-map of
pooled states says so, allocation plots read in the run's units and draw a few policies."""

from __future__ import annotations

import numpy as np

from ai4dl.reporting import plots
from ai4dl.cli.main import corpus_truth, write_plots
from ai4dl.io.loaders import DL_CORPUS, load_corpus_phases, load_dl_corpus
from ai4dl.method.model import PhaseModel


def _strip_texts(fig) -> dict[str, list[str]]:
    """Per axis titled 'logged phase': the names written on it."""
    return {str(i): [t.get_text() for t in ax.texts] for i, ax in enumerate(fig.axes)
            if ax.get_ylabel() == "logged\nphase"}


def test_the_logged_phases_are_drawn_under_the_detected_ones(tmp_path):
    traces = load_dl_corpus(DL_CORPUS)
    chosen = sorted(traces, key=len, reverse=True)[:2]
    codes, names = corpus_truth(chosen, load_corpus_phases(DL_CORPUS))
    model = PhaseModel(n_phases=3, epochs=3, random_state=0).fit(traces)
    labels = model.predict(chosen)
    values = np.concatenate([e.values for e in chosen])
    fig = plots.report_figure(model, chosen, labels, values, np.concatenate(labels), "t",
                              logged=list(zip(codes, [names] * 2)))
    strips = _strip_texts(fig)
    assert len(strips) == 2
    drawn = {t for texts in strips.values() for t in texts}
    logged = {names[c] for cs in codes for c in np.unique(cs)}
    assert drawn and drawn <= logged and "train" in drawn

    written = write_plots(model, chosen, tmp_path, max_executions=2,
                          logged={e.name: (c, names) for e, c in zip(chosen, codes)})
    assert {p.name for p in written} >= {"report.png", "distributions.png"}


def test_without_logged_phases_no_strip_is_drawn():
    traces = load_dl_corpus(DL_CORPUS)
    ex = max(traces, key=len)
    model = PhaseModel(n_phases=2, epochs=2, random_state=0).fit(traces)
    fig = plots.trace_figure(ex, model.predict([ex])[0], 2)
    assert _strip_texts(fig) == {} and len(fig.axes) == len(ex.features)


def test_a_heatmap_of_pooled_states_says_so():
    """describe --heatmap on the corpus: every state pooled (too few windows per state), one
    colour; the panel's title says why instead of leaving a reader to read phases into it."""
    from ai4dl.policy.headroom import HeadroomPolicy

    rng = np.random.default_rng(0)
    usages = [np.abs(rng.normal(1.0, 0.2, (200, 1))) for _ in range(4)]
    phases = [rng.integers(0, 3, 200) for _ in range(4)]
    pooled = HeadroomPolicy(min_windows=10_000).fit(usages, phases, 10, 3, ["cpu"])
    fig = plots.headroom_figure([pooled])
    assert "all states pooled" in fig.axes[0].get_title()
    assert "< 10000 windows each" in fig.axes[0].get_title()
    own = HeadroomPolicy(min_windows=1, max_bins=1).fit(usages, phases, 10, 3, ["cpu"])
    assert "pooled" not in plots.headroom_figure([own]).axes[0].get_title()


def test_allocation_figures_read_in_the_runs_units_and_draw_a_few_policies():
    from ai4dl.evaluation.evaluate import EvaluationConfig, run_evaluation
    from ai4dl.evaluation.plots import (duration_text, execution_figure, shown_policies,
                                        time_axis)

    assert duration_text(40) == "40 s" and duration_text(600) == "10 min"
    assert duration_text(40 * 15 * 12) == "2 h"
    assert time_axis(7 * 60) == (60.0, "minutes") and time_axis(30) == (1.0, "seconds")
    assert time_axis(5 * 3600)[1] == "hours"
    every = ["static", "adaptive-max", "adaptive-stat", "phase", "phase-proactive",
             "phase-headroom", "burst-headroom", "peak-risk", "vpa", "krr", "auto", "oracle"]
    assert shown_policies(every) == ["static", "adaptive-max", "vpa", "krr", "auto", "oracle"]
    assert shown_policies(["phase", "adaptive-stat", "oracle"]) == \
        ["adaptive-stat", "phase", "oracle"]

    traces = load_dl_corpus(DL_CORPUS)  # 1 s samples, runs of minutes
    res = run_evaluation(traces, EvaluationConfig(window=40, policies=("static", "adaptive-max",
                                                                       "adaptive-stat")))
    fig = execution_figure(res, 0)
    assert fig.axes[-1].get_xlabel() in ("minutes since the execution started",
                                         "seconds since the execution started")
    assert "= 40 s;" in fig.axes[0].get_title()
    labels = {t.get_label() for t in fig.axes[0].get_legend().get_texts()} | {
        t.get_text().split(" (")[0] for t in fig.axes[0].get_legend().get_texts()}
    assert "adaptive-stat" not in labels and "static" in labels
    assert any("not drawn (in the tables): adaptive-stat" in t.get_text() for t in fig.texts)
