"""``ai4dl evaluate --prometheus``: the replay of what a Prometheus has seen, against the real
Prometheus server backfilled (promtool) with a real trace, and kube-state-metrics' series.

History: the AI4DL sample trace ``sample-vr.csv`` (a real DL training container: cpu cores and
memory bytes, at 15 s; its pod requested 16 cores and 18 GiB) cut into nine pods of namespace
``replay``, written as cAdvisor series over the last day and a half: a Job of three pods, a
Deployment of two (through its ReplicaSet), a PyTorchJob of two, all with ``kube_pod_owner`` and
their requests; and a StatefulSet of two that kube-state-metrics does not know (owner from the
pod names, requests unknown).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ai4dl.cli import main as cli_main
from ai4dl.crd import GROUP, PLURAL, VERSION
from ai4dl.method.traces import Execution
from e2e_fixtures_operator import crd  # noqa: F401

pytestmark = pytest.mark.integration

STEP = 15.0
NS = "replay"
PODS = {"resnet-x7k2p": ("Job", "resnet"), "resnet-b4mzq": ("Job", "resnet"),
        "resnet-q9wtd": ("Job", "resnet"),
        "serve-7d9f8c6b5-x2kzq": ("ReplicaSet", "serve-7d9f8c6b5"),
        "serve-7d9f8c6b5-fghjk": ("ReplicaSet", "serve-7d9f8c6b5"),
        "bert-master-0": ("PyTorchJob", "bert"), "bert-worker-0": ("PyTorchJob", "bert"),
        "db-0": None, "db-1": None}
CPU_REQUEST, MEMORY_REQUEST = 16.0, 19327352832.0     # the trace's own cpu.num.cores, mem.limit


def _at(ex: Execution, t0: float, name: str) -> Execution:
    return Execution(name, t0 + STEP * np.arange(len(ex)), ex.values, ex.features, ex.units,
                     group=name, step=STEP)


@pytest.fixture(scope="module")
def replay_history(shared_data, prometheus_binary, tmp_path_factory):
    """(Prometheus URL, a function that backfills the same history into another storage
    folder, the runs written)."""
    sys.path.append(str(Path(__file__).resolve().parent.parent))
    from ai4dl.io import load_traces
    from e2e.prometheus.backfill import backfill, history_server, promtool_next_to

    trace = load_traces(shared_data / "ai4dl_samples" / "sample-vr.csv")[0]
    end = time.time() // STEP * STEP - 600
    runs = {}
    for i, pod in enumerate(PODS):
        piece = trace.slice(i * 240, i * 240 + 300)
        runs[(NS, pod, "main")] = [_at(piece, end - 30 * 3600 + i * 3 * 3600, pod)]
    owners = {(NS, p): o for p, o in PODS.items() if o}
    requests = {(NS, p, "main"): {"cpu": CPU_REQUEST, "memory": MEMORY_REQUEST}
                for p, o in PODS.items() if o}

    def backfill_into(storage) -> None:
        backfill(runs, storage, promtool_next_to(prometheus_binary), pod_owners=owners,
                 replicaset_owners={(NS, "serve-7d9f8c6b5"): ("Deployment", "serve")},
                 requests=requests)

    srv = history_server(workdir=tmp_path_factory.mktemp("prom-replay"), targets=[],
                         scrape_interval="15s", binary=prometheus_binary)
    backfill_into(srv.storage_path)
    srv.start()
    yield srv.url, backfill_into, runs
    srv.stop()


def evaluate(url, *args) -> int:
    return cli_main(["-q", "evaluate", "--prometheus", url, "--selector", f'namespace="{NS}"',
                     "--since", "2d", "--prometheus-retries", "0", *args])


def test_replay_per_workload_against_the_requests(replay_history, tmp_path, capsys):
    url, _, runs = replay_history
    out = tmp_path / "out"
    # the first window unscored: Prometheus's rate() has no value for a pod's first samples,
    # so the scored usage is compared with the trace's from its second window on
    assert evaluate(url, "--epochs", "10", "--json", str(out / "r.json"), "--markdown",
                    str(out / "r.md"), "--plots", str(out / "plots"),
                    "--exclude-cold-start") == 0
    text = capsys.readouterr().out
    assert "Per workload" in text and "| **total**" in text and f"{NS}/Job/resnet" in text
    # each pod started as served: a workload is its top controller and container
    assert "initial request: served, as the operator would (workload by 'workload': " in text
    doc = json.loads((out / "r.json").read_text())
    wl = doc["workloads"]
    rows = {r["workload"]: r for r in wl["rows"]}
    assert set(rows) == {f"{NS}/Job/resnet", f"{NS}/Deployment/serve", f"{NS}/PyTorchJob/bert",
                         f"{NS}/StatefulSet/db"}
    assert rows[f"{NS}/Deployment/serve"]["owner_source"] == "kube_pod_owner"
    assert rows[f"{NS}/StatefulSet/db"]["owner_source"] == "pod name"
    assert {k.split("/")[-1]: r["pods"] for k, r in rows.items()} == {
        "resnet": 3, "serve": 2, "bert": 2, "db": 2}
    assert wl["owners_from_kube_state_metrics"] == 7 and wl["containers_with_requests"] == 7
    # every pod replayed (cross-fitted), every policy reported per workload
    assert doc["counts"]["test_executions"] == len(runs)
    for r in rows.values():
        assert set(r["policies"]) == set(doc["policies"])
    # the requests: 16 cores over each known pod's scored hours; none claimed for db
    db, resnet = rows[f"{NS}/StatefulSet/db"], rows[f"{NS}/Job/resnet"]
    assert db["requested_hours"]["cpu"] == 0 and \
        db["policies"]["auto"]["cpu"]["savings_vs_request"] is None
    assert resnet["requested"]["cpu"] == pytest.approx(CPU_REQUEST
                                                       * resnet["requested_hours"]["cpu"])
    # the usage Prometheus gave back is the trace's (rate() of the backfilled counter)
    scored = sum(float(ex.column("cpu")[40:].sum()) for (n, p, c), execs in runs.items()
                 if p.startswith("resnet") for ex in execs) * STEP / 3600
    assert resnet["usage"]["cpu"] == pytest.approx(scored, rel=0.03)
    # what auto would have allocated is far below 16 cores on this trace
    saving = resnet["policies"]["auto"]["cpu"]["savings_vs_request"]
    assert 0.5 < saving < 1.0
    total = wl["total"]
    assert total["pods"] == len(runs) and total["requested_hours"]["cpu"] < total["hours"]
    md = (out / "r.md").read_text()
    assert "Per workload" in md and f"{NS}/Job/resnet" in md and "(current requests)" in md
    assert (out / "plots" / "workloads.png").stat().st_size > 10_000
    assert doc["history"]["containers"] == len(runs)


def test_selector_matching_nothing_is_one_line_and_exit_2(replay_history, tmp_path, capsys):
    url, _, _ = replay_history
    code = cli_main(["evaluate", "--prometheus", url, "--selector", 'namespace="nothing-here"',
                     "--json", str(tmp_path / "r.json"), "--plots", str(tmp_path / "p")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("ai4dl: error: nothing to replay") and "no series matched" in err[-1]
    assert not any("Traceback" in x for x in err)
    assert not list(tmp_path.iterdir())


def test_prometheus_dying_mid_pull_exits_3_and_writes_nothing(replay_history, prometheus_binary,
                                                              tmp_path, capsys, monkeypatch):
    """A second Prometheus with the same history, killed once the first range query of the
    pull has been answered (the pull is several: day-long chunks)."""
    from e2e.prometheus.backfill import history_server
    from ai4dl.sources.prometheus import PrometheusSource

    _, backfill_into, _ = replay_history
    srv = history_server(workdir=tmp_path / "prom", targets=[], scrape_interval="15s",
                         binary=prometheus_binary)
    backfill_into(srv.storage_path)
    srv.start()
    real = PrometheusSource._fetch_lean
    calls = []

    def then_die(self, *a, **kw):
        got = real(self, *a, **kw)
        calls.append(1)
        if len(calls) == 1:
            srv.stop()
        return got

    monkeypatch.setattr(PrometheusSource, "_fetch_lean", then_die)
    out = tmp_path / "out"
    try:
        code = cli_main(["evaluate", "--prometheus", srv.url, "--selector", f'namespace="{NS}"',
                         "--since", "2d", "--prometheus-retries", "0",
                         "--prometheus-concurrency", "1", "--json", str(out / "r.json"),
                         "--markdown", str(out / "r.md"), "--plots", str(out / "plots")])
    finally:
        srv.stop()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3, err
    assert err[-1].startswith("ai4dl: error: Prometheus at") and "unavailable" in err[-1]
    assert len(calls) >= 1 and not out.exists()


@pytest.fixture(scope="module")
def phasemodel_spec(replay_history):
    """A PhaseModel's spec (window 20 min) whose model was fitted and given auto's choice on
    the history's pods, as the trainer does."""
    from ai4dl.crd_spec import PhaseModelSpec
    from ai4dl.method.model import PhaseModel
    from ai4dl.trainer import choose_served_policy

    _, _, runs = replay_history
    execs = [ex for execs in runs.values() for ex in execs]
    spec = {"selector": {"matchLabels": {"app": "train"}}, "stepSeconds": int(STEP),
            "windowSeconds": 1200, "policy": {"mode": "Recommend"}}
    model = PhaseModel(epochs=10, random_state=0).fit(execs)
    choose_served_policy(model, execs, PhaseModelSpec.model_validate(spec))
    spec["model"] = json.loads(model.to_document().model_dump_json(by_alias=True,
                                                                  exclude_none=True))
    return spec


