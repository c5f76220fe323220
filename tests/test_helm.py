"""The Helm chart (charts/ai4dl-operator) and the plain manifests rendered from it (deploy/).

Offline checks (helm only): lint, the values schema's one-line errors, what the templates render
(security context, probes, least-privilege RBAC), the chart's CRD = the generated CRD, deploy/ in
sync with the chart. Against the real API server (``kube_cluster``; marked ``integration``):
server-side dry runs of everything rendered, and ``helm install`` -> the operator started from
the entrypoint and arguments of the installed Deployment, as the chart's ServiceAccount -> a
PhaseModel gets its status -> ``helm uninstall`` leaves nothing behind but the CRD (Helm never
deletes CRDs from a chart's crds/ folder, by design).

helm comes from ``e2e/helm/build.sh`` (Go module proxy, cached in ~/.cache/ai4dl/bin); if it
cannot be built the tests skip, unless ``CI`` is set (then they fail).
"""

from __future__ import annotations

import base64
import filecmp
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from ai4dl.controller.pods import OWNED_ANNOTATIONS
from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION
from ai4dl.crd_spec import default_features
from e2e.controlplane import cluster as _cp
from e2e_fixtures_operator import free_port, stop_process

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "ai4dl-operator"
ALL_FEATURES = CHART / "ci" / "all-features-values.yaml"
URL = "http://prometheus.example:9090"
#: The chart names no published image (issue 45): every render here names one.
IMAGE = "registry.example/ai4dl-operator"
WITH_IMAGE = ("--set", f"image.repository={IMAGE}")


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def helm() -> Path:
    path = _cp.bin_dir() / "helm"
    r = subprocess.run(["bash", str(REPO / "e2e" / "helm" / "build.sh")], capture_output=True,
                       text=True, timeout=1800)
    if r.returncode != 0 or not path.is_file():
        msg = f"cannot build helm (e2e/helm/build.sh): {(r.stderr.strip().splitlines() or ['?'])[-1]}"
        if _ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return path


@pytest.fixture(scope="session")
def helm_env(tmp_path_factory) -> dict:
    """helm's config/cache/data in a temporary folder (nothing written to ~/.config/helm)."""
    home = tmp_path_factory.mktemp("helm-home")
    return {**os.environ, "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_CACHE_HOME": str(home / "cache"), "HELM_DATA_HOME": str(home / "data")}


def run(cmd, env=None, check=True, timeout=120) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n"
                             f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def template(helm, helm_env, *args, release="ai4dl-operator", namespace="ai4dl-system"):
    out = run([helm, "template", release, CHART, "--namespace", namespace, *WITH_IMAGE, *args],
              helm_env).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


# ----------------------------------------------------------------------------- offline
def test_chart_crd_is_the_generated_crd():
    for name in ("phasemodels.ai4dl.io.yaml", "workloadprofiles.ai4dl.io.yaml"):
        chart_crd = CHART / "crds" / name
        assert chart_crd.read_bytes() == (REPO / "crds" / name).read_bytes(), (
            f"charts/ai4dl-operator/crds/{name} differs from crds/: run `make generate`")
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(
        p.name for p in (REPO / "crds").iterdir())


@pytest.mark.parametrize("values", [["--set", f"prometheus.url={URL}", *WITH_IMAGE],
                                    ["-f", str(ALL_FEATURES)]], ids=["defaults", "all-features"])
def test_helm_lint(helm, helm_env, values):
    r = run([helm, "lint", CHART, "--strict", *values], helm_env)
    assert "0 chart(s) failed" in r.stdout


@pytest.mark.parametrize("args, message", [
    ([], "prometheus.url is required: helm install ... --set prometheus.url=http://PROMETHEUS:9090"),
    (["--set", "prometheus.url=prometheus:9090"], "at '/prometheus/url': 'prometheus:9090' does not match pattern"),
    (["--set", f"prometheus.url={URL}", "--set", "operator.replicas=2"], "at '/operator/replicas': maximum: got 2, want 1"),
    (["--set", f"prometheus.url={URL}", "--set", "promethues.timeout=3"], "additional properties 'promethues' not allowed"),
    (["--set", f"prometheus.url={URL}", "--set", "examplePhaseModel.enabled=true",
      "--set", "examplePhaseModel.policy.mode=Auto"], "at '/examplePhaseModel/policy/mode': value must be one of 'Off', 'Initial', 'Recommend', 'InPlace'"),
    (["--set", f"prometheus.url={URL}", "--set", "trainer.enabled=true"], "trainer.enabled needs at least one entry in trainer.phaseModels"),
    (["--set", f"prometheus.url={URL}", "--set", "webhook.networkPolicy.enabled=true"],
     "webhook.networkPolicy.from: name the API server's sources"),
    (["--set", f"prometheus.url={URL}", "--set", "webhook.clientAuth.caKey=../x"],
     "at '/webhook/clientAuth/caKey': '../x' does not match pattern"),
    (["--set", f"prometheus.url={URL}", "--set", "operator.hostNetwork=yes"],
     "at '/operator/hostNetwork': got string, want boolean"),
    (["--set", f"prometheus.url={URL}", "--set", "webhook.clientAuth.caConfigMap=ca"],
     "webhook.clientAuth.allowedNames: name the API server's client certificate"),
    (["--set", f"prometheus.url={URL}", "--set", "operator.kubeApiBurst=0"],
     "at '/operator/kubeApiBurst': minimum: got 0, want 1"),
    (["--set", f"prometheus.url={URL}", "--set", "operator.kubeApiQps=-5"],
     "at '/operator/kubeApiQps'"),
    (["--set", f"prometheus.url={URL}", "--set", "operator.podRecordShare=5"],
     "at '/operator/podRecordShare'"),
], ids=["no-url", "url-without-scheme", "two-replicas", "typo", "bad-mode", "trainer-without-models",
        "network-policy-without-sources", "ca-key-path", "host-network-not-a-boolean",
        "client-auth-without-names", "write-burst-zero", "write-qps-negative",
        "record-share-above-one"])
def test_wrong_values_fail_at_install_time(helm, helm_env, args, message):
    r = run([helm, "template", "x", CHART, *WITH_IMAGE, *args], helm_env, check=False)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr


