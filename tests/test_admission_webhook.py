"""The admission webhook on the real API server: the operator serves it over TLS on 127.0.0.1
(the configuration, from the chart's template, reaches it by URL: the test control plane has no
Service routing), writes its self-signed CA into the configuration's caBundle with its own
least-privilege token, and pods created with `kubectl apply` come back with their PhaseModel's
learned first-window requests. Every failure case leaves pod creation working: the operator
killed, a webhook too slow, one answering garbage, a PhaseModel without a model, the operator's
own namespace, a pod of a PhaseModel in mode Recommend."""

from __future__ import annotations

import copy
import http.server
import json
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from ai4dl.controller.pods import A_ADMISSION, A_ADMITTED
from ai4dl.controller.podstate import peek
from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION
from e2e_fixtures_k8s import delete_custom_objects
from e2e_fixtures_operator import (REPO, Operator, crd, free_port,  # noqa: F401 (fixtures)
                                   operator_kubeconfig, wait_for, write_report)

pytestmark = pytest.mark.integration

CONFIGURATION = "ai4dl-operator"          # deploy/rbac.yaml grants get/patch of this name
OPERATOR_NS = "ai4dl-system"
ROWS: list[tuple[str, str, str]] = []
BURSTABLE = {"requests": {"cpu": "4", "memory": "32Gi"}, "limits": {"memory": "64Gi"}}


def kubectl(kube_cluster, *args, input_=None, timeout=60):
    from e2e.controlplane.cluster import bin_dir

    return subprocess.run([str(bin_dir() / "kubectl"), "--kubeconfig",
                           str(kube_cluster.kubeconfig), *args], input=input_, text=True,
                          capture_output=True, timeout=timeout)


def chart_webhook_configuration(url: str) -> dict:
    """The chart's MutatingWebhookConfiguration, as deploy/ai4dl-operator.yaml renders it, with
    the Service reference replaced by ``url``."""
    docs = yaml.safe_load_all((REPO / "deploy" / "ai4dl-operator.yaml").read_text())
    mwc = next(d for d in docs if d and d["kind"] == "MutatingWebhookConfiguration")
    for hook in mwc["webhooks"]:
        hook["clientConfig"] = {"url": url}
    return mwc


@pytest.fixture(scope="module")
def doc(fitted_model, synthetic_train):
    """A model document with auto's choice and the head-room tables (their first-window level)
    for windows of 40 samples (600 s at 15 s)."""
    from ai4dl.crd_spec import PhaseModelSpec
    from ai4dl.method.model import PhaseModel
    from ai4dl.trainer import choose_served_policy

    m = PhaseModel.from_document(fitted_model.to_document())
    choose_served_policy(m, list(synthetic_train[0]),
                         PhaseModelSpec.model_validate(spec_of(m.features_, {})))
    return json.loads(m.to_document().model_dump_json(by_alias=True))


def names(doc) -> list[str]:
    return [f["name"] for f in doc["features"]]


def spec_of(features, policy: dict, model=None) -> dict:
    out = {"features": [{"name": f, "query": f + "{{{selector}}}"} for f in features],
           "stepSeconds": 15, "windowSeconds": 600, "selector": {"matchLabels": {"app": "train"}},
           "policy": {"mode": "InPlace", **policy}}
    if model is not None:
        out["model"] = model
    return out