@pytest.fixture()
def phasemodel(kube_cluster, k8s_namespace, crd, phasemodel_spec):  # noqa: F811
    """That PhaseModel in the API server."""
    from kubernetes import client

    client.CustomObjectsApi(kube_cluster.api_client).create_namespaced_custom_object(
        GROUP, VERSION, k8s_namespace, PLURAL,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
         "metadata": {"name": "pm"}, "spec": phasemodel_spec})
    return f"{k8s_namespace}/pm"


def test_phasemodel_replays_what_the_operator_would_serve(replay_history, phasemodel,
                                                          kube_cluster, tmp_path, capsys):
    url, _, runs = replay_history
    code = evaluate(url, "--phasemodel", phasemodel, "--kubeconfig",
                    str(kube_cluster.kubeconfig), "--json", str(tmp_path / "r.json"))
    assert code == 0, capsys.readouterr().err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert "phasemodel" in doc["policies"] and "auto" not in doc["policies"]
    assert doc["config"]["window"] == 80                 # 1200 s / 15 s, from the spec
    assert doc["workloads"]["shown_policy"] == "phasemodel"
    assert doc["counts"]["test_executions"] == len(runs)  # no fold: every pod, no fit
    assert doc["config"]["safety"] is not None           # the PhaseModel's own safety layer
    code = evaluate(url, "--phasemodel", phasemodel.split("/")[0] + "/missing", "--kubeconfig",
                    str(kube_cluster.kubeconfig))
    assert code == 2 and "not found" in capsys.readouterr().err