@pytest.mark.parametrize("args, what, target", [
    (["--set", f"prometheus.url={URL}"], "image", "operator"),
    (["--set", f"prometheus.url={URL}", *WITH_IMAGE, "--set", "trainer.enabled=true",
      "--set-json", 'trainer.phaseModels=[{"name": "m", "selector": "namespace=\\"ml\\""}]'],
     "trainer.image", "trainer"),
], ids=["operator", "trainer"])
def test_no_image_repository_fails_in_one_line_saying_how_to_build_one(helm, helm_env, args,
                                                                      what, target):
    """No registry publishes the image: a chart that rendered a placeholder would install and
    sit in ImagePullBackOff (issue 45). One line, naming the value and how to build it."""
    r = run([helm, "template", "x", CHART, *args], helm_env, check=False)
    assert r.returncode != 0
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("Error:")]
    assert line.endswith(f"{what}.repository is required: no registry publishes the image; "
                         f"build it (docker build --target {target} -t REGISTRY/ai4dl-{target} "
                         f".), push it (or load it into the nodes), then --set "
                         f"{what}.repository=REGISTRY/ai4dl-{target}"), r.stderr


RESTRICTED = {"runAsNonRoot": True, "runAsUser": 65532, "readOnlyRootFilesystem": True,
              "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
              "seccompProfile": {"type": "RuntimeDefault"}}


