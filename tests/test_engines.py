"""The engines a cluster's replay runs its pieces on (ai4dl.cli.engines): in this process, in
worker processes, on a Dask LocalCluster of worker processes — every result back with its
index, and an error in a worker back as the same one-line error (issue 44, item 5)."""

from __future__ import annotations

import numpy as np
import pytest

from ai4dl.cli import engines
from ai4dl.cli.replay_cluster import PieceTask, replay_piece
from ai4dl.errors import Ai4dlError
from ai4dl.evaluation.evaluate import EvaluationConfig
from ai4dl.evaluation.partitioned import factor_grid
from ai4dl.evaluation.workload_report import Owner
from ai4dl.sources.prometheus_types import PodRef, PrometheusUnavailable, default_feature_queries

GONE = "http://127.0.0.1:9"       # nothing listens on the discard port


def _task_on(url: str) -> PieceTask:
    ref = PodRef("ml", "train-abcde", "main")
    return PieceTask(url, 2.0, 0, 1, 'namespace="ml"', tuple(default_feature_queries()),
                     ("cores", "bytes"), 15.0, 0.0, 3600.0, 4.0, {ref: 1},
                     {("ml", "train-abcde"): Owner("ml", "Job", "train")}, {},
                     EvaluationConfig(), None, factor_grid())


@pytest.mark.parametrize("name,workers", [("local", 1), ("local", 2), ("dask", 2)])
def test_every_result_comes_back_with_its_index(name, workers):
    tasks = [-3, 1, -4, 1, -5, 9]
    with engines.engine(name, workers) as run:
        got = dict(run(abs, tasks))
    assert got == {i: abs(t) for i, t in enumerate(tasks)}


@pytest.mark.parametrize("name,workers", [("local", 1), ("local", 2), ("dask", 2)])
def test_a_prometheus_gone_in_a_worker_is_the_same_error_here(name, workers):
    with engines.engine(name, workers) as run:
        with pytest.raises(PrometheusUnavailable) as err:
            list(run(replay_piece, [_task_on(GONE)]))
    assert str(err.value).startswith(f"Prometheus at {GONE} unavailable")
    assert err.value.url == GONE and "\n" not in str(err.value)


def test_engine_flags_are_one_line_errors(monkeypatch):
    for kw, msg in ((dict(name="spark"), "--engine must be one of local, dask"),
                    (dict(name="local", workers=0), "--workers must be at least 1"),
                    (dict(name="local", scheduler="tcp://x:8786"), "give --engine dask")):
        with pytest.raises(Ai4dlError, match=msg):
            with engines.engine(**kw):
                pass
    monkeypatch.setattr(engines, "CONNECT_TIMEOUT", "2s")
    with pytest.raises(Ai4dlError, match=r"^Dask at tcp://127.0.0.1:9: "):
        with engines.engine("dask", 1, "tcp://127.0.0.1:9"):
            pass


def test_a_piece_with_nothing_to_replay_is_none():
    """A piece whose containers have no samples in range sums to nothing (None), which the
    merge skips: checked without a server by giving the pull no container."""
    task = _task_on(GONE)
    empty = PieceTask(*[getattr(task, f) if f != "containers" else {}
                        for f in task.__dataclass_fields__])
    assert replay_piece(empty) is None
    assert np.array_equal(task.grid, factor_grid())


def test_engine_flags_without_prometheus_are_refused_before_any_input(tmp_path, capsys):
    from ai4dl.cli import main as cli_main

    for args, msg in ((["evaluate", str(tmp_path / "none.csv"), "--engine", "local"],
                       "--engine replays a Prometheus's history: give --prometheus URL"),
                      (["evaluate", str(tmp_path / "none.csv"), "--scheduler", "tcp://x:1"],
                       "--scheduler needs --engine dask"),
                      (["evaluate", str(tmp_path / "none.csv"), "--phasemodel-file", "pm.yaml"],
                       "--phasemodel-file needs --prometheus URL")):
        assert cli_main(args) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"ai4dl: error: {msg}"], err
