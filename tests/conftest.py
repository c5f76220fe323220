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


@pytest.fixture(scope="session")
def synthetic_jobs_doc():
    """A small model of synthetic DL jobs (cpu cores, memory bytes; 15 s trace step) as its
    PhaseModel document, fitted once per session: the operator tests' model (and the trainer's
    poor current one). Modules take a deep copy (the fit takes seconds; each module's own copy
    is as if it had fitted it)."""
    import json

    from ai4dl.method import synthetic
    from ai4dl.method.model import PhaseModel

    cfg = synthetic.SyntheticConfig(n_features=2)
    traces, _ = synthetic.generate(30, seed=21, config=cfg)
    model = PhaseModel(n_phases=4, epochs=15, random_state=0).fit(traces)
    return json.loads(model.to_document().model_dump_json(by_alias=True, exclude_none=True))


# Kubernetes e2e fixtures (kube_cluster, k8s_namespace, fake_kubelet): tests/e2e_fixtures_k8s.py;
# the opt-in real node (real_node, node_pods; AI4DL_REAL_NODE=1): tests/e2e_fixtures_node.py
pytest_plugins = ["e2e_fixtures_k8s", "e2e_fixtures_prom", "e2e_fixtures_node"]


#: What the suite's harnesses make in the machine's temporary folder; none may outlive it.
TEMP_PREFIXES = ("ai4dl-webhook-", "ai4dl-workloads-", "ai4dl-ckpt-", "ai4dl-cp-",
                 "ai4dl-bench-")


def _our_temp_entries() -> set[str]:
    import tempfile

    folder = Path(tempfile.gettempdir())
    return {p.name for p in folder.iterdir() if p.name.startswith(TEMP_PREFIXES)}


def _child_processes() -> dict[int, str]:
    """The processes this one started that still run (from /proc: pid -> command line), but
    multiprocessing's own helpers, which live until the interpreter exits."""
    me, out = os.getpid(), {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if int(fields.get("PPid", "0")) == me and not fields.get("State", "").startswith("Z") \
                and "from multiprocessing" not in cmdline:
            out[int(entry.name)] = cmdline
    return out


@pytest.fixture(scope="session", autouse=True)
def _suite_leaves_nothing(tmp_path_factory):
    """After the last test (its session fixtures are torn down first: this one is set up
    before them): no process the suite started still runs, the real node's teardown left no
    process, mount, cgroup or file, and nothing the harnesses made in the temporary folder is
    left (a leak there is a private key, a checkpoint, a log).

    The session's temporary folder is its own (TMPDIR for every process it starts): a second
    pytest session on the machine cannot be taken for a leak of this one."""
    import multiprocessing.util
    import shutil
    import tempfile

    tmp_path_factory.getbasetemp()        # pytest's own folders stay where users look for them
    multiprocessing.util.get_temp_dir()   # and multiprocessing's, which it removes at exit
    root = tempfile.mkdtemp(prefix="ai4dl-suite-")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", root)
        mp.setattr(tempfile, "tempdir", root)
        try:
            yield
        finally:
            left = sorted(_our_temp_entries())
            shutil.rmtree(root, ignore_errors=True)
    from e2e_fixtures_node import NODE_LEFTOVERS

    procs = _child_processes()
    problems = [f"the real node left {NODE_LEFTOVERS}"] if NODE_LEFTOVERS else []
    if left:
        problems.append(f"left in the temporary folder: {left[:8]}")
    if procs:
        problems.append("still running: " + "; ".join(f"{pid} {cmd[:120]}"
                                                      for pid, cmd in sorted(procs.items())))
    assert not problems, "the suite leaked: " + " | ".join(problems)