def test_default_render(helm, helm_env):
    docs = template(helm, helm_env, "--set", f"prometheus.url={URL}")
    assert sorted(d["kind"] for d in docs) == ["ClusterRole", "ClusterRole", "ClusterRoleBinding",
                                               "ClusterRoleBinding", "Deployment",
                                               "MutatingWebhookConfiguration", "Secret",
                                               "Service", "Service", "ServiceAccount",
                                               "ValidatingAdmissionPolicy",
                                               "ValidatingAdmissionPolicy",
                                               "ValidatingAdmissionPolicyBinding",
                                               "ValidatingAdmissionPolicyBinding"]
    (dep,) = by_kind(docs, "Deployment")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"] == ["ai4dl-operator"]
    assert f"--prometheus-url={URL}" in c["args"] and "--metrics-port=8080" in c["args"]
    assert {"--metrics-bind-address=0.0.0.0", "--health-bind-address=0.0.0.0",
            "--health-port=8081", "--max-container-cpu=2048",
            "--max-container-memory=64Ti", "--query-budget-seconds=5",
            "--min-window-seconds=60", "--window-workers=4", "--window-late-seconds=5",
            "--kube-api-qps=50", "--kube-api-burst=100",
            "--pod-record-share=0.05"} <= set(c["args"])
    assert not any(a.startswith("--peering") for a in c["args"])
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": 8080, "health": 8081,
                                                                  "webhook": 9443}
    assert {"--webhook-port=9443", "--webhook-bind-address=0.0.0.0",
            "--webhook-service=ai4dl-operator-webhook.ai4dl-system",
            "--webhook-configuration=ai4dl-operator"} <= set(c["args"])
    assert c["securityContext"] == RESTRICTED
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert pod["serviceAccountName"] == "ai4dl-operator"
    svc, hook_svc = sorted(by_kind(docs, "Service"), key=lambda d: d["metadata"]["name"])
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics",
                                     "protocol": "TCP"}]
    assert hook_svc["spec"]["ports"] == [{"name": "webhook", "port": 443,
                                          "targetPort": "webhook", "protocol": "TCP"}]
    # the webhook never blocks a cluster: Ignore, a short timeout, opted-in pods only, never
    # the operator's own namespace, pods created only
    (mwc,) = by_kind(docs, "MutatingWebhookConfiguration")
    (hook,) = mwc["webhooks"]
    assert (hook["failurePolicy"], hook["timeoutSeconds"], hook["sideEffects"]) == \
        ("Ignore", 3, "None")
    assert hook["objectSelector"] == {"matchLabels": {"ai4dl.io/managed": "true"}}
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["ai4dl-system"]}]
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    assert hook["clientConfig"] == {"service": {"name": "ai4dl-operator-webhook",
                                                "namespace": "ai4dl-system",
                                                "path": "/admission", "port": 443}}
    assert "caBundle" not in hook["clientConfig"]     # the operator writes it
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    role, hook_role = sorted(by_kind(docs, "ClusterRole"), key=lambda d: d["metadata"]["name"])
    # its own webhook configuration, by name, get and patch only
    assert hook_role["rules"] == [{"apiGroups": ["admissionregistration.k8s.io"],
                                   "resources": ["mutatingwebhookconfigurations"],
                                   "resourceNames": ["ai4dl-operator"],
                                   "verbs": ["get", "patch"]}]
    rules = {(g, r): set(rule["verbs"]) for rule in role["rules"]
             for g in rule["apiGroups"] for r in rule["resources"]}
    assert rules == {("", "pods"): {"get", "list", "patch"}, ("", "pods/resize"): {"patch"},
                     ("", "events"): {"create"}, ("", "limitranges"): {"list", "watch"},
                     ("", "resourcequotas"): {"list", "watch"},
                     (GROUP, PLURAL): {"get", "list", "watch", "patch"},
                     (GROUP, f"{PLURAL}/status"): {"get", "patch"},
                     # its own checkpoint objects (issue 42): no patch, tenants get no role
                     (GROUP, "workloadprofiles"): {"get", "list", "watch", "create", "update",
                                                   "delete"}}
    bindings = by_kind(docs, "ClusterRoleBinding")       # cluster-wide: no watchNamespaces
    assert sorted(b["roleRef"]["name"] for b in bindings) == \
        [role["metadata"]["name"], hook_role["metadata"]["name"]]
    # the admission policies: the operator's ServiceAccount, its own annotations, the bounds;
    # its webhook configuration's caBundle and nothing else
    vap, hook_vap = sorted(by_kind(docs, "ValidatingAdmissionPolicy"),
                           key=lambda d: d["metadata"]["name"])
    assert hook_vap["metadata"]["name"] == "ai4dl-operator-webhook-writes"
    vapb, _ = sorted(by_kind(docs, "ValidatingAdmissionPolicyBinding"),
                     key=lambda d: d["metadata"]["name"])
    assert vapb["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
    assert vap["spec"]["failurePolicy"] == "Fail"
    assert vap["spec"]["matchConditions"][0]["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:ai4dl-system:ai4dl-operator'")
    owned = next(v["expression"] for v in vap["spec"]["variables"] if v["name"] == "owned")
    assert owned == str(list(OWNED_ANNOTATIONS))     # the operator's own list, nothing more
    assert any("quantity(r == 'cpu' ? '2048' : '64Ti')" in v["expression"]
               for v in vap["spec"]["validations"])
    # least privilege: no Secrets, no wildcards, no writes beyond these, no peering when standalone
    assert not any(r in ("secrets", "configmaps", "*") or g == "*" for g, r in rules)
    # create/delete only of its own checkpoint objects (a WorkloadProfile per workload)
    assert not any(v in ("*", "delete", "deletecollection", "create") for (g, r), vs in rules.items()
                   if r not in ("events", "workloadprofiles") for v in vs)
    assert "deletecollection" not in rules[(GROUP, "workloadprofiles")]
    assert not any(g in ("kopf.dev", "coordination.k8s.io") for g, _ in rules)


def test_cert_manager_render(helm, helm_env):
    """webhook.certManager: cert-manager issues the serving certificate into a Secret the
    kubelet mounts (the operator reads no Secret) and injects the CA; the operator gets no
    right on the webhook configuration."""
    docs = template(helm, helm_env, "--set", f"prometheus.url={URL}",
                    "--set", "webhook.certManager.enabled=true", release="r", namespace="ops")
    kinds = [d["kind"] for d in docs]
    assert kinds.count("Certificate") == 1 and kinds.count("Issuer") == 1
    (mwc,) = by_kind(docs, "MutatingWebhookConfiguration")
    assert mwc["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "ops/r-ai4dl-operator-webhook"}
    (cert,) = by_kind(docs, "Certificate")
    assert cert["spec"]["dnsNames"][0] == "r-ai4dl-operator-webhook.ops.svc"
    assert cert["spec"]["issuerRef"] == {"name": "r-ai4dl-operator-webhook", "kind": "Issuer"}
    (dep,) = by_kind(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert "--webhook-cert-dir=/etc/ai4dl/webhook" in pod["containers"][0]["args"]
    assert not any(a.startswith("--webhook-configuration") for a in pod["containers"][0]["args"])
    assert {"name": "webhook-tls", "secret": {"secretName": "r-ai4dl-operator-webhook-tls"}} \
        in pod["volumes"]
    assert not any("mutatingwebhookconfigurations" in r["resources"]
                   for role in by_kind(docs, "ClusterRole") for r in role["rules"])
    docs = template(helm, helm_env, "--set", f"prometheus.url={URL}",
                    "--set", "webhook.certManager.enabled=true",
                    "--set", "webhook.certManager.issuerRef.name=corp-ca",
                    "--set", "webhook.certManager.issuerRef.kind=ClusterIssuer")
    assert "Issuer" not in [d["kind"] for d in docs]
    assert by_kind(docs, "Certificate")[0]["spec"]["issuerRef"] == {"name": "corp-ca",
                                                                     "kind": "ClusterIssuer"}
    # and off: no webhook at all, no admission flags
    docs = template(helm, helm_env, "--set", f"prometheus.url={URL}",
                    "--set", "webhook.enabled=false")
    assert "MutatingWebhookConfiguration" not in [d["kind"] for d in docs]
    (dep,) = by_kind(docs, "Deployment")
    assert not any(a.startswith("--webhook") for a in dep["spec"]["template"]["spec"]
                   ["containers"][0]["args"])


def test_webhook_client_auth_and_network_policy_render(helm, helm_env):
    """webhook.clientAuth: the CA ConfigMap mounted by the kubelet (the operator reads no
    ConfigMap) and the flags naming it; webhook.networkPolicy: the webhook port only from the
    given sources, metrics and health as before. Both off by default."""
    docs = template(helm, helm_env, "--set", f"prometheus.url={URL}")
    assert not by_kind(docs, "NetworkPolicy")
    args = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith("--webhook-client") for a in args)
    docs = template(helm, helm_env, "-f", ALL_FEATURES, release="r", namespace="ops")
    pod = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert {"--webhook-client-ca-file=/etc/ai4dl/webhook-client-ca/ca.crt",
            "--webhook-client-name=kube-apiserver-webhook-client"} <= set(c["args"])
    assert {"name": "webhook-client-ca", "mountPath": "/etc/ai4dl/webhook-client-ca",
            "readOnly": True} in c["volumeMounts"]
    assert {"name": "webhook-client-ca",
            "configMap": {"name": "kube-apiserver-webhook-client-ca"}} in pod["volumes"]
    (np_,) = by_kind(docs, "NetworkPolicy")
    assert np_["spec"]["podSelector"]["matchLabels"] == \
        by_kind(docs, "Deployment")[0]["spec"]["selector"]["matchLabels"]
    assert np_["spec"]["policyTypes"] == ["Ingress"]
    webhook_rule, open_rule = np_["spec"]["ingress"]
    assert webhook_rule == {"from": [{"ipBlock": {"cidr": "10.0.0.2/32"}}],
                            "ports": [{"port": 9443, "protocol": "TCP"}]}
    assert open_rule == {"ports": [{"port": 8080, "protocol": "TCP"},
                                   {"port": 8081, "protocol": "TCP"}]}
    # the operator reads LimitRanges (admission keeps requests within them), nothing more
    (role,) = [r for r in by_kind(docs, "ClusterRole") if r["metadata"]["name"] == "r-ai4dl-operator"]
    assert {"apiGroups": [""], "resources": ["limitranges"], "verbs": ["list", "watch"]} \
        in role["rules"]


def test_all_features_render(helm, helm_env):
    docs = template(helm, helm_env, "-f", ALL_FEATURES, release="r", namespace="ops")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds.count("CronJob") == 2 and kinds.count("PhaseModel") == 1
    assert kinds.count("ServiceMonitor") == 1 and kinds.count("RoleBinding") == 4
    # watchNamespaces: namespaced grants only, but for the one cluster-scoped object the
    # operator writes (its own webhook configuration, by name); the webhook sees only the
    # watched namespaces
    (crb,) = by_kind(docs, "ClusterRoleBinding")
    assert crb["roleRef"]["name"] == "r-ai4dl-operator-webhook"
    (mwc,) = by_kind(docs, "MutatingWebhookConfiguration")
    assert mwc["webhooks"][0]["namespaceSelector"]["matchExpressions"][1] == {
        "key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ml", "vision"]}
    (dep,) = by_kind(docs, "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"--peering=ai4dl", "--namespace=ml", "--namespace=vision", "--verbose"} <= set(args)
    role = next(d for d in by_kind(docs, "ClusterRole") if d["metadata"]["name"] == "r-ai4dl-operator")
    assert any("kopf.dev" in rule["apiGroups"] and rule["resources"] == ["kopfpeerings"]
               for rule in role["rules"])
    # the operator's role is granted in the watched namespaces only
    assert sorted(b["metadata"]["namespace"] for b in by_kind(docs, "RoleBinding")
                  if b["roleRef"]["name"] == "r-ai4dl-operator") == ["ml", "vision"]
    jobs = {j["metadata"]["annotations"]["ai4dl.io/phasemodel"]: j for j in by_kind(docs, "CronJob")}
    assert set(jobs) == {"ops/resnet", "nlp/bert"}
    bert = jobs["nlp/bert"]
    assert bert["spec"]["concurrencyPolicy"] == "Forbid" and bert["spec"]["schedule"] == "30 2 * * 0"
    c = bert["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] + c["args"] == [
        "ai4dl", "train", f"--prometheus={URL.replace('prometheus.example', 'prometheus-server.monitoring.svc')}",
        '--selector=namespace="nlp",pod=~"bert-(train|finetune)-.*"', "--since=30d",
        "--phasemodel=nlp/bert", "--if-due", "--state-key-file=/etc/ai4dl/state-key/key"]
    # the operator's key, mounted by the kubelet: the batch fill seals workload profiles
    tpod = bert["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert {"name": "state-key", "mountPath": "/etc/ai4dl/state-key", "readOnly": True} \
        in c["volumeMounts"]
    assert next(v for v in tpod["volumes"] if v["name"] == "state-key")["secret"][
        "secretName"] == "r-ai4dl-operator-state-key"
    assert c["image"].startswith("registry.example/ai4dl-trainer:")
    # peering: a KopfPeering per watched namespace, the pod name as kopf's identity
    assert sorted(p["metadata"]["namespace"] for p in by_kind(docs, "KopfPeering")) == ["ml", "vision"]
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "POD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in env
    # the real CLIs accept what the templates render
    from ai4dl.cli.main import build_parser as cli_parser
    from ai4dl.controller.__main__ import build_parser as operator_parser

    parsed = cli_parser().parse_args(c["command"][1:] + c["args"])
    assert (parsed.phasemodel, parsed.since, parsed.if_due) == ("nlp/bert", "30d", True)
    assert parsed.state_key_file == "/etc/ai4dl/state-key/key"
    parsed = operator_parser().parse_args(args)
    assert parsed.peering == "ai4dl" and parsed.namespace == ["ml", "vision"]
    assert c["securityContext"] == RESTRICTED
    # the trainer may patch the PhaseModels it trains only: a Role per listed namespace naming
    # them (resourceNames), no ClusterRole; listing pods cannot be narrowed by name
    tbind = [b for b in by_kind(docs, "RoleBinding") if b["roleRef"]["name"].endswith("-trainer")]
    assert sorted(b["metadata"]["namespace"] for b in tbind) == ["nlp", "ops"]
    assert all(b["roleRef"]["kind"] == "Role" for b in tbind)
    assert not [d for d in by_kind(docs, "ClusterRole") if d["metadata"]["name"].endswith("-trainer")]
    troles = {d["metadata"]["namespace"]: d for d in by_kind(docs, "Role")
              if d["metadata"]["name"].endswith("-trainer")}
    for ns, name in (("nlp", "bert"), ("ops", "resnet")):
        assert troles[ns]["rules"] == [
            {"apiGroups": [GROUP], "resources": [PLURAL], "resourceNames": [name],
             "verbs": ["get", "patch"]},
            {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "resourceNames": [name],
             "verbs": ["get", "patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            # the batch fill: profile names are hashes of workloads (no resourceNames)
            {"apiGroups": [GROUP], "resources": ["workloadprofiles"],
             "verbs": ["get", "create", "update"]}]


def test_state_key_is_mounted_never_read_through_the_api(helm, helm_env):
    """The key that seals the operator's records on pods: generated once into a Secret the
    kubelet mounts (the ServiceAccount reads no Secret: test_default_render), or the user's
    Secret, or none (a key per process: no flag, no volume)."""
    def render(*extra):
        docs = template(helm, helm_env, "--set", f"prometheus.url={URL}", *extra)
        (dep,) = by_kind(docs, "Deployment")
        pod = dep["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        volume = next((v for v in pod["volumes"] if v["name"] == "state-key"), None)
        mount = next((m for m in c["volumeMounts"] if m["name"] == "state-key"), None)
        return docs, c["args"], volume, mount

    docs, args, volume, mount = render()
    (secret,) = by_kind(docs, "Secret")
    assert secret["metadata"]["name"] == "ai4dl-operator-state-key"
    assert len(base64.b64decode(secret["data"]["key"])) >= 32
    assert volume == {"name": "state-key", "secret": {"secretName": "ai4dl-operator-state-key",
                                                      "defaultMode": 0o440}}
    assert mount == {"name": "state-key", "mountPath": "/etc/ai4dl/state-key", "readOnly": True}
    assert "--state-key-file=/etc/ai4dl/state-key/key" in args
    docs, args, volume, mount = render("--set", "operator.stateKey.existingSecret=mine")
    assert not by_kind(docs, "Secret") and volume["secret"]["secretName"] == "mine"
    assert "--state-key-file=/etc/ai4dl/state-key/key" in args
    docs, args, volume, mount = render("--set", "operator.stateKey.generate=false")
    assert not by_kind(docs, "Secret") and volume is None and mount is None
    assert not any(a.startswith("--state-key-file") for a in args)
    assert not [d for d in docs if d["kind"] == "Job"]              # no hook Job by default


def test_state_key_made_in_the_cluster_survives_helm_template(helm, helm_env):
    """operator.stateKey.createInCluster (issue 43 item 5): no Secret in the rendered output
    (so a GitOps render never replaces the key); a pre-install/pre-upgrade hook Job, under a
    Role that may only create Secrets, makes it once (tests/test_state_key_secret.py runs it
    against the real API server); the operator mounts it as with the chart's own Secret."""
    docs = template(helm, helm_env, "--set", f"prometheus.url={URL}",
                    "--set", "operator.stateKey.createInCluster=true")
    assert not by_kind(docs, "Secret")
    (dep,) = by_kind(docs, "Deployment")
    volume = next(v for v in dep["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == "state-key")
    assert volume["secret"]["secretName"] == "ai4dl-operator-state-key"
    hooks = [d for d in docs if (d["metadata"].get("annotations") or {}).get("helm.sh/hook")]
    assert sorted(d["kind"] for d in hooks) == ["Job", "Role", "RoleBinding", "ServiceAccount"]
    for d in hooks:
        ann = d["metadata"]["annotations"]
        assert ann["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert ann["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        assert int(ann["helm.sh/hook-weight"]) < 0 and d["metadata"]["namespace"] == \
            "ai4dl-system"
    (role,) = [d for d in hooks if d["kind"] == "Role"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]
    (job,) = by_kind(docs, "Job")
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["serviceAccountName"] == "ai4dl-operator-state-key-init"
    assert c["image"] == dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert c["command"] == ["python", "-m", "ai4dl.kube.state_key_secret"]
    assert "--name=ai4dl-operator-state-key" in c["args"] and \
        "--namespace=ai4dl-system" in c["args"]
    assert c["securityContext"] == RESTRICTED and pod["restartPolicy"] == "Never"
    # the user's Secret wins: nothing made, no hook
    docs = template(helm, helm_env, "--set", f"prometheus.url={URL}",
                    "--set", "operator.stateKey.createInCluster=true",
                    "--set", "operator.stateKey.existingSecret=mine")
    assert not by_kind(docs, "Secret") and not by_kind(docs, "Job")


def test_host_network_render(helm, helm_env):
    """operator.hostNetwork: the operator's pod in the node's network namespace, with the DNS
    policy that keeps cluster names resolvable there; off by default (it needs a privileged Pod
    Security Standard). tests/test_real_node_chart.py runs it on a real node."""
    def pod_spec(*args):
        (dep,) = by_kind(template(helm, helm_env, "--set", f"prometheus.url={URL}", *args),
                         "Deployment")
        return dep["spec"]["template"]["spec"]

    default = pod_spec()
    assert "hostNetwork" not in default and "dnsPolicy" not in default
    on = pod_spec("--set", "operator.hostNetwork=true")
    assert on["hostNetwork"] is True and on["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert on["securityContext"] == default["securityContext"]   # nothing else loosened


def test_deploy_manifests_are_rendered_from_the_chart(helm, tmp_path):
    run(["bash", REPO / "deploy" / "render.sh", tmp_path], {**os.environ, "HELM": str(helm)})
    for name in ("ai4dl-operator.yaml", "rbac.yaml"):
        assert filecmp.cmp(tmp_path / name, REPO / "deploy" / name, shallow=False), (
            f"deploy/{name} is out of date with charts/ai4dl-operator: run `make generate`")
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text())]
    # tests/test_operator_integration.py binds this file for SA ai4dl-system/ai4dl-operator
    assert [d and d["kind"] for d in docs] == ["ServiceAccount", "ClusterRole", "ClusterRole",
                                               "ClusterRoleBinding", "ClusterRoleBinding",
                                               "ValidatingAdmissionPolicy",
                                               "ValidatingAdmissionPolicy",
                                               "ValidatingAdmissionPolicyBinding",
                                               "ValidatingAdmissionPolicyBinding"]
    assert docs[0]["metadata"] == {**docs[0]["metadata"], "name": "ai4dl-operator",
                                   "namespace": "ai4dl-system"}
    for binding in docs[3:5]:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ai4dl-operator",
                                        "namespace": "ai4dl-system"}]


def test_examples_opt_pods_in():
    job = list(yaml.safe_load_all((REPO / "deploy" / "examples" / "job.yaml").read_text()))
    pm = next(d for d in job if d["kind"] == "PhaseModel")
    templates = [next(d for d in job if d["kind"] == "Job")["spec"]["template"]]
    ptj = yaml.safe_load((REPO / "deploy" / "examples" / "pytorchjob.yaml").read_text())
    templates += [r["template"] for r in ptj["spec"]["pytorchReplicaSpecs"].values()]
    for t in templates:
        assert t["metadata"]["labels"][OPT_IN_LABEL] == "true"
        assert t["metadata"]["annotations"][MODEL_ANNOTATION] == pm["metadata"]["name"]
        assert pm["spec"]["selector"]["matchLabels"].items() <= t["metadata"]["labels"].items()


def test_prometheus_scrape_config_keeps_what_the_operator_reads():
    cfg = yaml.safe_load((REPO / "deploy" / "prometheus-scrape.yaml").read_text())
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    cadvisor = jobs["kubernetes-cadvisor"]
    assert cadvisor["metrics_path"] == "/metrics/cadvisor"
    import re

    keep = next(r for r in cadvisor["metric_relabel_configs"] if r["action"] == "keep")
    for feature in default_features():   # the metric names in the default PromQL templates
        name = re.search(r"(container_[a-z_]+)\{", feature.query).group(1)
        assert re.fullmatch(keep["regex"], name), name
    assert jobs["ai4dl-operator"]["relabel_configs"][0]["regex"] == "ai4dl-operator;metrics"


def test_prometheus_scrape_config_keeps_every_series_the_code_reads():
    """Every metric name the library and operator query (the history pull's container start
    times, kube-state-metrics' owners, labels and requests) survives the allowlists: a series a
    keep rule drops is silently absent, and the pull degrades without saying why."""
    import re

    from ai4dl.sources import membership, prometheus_history, workloads

    cfg = yaml.safe_load((REPO / "deploy" / "prometheus-scrape.yaml").read_text())
    keeps = [r["regex"] for j in cfg["scrape_configs"]
             for r in j.get("metric_relabel_configs", []) if r["action"] == "keep"]
    read = {workloads.POD_OWNER, workloads.REPLICASET_OWNER, workloads.JOB_OWNER,
            workloads.REQUESTS, membership.KSM_METRIC}
    read |= set(re.findall(r"(container_[a-z_]+)\{", Path(prometheus_history.__file__).read_text()))
    assert "container_start_time_seconds" in read
    for name in sorted(read):
        assert any(re.fullmatch(k, name) for k in keeps), f"{name} is dropped by every keep rule"


# ----------------------------------------------------------------------------- API server
@pytest.fixture(scope="module")
def kubectl(kube_cluster):
    path = _cp.bin_dir() / "kubectl"
    if kube_cluster.control_plane is None:   # an existing cluster: kubectl from PATH
        import shutil

        path = Path(shutil.which("kubectl") or path)
    if not path.is_file():
        pytest.skip(f"no kubectl at {path}")

    def kc(*args, check=True, timeout=60):
        return run([path, "--kubeconfig", kube_cluster.kubeconfig, *args], check=check,
                   timeout=timeout)
    return kc


@pytest.fixture(scope="module")
def crd_established(kube_cluster, kubectl):
    kubectl("apply", "--server-side", "--field-manager=ai4dl-tests", "--force-conflicts",
            "-f", CHART / "crds" / "phasemodels.ai4dl.io.yaml")
    crds_established(kubectl, f"{PLURAL}.{GROUP}")


# kopf's peering CRDs (kopf.dev/v1, as kopf's peering.yaml declares them): a prerequisite the
# chart documents for peering.enabled.
KOPF_PEERING_CRDS = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: clusterkopfpeerings.kopf.dev}
spec:
  scope: Cluster
  group: kopf.dev
  names: {kind: ClusterKopfPeering, plural: clusterkopfpeerings, singular: clusterkopfpeering}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: kopfpeerings.kopf.dev}
spec:
  scope: Namespaced
  group: kopf.dev
  names: {kind: KopfPeering, plural: kopfpeerings, singular: kopfpeering}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"""


@pytest.fixture(scope="module")
def kopf_peering_crds(kube_cluster, kubectl, tmp_path_factory):
    path = tmp_path_factory.mktemp("kopf") / "peering-crds.yaml"
    path.write_text(KOPF_PEERING_CRDS)
    kubectl("apply", "--server-side", "--field-manager=ai4dl-tests", "-f", path)
    crds_established(kubectl, "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev")


def crds_established(kubectl, *names: str, timeout: float = 30) -> None:
    """Wait until each CRD is Established. Not ``kubectl wait --for=condition=Established``:
    right after the apply a CRD can have no status.conditions yet, and kubectl then fails at
    once (".status.conditions accessor error: <nil> is of the type <nil>") instead of waiting;
    it failed a run this way."""
    query = '{.status.conditions[?(@.type=="Established")].status}'
    for name in names:
        wait_for(lambda: kubectl("get", f"crd/{name}", "-o", f"jsonpath={query}",
                                 check=False).stdout.strip() == "True",
                 timeout, f"CRD {name} to be Established")


def ensure_namespace(kube_cluster, name):
    from kubernetes.client.exceptions import ApiException

    try:
        kube_cluster.core.create_namespace({"metadata": {"name": name}})
    except ApiException as err:
        if err.status != 409:
            raise


@pytest.mark.integration
def test_server_side_dry_run(kube_cluster, kubectl, crd_established, kopf_peering_crds, helm,
                             helm_env, k8s_namespace, tmp_path):
    # the plain manifests, as users apply them
    ensure_namespace(kube_cluster, "ai4dl-system")
    # (--force-conflicts: in this shared test cluster other fixtures own the CRD already)
    r = kubectl("apply", "--server-side", "--dry-run=server", "--force-conflicts", "-f",
                REPO / "deploy" / "ai4dl-operator.yaml")
    assert "deployment.apps/ai4dl-operator serverside-applied (server dry run)" in r.stdout
    # every optional piece, in a fresh namespace (the ServiceMonitor needs the Prometheus
    # Operator's CRD, which this cluster has not: checked by the render test only)
    ns = k8s_namespace
    for other in ("nlp", "ml", "vision"):    # the values file's namespaces
        ensure_namespace(kube_cluster, other)
    docs = [d for d in template(helm, helm_env, "-f", ALL_FEATURES, release="dry", namespace=ns)
            if d["kind"] != "ServiceMonitor"]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    r = kubectl("apply", "--server-side", "--dry-run=server", "-f", tmp_path / "all.yaml")
    assert r.stdout.count("(server dry run)") == len(docs)
    # the examples (namespace rewritten to the test's; the PyTorchJob CRD is not installed)
    job = list(yaml.safe_load_all((REPO / "deploy" / "examples" / "job.yaml").read_text()))
    for d in job:
        d["metadata"]["namespace"] = ns
    (tmp_path / "job.yaml").write_text(yaml.safe_dump_all(job))
    r = kubectl("apply", "--server-side", "--dry-run=server", "-f", tmp_path / "job.yaml")
    assert r.stdout.count("(server dry run)") == 2


class OperatorProcess:
    def __init__(self, cmd, kubeconfig, log):
        self.log = log
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
        env.pop("AI4DL_PROMETHEUS_URL", None)
        self.proc = subprocess.Popen(cmd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)

    def stop(self) -> int:
        stop_process(self.proc, timeout=20)
        return self.proc.returncode

    def tail(self, n=30) -> str:
        return "\n".join(self.log.read_text().splitlines()[-n:])


def wait_for(predicate, timeout, what, interval=0.3):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except Exception as exc:   # noqa: BLE001 - not up yet
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def http_get(url):
    with urllib.request.urlopen(url, timeout=3) as r:
        return r.status, r.read().decode()


def mount_secrets(kube_cluster, ns, pod_spec, container, args: list[str], folder) -> list[str]:
    """What the kubelet does for a container's Secret volumes (there is none here): each
    Secret's files written under ``folder``/<volume>, and ``args`` pointed there instead of the
    mount path."""
    volumes = {v.name: v for v in pod_spec.volumes or []}
    for mount in container.volume_mounts or []:
        secret = getattr(volumes.get(mount.name), "secret", None)
        if secret is None:
            continue
        data = kube_cluster.core.read_namespaced_secret(secret.secret_name, ns).data or {}
        target = Path(folder) / mount.name
        target.mkdir(exist_ok=True)
        for name, value in data.items():
            (target / name).write_bytes(base64.b64decode(value))
        args = [a.replace(mount.mount_path, str(target)) for a in args]
    return args


def start_installed_operator(kube_cluster, ns, deployment, sa, tmp_path) -> OperatorProcess:
    """The operator from the installed Deployment's entrypoint and args (what the image runs),
    authenticated as the chart's ServiceAccount (a TokenRequest token)."""
    from kubernetes import client

    apps = client.AppsV1Api(kube_cluster.api_client)
    pod_spec = apps.read_namespaced_deployment(deployment, ns).spec.template.spec
    c = pod_spec.containers[0]
    assert c.command == ["ai4dl-operator"]
    entry = Path(sys.executable).parent / c.command[0]
    kubeconfig = kube_cluster.service_account_kubeconfig(ns, sa, tmp_path / "kubeconfig",
                                                        create=False)
    args = mount_secrets(kube_cluster, ns, pod_spec, c, list(c.args), tmp_path)
    return OperatorProcess([str(entry), *args], kubeconfig, tmp_path / "operator.log")


@pytest.mark.integration
def test_install_run_uninstall(kube_cluster, kubectl, crd_established, helm, helm_env,
                               k8s_namespace, tmp_path):
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ns, release = f"ai4dl-helm-{uuid.uuid4().hex[:6]}", "pkgtest"
    full, sa = f"{release}-ai4dl-operator", f"{release}-ai4dl-operator"
    metrics_port, health_port, webhook_port = free_port(), free_port(), free_port()
    dead_prometheus = f"http://127.0.0.1:{free_port()}"   # nothing listens: never queried here
    helm_cmd = [helm, "--kubeconfig", kube_cluster.kubeconfig]
    op = None
    try:
        r = run([*helm_cmd, "install", release, CHART, "--namespace", ns, "--create-namespace",
                 *WITH_IMAGE, "--set", f"prometheus.url={dead_prometheus}",
                 "--set", f"metrics.port={metrics_port}", "--set", f"probes.port={health_port}",
                 "--set", f"webhook.port={webhook_port}",
                 "--set", "operator.settleSeconds=0.2",
                 # the test's 4 s window is below the default minimum (60 s): served every window
                 "--set", "operator.minWindowSeconds=0", "--timeout", "60s"], helm_env)
        assert "STATUS: deployed" in r.stdout
        assert "kubectl get pm -A" in r.stdout   # NOTES.txt
        notes = r.stdout.split("NOTES:", 1)[1]
        # every command line runs as written: port-forward blocks, so no "&& curl" after it
        assert "&&" not in notes and f"curl -s localhost:{metrics_port}/metrics" in notes
        assert f"reach the webhook on port {webhook_port}" in notes
        assert "ai4dl train --prometheus" in notes and "crds/phasemodels.ai4dl.io.yaml" in notes
        assert (REPO / "crds" / "phasemodels.ai4dl.io.yaml").is_file()
        # ... which warns while the webhook answers any caller (no client auth, no policy)
        assert "WARNING: the admission webhook" in r.stdout

        # RBAC, as the API server decides it for the chart's ServiceAccount
        who = f"system:serviceaccount:{ns}:{sa}"
        can = lambda *a: kubectl("auth", "can-i", *a, "--as", who, "-n", k8s_namespace,  # noqa: E731
                                 check=False).stdout.strip()
        assert can("patch", "pods", "--subresource=resize") == "yes"
        assert can("list", "pods") == "yes" and can("watch", "pods") == "no"
        assert can("patch", f"{PLURAL}.{GROUP}", "--subresource=status") == "yes"
        assert can("get", "secrets") == "no" and can("list", "secrets") == "no"
        assert can("delete", "pods") == "no" and can("create", "pods") == "no"
        assert can("update", "pods", "--subresource=resize") == "no"
        # the state key: made once at install, the same after an upgrade (helm's lookup), so
        # that the records sealed before the upgrade still verify
        key = kube_cluster.core.read_namespaced_secret(f"{full}-state-key", ns).data["key"]
        assert len(base64.b64decode(key)) >= 32
        run([*helm_cmd, "upgrade", release, CHART, "--namespace", ns, "--reuse-values",
             "--timeout", "60s"], helm_env)
        assert kube_cluster.core.read_namespaced_secret(f"{full}-state-key", ns).data["key"] == key

        op = start_installed_operator(kube_cluster, ns, full, sa, tmp_path)

        try:
            assert wait_for(lambda: http_get(f"http://127.0.0.1:{health_port}/healthz")[0] == 200,
                            60, "the liveness endpoint")
            status, text = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
            assert status == 200 and "# TYPE ai4dl_pod_phase gauge" in text
            # the webhook: the operator wrote its self-signed CA into the chart's configuration
            adm = client.AdmissionregistrationV1Api(kube_cluster.api_client)
            wait_for(lambda: all(h.client_config.ca_bundle for h in
                                 adm.read_mutating_webhook_configuration(full).webhooks),
                     60, "the CA bundle in the webhook configuration")
            # a PhaseModel without a model: auto serves the reactive baseline and says so
            custom = client.CustomObjectsApi(kube_cluster.api_client)
            custom.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PLURAL, {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
                "metadata": {"name": "untrained"},
                "spec": {"selector": {"matchLabels": {"app": "train"}}, "stepSeconds": 1,
                         "windowSeconds": 4}})

            def baseline():
                pm = custom.get_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PLURAL,
                                                         "untrained")
                conds = {c["type"]: c for c in (pm.get("status") or {}).get("conditions", [])}
                return conds.get("Ready", {}).get("reason") == "BaselineNoModel" and pm
            pm = wait_for(baseline, 30, "PhaseModel status Ready=True/BaselineNoModel")
            conds = {c["type"]: c for c in pm["status"]["conditions"]}
            assert conds["Ready"]["status"] == "True"
            assert "serving adaptive-max (no model yet)" in conds["Ready"]["message"]
            assert pm["status"]["servedPolicy"].startswith("auto: no model yet")
            out = kubectl("get", "pm", "-n", k8s_namespace).stdout.splitlines()
            assert out[0].split() == ["NAME", "PHASES", "PODS", "MODE", "READY", "AGE"]
            assert out[1].split()[:4] == ["untrained", "0", "Recommend", "True"]
            wide = kubectl("get", "pm", "-n", k8s_namespace, "-o", "wide").stdout.splitlines()
            assert wide[0].split()[:8] == ["NAME", "PHASES", "PODS", "MODE", "POLICY", "SCORE",
                                           "MEMORYRISK", "SAVED"]
            # by the header's column offsets (empty cells leave no word to split on)
            at = {h: wide[0].index(h) for h in wide[0].split()}
            assert wide[1][at["POLICY"]:at["SCORE"]].strip() == "adaptive-max"   # status.policy
            assert wide[1][at["SCORE"]:at["READY"]].strip() == ""    # no training, no savings
            # a kind that needs a model, without one: Degraded, with the reason
            custom.patch_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PLURAL,
                                                  "untrained", {"spec": {"policy": {
                                                      "kind": "phase-headroom"}}})

            def degraded():
                pm = custom.get_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PLURAL,
                                                         "untrained")
                conds = {c["type"]: c for c in (pm.get("status") or {}).get("conditions", [])}
                return conds.get("Ready", {}).get("reason") == "NoModel" and conds
            conds = wait_for(degraded, 30, "PhaseModel status Ready=False/NoModel")
            assert "spec.model is empty" in conds["Ready"]["message"]
            # deleted while the operator runs: it releases its finalizer
            custom.delete_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PLURAL,
                                                   "untrained")
            wait_for(lambda: not any(p["metadata"]["name"] == "untrained" for p in
                                     custom.list_namespaced_custom_object(
                                         GROUP, VERSION, k8s_namespace, PLURAL)["items"]),
                     30, "the PhaseModel deleted")
        except AssertionError:
            print(op.tail())
            raise
        assert op.stop() == 0, op.tail()
        log = op.log.read_text()
        assert "Forbidden" not in log and " 403" not in log, op.tail(80)   # the RBAC sufficed

        r = run([*helm_cmd, "uninstall", release, "--namespace", ns, "--wait", "--timeout", "60s"],
                helm_env)
        assert "uninstalled" in r.stdout
        release = None
        # nothing left in the namespace (Helm's release records are Secrets there: gone too)
        kinds = kubectl("api-resources", "--verbs=list", "--namespaced", "-o", "name").stdout.split()
        left = kubectl("get", ",".join(kinds), "-n", ns, "-o", "name",
                       "--ignore-not-found").stdout.split()
        # Events are records, not objects the chart made (one about the webhook Service, which
        # nothing of ours writes, was once still there after the uninstall: the API server's)
        left = [x for x in left if not x.startswith(("event/", "event.events.k8s.io/"))]
        assert left == [], left
        # nor cluster-wide: no webhook configuration left behind to call a dead operator
        adm = client.AdmissionregistrationV1Api(kube_cluster.api_client)
        with pytest.raises(ApiException) as err:
            adm.read_mutating_webhook_configuration(full)
        assert err.value.status == 404
        rbac = client.RbacAuthorizationV1Api(kube_cluster.api_client)
        for read in (rbac.read_cluster_role, rbac.read_cluster_role_binding):
            with pytest.raises(ApiException) as err:
                read(full)
            assert err.value.status == 404
        left = kubectl("get", "clusterroles,clusterrolebindings,mutatingwebhookconfigurations,"
                       "validatingadmissionpolicies,validatingadmissionpolicybindings", "-l",
                       "app.kubernetes.io/instance=pkgtest", "-o", "name").stdout.split()
        assert left == [], left
        # the CRD stays: Helm installs crds/ once and never deletes them (users' PhaseModels
        # would go with it); README: kubectl delete crd phasemodels.ai4dl.io
        kubectl("get", f"crd/{PLURAL}.{GROUP}")
    finally:
        if op is not None:
            op.stop()
        if release is not None:
            run([*helm_cmd, "uninstall", release, "--namespace", ns], helm_env, check=False)
        try:
            kube_cluster.core.delete_namespace(ns)   # stays Terminating: no namespace controller
        except ApiException:
            pass


