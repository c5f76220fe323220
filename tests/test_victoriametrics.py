"""Past one Prometheus: the trainer's history pull, ``ai4dl evaluate --prometheus`` and the
operator against VictoriaMetrics (single node, the Debian package ``victoria-metrics``), with the
same real trace history as the Prometheus tests: the same executions and figures within
rounding.

History: the AI4DL sample trace ``sample-vr.csv`` (a real DL training container) cut into six
pods of two Jobs, with kube-state-metrics' owners and requests, written into a real Prometheus
(promtool blocks) and into VictoriaMetrics (its Prometheus-text import) from the same series.

FakeKubelet, not the real node: the store (VictoriaMetrics against Prometheus) is tested, with
trace-driven usage.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ai4dl.cli import main as cli_main
from ai4dl.crd import GROUP, OPT_IN_LABEL, PLURAL, VERSION
from ai4dl.method.traces import Execution
from e2e_fixtures_operator import crd, operator_kubeconfig  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
STEP = 15.0
NS = "vm"
PODS = {"train-x7k2p": "train", "train-b4mzq": "train", "train-q9wtd": "train",
        "tune-x7k2p": "tune", "tune-b4mzq": "tune", "tune-q9wtd": "tune"}


@pytest.fixture(scope="module")
def victoria_metrics_binary():
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))
    from e2e.victoriametrics.server import find_victoria_metrics

    try:
        return find_victoria_metrics()
    except (RuntimeError, FileNotFoundError) as err:
        if __import__("os").environ.get("CI"):
            raise
        pytest.skip(f"VictoriaMetrics not available: {err}")


@pytest.fixture(scope="module")
def both(shared_data, prometheus_binary, victoria_metrics_binary, tmp_path_factory):
    """(Prometheus URL, VictoriaMetrics URL, runs): one history in both stores."""
    from ai4dl.io import load_traces
    from e2e.prometheus.backfill import backfill, history_server, promtool_next_to, text_lines
    from e2e.victoriametrics.server import VictoriaMetricsServer

    trace = load_traces(shared_data / "ai4dl_samples" / "sample-vr.csv")[0]
    end = time.time() // STEP * STEP - 3600
    runs = {}
    for i, pod in enumerate(PODS):
        piece = trace.slice(i * 300, i * 300 + 360)
        runs[(NS, pod, "main")] = [Execution(pod, end - 20 * 3600 + i * 3 * 3600
                                             + STEP * np.arange(len(piece)), piece.values,
                                             piece.features, piece.units, group=pod, step=STEP)]
    kube_state = dict(pod_owners={(NS, p): ("Job", j) for p, j in PODS.items()},
                      requests={(NS, p, "main"): {"cpu": 16.0, "memory": 19327352832.0}
                                for p in PODS},
                      # the trainer keeps the pods a PhaseModel serves (kube_pod_labels)
                      # (one pod not opted in)
                      pod_labels={(NS, p): {OPT_IN_LABEL: str(p != "tune-q9wtd").lower(),
                                            "app": j} for p, j in PODS.items()})
    prom = history_server(workdir=tmp_path_factory.mktemp("prom-vm"), targets=[],
                          scrape_interval="15s", binary=prometheus_binary)
    labels = kube_state.pop("pod_labels")
    backfill(runs, prom.storage_path, promtool_next_to(prometheus_binary), pod_labels=labels,
             **kube_state)
    prom.start()
    vm = VictoriaMetricsServer([], workdir=tmp_path_factory.mktemp("vm"),
                               scrape_interval="15s").start()
    vm.import_series(text_lines(runs, labels, **kube_state))
    yield prom.url, vm.url, runs
    prom.stop()
    vm.stop()


def pull(url):
    from ai4dl.sources.prometheus import PrometheusSource
    from ai4dl.sources.prometheus_types import default_feature_queries
    from ai4dl.sources.prometheus_history import PrometheusHistory

    with PrometheusSource(url) as src:
        hist = PrometheusHistory(src, default_feature_queries(("cpu", "memory")),
                                 f'namespace="{NS}"', STEP)
        now = time.time()
        return hist.executions(now - 2 * 86400, now)


def test_history_pull_gives_the_same_executions(both):
    prom, vm, runs = both
    a, b = pull(prom), pull(vm)
    assert {e.name for e in a.executions} == {e.name for e in b.executions} == \
        {f"{NS}/{p}/main" for p in PODS}
    by_name = {e.name: e for e in b.executions}
    began = {f"{ns}/{pod}/{ctr}": float(run.times[0]) for (ns, pod, ctr), (run,) in runs.items()}
    for ea in a.executions:
        eb = by_name[ea.name]
        # the same grid points (the trailing lookback repeats where the stores differ are
        # not measurements and are left out by the pull) and the same values: each run's
        # first minute kept, Prometheus's young rates read over the container's age (issue 42)
        np.testing.assert_array_equal(ea.times, eb.times)
        assert ea.times[0] - began[ea.name] < 60
        np.testing.assert_allclose(ea.values, eb.values, rtol=1e-5, atol=1e-9)


def test_a_young_containers_rate_undiluted_on_prometheus_is_what_victoriametrics_reads(both):
    """In a container's first minute Prometheus's rate() divides what it used by the whole
    minute, VictoriaMetrics by the span it has (issue 42: the real node's cpu start read low).
    The probe tells the two apart without reading a series, and the operator's correction
    makes Prometheus's young readings VictoriaMetrics's."""
    from ai4dl.sources.prometheus import PrometheusSource, young_rates_diluted
    from ai4dl.sources.prometheus_types import PodRef, default_feature_queries
    from ai4dl.sources.young_rates import feature_rate_ranges, undilute

    prom, vm, runs = both
    features = default_feature_queries(("cpu", "memory"))
    ranges = feature_rate_ranges([f.promql for f in features], "1m")
    with PrometheusSource(prom) as p, PrometheusSource(vm) as v:
        assert young_rates_diluted(p) is True and young_rates_diluted(v) is False
        for (ns, pod, ctr), (run,) in runs.items():
            began = float(run.times[0])
            ref = PodRef(ns, pod, ctr)
            a = p.fetch(features, [ref], began + STEP, began + 150, STEP)[ref]
            b = v.fetch(features, [ref], began + STEP, began + 150, STEP)[ref]
            young = a.times - began < 60
            assert young.sum() == 3 and np.isfinite(a.values[:, 0]).all()
            assert (a.values[young, 0] < 0.8 * b.values[young, 0]).all()      # read low
            fixed = undilute(a.values, a.times, began, ranges, STEP)
            np.testing.assert_allclose(fixed[:, 0], b.values[:, 0], rtol=1e-6)
            np.testing.assert_array_equal(fixed[~young], a.values[~young])


def test_replay_figures_match_within_rounding(both, tmp_path):
    prom, vm, _ = both
    docs = []
    for url in (prom, vm):
        out = tmp_path / f"{len(docs)}.json"
        assert cli_main(["-q", "evaluate", "--prometheus", url, "--selector",
                         f'namespace="{NS}"', "--since", "2d", "--epochs", "10",
                         "--prometheus-retries", "0", "--json", str(out)]) == 0
        docs.append(json.loads(out.read_text()))
    a, b = docs
    rows_a = {r["workload"]: r for r in a["workloads"]["rows"]}
    rows_b = {r["workload"]: r for r in b["workloads"]["rows"]}
    assert set(rows_a) == set(rows_b) == {f"{NS}/Job/train", f"{NS}/Job/tune"}
    assert a["workloads"]["containers_with_requests"] == \
        b["workloads"]["containers_with_requests"] == len(PODS)
    for k in rows_a:
        ra, rb = rows_a[k], rows_b[k]
        assert ra["requested"]["cpu"] == pytest.approx(rb["requested"]["cpu"], rel=1e-6)
        for r in ("cpu", "memory"):
            assert ra["usage"][r] == pytest.approx(rb["usage"][r], rel=1e-5)
            for p in ra["policies"]:
                assert ra["policies"][p][r]["allocation"] == \
                    pytest.approx(rb["policies"][p][r]["allocation"], rel=1e-4), (k, p, r)
    # Every policy's figures at matched fulfilment, auto's fitted choice included.
    print("\n[the same history: Prometheus vs VictoriaMetrics, allocation ÷ oracle at matched 97 %]")
    print("| policy | resource | Prometheus | VictoriaMetrics | difference |\n|---|---|---|---|---|")
    for p in a["policies"]:
        for r in ("cpu", "memory"):
            va = a["scores"][p][r]["vs_oracle_at"]["0.97"]
            vb = b["scores"][p][r]["vs_oracle_at"]["0.97"]
            print(f"| {p} | {r} | {va:.3f} | {vb:.3f} | {100 * (vb / va - 1):+.2f} % |")
            assert va == pytest.approx(vb, rel=1e-3), (p, r)


def test_operator_resizes_from_victoria_metrics(kube_cluster, k8s_namespace, fake_kubelet,
                                                trace_exporter, victoria_metrics_binary,
                                                operator_kubeconfig, crd, tmp_path,  # noqa: F811
                                                synthetic_jobs_doc):
    """The operator's live windows from VictoriaMetrics scraping the pods' cAdvisor metrics
    (the exporter, as in tests/test_operator_integration.py): pods resized within two windows,
    the PhaseModel Ready."""
    from e2e.victoriametrics.server import VictoriaMetricsServer
    from e2e_fixtures_operator import Operator, wait_for
    from test_operator_integration import (SPEED, STEP, WINDOW, condition, make_phasemodel,
                                           read_pm, requests_of, start_pods)

    from ai4dl.method import synthetic

    doc = copy.deepcopy(synthetic_jobs_doc)        # the session's fit (tests/conftest.py)
    # played SPEED times faster: one trace step is one cluster second, the spec's step (the
    # operator requires the model's step to equal it)
    doc["stepSeconds"] = float(STEP)
    jobs = synthetic.generate(6, seed=33, config=synthetic.SyntheticConfig(
        n_features=2, epochs=(10, 12)))
    jobs = (list(jobs[0]), jobs[1])
    exporter = trace_exporter({}, speed=SPEED, loop=True)
    vm = VictoriaMetricsServer([exporter.url], workdir=tmp_path / "vm",
                               scrape_interval="1s").start()
    op = Operator(operator_kubeconfig, vm.url, tmp_path / "operator.log").start()
    ns = k8s_namespace
    try:
        start_pods(fake_kubelet, exporter, jobs, ns, ["v1", "v2"])
        make_phasemodel(kube_cluster, ns, "pm", doc)
        before = requests_of(kube_cluster, ns, "v1")
        try:
            wait_for(lambda: all(requests_of(kube_cluster, ns, p) != before
                                 for p in ("v1", "v2")), 2 * WINDOW + 15, what="v1, v2 resized")
        except AssertionError:
            print(op.tail())
            raise
        pm = wait_for(lambda: (lambda o: o if (o.get("status") or {}).get("podsTracked") == 2
                               else None)(read_pm(kube_cluster, ns, "pm")), WINDOW + 5,
                      what="status podsTracked 2")
        assert condition(pm, "Ready")["status"] == "True"
    finally:
        op.stop()
        vm.stop()


def test_trainer_refits_the_same_from_either_store(both, kube_cluster, k8s_namespace,
                                                    crd):  # noqa: F811
    """``ai4dl train --prometheus ... --phasemodel NS/NAME`` from each store: the same pods kept
    (kube_pod_labels: the opted-in ones), the same samples, the same score."""
    from kubernetes import client

    prom, vm, _ = both
    api = client.CustomObjectsApi(kube_cluster.api_client)
    got = {}
    for store, url in (("prom", prom), ("vm", vm)):
        name = f"pm-{store}"
        api.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
            "metadata": {"name": name},
            "spec": {"stepSeconds": int(STEP), "windowSeconds": 600}})
        assert cli_main(["train", "--prometheus", url, "--selector", f'namespace="{NS}"',
                         "--since", "2d", "--phasemodel", f"{k8s_namespace}/{name}",
                         "--kubeconfig", str(kube_cluster.kubeconfig), "--epochs", "10",
                         "--prometheus-retries", "0",
                         "--log-format", "json"]) == 0
        got[store] = api.get_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PLURAL,
                                                      name)["status"]["training"]
    a, b = got["prom"], got["vm"]
    assert a["decision"] == b["decision"] == "applied"
    assert "5 of 6 containers served" in a["source"] and "5 of 6 containers served" in b["source"]
    assert (a["executions"], a["samples"], a["heldOutExecutions"]) == \
        (b["executions"], b["samples"], b["heldOutExecutions"])
    assert a["candidateScore"] == pytest.approx(b["candidateScore"], rel=1e-3)
