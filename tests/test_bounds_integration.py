"""Bounds on what is accepted, on the real API server (issue 26, item 8):

1. model documents beyond a dimension bound are refused by `kubectl apply` (the CRD's
   maximum/maxItems/maxLength/CEL, generated from ai4dl.method.document like the rest of the schema;
   the `crd` fixture applying the CRD proves the API server accepts the rules' cost), and
   pydantic refuses the same documents, naming the same field;
2. a document within every dimension and the count of numbers (the CEL rule standing in for
   bytes) but beyond the byte bound (which a CRD cannot state) is stored by the API server,
   and the operator refuses it: Degraded/InvalidModel naming the bound, no resize of its pod,
   while a PhaseModel with a good document beside it resizes;
3. the trainer's RBAC, rendered from the chart, used with the trainer ServiceAccount's own
   token: it may read and patch the PhaseModels it trains (the trainer's own client calls),
   and nothing else: another PhaseModel of the same namespace is refused (403), and a
   `kubectl auth can-i` matrix.

Rows go to the fault table ($AI4DL_FAULT_REPORT), as tests/test_faults_bad_input.py's.

Pods: FakeKubelet, not the real node (tests/test_real_node.py): the pod only has to exist and
be Running for the operator to list it; what is tested is the refusal of a document, in which
no kubelet takes part.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from bounds_docs import doc, oversized, too_many_numbers
from pydantic import ValidationError

from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION
from ai4dl.method.document import PhaseModelDocument
from ai4dl.method.document_bounds import MAX_DOCUMENT_BYTES
from e2e.prometheus.fake import FakePrometheus
from e2e_fixtures_k8s import create_namespace
from e2e_fixtures_operator import (Operator, crd, operator_kubeconfig,  # noqa: F401
                                   wait_for, write_report)
from test_faults_bad_input import age
from test_operator_integration import (WINDOW, condition, events, make_phasemodel,
                                       requests_of, wait_condition)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "ai4dl-operator"
REQUESTS = {"cpu": "8", "memory": "32Gi"}
ROWS: list[tuple[str, str, str]] = []     # (bad input, wrong writes, signals)


@pytest.fixture(scope="module", autouse=True)
def table(request):
    yield
    write_report(request, "bounds", "| bad input | wrong writes | signals raised |", ROWS,
                 append=True)


def kubectl(kube_cluster, *args: str, stdin: str | None = None, kubeconfig=None):
    from e2e.controlplane.cluster import bin_dir

    return subprocess.run([str(bin_dir() / "kubectl"), "--kubeconfig",
                           str(kubeconfig or kube_cluster.kubeconfig), *args],
                          input=stdin, text=True, capture_output=True, timeout=60)


def pm_body(namespace: str, name: str, model: dict | None = None) -> dict:
    spec = {"selector": {"matchLabels": {"app": "train"}}, "stepSeconds": 1,
            "windowSeconds": WINDOW}
    if model is not None:
        spec["model"] = model
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def new_namespace(kube_cluster, what: str) -> str:
    ns = f"bounds-{what}-{uuid.uuid4().hex[:6]}"
    return create_namespace(kube_cluster, ns)


# ----------------------------------------------------------------------------- 1. dimensions
# (what, the document, what the API server says (field and bound), what pydantic says)
BEYOND = [
    ("crbm.n_hidden 101 (the probe: 400,000)", lambda: doc(hidden=101),
     ["spec.model.crbm.n_hidden", "less than or equal to 100"],
     "crbm.n_hidden: Input should be less than or equal to 100"),
    ("crbm.n_history 61", lambda: doc(history=61),
     ["spec.model.crbm.n_history", "less than or equal to 60"],
     "crbm.n_history: Input should be less than or equal to 60"),
    ("crbm.n_history x n_visible 250", lambda: doc(features=("cpu", "memory", "a", "b", "c"),
                                                   history=50),
     ["spec.model.crbm.B", "must have at most 240 items"],
     "crbm.B: List should have at most 240 items"),
    ("crbm.n_history x n_visible 250, B and A cut to 240 rows", lambda: _cut(doc(
        features=("cpu", "memory", "a", "b", "c"), history=50)),
     ["crbm.n_history x crbm.n_visible must be at most 240"],
     "crbm: n_history x n_visible = 250, at most 240"),
    ("65 phases", lambda: doc(phases=65),
     ["spec.model.centroids", "must have at most 64 items"],
     "centroids: List should have at most 64 items"),
    ("101 prototypes", lambda: doc(prototypes=101),
     ["spec.model.prototypes", "must have at most 100 items"],
     "prototypes: List should have at most 100 items"),
    ("a prototype of 1001 phases", lambda: doc(sequence=1001),
     ["spec.model.prototypes[0].sequence", "must have at most 1000 items"],
     "prototypes.0.sequence: List should have at most 1000 items"),
    ("a feature name of 254 characters", lambda: doc(features=("x" * 254,)),
     ["spec.model.features[0].name", "253"],
     "features.0.name: String should have at most 253 characters"),
    ("16,883 numbers in its matrices (about 200 KiB), every dimension within its bound",
     too_many_numbers, ["may hold at most 16384 numbers together"],
     "the model's matrices and prototype sequences hold 16883 numbers, more than the 16384"),
]


def _cut(d: dict) -> dict:
    """B and A within maxItems, n_history x n_visible not: only the CEL rule sees it."""
    d["crbm"]["B"], d["crbm"]["A"] = d["crbm"]["B"][:240], d["crbm"]["A"][:240]
    return d


@pytest.mark.parametrize("what,make,api_words,pydantic_words", BEYOND,
                         ids=[b[0] for b in BEYOND])
def test_kubectl_apply_refuses_a_document_beyond_a_dimension(kube_cluster, crd,  # noqa: F811
                                                             what, make, api_words,
                                                             pydantic_words):
    ns = "default"
    name = f"beyond-{uuid.uuid4().hex[:6]}"
    model = make()
    r = kubectl(kube_cluster, "apply", "-f", "-", stdin=json.dumps(pm_body(ns, name, model)))
    assert r.returncode != 0, r.stdout
    for words in api_words:
        assert words in r.stderr, r.stderr
    got = kubectl(kube_cluster, "get", "-n", ns, "pm", name)
    assert got.returncode != 0 and "NotFound" in got.stderr          # nothing stored
    # the operator's and the commands' own check (objects stored before the rule)
    with pytest.raises(ValidationError) as err:
        PhaseModelDocument.model_validate(model)
    from ai4dl.method.model import validation_message

    assert pydantic_words in validation_message(err.value)
    ROWS.append((f"model document: {what}", "0 (not stored)",
                 "kubectl apply refused: " + ": ".join(api_words)))


def test_a_document_at_the_dimension_bounds_is_stored(kube_cluster, crd):  # noqa: F811
    name = f"at-bounds-{uuid.uuid4().hex[:6]}"
    model = doc(hidden=100, history=60, phases=16)     # 14,296 numbers: within MAX_CELLS
    r = kubectl(kube_cluster, "apply", "-f", "-", stdin=json.dumps(pm_body("default", name,
                                                                           model)))
    try:
        assert r.returncode == 0, r.stderr
    finally:
        kubectl(kube_cluster, "delete", "-n", "default", "pm", name, "--ignore-not-found")


# ----------------------------------------------------------------------------- 2. bytes
def test_a_document_beyond_the_byte_bound_is_stored_and_refused_by_the_operator(
        kube_cluster, operator_kubeconfig, crd, tmp_path):  # noqa: F811
    """203 KiB, every dimension and the count of numbers within bounds: `kubectl apply` stores
    it (no schema can count bytes); the operator sets Degraded/InvalidModel naming the bound and resizes nothing,
    while the PhaseModel beside it, with a small document, resizes its pod."""
    from e2e_fixtures_k8s import FakeKubelet

    big = oversized()
    size = len(json.dumps(big, separators=(",", ":")))
    assert MAX_DOCUMENT_BYTES < size < 256 * 1024 - 40 * 1024, size
    ns = new_namespace(kube_cluster, "bytes")
    kubelet = FakeKubelet(kube_cluster.api_client, namespace=ns)
    fake = FakePrometheus().start()
    for pod, model in (("p-big", "big"), ("p-ok", "ok")):
        kubelet.create_pod(pod, requests=REQUESTS, labels={OPT_IN_LABEL: "true", "app": "train"},
                           annotations={MODEL_ANNOTATION: model})
        age(kube_cluster, ns, pod)
        fake.pods[(ns, pod, "main")] = "good"
    before = {pod: requests_of(kube_cluster, ns, pod) for pod in ("p-big", "p-ok")}
    body = pm_body(ns, "big", big)
    body["spec"]["policy"] = {"mode": "InPlace", "minChange": 0.05, "cooldownWindows": 0}
    r = kubectl(kube_cluster, "apply", "-f", "-", stdin=json.dumps(body))
    assert r.returncode == 0, r.stderr                     # stored: between bound and limits
    # at the PhaseModel's step: the operator refuses a model fitted at another
    make_phasemodel(kube_cluster, ns, "ok", {**doc(), "stepSeconds": 1.0}, minChange=0.05)
    op = Operator(operator_kubeconfig, fake.url, tmp_path / "operator.log").start()
    try:
        wait_for(lambda: requests_of(kube_cluster, ns, "p-ok") != before["p-ok"],
                 3 * WINDOW + 15, what="the control pod resized")
        pm = wait_condition(kube_cluster, ns, "Degraded", "True", 2 * WINDOW, name="big")
    except AssertionError:
        print(op.tail(40))
        raise
    finally:
        op.stop()
        fake.stop()
    degraded = condition(pm, "Degraded")
    assert degraded["reason"] == "InvalidModel", degraded
    said = re.search(r"the document is (\d+) KiB serialised, more than the (\d+) KiB a model "
                     r"document may hold", degraded["message"])
    assert said and int(said.group(2)) == MAX_DOCUMENT_BYTES // 1024 < int(said.group(1)), \
        degraded
    assert requests_of(kube_cluster, ns, "p-big") == before["p-big"]
    resized = {e.involved_object.name for e in events(kube_cluster, ns, "Resized")}
    assert resized == {"p-ok"}, resized
    annotations = kube_cluster.core.read_namespaced_pod("p-big", ns).metadata.annotations
    assert set(annotations) == {MODEL_ANNOTATION}, annotations        # nothing written
    ROWS.append((f"model document of {size / 1024:.0f} KiB, every dimension within bounds "
                 f"(stored by kubectl apply)", "0 (its pod untouched; the control pod resized)",
                 f"Degraded/InvalidModel: {degraded['message'][:90]}"))


# ----------------------------------------------------------------------------- 3. trainer RBAC
@pytest.fixture(scope="module")
def trainer(kube_cluster, crd, tmp_path_factory):  # noqa: F811
    """The chart's trainer RBAC for one PhaseModel, ns/listed: its ServiceAccount's token,
    PhaseModels `listed` and `other` in ns, `listed` in a second namespace."""
    from e2e.controlplane.cluster import bin_dir
    from kubernetes import client, utils

    helm = bin_dir() / "helm"
    if not helm.is_file():
        pytest.skip(f"no helm at {helm} (bash e2e/helm/build.sh)")
    suffix = uuid.uuid4().hex[:6]
    release, home = f"tr{suffix}", new_namespace(kube_cluster, "trainer-home")
    ns, elsewhere = new_namespace(kube_cluster, "trained"), new_namespace(kube_cluster, "else")
    rendered = subprocess.run(
        [str(helm), "template", release, str(CHART), "--namespace", home,
         "--set", "prometheus.url=http://127.0.0.1:9",
         "--set", "image.repository=ai4dl-operator", "--set", "trainer.image.repository=ai4dl-trainer", "--set", "trainer.enabled=true",
         "--set-json", "trainer.phaseModels=" + json.dumps(
             [{"name": "listed", "namespace": ns, "selector": f'namespace="{ns}"'}]),
         "--show-only", "templates/trainer.yaml"],
        capture_output=True, text=True, check=True, timeout=60).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] != "CronJob"]
    assert sorted(d["kind"] for d in docs) == ["Role", "RoleBinding", "ServiceAccount"]
    for d in docs:
        utils.create_from_dict(kube_cluster.api_client, d)
    custom = client.CustomObjectsApi(kube_cluster.api_client)
    for where, name in ((ns, "listed"), (ns, "other"), (elsewhere, "listed")):
        custom.create_namespaced_custom_object(GROUP, VERSION, where, PLURAL,
                                               pm_body(where, name))
    sa = next(d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount")
    kubeconfig = kube_cluster.service_account_kubeconfig(
        home, sa, tmp_path_factory.mktemp("trainer") / "kubeconfig", create=False)
    return {"ns": ns, "elsewhere": elsewhere, "kubeconfig": kubeconfig, "custom": custom}


def _attempt(what: str, expect: str, call) -> str:
    from ai4dl.kube.phasemodels import KubeError

    try:
        call()
        got = "allowed"
    except KubeError as err:
        got = f"denied ({err.status}): {str(err)[:100]}"
    ROWS.append((f"trainer token: {what}", "0" if expect == "denied" else "-",
                 got if expect == "denied" else f"{got} (expected)"))
    return got


def test_the_trainer_token_patches_only_the_phasemodels_it_trains(kube_cluster, trainer):
    """The trainer's own client (ai4dl.kube.phasemodels: GET by name, server-side apply of
    spec.model and of status.training) under the chart's Role, with its own token."""
    from kubernetes import client, config

    from ai4dl import trainer as T
    from ai4dl.kube.phasemodels import PhaseModels

    ns, elsewhere, custom = trainer["ns"], trainer["elsewhere"], trainer["custom"]
    api = config.new_client_from_config(config_file=str(trainer["kubeconfig"]))
    kube = PhaseModels(api)
    model = json.loads(json.dumps(doc()))
    record = T.TrainingRecord(decision="applied", reason="test", trained_at="2026-01-01T00:00:00Z",
                              source="test")

    def spec_apply(where, name):
        return lambda: kube.apply_spec(T.model_apply(where, name, model, None).body)

    def status_apply(where, name):
        return lambda: kube.apply_status(T.status_apply(where, name, record))

    before = {(w, n): custom.get_namespaced_custom_object(GROUP, VERSION, w, PLURAL, n)
              for w, n in ((ns, "other"), (elsewhere, "listed"))}
    core = client.CoreV1Api(api)
    rows = [
        (f"get {ns}/listed (the PhaseModel it trains)", "allowed", lambda: kube.get(ns, "listed")),
        (f"apply spec.model of {ns}/listed", "allowed", spec_apply(ns, "listed")),
        (f"apply status.training of {ns}/listed", "allowed", status_apply(ns, "listed")),
        (f"list pods in {ns}", "allowed",
         lambda: kube._call("listing pods", core.list_namespaced_pod, ns, limit=1)),
        (f"get {ns}/other (same namespace, not listed)", "denied", lambda: kube.get(ns, "other")),
        (f"apply spec.model of {ns}/other", "denied", spec_apply(ns, "other")),
        (f"apply status.training of {ns}/other", "denied", status_apply(ns, "other")),
        (f"apply spec.model of {elsewhere}/listed (same name, namespace not listed)", "denied",
         spec_apply(elsewhere, "listed")),
        (f"list PhaseModels in {ns}", "denied",
         lambda: kube._call("listing", kube.api.list_namespaced_custom_object, GROUP, VERSION,
                            ns, PLURAL)),
        (f"delete {ns}/listed", "denied",
         lambda: kube._call("deleting", kube.api.delete_namespaced_custom_object, GROUP,
                            VERSION, ns, PLURAL, "listed")),
        (f"create {ns}/new (server-side apply of a new name)", "denied", spec_apply(ns, "new")),
    ]
    try:
        for what, want, call in rows:
            got = _attempt(what, want, call)
            assert got.startswith(want), (what, got)
            if want == "denied":
                assert "(403)" in got, (what, got)
    finally:
        api.close()
    # zero wrong writes: the PhaseModels it does not train are as they were
    for (w, n), old in before.items():
        now = custom.get_namespaced_custom_object(GROUP, VERSION, w, PLURAL, n)
        assert now["metadata"]["resourceVersion"] == old["metadata"]["resourceVersion"], (w, n)
        assert "model" not in now["spec"] and "status" not in now
    listed = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "listed")
    assert listed["spec"]["model"] == model and listed["status"]["training"]["decision"] == \
        "applied"