@pytest.mark.integration
def test_peering_install_runs_with_its_rbac(kube_cluster, kubectl, crd_established,
                                            kopf_peering_crds, helm, helm_env, tmp_path):
    """peering.enabled: the chart creates the ClusterKopfPeering and the RBAC kopf needs; the
    operator keeps its peer record alive in the peering's status, and uninstall removes it."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    suffix = uuid.uuid4().hex[:6]
    ns, release, peering = f"ai4dl-peer-{suffix}", "peertest", f"ai4dl-{suffix}"
    full = f"{release}-ai4dl-operator"
    health_port = free_port()
    helm_cmd = [helm, "--kubeconfig", kube_cluster.kubeconfig]
    custom = client.CustomObjectsApi(kube_cluster.api_client)
    read_peering = lambda: custom.get_cluster_custom_object(  # noqa: E731
        "kopf.dev", "v1", "clusterkopfpeerings", peering)
    op = None
    try:
        run([*helm_cmd, "install", release, CHART, "--namespace", ns, "--create-namespace",
             *WITH_IMAGE, "--set", f"prometheus.url=http://127.0.0.1:{free_port()}",
             "--set", "peering.enabled=true", "--set", f"peering.name={peering}",
             "--set", f"metrics.port={free_port()}", "--set", f"probes.port={health_port}"],
            helm_env)
        assert read_peering()["metadata"]["labels"]["app.kubernetes.io/instance"] == release
        who = f"system:serviceaccount:{ns}:{full}"
        assert kubectl("auth", "can-i", "patch", "clusterkopfpeerings.kopf.dev", "--as", who,
                       check=False).stdout.strip() == "yes"
        op = start_installed_operator(kube_cluster, ns, full, full, tmp_path)
        assert f"--peering={peering}" in op.proc.args
        try:
            wait_for(lambda: http_get(f"http://127.0.0.1:{health_port}/healthz")[0] == 200,
                     60, "the liveness endpoint")
            peers = wait_for(lambda: read_peering().get("status"), 30,
                             "the operator's record in the ClusterKopfPeering status")
        except AssertionError:
            print(op.tail())
            raise
        assert len(peers) == 1 and next(iter(peers.values()))["priority"] == 0
        assert op.stop() == 0, op.tail()
        log = op.log.read_text()
        assert "Forbidden" not in log and " 403" not in log, op.tail(80)
        run([*helm_cmd, "uninstall", release, "--namespace", ns, "--wait"], helm_env)
        release = None
        with pytest.raises(ApiException) as err:
            read_peering()
        assert err.value.status == 404
    finally:
        if op is not None:
            op.stop()
        if release is not None:
            run([*helm_cmd, "uninstall", release, "--namespace", ns], helm_env, check=False)
        try:
            kube_cluster.core.delete_namespace(ns)
        except ApiException:
            pass


@pytest.mark.integration
def test_pods_pass_the_restricted_pod_security_standard(kube_cluster, helm, helm_env, tmp_path):
    """The operator's and the trainer's pods, created (server dry run) in a namespace that
    enforces Pod Security "restricted"; a pod without the security context is refused there."""
    from kubernetes.client.exceptions import ApiException

    ns = f"ai4dl-psa-{uuid.uuid4().hex[:6]}"
    kube_cluster.core.create_namespace({"metadata": {"name": ns, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})
    try:
        docs = template(helm, helm_env, "-f", ALL_FEATURES, release="psa", namespace=ns)
        specs = [by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]]
        specs += [j["spec"]["jobTemplate"]["spec"]["template"]["spec"]
                  for j in by_kind(docs, "CronJob")]
        for i, spec in enumerate(specs):
            kube_cluster.core.create_namespaced_pod(
                ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"},
                     "spec": spec}, dry_run="All")
        bare = {**specs[0], "securityContext": {},
                "containers": [{**specs[0]["containers"][0], "securityContext": {}}]}
        with pytest.raises(ApiException) as err:
            kube_cluster.core.create_namespaced_pod(
                ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"},
                     "spec": bare}, dry_run="All")
        assert err.value.status == 403 and "restricted" in err.value.body
    finally:
        try:
            kube_cluster.core.delete_namespace(ns)
        except ApiException:
            pass



def test_grafana_dashboard_configmap(helm, helm_env):
    """Off by default; on, one ConfigMap with the sidecar's label and the dashboard JSON as
    dashboards/generate.py writes it (the file in the chart must not drift from it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "dashboard_generate", CHART / "dashboards" / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    shipped = json.loads((CHART / "dashboards" / "ai4dl-operator.json").read_text())
    assert shipped == json.loads(json.dumps(gen.dashboard())), \
        "dashboards/ai4dl-operator.json is stale: run make generate"
    assert not by_kind(template(helm, helm_env, "--set", f"prometheus.url={URL}"), "ConfigMap")
    docs = template(helm, helm_env, "--set", f"prometheus.url={URL}",
                    "--set", "grafanaDashboard.enabled=true",
                    "--set", "grafanaDashboard.namespace=monitoring",
                    "--set", "grafanaDashboard.annotations.grafana_folder=ML")
    (cm,) = by_kind(docs, "ConfigMap")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "ML"}
    assert json.loads(cm["data"]["ai4dl-operator.json"]) == shipped
    # every panel has a query, and the generator itself is not packaged
    assert all(p["targets"] and all(t["expr"] for t in p["targets"]) for p in shipped["panels"])
    assert "dashboards/*.py" in (CHART / ".helmignore").read_text()
