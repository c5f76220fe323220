"""The batch trainer against a real Prometheus (backfilled with real traces by promtool) and a
real kube-apiserver; the last step of the CronJob scenario is the operator using the new model.

History: the AI4DL sample trace ``sample-vr.csv`` (a real DL training container, cpu cores and
memory bytes) cut into pods of the Prometheus namespace ``hist``, written as cAdvisor series
ending ten minutes ago; one pod restarts (a new container id), one has a long gap. Their labels
are in kube-state-metrics' ``kube_pod_labels``: six pods the PhaseModel serves (opted in, app
train) and two it must not learn from (another PhaseModel's pod, and a pod not opted in).

FakeKubelet, not the real node: the live pods' usage is a real trace played by the exporter;
the refit and its use are tested, not the node.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ai4dl.method import synthetic
from ai4dl.cli import main as cli_main
from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION
from ai4dl.method.model import PhaseModel
from ai4dl.method.traces import Execution
from e2e_fixtures_operator import Operator, crd, operator_kubeconfig, wait_for  # noqa: F401

pytestmark = pytest.mark.integration

STEP = 15.0
SELECTOR = 'namespace="hist"'


def _at(ex: Execution, t0: float, n: int | None = None) -> Execution:
    v = ex.values[:n] if n else ex.values
    return Execution(ex.name, t0 + STEP * np.arange(len(v)), v, ex.features, ex.units, step=STEP)


@pytest.fixture(scope="module")
def real_trace(shared_data):
    from ai4dl.io import load_traces

    return load_traces(shared_data / "ai4dl_samples" / "sample-vr.csv")[0]


@pytest.fixture(scope="module")
def history(real_trace, trace_exporter, prometheus_binary, tmp_path_factory):
    """(Prometheus URL, exporter): the backfilled history plus live scrapes of the exporter."""
    sys.path.append(str(Path(__file__).resolve().parent.parent))
    from e2e.prometheus.backfill import backfill, history_server, promtool_next_to

    now = time.time() // STEP * STEP
    pieces = [real_trace.slice(i * 600, (i + 1) * 600) for i in range(4)]
    end = now - 600
    runs = {("hist", f"train-{i}", "main"): [_at(p, end - (4 - i) * 3 * 3600)]
            for i, p in enumerate(pieces)}
    # a restart: the same container, a new container id two minutes after the first run ended
    first = _at(pieces[1], end - 20 * 3600, 300)
    runs[("hist", "train-r", "main")] = [
        first, _at(pieces[2], float(first.times[-1]) + 120, 300)]
    # a long gap (one hour) in one run: two executions of one pod
    a, b = _at(pieces[3], end - 18 * 3600, 250), _at(pieces[0], end - 17 * 3600 + 3600, 250)
    runs[("hist", "train-g", "main")] = [Execution("g", np.r_[a.times, b.times],
                                                   np.vstack([a.values, b.values]),
                                                   a.features, a.units, step=STEP)]
    served = {OPT_IN_LABEL: "true", "app": "train"}
    labels = {("hist", pod): served for _, pod, _ in runs}
    # not this PhaseModel's: another model's pod and a pod that never opted in
    runs[("hist", "infer-0", "main")] = [_at(pieces[0], end - 6 * 3600)]
    runs[("hist", "plain-0", "main")] = [_at(pieces[1], end - 6 * 3600)]
    labels[("hist", "infer-0")] = {OPT_IN_LABEL: "true", "app": "infer"}
    labels[("hist", "plain-0")] = {"app": "train"}
    exporter = trace_exporter({}, speed=1.0, loop=True)
    srv = history_server(targets=[exporter.url], workdir=tmp_path_factory.mktemp("prom-hist"),
                         scrape_interval="1s", binary=prometheus_binary)
    backfill(runs, srv.storage_path, promtool_next_to(prometheus_binary), pod_labels=labels)
    srv.start()
    yield srv.url, exporter
    srv.stop()


def _client(kube_cluster):
    from kubernetes import client

    return client.CustomObjectsApi(kube_cluster.api_client)


def make_pm(kube_cluster, ns, name, model=None, window=600, **policy):
    spec = {"selector": {"matchLabels": {"app": "train"}}, "stepSeconds": int(STEP),
            "windowSeconds": window, "policy": {"mode": "Recommend", **policy}}
    if model is not None:
        spec["model"] = model
    return _client(kube_cluster).create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
                                     "metadata": {"name": name}, "spec": spec})


def read_pm(kube_cluster, ns, name):
    return _client(kube_cluster).get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)


def doc_of(model: PhaseModel) -> dict:
    return json.loads(model.to_document().model_dump_json(by_alias=True, exclude_none=True))


@pytest.fixture(scope="module")
def synthetic_doc(synthetic_jobs_doc):
    """A model of synthetic jobs (other scales, other phases): a poor current model for the
    real history, which a refit should beat (this module's copy of the session's fit)."""
    return copy.deepcopy(synthetic_jobs_doc)


def train(kube_cluster, url, *args) -> int:
    return cli_main(["train", "--prometheus", url, "--selector", SELECTOR, "--since", "2d",
                     "--kubeconfig", str(kube_cluster.kubeconfig), "--prometheus-retries", "0",
                     "--log-format", "json", *args])


def error_line(capsys) -> dict:
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    return lines[-1]


# ----------------------------------------------------------------------------- the CronJob run
def test_cronjob_refit_is_applied_and_used_by_the_operator(
        kube_cluster, k8s_namespace, fake_kubelet, history, real_trace, synthetic_doc,
        operator_kubeconfig, crd, tmp_path):  # noqa: F811
    from ai4dl.controller.pods import A_RECOMMENDATION

    url, exporter = history
    ns = k8s_namespace
    # live pods in the test namespace, played in real time (15 s steps, as the history)
    for i in range(2):
        fake_kubelet.create_pod(f"live-{i}", namespace=ns,
                                requests={"cpu": "4", "memory": "32Gi"},
                                labels={OPT_IN_LABEL: "true", "app": "train"},
                                annotations={MODEL_ANNOTATION: "pm"})
        exporter.add_pod((ns, f"live-{i}", "main"), real_trace, offset=(1 + i) * 3000.0)
    make_pm(kube_cluster, ns, "pm", synthetic_doc, window=60, maxDecrease=1.0, minChange=0.0,
            cooldownWindows=0, memoryMargin=0.0)
    op = Operator(operator_kubeconfig, url, tmp_path / "operator.log").start()
    try:
        env = dict(os.environ, KUBECONFIG=str(kube_cluster.kubeconfig))
        env.pop("KUBERNETES_SERVICE_HOST", None)
        ai4dl = Path(sys.executable).with_name("ai4dl")
        cmd = [str(ai4dl), "train", "--prometheus", url, "--selector", SELECTOR,
               "--since", "14d", "--phasemodel", f"{ns}/pm"]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, run.stderr[-2000:]
        logs = [json.loads(line) for line in run.stderr.splitlines()]   # JSON lines in a Job
        assert logs[-1]["event"] == "applied", logs[-1]
        history_log = next(x for x in logs if x["event"] == "history")
        assert history_log["containers"] == 6 and history_log["executions"] == 8
        members = next(x for x in logs if x["event"] == "membership")
        assert (members["found"], members["kept"], members["notServed"]) == (8, 6, 2)
        assert members["source"] == "kube-state-metrics" and "dropped 2" in members["message"]

        pm = read_pm(kube_cluster, ns, "pm")
        training = pm["status"]["training"]
        assert training["decision"] == "applied"
        assert "(6 of 8 containers served)" in training["source"]
        assert training["candidateScore"] <= training["currentScore"] * (1 + training["tolerance"])
        assert training["executions"] >= 3 and training["heldOutExecutions"] >= 1
        for key in ("samples", "fitSeconds", "reconstructionError", "noveltyRate", "phases",
                    "trainedAt"):
            assert key in training, key
        # per resource, the objective auto was chosen for (kept by the status schema)
        assert [o["resource"] for o in training["objectives"]] == ["cpu", "memory"]
        assert all(0 < o["value"] < 1 for o in training["objectives"])
        assert pm["spec"]["previousModel"] == synthetic_doc
        new_doc = pm["spec"]["model"]
        assert new_doc != synthetic_doc and len(new_doc["centroids"]) == training["phases"]
        managers = {m["manager"]: m for m in pm["metadata"]["managedFields"]}
        assert "ai4dl-trainer" in managers
        assert pm["spec"]["policy"]["mode"] == "Recommend"   # the user's fields untouched

        # auto: every candidate scored on the most recent training executions, the winner
        # per resource stored with the model (with both head-room tables) and in the status
        chosen = training["policy"]
        assert set(chosen["served"]) == {"cpu", "memory"}
        assert {s["policy"] for s in chosen["scores"]} >= {
            "adaptive-max", "adaptive-stat", "phase-headroom", "burst-headroom", "phase",
            "phase-proactive", "vpa"}
        assert "vpa" not in chosen["served"].values()          # scored, never served
        assert new_doc["schemaVersion"] == "ai4dl.io/phase-model/v2"
        assert new_doc["policyChoice"]["winners"] == [chosen["served"]["cpu"],
                                                      chosen["served"]["memory"]]
        assert [t["name"] for t in new_doc["policyTables"]] == ["phase-headroom",
                                                               "burst-headroom"]

        # The operator's next windows serve the trainer's choice from the new model (the old
        # model carried none: it served the reactive baseline) and recommend for both pods.
        def serves_choice():
            pm = read_pm(kube_cluster, ns, "pm")
            served = (pm.get("status") or {}).get("servedPolicy") or ""
            recs = [json.loads((kube_cluster.core.read_namespaced_pod(f"live-{i}", ns).metadata
                                .annotations or {}).get(A_RECOMMENDATION, "{}")).get("main")
                    for i in range(2)]
            return served.startswith("auto: ") and "won on" in served and all(recs) and served
        try:
            served = wait_for(serves_choice, 150, what="the operator serving the new choice")
        except AssertionError:
            print(op.tail())
            raise
        for name in set(chosen["served"].values()):
            assert name in served, served
    finally:
        op.stop()


# ----------------------------------------------------------------------------- decisions
def test_rejected_forced_and_rolled_back(kube_cluster, k8s_namespace, history, crd,  # noqa: F811
                                         capsys):
    url, _ = history
    ns = k8s_namespace
    # kind phase, three phases: a one-phase model is then clearly worse on the held-out pods
    # (1.84 against 1.46; auto would serve either a table)
    make_pm(kube_cluster, ns, "pm", kind="phase")
    assert train(kube_cluster, url, "--phasemodel", f"{ns}/pm", "--phases", "3") == 0
    pm = read_pm(kube_cluster, ns, "pm")
    good = pm["spec"]["model"]
    assert pm["status"]["training"]["decision"] == "applied"
    assert pm["status"]["training"]["reason"] == "no current model"
    assert "previousModel" not in pm["spec"]

    # a one-phase candidate provisions worse: rejected, the reason recorded, the model kept
    assert train(kube_cluster, url, "--phasemodel", f"{ns}/pm", "--phases", "1") == 0
    pm = read_pm(kube_cluster, ns, "pm")
    t = pm["status"]["training"]
    assert t["decision"] == "rejected" and "worse by more than" in t["reason"]
    assert t["candidateScore"] > t["currentScore"] * (1 + t["tolerance"])
    assert pm["spec"]["model"] == good and "previousModel" not in pm["spec"]
    assert train(kube_cluster, url, "--phasemodel", f"{ns}/pm", "--phases", "1",
                 "--fail-on-reject") == 4

    # --force applies it anyway and keeps the good one for rollback
    assert train(kube_cluster, url, "--phasemodel", f"{ns}/pm", "--phases", "1",
                 "--force") == 0
    pm = read_pm(kube_cluster, ns, "pm")
    assert pm["status"]["training"]["decision"] == "forced"
    assert len(pm["spec"]["model"]["centroids"]) == 1 and pm["spec"]["previousModel"] == good
    forced = pm["spec"]["model"]

    # one command puts the good model back (and keeps the forced one as previous)
    kc = str(kube_cluster.kubeconfig)
    assert cli_main(["rollback", "--phasemodel", f"{ns}/pm", "--kubeconfig", kc]) == 0
    pm = read_pm(kube_cluster, ns, "pm")
    assert pm["spec"]["model"] == good and pm["spec"]["previousModel"] == forced
    assert pm["status"]["training"]["decision"] == "rolled-back"


# ----------------------------------------------------------------------------- workload profiles
def test_the_batch_fill_writes_each_workloads_profile_once(kube_cluster, history, crd,  # noqa: F811
                                                           capsys, tmp_path):
    """Issue 42, the trainer's half: the ended executions it read, by workload (no
    kube-state-metrics owner here: the pods' names), go into the PhaseModel's WorkloadProfiles,
    sealed with the operator's key; a second run writes nothing (every run already counted)."""
    from kubernetes.client.exceptions import ApiException

    from ai4dl.controller.podstate import StateKey
    from ai4dl.controller.profiles import open_record
    from ai4dl.crd_profile import PROFILE_PLURAL
    from e2e_fixtures_k8s import create_namespace

    url, _ = history
    try:
        create_namespace(kube_cluster, "hist")
    except ApiException as err:
        if err.status != 409:
            raise
    key_file = tmp_path / "state-key"
    key_file.write_bytes(b"s" * 32)
    make_pm(kube_cluster, "hist", "pm-fill", kind="phase")
    args = ("--phasemodel", "hist/pm-fill", "--phases", "3", "--state-key-file", str(key_file))
    assert train(kube_cluster, url, *args) == 0
    objects = _client(kube_cluster).list_namespaced_custom_object(
        GROUP, VERSION, "hist", PROFILE_PLURAL, label_selector="ai4dl.io/phasemodel=pm-fill")
    got = {o["spec"]["workload"]: open_record(o, StateKey(b"s" * 32)) for o in objects["items"]}
    assert all(g.problem is None for g in got.values()), got
    # train-0..3: one StatefulSet-like name (train-<n>), four executions; train-r: a restart,
    # two runs of one container; train-g: one pod, a gap of an hour: two executions
    runs = {w: g.containers["main"].executions for w, g in got.items()}
    assert runs == {"StatefulSet/train": 4, "Pod/train-r": 2, "Pod/train-g": 2}, runs
    profile = got["StatefulSet/train"].containers["main"]
    assert profile.resources == ("cpu", "memory") and profile.first_request(time.time(), 1.0)[1] > 0
    written = [json.loads(x) for x in capsys.readouterr().err.splitlines()
               if x.startswith("{") and '"profiles"' in x]
    assert written and written[-1]["written"] == 3
    assert train(kube_cluster, url, *args) == 0
    again = [json.loads(x) for x in capsys.readouterr().err.splitlines()
             if x.startswith("{") and '"profiles"' in x]
    assert again[-1]["written"] == 0 and again[-1]["workloads"] == 3


