"""How make test's integration tier shares its tests between pytest-xdist workers
(tests/e2e_fixtures_node.py): a file at a time, the real node's files and the heavy training
runs as one unit, so that one worker holds the machine's one kubelet; and how the workers'
figures tables still reach the terminal (tests/e2e_fixtures_k8s.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from e2e_fixtures_k8s import WORKER_REPORTS
from e2e_fixtures_node import (BESIDE_THE_REAL_NODE, REAL_NODE_FILES,
                               pytest_collection_modifyitems, pytest_xdist_make_scheduler,
                               real_node_scope)


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


def test_a_test_of_this_folder_on_the_real_node_elsewhere_is_refused_at_collection(tmp_path):
    here = Path(__file__).resolve().parent

    def item(path: Path, fixtures=("real_node", "kube_cluster")):
        return SimpleNamespace(path=path, fixturenames=list(fixtures), nodeid=f"{path.name}::t")

    pytest_collection_modifyitems([item(here / "test_real_node_new.py"),
                                   item(here / "test_helm.py", fixtures=("kube_cluster",)),
                                   item(tmp_path / "test_child.py")])   # another session's
    with pytest.raises(pytest.UsageError, match=r"test_helm\.py::t runs on the real node"):
        pytest_collection_modifyitems([item(here / "test_helm.py")])


_TABLES = '''
from e2e_fixtures_operator import write_report

def test_one(request):
    write_report(request, "a first table", "| a | b |", [(1, 2)])

def test_two(request):
    write_report(request, "a second table", "| c | d |", [(3, 4)])
'''


def test_the_workers_figures_tables_are_printed_by_the_controller(tmp_path):
    """write_report's tables reach the terminal from pytest-xdist's workers too (a worker's own
    output is shown nowhere), and their folder is removed after the session."""
    (tmp_path / "test_tables.py").write_text(_TABLES)
    here = Path(__file__).resolve().parent
    env = {**os.environ, "TMPDIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(here.parent / "operator"), str(here)])}
    env.pop(WORKER_REPORTS, None)
    env.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "e2e_fixtures_k8s", "-n", "2", "--rootdir", str(tmp_path),
                          str(tmp_path / "test_tables.py")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    for title, row in (("a first table", "| 1 | 2 |"), ("a second table", "| 3 | 4 |")):
        assert f"[{title}]" in run.stdout and row in run.stdout, run.stdout[-3000:]
    assert not list(tmp_path.glob("ai4dl-reports-*"))