@pytest.fixture(scope="module")
def webhook(kube_cluster, crd, operator_kubeconfig, tmp_path_factory):  # noqa: F811
    """The chart's webhook configuration (by URL) and the operator serving it."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    adm = client.AdmissionregistrationV1Api(kube_cluster.api_client)
    port = free_port()
    body = chart_webhook_configuration(f"https://127.0.0.1:{port}/admission")
    try:
        adm.delete_mutating_webhook_configuration(CONFIGURATION)
    except ApiException as err:
        if err.status != 404:
            raise
    adm.create_mutating_webhook_configuration(body)
    log = tmp_path_factory.mktemp("webhook") / "operator.log"
    # the API server authenticates: its webhook client certificate (CN WEBHOOK_CLIENT_CN, signed
    # by the cluster CA, which signs every user's certificate too: hence the name)
    client_auth = ()
    if client_auth_available(kube_cluster):
        from e2e.controlplane.cluster import WEBHOOK_CLIENT_CN

        client_auth = ("--webhook-client-ca-file", str(kube_cluster.control_plane.pki.ca_crt),
                       "--webhook-client-name", WEBHOOK_CLIENT_CN)
    op = Operator(operator_kubeconfig, "http://127.0.0.1:9", log, extra_args=(
        "--webhook-port", str(port), "--webhook-host", "127.0.0.1",
        "--webhook-configuration", CONFIGURATION, "--orphan-check-seconds", "0",
        *client_auth)).start()

    def ca_written():
        hooks = adm.read_mutating_webhook_configuration(CONFIGURATION).webhooks
        return all(h.client_config.ca_bundle for h in hooks)
    try:
        wait_for(ca_written, 60, what="the operator writing its CA into the configuration")
        yield op, adm, port
    finally:
        op.stop()
        try:
            adm.delete_mutating_webhook_configuration(CONFIGURATION)
        except ApiException:
            pass


def client_auth_available(kube_cluster) -> bool:
    """The test control plane presents a webhook client certificate (an existing cluster may
    not: the module then runs without client authentication, and its TLS test is skipped)."""
    cp = kube_cluster.control_plane
    return cp is not None and cp.webhook_client_crt is not None


def make_pm(kube_cluster, ns, name, spec):
    from kubernetes import client

    return client.CustomObjectsApi(kube_cluster.api_client).create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
                                     "metadata": {"name": name}, "spec": spec})


def pod_manifest(ns, name, pm="pm", resources=None, labels=None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns,
                         "labels": {OPT_IN_LABEL: "true", "app": "train", **(labels or {})},
                         "annotations": {MODEL_ANNOTATION: pm}},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                     "resources": copy.deepcopy(resources or BURSTABLE)}]}}


def apply_pod(kube_cluster, manifest, dry_run=False) -> tuple[dict, float]:
    """`kubectl apply` of a pod; the object as the API server stored it, and the seconds the
    apply took."""
    started = time.perf_counter()
    r = kubectl(kube_cluster, "apply", "-o", "json", *(["--dry-run=server"] if dry_run else []),
                "-f", "-", input_=json.dumps(manifest))
    took = time.perf_counter() - started
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), took


def requests_of(obj) -> dict:
    return obj["spec"]["containers"][0]["resources"].get("requests", {})


def annotations_of(obj) -> dict:
    return obj["metadata"].get("annotations") or {}


def wait_admitted(kube_cluster, ns, name="probe", pm="pm", timeout=30.0) -> dict:
    """Until the operator's index has the PhaseModel (a server-side dry run is admitted)."""
    def admitted():
        obj, _ = apply_pod(kube_cluster, pod_manifest(ns, name, pm), dry_run=True)
        return A_ADMISSION in annotations_of(obj) and obj
    return wait_for(admitted, timeout, interval=0.5, what=f"admission of pods of {pm}")


# ----------------------------------------------------------------------------- the happy path
def test_kubectl_apply_gets_the_learned_requests(kube_cluster, k8s_namespace, webhook, doc):
    op, _, _ = webhook
    make_pm(kube_cluster, k8s_namespace, "pm", spec_of(names(doc), {}, doc))
    wait_admitted(kube_cluster, k8s_namespace)
    obj, took = apply_pod(kube_cluster, pod_manifest(k8s_namespace, "job-0"))
    tables = doc["policyTables"][0]["resources"]
    want = {r["resource"]: r["coldStart"] for r in tables}
    from ai4dl.quantity import format_resource, parse_quantity

    got = requests_of(obj)
    assert got == {r: format_resource(r, v) for r, v in want.items()}, (got, annotations_of(obj))
    assert parse_quantity(got["memory"]) <= parse_quantity(BURSTABLE["limits"]["memory"])
    assert peek(annotations_of(obj)[A_ADMITTED]) == {"main": BURSTABLE["requests"]}   # sealed
    assert annotations_of(obj)[A_ADMISSION].startswith("set by PhaseModel pm")
    # what the API server stored, read back
    stored = kube_cluster.core.read_namespaced_pod("job-0", k8s_namespace)
    assert stored.spec.containers[0].resources.requests == got
    assert stored.spec.containers[0].resources.limits == BURSTABLE["limits"]
    ROWS.append(("InPlace PhaseModel with a model: `kubectl apply` of a pod asking 4 cores / "
                 "32Gi", f"created in {took:.2f} s with {got['cpu']} / {got['memory']}",
                 "ai4dl.io/admitted keeps the original requests"))
    assert "ai4dl_admissions_total{outcome=\"set\"}" in op.metrics()


def test_initial_mode_admits_and_recommend_mode_does_not(kube_cluster, k8s_namespace, webhook,
                                                        doc):
    features = names(doc)
    make_pm(kube_cluster, k8s_namespace, "first", spec_of(features, {"mode": "Initial"}, doc))
    make_pm(kube_cluster, k8s_namespace, "reco", spec_of(features, {"mode": "Recommend"}, doc))
    wait_admitted(kube_cluster, k8s_namespace, pm="first")
    obj, _ = apply_pod(kube_cluster, pod_manifest(k8s_namespace, "i-0", pm="first"))
    assert requests_of(obj) != BURSTABLE["requests"] and A_ADMITTED in annotations_of(obj)
    obj, _ = apply_pod(kube_cluster, pod_manifest(k8s_namespace, "r-0", pm="reco"))
    assert requests_of(obj) == BURSTABLE["requests"] and A_ADMISSION not in annotations_of(obj)


