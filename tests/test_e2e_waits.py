"""The integration tests' waits on the operator (tests/e2e_fixtures_operator.Operator): their
deadlines follow the windows the operator logs (lateness and duration), and a wait that runs
out says why. On a log file, without an API server."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from e2e_fixtures_operator import Operator


def line(ns: str, start: float, late: float, took: float | None, at: float | None = None) -> str:
    stamp = datetime.fromtimestamp(time.time() if at is None else at)
    tail = f", took {took:.2f} s" if took is not None else ""
    return (f"{stamp:%Y-%m-%d %H:%M:%S},{stamp.microsecond // 1000:03d} INFO ai4dl.operator: "
            f"PhaseModel {ns}/pm window {start:.1f}: 3 pods, 2 resized, skipped {{}}; "
            f"started {late:.2f} s after due{tail}\n")


@pytest.fixture()
def op(tmp_path) -> Operator:
    o = Operator(Path("kubeconfig"), "http://prometheus", tmp_path / "operator.log")
    o.started_at = time.time() - 60            # as if it had started a minute ago
    return o


def test_windows_are_read_from_the_log_with_lateness_and_duration(op):
    op.log.write_text(line("a", 1000.0, 0.31, 1.25, at=op.started_at + 1)
                      + "2026-11-27 17:20:02,123 INFO kopf.objects: something else\n"
                      + line("b", 1010.0, 2.0, None, at=op.started_at + 2))   # older operator
    ws = op.windows()
    assert [(w.namespace, w.start, w.late, w.took) for w in ws] == \
        [("a", 1000.0, 0.31, 1.25), ("b", 1010.0, 2.0, 0.0)]
    assert [w.namespace for w in op.windows("b")] == ["b"]
    assert abs(ws[0].logged - (op.started_at + 1)) < 0.01


def test_a_wait_that_runs_out_says_why(op):
    op.log.write_text(line("a", 1000.0, 6.5, 9.8, at=op.started_at + 1))
    with pytest.raises(AssertionError) as err:
        op.wait_for(lambda: None, 0.3, "the pods resized", namespace="b", interval=0.05)
    msg = str(err.value)
    assert "the pods resized" in msg and "0 window(s) of b/pm logged" in msg
    assert "last windows took 9.8 s and started 6.5 s after due, against a 10 s window" in msg
    assert "served 1 PhaseModel(s): ['a/pm']" in msg and "operator log tail" in msg


def test_a_slow_operator_pushes_the_deadline_back(op):
    """Windows logged during the wait, late and long, extend it by their lateness and
    duration (up to ``cap`` times the timeout); an operator logging nothing does not."""
    op.log.write_text("")
    t0 = time.time()
    with pytest.raises(AssertionError):
        op.wait_for(lambda: None, 0.4, "nothing", interval=0.05)
    quick = time.time() - t0
    assert quick < 1.0

    calls = []

    def slow():
        calls.append(1)
        if len(calls) == 3:     # logged during the wait
            op.log.write_text(line("a", 1000.0, 0.5, 0.7))    # 1.2 s of measured slowness
        return None
    t0 = time.time()
    with pytest.raises(AssertionError) as err:
        op.wait_for(slow, 0.4, "nothing", interval=0.05, cap=10)
    assert 1.5 < time.time() - t0 < 3.0, time.time() - t0
    assert "+ 1.2 s of the operator's measured slowness" in str(err.value)