# ----------------------------------------------------------------------------- bad input
def test_bad_input_exit_codes_and_one_line_errors(kube_cluster, k8s_namespace, history,
                                                  crd, capsys):  # noqa: F811
    from ai4dl.sources.prometheus import PrometheusSource  # noqa: F401  (import cost outside)
    from e2e.prometheus.server import free_port

    url, _ = history
    ns = k8s_namespace
    make_pm(kube_cluster, ns, "pm")
    capsys.readouterr()

    assert train(kube_cluster, url, "--phasemodel", f"{ns}/missing") == 2
    assert error_line(capsys)["message"] == (
        f"ai4dl: error: PhaseModel {ns}/missing not found (create it first, or pass --create "
        "to create it with the default features and policy)")

    dead = f"http://127.0.0.1:{free_port()}"
    assert train(kube_cluster, dead, "--phasemodel", f"{ns}/pm") == 3
    err = error_line(capsys)
    assert err["exitCode"] == 3 and "connection refused" in err["message"]

    assert cli_main(["train", "--prometheus", url, "--selector", 'namespace="nothing-here"',
                     "--phasemodel", f"{ns}/pm", "--kubeconfig", str(kube_cluster.kubeconfig),
                     "--log-format", "json"]) == 2
    assert "no data for selector {namespace=\"nothing-here\"}" in error_line(capsys)["message"]

    assert cli_main(["train", "--prometheus", url, "--selector", 'namespace="hist",pod="train-0"',
                     "--phasemodel", f"{ns}/pm", "--kubeconfig", str(kube_cluster.kubeconfig),
                     "--log-format", "json"]) == 2
    assert "too few executions to fit" in error_line(capsys)["message"]

    # only pods the PhaseModel does not serve
    assert cli_main(["train", "--prometheus", url, "--selector", 'namespace="hist",pod="infer-0"',
                     "--phasemodel", f"{ns}/pm", "--kubeconfig", str(kube_cluster.kubeconfig),
                     "--log-format", "json"]) == 2
    assert "none of the 1 containers found is served by the PhaseModel" in \
        error_line(capsys)["message"]

    assert train(kube_cluster, url, "--phasemodel", f"{ns}/pm", "--selector", "pod=~(") == 2
    assert "rejected the query" in error_line(capsys)["message"]
    pm = read_pm(kube_cluster, ns, "pm")
    assert "model" not in pm["spec"] and "training" not in (pm.get("status") or {})