# ----------------------------------------------------------------------------- --engine
def _engine_doc(url, tmp_path, name, *args) -> dict:
    out = tmp_path / f"{name}.json"
    assert evaluate(url, *args, "--json", str(out), "--markdown", str(tmp_path / f"{name}.md")) \
        == 0
    return json.loads(out.read_text())


def test_engine_replays_piece_by_piece_what_the_whole_replay_gives(
        replay_history, phasemodel, phasemodel_spec, kube_cluster, tmp_path, capsys):
    """The PhaseModel as served, piece by piece (four pieces of whole workloads) in this
    process, on two worker processes and on a Dask LocalCluster of two: the same figures every
    time, each workload's row that of the replay of everything at once, and each matched
    share the whole replay's factor rounded up to the grid."""
    import yaml

    url, _, runs = replay_history
    manifest = tmp_path / "pm.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": f"{GROUP}/{VERSION}",
                                        "kind": "PhaseModel", "metadata": {"name": "pm"},
                                        "spec": phasemodel_spec}))
    whole = _engine_doc(url, tmp_path, "whole", "--phasemodel", phasemodel, "--kubeconfig",
                        str(kube_cluster.kubeconfig))
    pieces = ["--phasemodel-file", str(manifest), "--piece-containers", "3"]
    one = _engine_doc(url, tmp_path, "one", "--engine", "local", *pieces)
    two = _engine_doc(url, tmp_path, "two", "--engine", "local", "--workers", "2", *pieces)
    on_dask = _engine_doc(url, tmp_path, "dask", "--engine", "dask", "--workers", "2", *pieces)
    assert one["engine"]["pieces"] == 4 and on_dask["engine"]["name"] == "dask"
    assert one["history"]["containers"] == len(runs) == one["workloads"]["total"]["pods"]
    for doc in (two, on_dask):
        assert doc["matched_risk"] == one["matched_risk"]
        assert doc["workloads"]["rows"] == one["workloads"]["rows"]
    # the rows of the whole replay (served: one policy per name, no fold)
    assert set(one["policies"]) == set(whole["policies"]) - {"oracle"}
    rows = {r["workload"]: r for r in whole["workloads"]["rows"]}
    assert {r["workload"] for r in one["workloads"]["rows"]} == set(rows)
    for r in one["workloads"]["rows"]:
        w = rows[r["workload"]]
        assert (r["pods"], r["executions"]) == (w["pods"], w["executions"])
        for p, figs in r["policies"].items():
            for res, f in figs.items():
                g = w["policies"][p][res]
                assert (f["short_windows"], f["windows"]) == (g["short_windows"], g["windows"])
                assert f["allocation"] == pytest.approx(g["allocation"], rel=1e-9)
                assert (f["savings_vs_request"] is None is g["savings_vs_request"]
                        or f["savings_vs_request"] == pytest.approx(g["savings_vs_request"],
                                                                    rel=1e-9))
    # each share at the whole replay's factor rounded up to the grid, or at its floor
    factors = floors = 0
    for m in one["matched_risk"]:
        judged = whole["scores"][m["policy"]][m["resource"]]
        key = f"{m['share']:g}"
        f = judged["risk_multiplier_at"][key]
        if f == "unreachable":
            assert m["factor"] is None and m["floor"] == judged["risk_floor_at"][key], m
            cost = judged["vs_oracle_floor_at"][key]
            floors += 1
        else:
            assert m["factor"] is not None and m["floor"] is None, m
            cost = judged["vs_oracle_risk_at"][key]
            # (at the grid's bottom every factor meets the share: the layer's floors cover
            # every window, and the judge's search stops where its halvings end)
            if m["factor"] > 0.25:
                assert f <= m["factor"] * (1 + 1e-9) <= f * 2 ** (1 / 64) * (1 + 2e-9), m
                factors += 1
        assert cost * (1 - 1e-9) <= m["vs_oracle"] <= cost * 1.06, (m, cost)
    assert floors >= 6 and floors + factors >= 12
    md = (tmp_path / "one.md").read_text()
    assert "A cluster's replay" in md and "| phasemodel" in md and f"{NS}/Job/resnet" in md