# ----------------------------------------------------------------------------- unchanged, said
def test_a_phasemodel_without_a_model_admits_unchanged_with_the_reason(kube_cluster,
                                                                      k8s_namespace, webhook,
                                                                      doc):
    make_pm(kube_cluster, k8s_namespace, "untrained",
            spec_of(names(doc), {}))
    wait_admitted(kube_cluster, k8s_namespace, pm="untrained")
    obj, _ = apply_pod(kube_cluster, pod_manifest(k8s_namespace, "u-0", pm="untrained"))
    assert requests_of(obj) == BURSTABLE["requests"]
    assert annotations_of(obj)[A_ADMISSION] == \
        "unchanged: PhaseModel untrained: it has no model yet"
    # a Guaranteed pod keeps its QoS class
    make_pm(kube_cluster, k8s_namespace, "pm", spec_of(names(doc),
                                                      {}, doc))
    wait_admitted(kube_cluster, k8s_namespace)
    fixed = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
    obj, _ = apply_pod(kube_cluster, pod_manifest(k8s_namespace, "g-0", resources=fixed))
    assert obj["spec"]["containers"][0]["resources"] == fixed
    assert obj["status"].get("qosClass") in (None, "Guaranteed")
    assert "the pod is Guaranteed" in annotations_of(obj)[A_ADMISSION]
    ROWS.append(("PhaseModel without a model; a Guaranteed pod", "created unchanged",
                 "ai4dl.io/admission says why"))


def test_the_operators_own_namespace_is_never_sent(kube_cluster, webhook, doc):
    from kubernetes.client.exceptions import ApiException

    features = names(doc)
    try:
        make_pm(kube_cluster, OPERATOR_NS, "pm", spec_of(features, {}, doc))
    except ApiException as err:
        if err.status != 409:
            raise
    try:
        obj, _ = apply_pod(kube_cluster, pod_manifest(OPERATOR_NS, "own-0"), dry_run=True)
        assert requests_of(obj) == BURSTABLE["requests"] and \
            A_ADMISSION not in annotations_of(obj)
    finally:
        # the operator's namespace outlives the module: its PhaseModel must not
        delete_custom_objects(kube_cluster, OPERATOR_NS, group=GROUP)


# ----------------------------------------------------------------------------- never blocking
class _FakeWebhook:
    """A TLS server on 127.0.0.1 that answers admission reviews slowly or with garbage."""

    def __init__(self, behaviour: str, folder: Path):
        from ai4dl.controller.webhook import make_ca, make_serving

        ca, ca_key = make_ca()
        cert = make_serving(ca, ca_key, ["127.0.0.1"])
        (folder / "tls.crt").write_bytes(cert.cert_pem)
        (folder / "tls.key").write_bytes(cert.key_pem)
        self.ca_pem = ca.cert_pem
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if outer.behaviour == "slow":
                    time.sleep(10)
                body = b"<html>not an AdmissionReview</html>"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        self.behaviour = behaviour
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(folder / "tls.crt", folder / "tls.key")
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.mark.parametrize("behaviour", ["slow", "garbage"])
def test_a_slow_or_broken_webhook_never_blocks_pod_creation(kube_cluster, k8s_namespace,
                                                           webhook, behaviour, tmp_path):
    import base64

    _, adm, _ = webhook
    fake = _FakeWebhook(behaviour, tmp_path)
    body = chart_webhook_configuration(f"https://127.0.0.1:{fake.port}/admission")
    body["metadata"] = {"name": f"ai4dl-test-{behaviour}"}
    for hook in body["webhooks"]:
        hook["clientConfig"]["caBundle"] = base64.b64encode(fake.ca_pem).decode()
        hook["objectSelector"]["matchLabels"]["ai4dl-test"] = behaviour
    adm.create_mutating_webhook_configuration(body)
    try:
        time.sleep(2)                          # the API server picks up a new configuration
        obj, took = apply_pod(kube_cluster, pod_manifest(k8s_namespace, f"{behaviour}-0",
                                                         labels={"ai4dl-test": behaviour}))
    finally:
        adm.delete_mutating_webhook_configuration(body["metadata"]["name"])
        fake.close()
    assert requests_of(obj) == BURSTABLE["requests"]
    timeout = body["webhooks"][0]["timeoutSeconds"]
    if behaviour == "slow":
        assert timeout - 0.5 <= took < timeout + 5, took
    else:
        assert took < timeout, took
    what = "slow (10 s)" if behaviour == "slow" else "answering garbage"
    ROWS.append((f"a webhook that is {what}", f"created unchanged in {took:.1f} s",
                 f"failurePolicy Ignore, timeoutSeconds {timeout}"))


def test_a_dead_operator_never_blocks_pod_creation(kube_cluster, k8s_namespace, webhook, doc):
    op, adm, _ = webhook
    make_pm(kube_cluster, k8s_namespace, "pm", spec_of(names(doc),
                                                      {}, doc))
    wait_admitted(kube_cluster, k8s_namespace)
    op.stop(sig=9)                             # killed: nothing listens on the port any more
    try:
        obj, took = apply_pod(kube_cluster, pod_manifest(k8s_namespace, "dead-0"))
        assert requests_of(obj) == BURSTABLE["requests"] and A_ADMISSION not in annotations_of(obj)
        assert took < 3, took
        ROWS.append(("the operator killed (SIGKILL)", f"created unchanged in {took:.2f} s",
                     "connection refused: failurePolicy Ignore"))
    finally:
        op.start()                             # the module's later tests (and the CA) again

        def ca_rewritten():
            obj, _ = apply_pod(kube_cluster, pod_manifest(k8s_namespace, "probe"), dry_run=True)
            return A_ADMITTED in annotations_of(obj)
        wait_for(ca_rewritten, 60, what="the restarted operator admitting again (its new CA)")


