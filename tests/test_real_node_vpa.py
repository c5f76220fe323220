"""The real-node table's VPA replica (``e2e.node.jobs.VpaUpdater``), one function without a
node: the size it gives a new pod (VPA's admission controller) and the recommender it keeps
across a job's runs; and the same history pre-loaded into the operator's workload profiles."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ai4dl.crd import GROUP, PLURAL, VERSION
from ai4dl.method.traces import Execution
from e2e.node import jobs as J
from e2e_fixtures_operator import crd  # noqa: F401


def test_a_new_pod_is_sized_from_the_history_only_once_there_is_one():
    blind = J.VpaUpdater(None, "http://127.0.0.1:9", "ns", ["cnn"])
    assert blind.target("cnn", 1000.0) is None      # VPA has no recommendation yet
    t = np.arange(0.0, 600.0, 5.0)
    run = Execution("cnn", t, np.column_stack([np.full(len(t), 0.5),
                                               np.full(len(t), 900 * 2.0 ** 20)]),
                    ("cpu", "memory"), ("cores", "bytes"))
    seen = J.VpaUpdater(None, "http://127.0.0.1:9", "ns", ["cnn"], history={"cnn": [run]})
    got = seen.target("cnn", 1000.0)
    assert got is not None and got["memory"].endswith("Mi") and got["cpu"].endswith("m")
    assert int(got["memory"][:-2]) > 900            # the peak and VPA's margin
    # the next run's pod, of its own name, goes on with its workload's recommender
    again = J.VpaUpdater(None, "http://127.0.0.1:9", "ns", ["cnn-2"], recommenders=seen.recs,
                         workloads={"cnn-2": "cnn"})
    assert again.target("cnn-2", 1000.0) == got


def test_a_jobs_runs_are_pods_of_their_own_names_in_one_workload():
    from dataclasses import replace
    from pathlib import Path

    run2 = replace(J.DEFAULT_JOBS[0], name="cnn-2", workload="cnn")
    meta = J.job_manifest(run2, "ns", "node", Path("/tmp"))["metadata"]
    assert meta["name"] == "cnn-2"
    assert meta["labels"]["ai4dl.io/workload"] == meta["labels"]["job"] == "cnn"


@pytest.mark.integration
def test_the_operators_profiles_start_with_the_static_runs_as_the_vpa_replica_does(
        kube_cluster, k8s_namespace, crd, tmp_path):  # noqa: F811
    """The real-node table pre-loads the operator's workload profiles with the static runs
    (``preload_profiles``: the trainer's batch fill's functions), so that both history-keeping
    policies start from the same runs: one sealed WorkloadProfile per job, keyed as the
    operator keys a pod with the job's ``ai4dl.io/workload`` label, one run per static run."""
    from kubernetes import client

    from ai4dl.controller.podstate import StateKey
    from ai4dl.controller.profiles import ProfileStore

    custom = client.CustomObjectsApi(kube_cluster.api_client)
    custom.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PLURAL,
                                           J.phasemodel_body("pm", "auto", None))
    t = np.arange(0.0, 120.0, 5.0)
    t0 = time.time() - 3600.0

    def run(pod: str, peak_mib: float) -> Execution:
        mem = np.linspace(300.0, peak_mib, len(t)) * 2.0 ** 20
        return Execution(pod, t0 + t, np.column_stack([np.full(len(t), 0.5), mem]),
                         ("cpu", "memory"), ("cores", "bytes"), step=5.0,
                         meta={"namespace": "jobs-static", "pod": pod, "container": "main"})

    history = {"cnn": [run("cnn-1", 900.0), run("cnn-2", 1000.0)],
               "transformer": [run("transformer-1", 800.0)]}
    key = tmp_path / "state-key"
    key.write_bytes(b"k" * 32)
    assert J.preload_profiles(kube_cluster.api_client, k8s_namespace, history, key) == 2
    store = ProfileStore(custom, k8s_namespace, "pm", StateKey(b"k" * 32))
    cnn = store.read("Label/cnn")
    assert cnn.problem is None and cnn.containers["main"].executions == 2
    level = float(np.nanmax(cnn.containers["main"].hold(time.time()).levels))
    assert level == pytest.approx(1000.0 * 2.0 ** 20, rel=1e-4)
    assert store.read("Label/transformer").containers["main"].executions == 1
