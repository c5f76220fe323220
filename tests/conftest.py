"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real trace files (``$AI4DL_DATA``, default ``<repo>/../shared/data``)."""
    path = Path(os.environ.get("AI4DL_DATA", REPO_ROOT.parent / "shared" / "data"))
    if not path.is_dir():
        pytest.skip(f"real trace data not found at {path} (set AI4DL_DATA to its folder)")
    return path


@pytest.fixture(scope="module")
def results_script(request):
    """The docs/results script named by the test module's ``RESULTS_SCRIPT``, loaded as a
    module (the recipe for a file; registered while the module's tests run, since its
    dataclasses look their module up). Its folder is on sys.path while it loads, as when it
    runs: the scripts import their siblings."""
    import importlib.util
    import sys

    folder = REPO_ROOT / "docs" / "results"
    path = folder / request.module.RESULTS_SCRIPT
    spec = importlib.util.spec_from_file_location(f"results_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    sys.path.insert(0, str(folder))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(folder))
    yield mod
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="session")
def synthetic_train():
    """Synthetic DL-like executions with ground-truth phases (training side)."""
    from ai4dl.method import synthetic

    return synthetic.generate(24, seed=11)


@pytest.fixture(scope="session")
def synthetic_test():
    from ai4dl.method import synthetic

    return synthetic.generate(8, seed=12)


@pytest.fixture(scope="session")
def fitted_model(synthetic_train):
    """One PhaseModel fitted once per session (k chosen automatically)."""
    from ai4dl.method.model import PhaseModel

    traces, _ = synthetic_train
    return PhaseModel(random_state=3, epochs=40).fit(traces)


# Kubernetes e2e fixtures (kube_cluster, k8s_namespace, fake_kubelet): tests/e2e_fixtures_k8s.py;
# the opt-in real node (real_node, node_pods; AI4DL_REAL_NODE=1): tests/e2e_fixtures_node.py
pytest_plugins = ["e2e_fixtures_k8s", "e2e_fixtures_prom", "e2e_fixtures_node"]