# ----------------------------------------------------------------------------- least privilege
def test_the_operator_may_write_only_its_configurations_ca_bundle(kube_cluster, webhook,
                                                                  operator_kubeconfig):  # noqa: F811
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    api = config.new_client_from_config(config_file=str(operator_kubeconfig))
    adm = client.AdmissionregistrationV1Api(api)
    try:
        hooks = adm.read_mutating_webhook_configuration(CONFIGURATION).webhooks
        ca = hooks[0].client_config.ca_bundle
        # the CA bundle: allowed (what the operator does)
        adm.patch_mutating_webhook_configuration(CONFIGURATION, [
            {"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": ca}])
        refused = {
            "point the webhook elsewhere": (CONFIGURATION, [
                {"op": "replace", "path": "/webhooks/0/clientConfig/url",
                 "value": "https://attacker.example:443/admission"}]),
            "make it Fail closed": (CONFIGURATION, [
                {"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Fail"}]),
            "widen it to every pod": (CONFIGURATION, [
                {"op": "replace", "path": "/webhooks/0/objectSelector", "value": {}}]),
        }
        for what, (name, ops) in refused.items():
            with pytest.raises(ApiException) as err:
                adm.patch_mutating_webhook_configuration(name, ops)
            assert err.value.status in (403, 422), (what, err.value.status)
            ROWS.append((f"the operator's token: {what}", f"refused ({err.value.status})",
                         "the webhook-writes admission policy"))
        for verb, call in (("read another configuration",
                            lambda: adm.read_mutating_webhook_configuration("other")),
                           ("list configurations",
                            lambda: adm.list_mutating_webhook_configuration()),
                           ("delete its configuration",
                            lambda: adm.delete_mutating_webhook_configuration(CONFIGURATION))):
            with pytest.raises(ApiException) as err:
                call()
            assert err.value.status == 403, (verb, err.value.status)
            ROWS.append((f"the operator's token: {verb}", "refused (403)", "RBAC"))
    finally:
        api.close()


# ----------------------------------------------------------------------------- only the API server
FAULTS: list[tuple[str, str, str]] = []   # (bad input, wrong writes, signals)


def review(ns: str, pod: dict) -> dict:
    """An AdmissionReview as the API server sends it for the CREATE of ``pod`` in ``ns``."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "00000000-0000-0000-0000-000000000001",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": ns, "operation": "CREATE", "userInfo": {"username": "someone"},
        "object": pod, "dryRun": True}}


def post_review(port: int, body: dict, cert: tuple | None = None,
                tls12: bool = False) -> tuple[int, dict]:
    """POST a review to the operator's webhook (trusting any server certificate: what is tested
    is the server's check of the client). Returns (HTTP status, the JSON answer or {}).
    ``tls12``: in TLS 1.2 a refused client certificate fails the handshake itself (TLS 1.3
    reports it after, as a closed connection)."""
    import http.client

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if cert:
        ctx.load_cert_chain(*map(str, cert))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("POST", "/admission", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read()
        return resp.status, (json.loads(text) if resp.status == 200 else {})
    finally:
        conn.close()


def patched(answer: dict) -> list[dict]:
    import base64

    patch = (answer.get("response") or {}).get("patch")
    return json.loads(base64.b64decode(patch)) if patch else []


def request_writes(ops: list[dict]) -> list[dict]:
    """The operations of a JSON patch that touch the pod's spec (its requests)."""
    return [op for op in ops if op["path"].startswith("/spec")]


