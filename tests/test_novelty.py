"""Novelty-triggered refits, the operator's side: counting novel windows per PhaseModel."""

from ai4dl.controller.novelty import update_novelty
from ai4dl.crd_spec import RefitPolicy

REFIT = RefitPolicy(noveltyShare=0.25, windows=3)


def run(windows, model="m1", start=None, refit=REFIT):
    status, verdict = start, None
    for i, (novel, total) in enumerate(windows):
        verdict = update_novelty(status, model, 600.0 * (i + 1), novel, total, refit)
        status = verdict.status
    return verdict


def test_refit_recommended_only_over_a_full_span_at_the_threshold():
    assert run([(10, 10)]).reason == "TooFewWindows"          # one odd window triggers nothing
    assert not run([(10, 10), (10, 10)]).recommended
    v = run([(1, 10), (2, 10), (4, 10)])                       # 7 / 30 = 0.233 < 0.25
    assert not v.recommended and v.reason == "NoveltyBelow"
    v = run([(1, 10), (2, 10), (5, 10)])                       # 8 / 30 = 0.267
    assert v.recommended and v.reason == "NoveltyAbove" and "8 of 30" in v.message
    assert abs(v.status["share"] - 8 / 30) < 1e-6


def test_only_the_last_windows_count():
    v = run([(10, 10), (0, 10), (0, 10), (0, 10)])
    assert len(v.status["recent"]) == 3 and v.status["share"] == 0 and not v.recommended


def test_a_new_model_starts_a_new_count():
    before = run([(10, 10), (10, 10), (10, 10)])
    assert before.recommended
    after = update_novelty(before.status, "m2", 99_000.0, 0, 10, REFIT)
    assert after.status["recent"] == [{"novel": 0, "total": 10}] and not after.recommended


def test_a_window_is_counted_once_and_empty_windows_not_at_all():
    v = run([(3, 10)])
    again = update_novelty(v.status, "m1", 600.0, 3, 10, REFIT)      # same window, restarted
    assert again.status["recent"] == v.status["recent"]
    empty = update_novelty(v.status, "m1", 1200.0, 0, 0, REFIT)      # no container classified
    assert empty.status["recent"] == v.status["recent"]


def test_most_windows_novel_say_what_it_usually_means():
    """Issue 45: most windows novel from the first is data in other units or the wrong model,
    not a drift to refit for: the condition says so, with the share, before the full span."""
    early = run([(9, 10)])
    assert early.reason == "TooFewWindows" and not early.recommended
    assert "90.0% of container windows are novel for this model" in early.message
    assert "other units than the model's, or a model of another workload?" in early.message
    full = run([(9, 10), (10, 10), (8, 10)])
    assert full.recommended and "90.0% of container windows are novel" in full.message
    assert "novel for this model" not in run([(5, 10), (5, 10), (5, 10)]).message   # 50 %: not most