def test_traces_create_and_if_due(kube_cluster, k8s_namespace, history, crd, tmp_path,  # noqa: F811
                                  capsys):
    """From a trace file into a PhaseModel that does not exist yet (--create); then --if-due
    skips until the operator recommends a refit."""
    from ai4dl.io.writers import write_long_csv
    from ai4dl.sources.prometheus import PrometheusSource
    from ai4dl.sources.prometheus_types import FeatureQuery
    from ai4dl.sources.prometheus_history import PrometheusHistory
    from ai4dl.crd_spec import default_features
    from ai4dl.method.traces import TraceSet

    url, _ = history
    ns = k8s_namespace
    kc = str(kube_cluster.kubeconfig)
    with PrometheusSource(url) as src:
        got = PrometheusHistory(src, [FeatureQuery(f.name, f.query) for f in default_features()],
                                SELECTOR, STEP).executions(time.time() - 86400, time.time())
    path = write_long_csv(TraceSet(got.executions), tmp_path / "history.csv")

    base = ["train", str(path), "--phasemodel", f"{ns}/fresh", "--kubeconfig", kc,
            "--epochs", "5", "--log-format", "json"]
    assert cli_main(base) == 2                          # missing without --create
    assert cli_main(base + ["--create"]) == 0
    pm = read_pm(kube_cluster, ns, "fresh")
    assert pm["spec"]["policy"]["mode"] == "Recommend"   # API server defaults filled in
    first = pm["status"]["training"]
    assert first["decision"] == "applied" and first["source"].startswith("traces ")

    capsys.readouterr()
    assert cli_main(base + ["--if-due"]) == 0           # just trained: not due, no fit
    logs = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    assert [x["event"] for x in logs] == ["not-due"]
    assert read_pm(kube_cluster, ns, "fresh")["status"]["training"] == first

    # the operator's recommendation, set after the last run, makes it due
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 2))
    _client(kube_cluster).patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, "fresh", {"status": {"conditions": [
            {"type": "RefitRecommended", "status": "True", "reason": "NoveltyAbove",
             "message": "35% of windows novel", "lastTransitionTime": later}]}})
    time.sleep(2.5)
    assert cli_main(base + ["--if-due"]) == 0
    logs = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    assert logs[0]["event"] == "due" and "35% of windows novel" in logs[0]["message"]
    second = read_pm(kube_cluster, ns, "fresh")["status"]["training"]
    assert second["trainedAt"] > first["trainedAt"]
    assert second["decision"] in ("applied", "rejected")
    # answered: not due again although the condition is still True
    assert cli_main(base + ["--if-due"]) == 0
    assert [json.loads(x)["event"] for x in capsys.readouterr().err.splitlines()] == ["not-due"]