def test_the_webhook_answers_only_the_api_server(kube_cluster, k8s_namespace, webhook, doc,
                                                 tmp_path):
    if not client_auth_available(kube_cluster):
        pytest.skip("the cluster presents no webhook client certificate (existing cluster)")
    from e2e.controlplane.cluster import PKI, WEBHOOK_CLIENT_CN

    _, _, port = webhook
    cp = kube_cluster.control_plane
    make_pm(kube_cluster, k8s_namespace, "pm", spec_of(names(doc), {}, doc))
    wait_admitted(kube_cluster, k8s_namespace)       # the API server's calls are answered
    body = review(k8s_namespace, pod_manifest(k8s_namespace, "forged"))
    # the API server's own certificate: answered, with the learned requests (the control)
    for tls12 in (False, True):
        status, answer = post_review(port, body, (cp.webhook_client_crt, cp.webhook_client_key),
                                     tls12=tls12)
        assert status == 200 and request_writes(patched(answer)), answer
    other = PKI(tmp_path / "other-ca").generate()
    for what, cert in (("no client certificate", None),
                       ("a certificate of another CA, the API server's CN",
                        other.client_cert("impostor", WEBHOOK_CLIENT_CN))):
        with pytest.raises(ssl.SSLError) as err:
            post_review(port, body, cert, tls12=True)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            post_review(port, body, cert)                  # TLS 1.3: no answer either
        FAULTS.append((f"a forged AdmissionReview naming another namespace's PhaseModel, {what}",
                       "none (no answer)", f"TLS handshake refused ({err.value.reason})"))
    # a certificate of the cluster CA (every user's) with another common name: 403, no answer
    status, answer = post_review(port, body, (cp.admin_crt, cp.admin_key))
    assert status == 403 and answer == {}, (status, answer)
    FAULTS.append(("the same review with a cluster user's certificate (CN admin)",
                   "none (no answer)", "HTTP 403: --webhook-client-name"))
    # and the API server still gets answers: a real pod is created with the learned requests
    obj, _ = apply_pod(kube_cluster, pod_manifest(k8s_namespace, "after-tls"))
    assert requests_of(obj) != BURSTABLE["requests"] and A_ADMITTED in annotations_of(obj)


def test_a_review_is_answered_for_its_own_namespace_only(kube_cluster, k8s_namespace, webhook,
                                                        doc):
    """Even an authenticated caller (the worst case: client authentication off) learns nothing
    of a PhaseModel outside the review's request.namespace."""
    _, _, port = webhook
    cert = None
    if client_auth_available(kube_cluster):
        cp = kube_cluster.control_plane
        cert = (cp.webhook_client_crt, cp.webhook_client_key)
    make_pm(kube_cluster, k8s_namespace, "pm", spec_of(names(doc), {}, doc))
    wait_admitted(kube_cluster, k8s_namespace)
    victim = pod_manifest(k8s_namespace, "v")
    status, answer = post_review(port, review(k8s_namespace, victim), cert)
    assert status == 200 and request_writes(patched(answer)), answer      # the control
    cases = {
        "request.namespace attacker, the pod's metadata.namespace the victim's":
            review("attacker", victim),
        "request.namespace the victim's, the pod's metadata.namespace attacker":
            review(k8s_namespace, pod_manifest("attacker", "v")),
        "request.namespace the victim's, the pod without metadata.namespace":
            review(k8s_namespace, {**victim, "metadata": {
                k: v for k, v in victim["metadata"].items() if k != "namespace"}}),
        "request.namespace attacker, the pod in attacker naming the victim's PhaseModel name":
            review("attacker", pod_manifest("attacker", "v")),
    }
    for what, body in cases.items():
        status, answer = post_review(port, body, cert)
        ops = patched(answer)
        assert status == 200 and answer["response"]["allowed"] is True, (what, answer)
        assert request_writes(ops) == [], (what, ops)
        assert A_ADMITTED not in json.dumps(ops), (what, ops)
        note = [op["value"] for op in ops if op["path"].startswith("/metadata/annotations")]
        FAULTS.append((what, "0 requests written, no level in the answer",
                       "ai4dl.io/admission: " + (json.dumps(note)[:90] if note else "none")))


# ----------------------------------------------------------------------------- never refusing
def create_limit_range(kube_cluster, ns: str, limits: list[dict], name="lr") -> None:
    kube_cluster.core.create_namespaced_limit_range(ns, {
        "metadata": {"name": name}, "spec": {"limits": limits}})


def accepted_without_the_webhook(kube_cluster, manifest: dict) -> dict:
    """The API server's own answer for ``manifest`` without the webhook (the opt-in label off,
    so it is never sent): it must accept it, else the case tests nothing."""
    plain = copy.deepcopy(manifest)
    plain["metadata"]["labels"].pop(OPT_IN_LABEL)
    r = kubectl(kube_cluster, "create", "--dry-run=server", "-o", "json", "-f", "-",
                input_=json.dumps(plain))
    assert r.returncode == 0, f"the API server refuses the pod even without the webhook: {r.stderr}"
    return json.loads(r.stdout)


def create_through_the_webhook(kube_cluster, manifest: dict) -> dict:
    """Create the pod (opted in: sent to the webhook); it must be accepted."""
    r = kubectl(kube_cluster, "create", "-o", "json", "-f", "-", input_=json.dumps(manifest))
    assert r.returncode == 0, f"refused only because of the webhook: {r.stderr}"
    return json.loads(r.stdout)


@pytest.fixture
def learned(kube_cluster, k8s_namespace, webhook, doc) -> dict:
    """PhaseModel pm in the test's namespace, admitted; its learned levels {resource: value}."""
    from ai4dl.quantity import format_resource, parse_quantity

    make_pm(kube_cluster, k8s_namespace, "pm", spec_of(names(doc), {}, doc))
    wait_admitted(kube_cluster, k8s_namespace)
    return {r["resource"]: parse_quantity(format_resource(r["resource"], r["coldStart"]))
            for r in doc["policyTables"][0]["resources"]}


