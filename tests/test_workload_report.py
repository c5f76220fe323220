"""The per-workload report of ``ai4dl evaluate --prometheus`` (pure parts): owners from names
and from kube-state-metrics, cross-fitting folds, and the aggregation per workload."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ai4dl.method import synthetic
from ai4dl.evaluation.evaluate import EvaluationConfig, fold_splits, merge_results, run_cross_fitted
from ai4dl.judge import Replay, ReplayInput, score
from ai4dl.evaluation.workload_report import (Owner, owner_from_name, resolve_owners, totals_table,
                                              workload_rows, workload_table)


@pytest.mark.parametrize("pod, kind, name", [
    ("resnet-x7k2p", "Job", "resnet"),
    ("nightly-29012345-x7k2p", "CronJob", "nightly"),
    ("serve-7d9f8c6b5-x2kzq", "Deployment", "serve"),
    ("db-0", "StatefulSet", "db"),
    ("bert-master-0", "TrainingJob", "bert"),
    ("bert-worker-12", "TrainingJob", "bert"),
    ("standalone", "Pod", "standalone"),
    # an 'a' or 'e' is never in a generated suffix: a plain name, not a Job's pod
    ("my-alpha", "Pod", "my-alpha"),
])
def test_owner_from_generated_names(pod, kind, name):
    o = owner_from_name("ml", pod)
    assert (o.kind, o.name, o.source) == (kind, name, "pod name")


def test_resolve_owners_follows_replicasets_and_jobs():
    got = resolve_owners(
        {("ml", "serve-7d9f8c6b5-x2kzq"): ("ReplicaSet", "serve-7d9f8c6b5"),
         ("ml", "web-5c8d7f9b6-zzzzz"): ("ReplicaSet", "web-5c8d7f9b6"),
         ("ml", "nightly-1-x7k2p"): ("Job", "nightly-1"),
         ("ml", "once-x7k2p"): ("Job", "once"),
         ("ml", "bare"): ("<none>", "<none>")},
        replicaset_owner={("ml", "serve-7d9f8c6b5"): ("Deployment", "frontend")},
        job_owner={("ml", "nightly-1"): ("CronJob", "nightly")})
    assert got[("ml", "serve-7d9f8c6b5-x2kzq")] == Owner("ml", "Deployment", "frontend")
    # no kube_replicaset_owner: the template hash is cut off the ReplicaSet's name
    assert got[("ml", "web-5c8d7f9b6-zzzzz")] == Owner("ml", "Deployment", "web")
    assert got[("ml", "nightly-1-x7k2p")] == Owner("ml", "CronJob", "nightly")
    assert got[("ml", "once-x7k2p")] == Owner("ml", "Job", "once")
    assert got[("ml", "bare")] == Owner("ml", "Pod", "bare")


def test_fold_splits_score_every_group_once_and_never_on_both_sides():
    traces, _ = synthetic.generate(11, seed=4)
    folds = fold_splits(traces, 3, seed=1)
    held = [g for _, test in folds for g in test.groups()]
    assert sorted(held) == sorted(traces.groups())
    for train, test in folds:
        assert not set(train.groups()) & set(test.groups())
    with pytest.raises(ValueError):
        fold_splits(traces, 1)


def _toy_result():
    """Two executions of one workload and one of another; 2 windows of 2 samples each; a
    policy 'p' allocating 2.0 throughout (the cold-start window excluded from scoring)."""
    usage = [np.array([[1.0], [1.0], [1.0], [3.0]]), np.array([[1.0], [1.0], [1.0], [1.0]]),
             np.array([[0.5], [0.5], [0.5], [0.5]])]
    data = ReplayInput(["a", "b", "c"], usage, [None] * 3, [u.max(0) for u in usage], 3600.0,
                       ("cpu",), ("cores",), ["pa", "pb", "pc"], [0.0] * 3)
    cfg = EvaluationConfig(resources=("cpu",), window=2, policies=("p", "oracle"))
    replays = {"p": Replay("p", [np.full((2, 1), 2.0)] * 3),
               "oracle": Replay("oracle", [np.array([[1.0], [3.0]]), np.array([[1.0], [1.0]]),
                                           np.array([[0.5], [0.5]])])}
    from ai4dl.evaluation.evaluate import EvaluationResult

    scores = score(data, replays, 2)
    return EvaluationResult(cfg, data, replays, scores, [], 0, None)


def test_workload_rows_by_hand():
    res = _toy_result()
    owners = [Owner("ml", "Job", "train"), Owner("ml", "Job", "train"),
              Owner("ml", "Deployment", "web", "pod name")]
    # requests: 4 cores for a, 2 for b, unknown for c
    rows, total = workload_rows(res, owners, [np.array([4.0]), np.array([2.0]),
                                              np.array([np.nan])])
    train, web = rows
    assert (train.key, train.pods, train.executions) == ("ml/Job/train", 2, 2)
    # scored: 2 samples per execution at 1 h each
    assert train.hours == pytest.approx(4.0)
    assert train.usage["cpu"] == pytest.approx(1 + 3 + 1 + 1)
    assert train.requested["cpu"] == pytest.approx(4 * 2 + 2 * 2)
    p = train.policies["p"]["cpu"]
    assert p.allocation == pytest.approx(8.0)
    assert p.fulfilment == pytest.approx(3 / 4)          # the 3.0 sample is above 2.0
    assert (p.short_windows, p.windows) == (1, 2)
    assert p.savings == pytest.approx(1 - 8 / 12)
    # no request known: no saving claimed, the usage still reported
    assert web.known_hours["cpu"] == 0 and math.isnan(web.policies["p"]["cpu"].savings)
    assert math.isnan(web.request_level("cpu"))
    # total: savings over the executions whose request is known only
    assert total.pods == 3 and total.hours == pytest.approx(6.0)
    assert total.policies["p"]["cpu"].savings == pytest.approx(1 - 8 / 12)
    assert total.policies["p"]["cpu"].allocation == pytest.approx(12.0)
    text = workload_table(rows, total, "p", ("cpu",), ("cores",))
    assert "ml/Job/train" in text and "**total**" in text and "+33.3 %" in text
    assert "known for 67 % of the hours" in totals_table(total, ("cpu",), ("cores",),
                                                          ["p", "oracle"])


def test_workload_table_top_sums_the_rest_in_the_total():
    res = _toy_result()
    owners = [Owner("ml", "Job", "a"), Owner("ml", "Job", "b"), Owner("ml", "Job", "c")]
    rows, total = workload_rows(res, owners, [np.array([4.0])] * 3)
    text = workload_table(rows, total, "p", ("cpu",), ("cores",), top=1)
    assert "… 2 more" in text and text.count("ml/Job/") == 1


def test_cross_fitted_merge_scores_every_execution_with_its_own_folds_fit():
    traces, _ = synthetic.generate(8, seed=2, config=synthetic.SyntheticConfig(n_features=2))
    cfg = EvaluationConfig(policies=("adaptive-max", "phase-headroom", "oracle"), window=20)
    res = run_cross_fitted(traces, cfg, 2, {"epochs": 3, "n_phases": 3})
    assert sorted(res.data.names) == sorted(e.name for e in traces)
    assert len(res.per_execution) == len(traces)
    # the merged scores are those of the concatenated replays
    again = score(res.data, res.replays, cfg.window, targets=cfg.targets,
                  per_target=res.per_target)
    for name in res.scores:
        for a, b in zip(res.scores[name], again[name]):
            assert a.vs_oracle_at == b.vs_oracle_at
    assert len(res.folds) == 2
    # a cold-start table per fold's own learned level
    assert {c.source for c in res.cold_start} >= {"static peak", "model @ 97 %"}
    merged = merge_results([res])
    assert merged.scores["oracle"][0].vs_oracle == pytest.approx(1.0)