def test_engine_without_a_phasemodel_replays_the_policies_that_need_no_fit(
        replay_history, tmp_path, capsys):
    url, _, runs = replay_history
    doc = _engine_doc(url, tmp_path, "plain", "--engine", "local", "--piece-containers", "2")
    assert "phasemodel" not in doc["policies"] and "adaptive-max" in doc["policies"]
    assert "auto" not in doc["policies"] and doc["workloads"]["total"]["pods"] == len(runs)
    assert doc["engine"]["pieces"] == 4          # 3 resnet pods: a piece of their own
    assert doc["workloads"]["shown_policy"] == "adaptive-max"


def test_engine_flags_and_a_prometheus_gone_are_one_line(replay_history, prometheus_binary,
                                                         tmp_path, capsys):
    url, _, _ = replay_history
    for args, msg in ((["--engine", "local", "--plots", str(tmp_path / "p")],
                       "--plots is not available with --engine"),
                      (["--engine", "local", "--epochs", "3"], "--engine fits no model"),
                      (["--engine", "local", "--phasemodel-file", str(tmp_path / "none.yaml")],
                       "--phasemodel-file"),
                      (["--scheduler", "tcp://x:8786"], "--scheduler needs --engine")):
        assert evaluate(url, *args) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("ai4dl: error: ") and msg in err[-1], err
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Deployment\n")
    assert evaluate(url, "--engine", "local", "--phasemodel-file", str(bad)) == 2
    assert "not a PhaseModel manifest" in capsys.readouterr().err
    gone = "http://127.0.0.1:9"
    assert cli_main(["evaluate", "--prometheus", gone, "--selector", f'namespace="{NS}"',
                     "--prometheus-retries", "0", "--engine", "local", "--json",
                     str(tmp_path / "r.json")]) == 3
    assert "unavailable" in capsys.readouterr().err and not (tmp_path / "r.json").exists()