def containers(manifest_or_obj) -> list[dict]:
    return manifest_or_obj["spec"]["containers"]


def test_limit_range_min_and_ratio_are_kept(kube_cluster, k8s_namespace, learned):
    """Container min above the learned cpu level; memory limit / maxLimitRequestRatio above the
    learned memory level: the requests are raised to the bounds, never refused."""
    from ai4dl.quantity import format_resource, parse_quantity

    cpu, mem = learned["cpu"], learned["memory"]
    cpu_min = format_resource("cpu", 2 * cpu)
    mem_limit = format_resource("memory", 8 * mem)
    create_limit_range(kube_cluster, k8s_namespace, [{
        "type": "Container", "min": {"cpu": cpu_min},
        "maxLimitRequestRatio": {"memory": "2"}}])
    res = {"requests": {"cpu": format_resource("cpu", 4 * cpu),
                        "memory": format_resource("memory", 6 * mem)},
           "limits": {"memory": mem_limit}}
    manifest = pod_manifest(k8s_namespace, "lr-0", resources=res)
    accepted_without_the_webhook(kube_cluster, manifest)
    obj = create_through_the_webhook(kube_cluster, manifest)
    got = requests_of(obj)
    assert parse_quantity(got["cpu"]) == parse_quantity(cpu_min), got          # raised to min
    half = parse_quantity(mem_limit) / 2                                       # limit / ratio
    assert half <= parse_quantity(got["memory"]) < half + 2 ** 20, got
    assert annotations_of(obj)[A_ADMISSION].startswith("set by PhaseModel pm")
    FAULTS.append(("a LimitRange: Container min cpu 2x the learned level, memory "
                   "maxLimitRequestRatio 2 (limit 8x)", "0 refusals (was 403)",
                   f"requests clamped to {got['cpu']} / {got['memory']}"))


def test_limit_range_defaults_and_pod_min_are_kept(kube_cluster, k8s_namespace, learned):
    """A Pod-type min on the pod's total memory above the learned level: memory keeps every
    container's own request; a LimitRange defaultRequest for cpu is the request admission sees
    and may set."""
    from ai4dl.quantity import format_resource, parse_quantity

    mem = learned["memory"]
    own = format_resource("memory", 4 * mem)
    pod_min = format_resource("memory", 3 * mem)
    create_limit_range(kube_cluster, k8s_namespace, [
        {"type": "Pod", "min": {"memory": pod_min}},
        {"type": "Container", "defaultRequest": {"cpu": "3"}, "default": {"cpu": "6"}}])
    manifest = pod_manifest(k8s_namespace, "lrpod-0", resources={"requests": {"memory": own}})
    accepted_without_the_webhook(kube_cluster, manifest)
    obj = create_through_the_webhook(kube_cluster, manifest)
    got = requests_of(obj)
    assert got["memory"] == own, got
    assert parse_quantity(got["cpu"]) == learned["cpu"], got     # the defaulted request, set
    note = annotations_of(obj)[A_ADMISSION]
    assert f"memory of every container: the pod's total would break LimitRange lr Pod min " \
           f"{pod_min}" in note, note
    FAULTS.append((f"a LimitRange: Pod min memory {pod_min} above the learned level",
                   "0 refusals (was 403), memory unchanged", "ai4dl.io/admission names the rule"))


def create_quota(kube_cluster, ns: str, hard: dict, used: dict, name="q") -> None:
    """A ResourceQuota and its status as the quota controller would count it (this control
    plane runs no kube-controller-manager; the API server's quota admission reads the
    status)."""
    kube_cluster.core.create_namespaced_resource_quota(ns, {"metadata": {"name": name},
                                                            "spec": {"hard": hard}})
    kube_cluster.core.replace_namespaced_resource_quota_status(name, ns, {
        "metadata": {"name": name}, "spec": {"hard": hard},
        "status": {"hard": hard, "used": used}})


def test_a_raise_past_a_resource_quota_is_not_made(kube_cluster, k8s_namespace, learned):
    """Issue 43: admission raised a request past what a ResourceQuota had left, and the API
    server refused a pod it would otherwise admit (403 exceeded quota)."""
    from ai4dl.quantity import format_resource

    mem = learned["memory"]
    own = format_resource("memory", mem / 4)
    hard = format_resource("memory", mem / 2)
    create_quota(kube_cluster, k8s_namespace, {"requests.memory": hard},
                 {"requests.memory": "0"})
    manifest = pod_manifest(k8s_namespace, "quota-0", resources={"requests": {"memory": own}})
    accepted_without_the_webhook(kube_cluster, manifest)
    # the webhook's index sees the quota's status by a watch event: a dry run through it
    # succeeds once it has (before, the raise is what the API server refuses)
    wait_for(lambda: kubectl(kube_cluster, "create", "--dry-run=server", "-o", "json", "-f",
                             "-", input_=json.dumps(manifest)).returncode == 0, 15,
             what="a dry run through the webhook accepted")
    obj = create_through_the_webhook(kube_cluster, manifest)
    assert requests_of(obj)["memory"] == own, requests_of(obj)
    note = annotations_of(obj)[A_ADMISSION]
    assert f"memory not raised: the pod would exceed ResourceQuota q requests.memory (hard " \
           f"{hard}" in note, note
    FAULTS.append((f"a ResourceQuota: requests.memory {hard}, the learned level "
                   f"{format_resource('memory', mem)} above it", "0 refusals (was 403), memory "
                   "unchanged", "ai4dl.io/admission names the quota and its room"))


