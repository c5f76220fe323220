"""The real-node table's VPA replica (``e2e.node.jobs.VpaUpdater``), one function without a
node: the size it gives a new pod (VPA's admission controller) and the recommender it keeps
across a job's runs."""

from __future__ import annotations

import numpy as np

from ai4dl.method.traces import Execution
from e2e.node import jobs as J


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
