"""How make test's integration tier shares its tests between pytest-xdist workers
(tests/e2e_fixtures_node.py): a file at a time, the real node's files and the heavy training
runs as one unit, so that one worker holds the machine's one kubelet."""

from __future__ import annotations

from e2e_fixtures_node import BESIDE_THE_REAL_NODE, REAL_NODE_FILES, pytest_xdist_make_scheduler, \
    real_node_scope


def test_the_real_nodes_files_and_the_training_runs_are_one_unit_and_others_their_file():
    assert real_node_scope("tests/test_real_node.py::test_a") == REAL_NODE_FILES
    assert real_node_scope("tests/test_real_node_jobs.py::test_b[x]") == REAL_NODE_FILES
    for path in BESIDE_THE_REAL_NODE:
        assert real_node_scope(f"{path}::test_c") == REAL_NODE_FILES
    assert real_node_scope("tests/test_helm.py::test_d") == "tests/test_helm.py"
    assert real_node_scope("tests/test_operator_integration.py::T::test_e") \
        == "tests/test_operator_integration.py"


def test_only_loadfile_gets_the_scheduler(pytestconfig, monkeypatch):
    from xdist.scheduler import LoadFileScheduling

    for dist in ("load", "loadgroup", "no"):
        monkeypatch.setattr(pytestconfig.option, "dist", dist)
        assert pytest_xdist_make_scheduler(pytestconfig, None) is None
    monkeypatch.setattr(pytestconfig.option, "dist", "loadfile")
    monkeypatch.setattr(pytestconfig.option, "tx", ["2*popen"], raising=False)
    sched = pytest_xdist_make_scheduler(pytestconfig, None)
    assert isinstance(sched, LoadFileScheduling)
    assert sched._split_scope("tests/test_real_node_chart.py::t") == REAL_NODE_FILES
    assert sched._split_scope("tests/test_helm.py::t") == "tests/test_helm.py"