def test_pod_level_resources_are_kept(kube_cluster, k8s_namespace, learned):
    """Pod-level spec.resources (PodLevelResources): two containers whose learned cpu would sum
    above the pod's cpu keep their own; memory fits and is set."""
    from ai4dl.quantity import format_resource, parse_quantity

    cpu, mem = learned["cpu"], learned["memory"]
    half = format_resource("cpu", cpu / 2)
    manifest = pod_manifest(k8s_namespace, "plr-0", resources={
        "requests": {"cpu": half, "memory": format_resource("memory", 4 * mem)}})
    second = copy.deepcopy(containers(manifest)[0])
    second["name"] = "second"
    containers(manifest).append(second)
    manifest["spec"]["resources"] = {"requests": {
        "cpu": format_resource("cpu", 2 * parse_quantity(half)),
        "memory": format_resource("memory", 8 * mem)}}
    plain = accepted_without_the_webhook(kube_cluster, manifest)
    assert plain["spec"].get("resources"), "PodLevelResources is off in this API server"
    obj = create_through_the_webhook(kube_cluster, manifest)
    for c in containers(obj):
        assert c["resources"]["requests"]["cpu"] == half, c
        assert parse_quantity(c["resources"]["requests"]["memory"]) == mem, c
    assert "cpu of every container: the containers' requests would sum above the pod's " \
           "spec.resources" in annotations_of(obj)[A_ADMISSION]
    FAULTS.append(("pod-level spec.resources cpu = the containers' sum, below the learned sum",
                   "0 refusals (was 422), cpu unchanged", "ai4dl.io/admission names the rule"))


def test_a_limit_only_container_is_given_no_request(kube_cluster, k8s_namespace, learned):
    """A memory limit and nothing else: the memory request (defaulted to the limit) stays, no
    cpu request appears; the other container is set."""
    manifest = pod_manifest(k8s_namespace, "lim-0",
                            resources={"limits": {"memory": "8Gi"}})
    second = {"name": "second", "image": "registry.k8s.io/pause:3.10",
              "resources": copy.deepcopy(BURSTABLE)}
    containers(manifest).append(second)
    plain = accepted_without_the_webhook(kube_cluster, manifest)
    obj = create_through_the_webhook(kube_cluster, manifest)
    assert containers(obj)[0]["resources"] == containers(plain)[0]["resources"] == {
        "limits": {"memory": "8Gi"}, "requests": {"memory": "8Gi"}}
    assert requests_of({"spec": {"containers": containers(obj)[1:]}}) != BURSTABLE["requests"]
    note = annotations_of(obj)[A_ADMISSION]
    assert "main cpu: it has no request (none is added)" in note, note
    assert "main memory: its request equals its limit" in note, note
    FAULTS.append(("a container with a memory limit only (no cpu at all)",
                   "0 requests added or changed on it", "ai4dl.io/admission names the rule"))


