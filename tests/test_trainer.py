"""The batch trainer's pure parts: held-out split, decision, refit-due, applied objects, pull
planning, restart and gap splitting, and the command line's flag errors (no I/O)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from ai4dl import trainer as T
from ai4dl.cli import main as cli_main
from ai4dl.crd import parse_duration
from ai4dl.sources.prometheus import PodRef
from ai4dl.sources.prometheus_history import (container_executions, metric_names,
                                              normalise_selector, plan_pull)
from ai4dl.traces import Execution


def ex(name, group, t0, n=50):
    return Execution(name, t0 + 15.0 * np.arange(n), np.ones((n, 2)), ("cpu", "memory"),
                     ("cores", "bytes"), group, 15.0)


def test_split_holds_out_the_most_recent_pods_never_splitting_one():
    execs = [ex(f"p{i}", f"g{i}", 1000.0 * i) for i in range(8)] + [ex("p0b", "g0", 99999.0)]
    train, held = T.split_recent(execs, 0.25)
    assert {e.group for e in held} == {"g0", "g7"}      # g0 ran last (its second run)
    assert not {e.group for e in train} & {e.group for e in held}
    with pytest.raises(T.TooFewExecutions, match="too few executions to fit"):
        T.split_recent(execs[:3], 0.25)


@pytest.mark.parametrize("cand, cur, force, want", [
    (1.10, 1.20, False, "applied"),
    (1.205, 1.20, False, "applied"),     # within the 1 % tolerance
    (1.22, 1.20, False, "rejected"),
    (1.22, 1.20, True, "forced"),
    (float("inf"), 1.2, False, "rejected"),
    (1.5, float("inf"), False, "applied"),
])
def test_decide(cand, cur, force, want):
    d = T.decide(cand, cur, 0.01, force)
    assert d.decision == want
    assert d.replaces_model == (want in ("applied", "forced"))
    if want == "rejected":
        assert "worse by more than the 1.0% tolerance" in d.reason


def test_decide_without_a_usable_current_model():
    assert T.decide(2.0, None).reason == "no current model"
    assert "features differ" in T.decide(2.0, None, current_problem="features differ").reason


def _pm(model=True, trained_at=None, conditions=(), max_age="7d"):
    status = {"conditions": list(conditions)}
    if trained_at:
        status["training"] = {"decision": "applied", "trainedAt": trained_at}
    return {"spec": {"model": {"x": 1} if model else None, "refit": {"maxAge": max_age}},
            "status": status}


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def test_refit_due():
    now = 1_800_000_000.0
    assert T.refit_due(_pm(model=False), now) == (True, "the PhaseModel has no model yet")
    assert T.refit_due(_pm(trained_at=None), now)[0]
    assert not T.refit_due(_pm(trained_at=iso(now - 3600)), now)[0]
    assert T.refit_due(_pm(trained_at=iso(now - 8 * 86400)), now)[0]
    assert T.refit_due(_pm(trained_at=iso(now - 7200), max_age="1h"), now)[0]
    rec = {"type": "RefitRecommended", "status": "True", "reason": "NoveltyAbove",
           "message": "30% novel", "lastTransitionTime": iso(now - 60)}
    due, why = T.refit_due(_pm(trained_at=iso(now - 3600), conditions=[rec]), now)
    assert due and "30% novel" in why
    # a recommendation older than the last run has been answered already
    assert not T.refit_due(_pm(trained_at=iso(now - 30), conditions=[rec]), now)[0]
    assert not T.refit_due(_pm(trained_at=iso(now - 3600),
                               conditions=[{**rec, "status": "False"}]), now)[0]


def test_parse_duration():
    assert parse_duration("14d") == 14 * 86400 and parse_duration("1d12h") == 129600
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration("2 days")


def test_model_apply_carries_both_models_and_respects_the_size_budget():
    new, old = {"a": [1.0] * 10}, {"b": [2.0] * 10}
    plan = T.model_apply("ml", "pm", new, old)
    assert plan.body["spec"] == {"model": new, "previousModel": old} and plan.kept_previous
    assert plan.body["metadata"] == {"name": "pm", "namespace": "ml"}
    budget = T.document_bytes(new) + T.document_bytes(old) - 1
    plan = T.model_apply("ml", "pm", new, old, max_bytes=budget)
    assert plan.body["spec"] == {"model": new} and "not kept" in plan.warning
    with pytest.raises(ValueError, match="over the"):
        T.model_apply("ml", "pm", new, None, max_bytes=5)


def test_rollback_swaps_and_needs_a_previous_model():
    body = T.rollback_apply("ml", "pm", {"spec": {"model": {"n": 2}, "previousModel": {"n": 1}}})
    assert body["spec"] == {"model": {"n": 1}, "previousModel": {"n": 2}}
    with pytest.raises(ValueError, match="no previous model"):
        T.rollback_apply("ml", "pm", {"spec": {"model": {"n": 2}}})


def test_status_record_drops_unknowns_and_non_finite_numbers():
    rec = T.TrainingRecord("rejected", "why", "2026-01-01T00:00:00Z", candidate_score=np.inf,
                           current_score=1.23456789, executions=5)
    status = T.status_apply("ml", "pm", rec)["status"]["training"]
    assert "candidateScore" not in status and status["currentScore"] == 1.234568
    json.dumps(status, allow_nan=False)


def test_plan_pull_bounds_points_per_series_and_per_answer():
    pods = {PodRef("ml", f"p{i}", "main"): 2 for i in range(1000)}
    start, step = 0.0, 15.0
    end = start + 86400 - step                                 # 5,760 points
    plan = plan_pull(pods, start, end, step, n_columns=4, max_points=11000,
                     max_answer_points=2_000_000, max_query_samples=20_000_000)
    assert all((c1 - c0) / step + 1 <= 11000 for c0, c1 in plan.chunks)
    assert sum((c1 - c0) / step + 1 for c0, c1 in plan.chunks) == 5760
    points = max((c1 - c0) / step + 1 for c0, c1 in plan.chunks)
    assert all(len(b) * 4 * points <= 2_000_000 for b in plan.batches)
    assert sum(len(b) for b in plan.batches) == 1000
    long = plan_pull(pods, 0.0, 14 * 86400.0, step, n_columns=4)
    assert all((c1 - c0) / step + 1 <= 11000 for c0, c1 in long.chunks)


def test_container_executions_split_at_restarts_and_long_gaps():
    n = 200
    t = 15.0 * np.arange(n)
    v = np.column_stack([np.linspace(1, 2, n), np.linspace(10, 20, n)])
    v[50:53] = np.nan            # short gap: interpolated
    v[120:140] = np.nan          # 20 steps: a split
    start = np.where(np.arange(n) < 80, 100.0, 2000.0)   # restart at 80 (new container)
    resets = np.zeros(n)
    resets[170:174] = 1          # counter reset at 170
    out = container_executions(PodRef("ml", "p", "main"), t, v, ("cpu", "memory"),
                               ("cores", "bytes"), 15.0, start, resets)
    assert [e.name for e in out] == ["ml/p/main", "ml/p/main~2", "ml/p/main~2#2",
                                     "ml/p/main~3"]
    assert [len(e) for e in out] == [80, 40, 30, 30]
    assert {e.group for e in out} == {"ml/p"} and np.isfinite(out[0].values).all()


def test_selector_and_metric_names():
    assert normalise_selector(' {namespace="ml"} ') == 'namespace="ml"'
    with pytest.raises(ValueError, match="selector is empty"):
        normalise_selector("{}")
    from ai4dl.crd import default_features
    from ai4dl.sources.prometheus import FeatureQuery

    fqs = [FeatureQuery(f.name, f.query) for f in default_features()]
    assert metric_names(fqs) == ["container_cpu_usage_seconds_total",
                                 "container_memory_working_set_bytes"]
    assert metric_names([FeatureQuery("x", "sum(foo) + {selector}")]) is None


@pytest.mark.parametrize("argv, message", [
    (["train", "--prometheus", "http://p:9090", "--phasemodel", "ml/pm"], "needs --selector"),
    (["train", "--prometheus", "http://p:9090", "--selector", "a=\"b\""], "needs --phasemodel"),
    (["train", "x.csv", "--force"], "--force needs --phasemodel"),
    (["train", "--phasemodel", "ml/pm"], "needs TRACES or --prometheus"),
    (["train", "--prometheus", "http://p:9090", "--selector", "a=\"b\"", "--phasemodel",
      "ML/Bad_Name"], "--phasemodel expects NAMESPACE/NAME"),
    (["train", "--prometheus", "http://p:9090", "--selector", "a=\"b\"", "--phasemodel",
      "ml/pm", "--since", "2 weeks"], "--since: invalid duration"),
    (["train"], "give TRACES, or --prometheus"),
])
def test_flag_errors_are_one_line_exit_2(argv, message, capsys):
    assert cli_main(argv + ["--log-format", "text"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ai4dl: error: ") and message in err[0]


def test_device_defaults_to_auto():
    from ai4dl.cli import build_parser

    assert build_parser().parse_args(["train", "x.csv"]).device == "auto"