# ----------------------------------------------------------------------- traces that do not fit
MISFIT_ROWS: list[tuple[str, str, str]] = []


@pytest.fixture(scope="module")
def misfit_table(request):
    from e2e_fixtures_operator import write_report

    yield
    write_report(request, "trainer bad input", "| bad input | wrong writes | signal |",
                 MISFIT_ROWS, append=True)


@pytest.mark.parametrize("what,step,samples,extra,words", [
    ("traces at a 1 s step for a PhaseModel of stepSeconds 15", 1.0, None, ["--step", "1"],
     "the traces are at a step of 1 s, PhaseModel {pm} serves at spec.stepSeconds 15: "
     "pass --step 15"),
    ("runs of 450 s for a PhaseModel of windowSeconds 600", STEP, 30, [],
     "every training execution is at most one window long (PhaseModel {pm}'s "
     "spec.windowSeconds 600 = 40 samples of 15 s"),
], ids=["step", "window"])
def test_traces_that_do_not_fit_the_phasemodel_write_nothing(
        kube_cluster, k8s_namespace, crd, tmp_path, capsys, misfit_table,  # noqa: F811
        what, step, samples, extra, words):
    """`ai4dl train TRACES --phasemodel` with traces the PhaseModel cannot serve a model of
    (issue 28 item 2: a 1 s model was written into a PhaseModel of stepSeconds 15; item 3:
    head-room tables fitted on no window): one line, exit 2, before the fit, and the
    PhaseModel untouched (its resourceVersion unchanged)."""
    from ai4dl.io.writers import write_long_csv
    from ai4dl.method.traces import TraceSet

    ns = k8s_namespace
    make_pm(kube_cluster, ns, "pm")
    before = read_pm(kube_cluster, ns, "pm")
    cfg = synthetic.SyntheticConfig(n_features=2, step=step, epochs=(2, 3))
    runs = list(synthetic.generate(6, seed=4, config=cfg)[0])
    if samples:
        runs = [e.slice(0, samples) for e in runs]
    path = write_long_csv(TraceSet(runs), tmp_path / "t.csv")
    capsys.readouterr()
    code = cli_main(["train", str(path), "--phasemodel", f"{ns}/pm", "--kubeconfig",
                     str(kube_cluster.kubeconfig), "--epochs", "1", "--log-format", "json",
                     *extra])
    logs = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    line = logs[-1]
    assert code == 2 and line["exitCode"] == 2, line
    assert words.format(pm=f"{ns}/pm") in line["message"], line
    assert "fit-start" not in [x["event"] for x in logs], logs    # refused before the fit
    after = read_pm(kube_cluster, ns, "pm")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "model" not in after["spec"] and "training" not in (after.get("status") or {})
    MISFIT_ROWS.append((f"`ai4dl train --phasemodel`: {what}", "0 (resourceVersion unchanged)",
                        f"exit 2, before the fit: {words.format(pm='NS/pm')}"))