# ----------------------------------------------------------------------------- workload profiles
def test_a_known_workload_starts_from_its_profile(kube_cluster, k8s_namespace, webhook, doc,
                                                  operator_kubeconfig):
    """Issue 42 on the real API server: the operator's ServiceAccount writes a WorkloadProfile
    (as the window loop does when an execution ends: ai4dl.controller.profiles.ProfileStore),
    the running operator's index reads it, and the workload's next pod is admitted with the
    profile's first request; another workload's pod gets the pooled level. A profile a cluster
    admin forged (sealed with another key) is not used. A namespace admin has no verb on it."""
    from kubernetes import client, config

    from ai4dl.controller.podstate import StateKey
    from ai4dl.controller.pods import A_WORKLOAD
    from ai4dl.controller.profiles import ProfileStore, profile_object
    from ai4dl.crd_profile import PROFILE_PLURAL
    from ai4dl.rules.workload_profile import RunSummary, profile_from_runs
    from ai4dl.quantity import parse_quantity
    from e2e_fixtures_operator import state_key_file

    op, _, _ = webhook
    pm = make_pm(kube_cluster, k8s_namespace, "pm", spec_of(names(doc), {}, doc))
    wait_admitted(kube_cluster, k8s_namespace)
    resources = ("cpu", "memory")
    run = RunSummary(time.time() - 60, 600.0, (0.5, 3 * 2 ** 30), (1.0, 4 * 2 ** 30),
                     (30.0, 300.0), early=((0.5, 3 * 2 ** 30),), run_id="r1")
    api = config.new_client_from_config(config_file=str(operator_kubeconfig))
    try:
        key = StateKey.from_file(state_key_file(op.log.parent))
        store = ProfileStore(client.CustomObjectsApi(api), k8s_namespace, "pm", key)
        assert store.record_runs("Label/train", [("main", run)], resources,
                                 pm["metadata"]["uid"], time.time(), 1.0)
        assert store.record_runs("Label/train", [("main", run)], resources,
                                 pm["metadata"]["uid"], time.time(), 1.0) is None  # seen: none
        assert store.writes == 1
    finally:
        api.close()
    want = profile_from_runs(resources, [run]).first_request(time.time(), 1.0)

    def admitted_from_profile():
        obj, _ = apply_pod(kube_cluster, pod_manifest(k8s_namespace, "train-1",
                                                      labels={"ai4dl.io/workload": "train"}),
                           dry_run=True)
        return "profile" in annotations_of(obj).get(A_ADMISSION, "") and obj
    obj = wait_for(admitted_from_profile, 30, interval=0.5, what="the profile in the index")
    got = requests_of(obj)
    assert parse_quantity(got["memory"]) == pytest.approx(want[1], rel=1e-3)
    assert parse_quantity(got["cpu"]) == pytest.approx(want[0], rel=2e-3)
    assert annotations_of(obj)[A_WORKLOAD] == "Label/train"
    # a Guaranteed pod of the workload: request and limit, the API server keeps it Guaranteed
    both = {"cpu": "2", "memory": "8Gi"}
    guaranteed, _ = apply_pod(kube_cluster, pod_manifest(
        k8s_namespace, "train-g", labels={"ai4dl.io/workload": "train"},
        resources={"requests": both, "limits": both}), dry_run=True)
    res = guaranteed["spec"]["containers"][0]["resources"]
    assert res["requests"] == res["limits"] == got, res
    assert guaranteed["status"]["qosClass"] == "Guaranteed"
    other, _ = apply_pod(kube_cluster, pod_manifest(k8s_namespace, "eval-1",
                                                    labels={"ai4dl.io/workload": "eval"}),
                         dry_run=True)
    pooled = {r["resource"]: r["coldStart"] for r in doc["policyTables"][0]["resources"]}
    assert parse_quantity(requests_of(other)["memory"]) == pytest.approx(pooled["memory"],
                                                                         rel=1e-3)
    assert "profile" not in annotations_of(other)[A_ADMISSION]

    # a cluster admin writes a profile for "eval" sealed with another key: not used
    custom = client.CustomObjectsApi(kube_cluster.api_client)
    forged = profile_object(k8s_namespace, "pm", pm["metadata"]["uid"], "Label/eval",
                            {"main": profile_from_runs(resources, [run])},
                            StateKey(b"f" * 32), time.time(), 1.0)
    custom.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PROFILE_PLURAL, forged)
    time.sleep(2)           # the index has had time to see it
    again, _ = apply_pod(kube_cluster, pod_manifest(k8s_namespace, "eval-2",
                                                    labels={"ai4dl.io/workload": "eval"}),
                         dry_run=True)
    assert requests_of(again) == requests_of(other), annotations_of(again)

    # what the chart's roles allow: the operator all it needs, a namespace admin nothing
    authz = client.AuthorizationV1Api(kube_cluster.api_client)

    def can(user, groups, verb):
        review = {"spec": {"user": user, "groups": groups, "resourceAttributes": {
            "verb": verb, "resource": PROFILE_PLURAL, "group": GROUP,
            "namespace": k8s_namespace}}}
        return authz.create_subject_access_review(review).status.allowed
    operator = ("system:serviceaccount:ai4dl-system:ai4dl-operator",
                ["system:serviceaccounts", "system:serviceaccounts:ai4dl-system"])
    assert all(can(*operator, v) for v in ("get", "list", "watch", "create", "update",
                                           "delete"))
    assert not can(*operator, "patch")
    from kubernetes.client.exceptions import ApiException

    rbac = client.RbacAuthorizationV1Api(kube_cluster.api_client)
    try:
        rbac.create_namespaced_role_binding(k8s_namespace, {
            "metadata": {"name": "tenant-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "admin"},
            "subjects": [{"kind": "User", "name": "tenant", "apiGroup":
                          "rbac.authorization.k8s.io"}]})
    except ApiException as err:
        if err.status != 409:
            raise
    assert can("tenant", [], "create") is False and can("tenant", [], "update") is False
    assert can("tenant", [], "get") is False
    ROWS.append(("a workload with a WorkloadProfile (1 run, memory first window 3Gi)",
                 f"created with {got['cpu']} / {got['memory']} (its profile); another "
                 f"workload {requests_of(other)['cpu']} / {requests_of(other)['memory']}",
                 "a forged profile is not used; a namespace admin has no verb on profiles"))


@pytest.fixture(scope="module", autouse=True)
def fault_table(request):
    yield
    write_report(request, "admission: bad input", "| bad input | wrong writes | signals |",
                 FAULTS, append=True)


def test_report(request):
    write_report(request, "admission webhook on the real API server",
                 "| case | outcome | why |", ROWS)