def test_the_trainer_command_on_another_phasemodel_stops_in_one_line(trainer, tmp_path):
    """`ai4dl train --phasemodel NS/other` as the trainer: its first request (GET) is refused,
    one line, exit code non-zero, before any query."""
    import os
    import sys

    env = {**os.environ, "KUBECONFIG": str(trainer["kubeconfig"])}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    r = subprocess.run([str(Path(sys.executable).with_name("ai4dl")), "train",
                        "--prometheus", "http://127.0.0.1:9", "--selector", 'pod="x"',
                        "--phasemodel", f"{trainer['ns']}/other", "--log-format", "text"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "forbidden" in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert f"phasemodels.ai4dl.io \"other\" is forbidden" in lines[0], lines[0]
    ROWS.append((f"`ai4dl train --phasemodel {trainer['ns']}/other` with the trainer's token",
                 "0", f"exit {r.returncode}: {lines[0][:100]}"))


CAN_I = [  # (verb, resource[/name], subresource, where: "ns" | "elsewhere", expected)
    ("get", "phasemodels/listed", "", "ns", "yes"),
    ("patch", "phasemodels/listed", "", "ns", "yes"),
    ("patch", "phasemodels/listed", "status", "ns", "yes"),
    ("get", "phasemodels/other", "", "ns", "no"),
    ("patch", "phasemodels/other", "", "ns", "no"),
    ("patch", "phasemodels/other", "status", "ns", "no"),
    ("list", "phasemodels", "", "ns", "no"),
    ("create", "phasemodels", "", "ns", "no"),
    ("delete", "phasemodels/listed", "", "ns", "no"),
    ("update", "phasemodels/listed", "", "ns", "no"),
    ("patch", "phasemodels/listed", "", "elsewhere", "no"),
    ("list", "pods", "", "ns", "yes"),
    ("list", "pods", "", "elsewhere", "no"),
    ("patch", "pods", "", "ns", "no"),
]


def test_can_i_matrix_with_the_trainers_own_token(kube_cluster, trainer):
    got = {}
    for verb, res, sub, where, want in CAN_I:
        args = ["auth", "can-i", verb, res, "-n", trainer[where]]
        args += [f"--subresource={sub}"] if sub else []
        r = kubectl(kube_cluster, *args, kubeconfig=trainer["kubeconfig"])
        got[(verb, res, sub, where)] = r.stdout.strip()
        assert r.stdout.strip() in ("yes", "no"), r.stderr
        ROWS.append((f"trainer token: kubectl auth can-i {verb} {res}"
                     + (f" --subresource={sub}" if sub else "") + f" -n <{where}>",
                     "-", f"{r.stdout.strip()} (expected {want})"))
    assert got == {(v, r, s, w): want for v, r, s, w, want in CAN_I}
