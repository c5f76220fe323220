"""Admission rules (ai4dl.controller.admission), one function at a time: what a new pod's
requests become, and what is recorded on it. The webhook on the real API server is tested in
tests/test_admission_webhook.py."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from ai4dl.controller import admission
from ai4dl.controller.admission import AdmissionTarget, admission_target, limit_range_rules
from ai4dl.controller.pods import A_ADMISSION, A_ADMITTED
from ai4dl.crd import MODEL_ANNOTATION, OPT_IN_LABEL
from ai4dl.crd_spec import LabelSelector

GiB = 2.0 ** 30


def pod(*containers, labels=None, pm="pm", ns="ml"):
    return {"metadata": {"namespace": ns, "generateName": "job-",
                         "labels": {OPT_IN_LABEL: "true", "app": "train", **(labels or {})},
                         "annotations": {MODEL_ANNOTATION: pm}},
            "spec": {"containers": [
                {"name": name, "image": "x", "resources": res} for name, res in containers]}}


def target(mode="InPlace", levels=(1.5, 3 * GiB), floor=(0.0, 0.0), ceiling=(np.inf, np.inf),
           containers=(), reason="", selector=None):
    return {("ml", "pm"): AdmissionTarget(
        "ml", "pm", mode, selector or LabelSelector(matchLabels={"app": "train"}),
        tuple(containers), ("cpu", "memory"), tuple(levels), tuple(floor), tuple(ceiling),
        reason)}


BURSTABLE = {"requests": {"cpu": "4", "memory": "32Gi"}}


def admit(p, targets, max_value=None, namespace="ml", limit_ranges=()):
    """admission.admit for a review whose request.namespace is ``namespace`` (the pods here are
    in "ml")."""
    return admission.admit(p, targets, max_value, namespace=namespace, limit_ranges=limit_ranges)


def requests_of(body, i=0):
    return body["spec"]["containers"][i]["resources"]["requests"]


def test_burstable_pod_gets_the_learned_levels_and_keeps_its_original():
    p = pod(("main", copy.deepcopy(BURSTABLE)))
    a = admit(p, target())
    a.apply(p)
    assert requests_of(p) == {"cpu": "1500m", "memory": "3072Mi"}
    assert json.loads(p["metadata"]["annotations"][A_ADMITTED]) == \
        {"main": {"cpu": "4", "memory": "32Gi"}}
    assert "main cpu 1500m, main memory 3072Mi" in p["metadata"]["annotations"][A_ADMISSION]
    assert p["metadata"]["annotations"][MODEL_ANNOTATION] == "pm"      # nothing else touched


def test_without_client_authentication_nothing_is_sealed_and_the_note_keeps_the_originals():
    """Issue 43: with no client authentication (the default) anyone who reaches the webhook
    gets any "originals" sealed, and sealed they verify. The handler admits with
    ``seal=False`` then: the pod is still sized, no ``ai4dl.io/admitted`` record is written
    (the savings count from the requests at the operator's first write), and the note keeps
    the author's requests for people; with client authentication the record is sealed for
    this pod's identity."""
    from ai4dl.controller.podstate import StateKey, admitted_identity, admitted_scope

    key = StateKey(b"k" * 32)
    p = pod(("main", copy.deepcopy(BURSTABLE)))
    a = admission.admit(p, target(), None, key, namespace="ml", seal=False)
    a.apply(p)
    ann = p["metadata"]["annotations"]
    assert requests_of(p) == {"cpu": "1500m", "memory": "3072Mi"} and A_ADMITTED not in ann
    assert ann[A_ADMISSION].endswith("; the author's: main cpu 4, main memory 32Gi (not "
                                     "sealed: no client authentication)"), ann[A_ADMISSION]
    sealed = pod(("main", copy.deepcopy(BURSTABLE)))
    admission.admit(sealed, target(), None, key, namespace="ml").apply(sealed)
    opened = key.open(admitted_scope("ml", "pm", admitted_identity(sealed["metadata"])),
                      sealed["metadata"]["annotations"][A_ADMITTED])
    assert opened.problem is None and opened.data == {"main": {"cpu": "4", "memory": "32Gi"}}
    assert "not sealed" not in sealed["metadata"]["annotations"][A_ADMISSION]


def test_floor_ceiling_physical_maximum_and_limit_bound_the_level():
    p = pod(("main", {"requests": {"cpu": "4", "memory": "32Gi"},
                      "limits": {"memory": "2000M"}}))
    admit(p, target(levels=(0.01, 3 * GiB), floor=(0.25, 0.0), ceiling=(np.inf, 8 * GiB)),
          max_value={"cpu": 64.0, "memory": 1e12}).apply(p)
    # cpu raised to the floor; memory capped by the limit, written as the limit itself (its
    # MiB rounding would be above 2000M)
    assert requests_of(p) == {"cpu": "250m", "memory": "2000M"}
    p = pod(("main", copy.deepcopy(BURSTABLE)))
    admit(p, target(levels=(100.0, 3 * GiB), ceiling=(np.inf, 1 * GiB)),
          max_value={"cpu": 16.0}).apply(p)
    assert requests_of(p) == {"cpu": "16000m", "memory": "1024Mi"}


@pytest.mark.parametrize("resources,qos", [
    ({}, "BestEffort"),
    ({"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
     "Guaranteed"),
])
def test_qos_class_never_changes(resources, qos):
    p = pod(("main", copy.deepcopy(resources)))
    before = copy.deepcopy(p["spec"])
    a = admit(p, target())
    a.apply(p)
    assert p["spec"] == before and not a.changes
    assert p["metadata"]["annotations"][A_ADMISSION] == ({
        "BestEffort": "unchanged: the pod's QoS class is BestEffort: setting requests would "
                      "change it",
        "Guaranteed": "unchanged: the pod is Guaranteed and no managed container's workload has "
                      "a profile (a Guaranteed pod gets only its own workload's level, as "
                      "request and limit)"}[qos])


def test_a_burstable_pod_is_never_made_guaranteed():
    # limits = 1.5 cores / 3Gi: the levels would make requests equal the limits everywhere
    p = pod(("main", {"requests": {"cpu": "1", "memory": "1Gi"},
                      "limits": {"cpu": "1500m", "memory": "3Gi"}}))
    a = admit(p, target())
    a.apply(p)
    assert requests_of(p) == {"cpu": "1", "memory": "1Gi"}          # both kept their own
    assert "unchanged" in p["metadata"]["annotations"][A_ADMISSION]
    # with one resource still below its limit the pod stays Burstable: that one is set
    p = pod(("main", {"requests": {"cpu": "1", "memory": "1Gi"},
                      "limits": {"cpu": "1500m", "memory": "8Gi"}}))
    admit(p, target()).apply(p)
    assert requests_of(p) == {"cpu": "1500m", "memory": "3072Mi"}


def test_only_managed_containers_and_resources_with_a_level():
    p = pod(("main", copy.deepcopy(BURSTABLE)), ("sidecar", {"requests": {"cpu": "100m"}}))
    admit(p, target(containers=("main",), levels=(None, 3 * GiB))).apply(p)
    assert requests_of(p, 0) == {"cpu": "4", "memory": "3072Mi"}
    assert requests_of(p, 1) == {"cpu": "100m"}
    assert json.loads(p["metadata"]["annotations"][A_ADMITTED]) == {"main": {"memory": "32Gi"}}
    # a container without any requests gets none (its author asked for none)
    p = pod(("main", copy.deepcopy(BURSTABLE)), ("new", {}))
    admit(p, target()).apply(p)
    assert "requests" not in p["spec"]["containers"][1]["resources"]
    assert "new" not in json.loads(p["metadata"]["annotations"][A_ADMITTED])
    assert "new cpu: it has no request (none is added)" in \
        p["metadata"]["annotations"][A_ADMISSION]


def test_pods_admission_cannot_serve_are_left_unchanged_with_a_reason():
    p = pod(("main", copy.deepcopy(BURSTABLE)), labels={"app": "serve"})
    admit(p, target()).apply(p)
    assert requests_of(p) == BURSTABLE["requests"]
    assert "does not match PhaseModel pm's spec.selector" in \
        p["metadata"]["annotations"][A_ADMISSION]
    assert A_ADMITTED not in p["metadata"]["annotations"]
    # a PhaseModel this operator does not serve: untouched (another shard's webhook decides,
    # and must not find its own annotation overwritten)
    p = pod(("main", copy.deepcopy(BURSTABLE)), pm="other")
    before = copy.deepcopy(p)
    a = admit(p, target())
    a.apply(p)
    assert p == before and not a.changes and not a.annotations


def test_modes_that_do_not_admit_leave_the_pod_alone_silently():
    for mode in ("Off", "Recommend"):
        p = pod(("main", copy.deepcopy(BURSTABLE)))
        before = copy.deepcopy(p)
        a = admit(p, target(mode=mode))
        a.apply(p)
        assert p == before and not a.changes and not a.annotations
    p = pod(("main", copy.deepcopy(BURSTABLE)))
    admit(p, target(mode="Initial")).apply(p)
    assert requests_of(p)["cpu"] == "1500m"
    p = pod(("main", copy.deepcopy(BURSTABLE)))
    del p["metadata"]["labels"][OPT_IN_LABEL]          # not opted in: never touched
    assert admit(p, target()).annotations == {}


def test_only_the_requests_namespace_is_served():
    # the PhaseModel ml/pm exists; a review for namespace "other" naming it learns nothing
    for meta_ns, request_ns in (("ml", "other"), ("other", "ml"), (None, "ml"), ("ml", None),
                                ("ml", "")):
        p = pod(("main", copy.deepcopy(BURSTABLE)), ns=meta_ns)
        if meta_ns is None:
            del p["metadata"]["namespace"]
        a = admit(p, target(), namespace=request_ns)
        assert not a.changes and A_ADMITTED not in a.annotations, (meta_ns, request_ns)
        assert "is not the request's namespace" in a.annotations[A_ADMISSION]
    # a PhaseModel of the same name in another namespace is never looked up
    seen = []

    class Spy(dict):
        def get(self, key, default=None):
            seen.append(key)
            return super().get(key, default)
    p = pod(("main", copy.deepcopy(BURSTABLE)), ns="other")
    admit(p, Spy(target()), namespace="other")
    assert seen == [("other", "pm")]
    admit(pod(("main", copy.deepcopy(BURSTABLE))), Spy(target()), namespace="other")
    assert seen == [("other", "pm")]                # mismatch: nothing read


def test_limits_only_intent_is_kept():
    # a memory limit only: the API server defaulted the memory request to it; no cpu at all
    p = pod(("main", {"requests": {"memory": "8Gi"}, "limits": {"memory": "8Gi"}}),
            ("side", {"requests": {"cpu": "2", "memory": "1Gi"}}))
    before = copy.deepcopy(p["spec"]["containers"][0])
    a = admit(p, target())
    a.apply(p)
    assert p["spec"]["containers"][0] == before
    assert requests_of(p, 1) == {"cpu": "1500m", "memory": "3072Mi"}
    note = p["metadata"]["annotations"][A_ADMISSION]
    assert note.startswith("set by PhaseModel pm")
    assert "main cpu: it has no request (none is added)" in note
    assert "main memory: its request equals its limit" in note
    assert "\n" not in note


def limit_range(name="lr", **items):
    return limit_range_rules({"metadata": {"name": name, "namespace": "ml"}, "spec": {"limits": [
        {"type": kind, **fields} for kind, fields in items.items()]}})


def test_limit_range_bounds_clamp_the_request():
    lr = limit_range(Container={"min": {"cpu": "2", "memory": "4Gi"},
                                "max": {"memory": "2500M"},
                                "maxLimitRequestRatio": {"memory": "2"}})
    # cpu 1.5 -> min 2; memory 3Gi above max 2500M -> the max itself
    p = pod(("main", {"requests": {"cpu": "4", "memory": "2Gi"}, "limits": {"memory": "2500M"}}))
    a = admit(p, target(), limit_ranges=(lr,))
    a.apply(p)
    assert requests_of(p) == {"cpu": "2000m", "memory": "2Gi"}, a.annotations
    # memory: min 4Gi > max 2500M: no value fits, left as it was, said
    assert "main memory: no request is within its limit and LimitRange bounds (lr)" in \
        p["metadata"]["annotations"][A_ADMISSION]
    # ratio: limit 10Gi / ratio 2 -> at least 5Gi (level 3Gi raised)
    lr = limit_range(Container={"maxLimitRequestRatio": {"memory": "2", "cpu": "4"}})
    p = pod(("main", {"requests": {"cpu": "4", "memory": "6Gi"},
                      "limits": {"cpu": "8", "memory": "10Gi"}}))
    admit(p, target(), limit_ranges=(lr,)).apply(p)
    assert requests_of(p) == {"cpu": "2000m", "memory": "5120Mi"}


def quota(name="q", hard=None, used=None):
    return admission.quota_room({"metadata": {"name": name}, "spec": {"hard": hard or {}},
                                 "status": {"hard": hard or {}, "used": used or {}}})


def test_a_raise_past_a_resource_quotas_room_is_not_made():
    """Issue 43: raising a request past what a ResourceQuota has left made the API server
    refuse a pod it would otherwise admit (403 exceeded quota)."""
    # 2 cpu and 512Mi requested; the level is 1.5 cpu (a decrease) and 3Gi (a raise)
    p = pod(("main", {"requests": {"cpu": "2", "memory": "512Mi"}}))
    q = quota(hard={"requests.memory": "2Gi", "cpu": "10", "pods": "5"},
              used={"requests.memory": "1Gi", "cpu": "2"})
    a = admission.admit(p, target(), namespace="ml", resource_quotas=(q,))
    a.apply(p)
    assert requests_of(p) == {"cpu": "1500m", "memory": "512Mi"}       # the decrease stands
    assert "memory not raised: the pod would exceed ResourceQuota q requests.memory (hard " \
        "2Gi, 1024Mi left)" in p["metadata"]["annotations"][A_ADMISSION]
    # room enough: raised as before
    p = pod(("main", {"requests": {"cpu": "2", "memory": "512Mi"}}))
    admission.admit(p, target(), namespace="ml",
                    resource_quotas=(quota(hard={"memory": "8Gi"}),)).apply(p)
    assert requests_of(p) == {"cpu": "1500m", "memory": "3072Mi"}
    # a Guaranteed pod's limits move with its requests: limits.memory counts too
    from ai4dl.controller.pods import Container

    q = quota(hard={"limits.memory": "4Gi"}, used={"limits.memory": "3Gi"})
    got, notes = admission._within_quotas(
        pod(("main", {"requests": {"memory": "512Mi"}, "limits": {"memory": "512Mi"}})),
        [Container("main", {"memory": 512 * 2.0 ** 20}, {"memory": 512 * 2.0 ** 20})],
        {0: {"memory": "2Gi"}}, [], True, (q,))
    assert got == {0: {}} and "limits.memory" in notes[0]


def test_pod_level_resources_and_pod_limit_ranges_keep_the_sum():
    # two containers of 1 core each, the pod 2.5 cores: 1.5 + 1.5 would be 3 > 2.5
    p = pod(("a", {"requests": {"cpu": "1", "memory": "8Gi"}}),
            ("b", {"requests": {"cpu": "1", "memory": "8Gi"}}))
    p["spec"]["resources"] = {"requests": {"cpu": "2500m", "memory": "20Gi"}}
    admit(p, target()).apply(p)
    assert [requests_of(p, i) for i in (0, 1)] == [{"cpu": "1", "memory": "3072Mi"}] * 2
    assert "cpu of every container: the containers' requests would sum above the pod's " \
        "spec.resources (2500m)" in p["metadata"]["annotations"][A_ADMISSION]
    # a Pod-type LimitRange min: 2 x 3Gi = 6Gi is below 10Gi: memory kept
    p = pod(("a", {"requests": {"cpu": "1", "memory": "8Gi"}}),
            ("b", {"requests": {"cpu": "1", "memory": "8Gi"}}))
    admit(p, target(), limit_ranges=(limit_range(Pod={"min": {"memory": "10Gi"}}),)).apply(p)
    assert [requests_of(p, i) for i in (0, 1)] == [{"cpu": "1500m", "memory": "8Gi"}] * 2
    assert "memory of every container: the pod's total would break LimitRange lr Pod min " \
        "10Gi" in p["metadata"]["annotations"][A_ADMISSION]
    # nothing can be set at all: unchanged, with every reason
    p = pod(("a", {"requests": {"cpu": "1", "memory": "8Gi"}}))
    p["spec"]["resources"] = {"requests": {"cpu": "1", "memory": "8Gi"}}
    a = admit(p, target(levels=(1.5, 9 * GiB)))
    assert not a.changes and A_ADMITTED not in a.annotations
    assert a.annotations[A_ADMISSION].startswith("unchanged: cpu of every container")


# ----------------------------------------------------------------------------- targets
def phasemodel(spec):
    return {"metadata": {"namespace": "ml", "name": "pm", "generation": 1}, "spec": spec}


def test_no_model_admits_unchanged_with_the_reason(fitted_model):
    t = admission_target(phasemodel({"policy": {"mode": "InPlace"}}))
    assert t.reason == "it has no model yet"
    p = pod(("main", copy.deepcopy(BURSTABLE)), labels={})
    admit(p, {("ml", "pm"): t}).apply(p)
    assert p["metadata"]["annotations"][A_ADMISSION] == \
        "unchanged: PhaseModel pm: it has no model yet"
    bad = admission_target(phasemodel({"stepSeconds": 600, "windowSeconds": 15}))
    assert bad.reason.startswith("its spec is invalid") and not bad.admits


@pytest.fixture(scope="module")
def policy_model(fitted_model, synthetic_train):
    """The session's model with auto's choice and both head-room tables (windows of 40)."""
    from ai4dl.crd_spec import PhaseModelSpec
    from ai4dl.method.model import PhaseModel
    from ai4dl.trainer import choose_served_policy

    m = PhaseModel.from_document(fitted_model.to_document())
    choose_served_policy(m, list(synthetic_train[0]), PhaseModelSpec.model_validate(
        spec_of(m, {"policy": {"kind": "auto"}})))
    return m


def spec_of(model, spec: dict) -> dict:
    return {"features": [{"name": f, "query": f + "{{{selector}}}"} for f in model.features_],
            "stepSeconds": 15, "windowSeconds": 600, **spec}


def test_the_learned_level_comes_from_the_models_tables(policy_model):
    from ai4dl.crd_spec import PhaseModelSpec
    from ai4dl.serving import served_policy

    doc = json.loads(policy_model.to_document().model_dump_json(by_alias=True))
    spec = spec_of(policy_model, {
        "policy": {"mode": "Initial", "kind": "adaptive-max",
                   "resources": {"memory": {"ceiling": "64Gi"}}}, "model": doc})
    t = admission_target(phasemodel(spec))
    table = policy_model.policy_tables_[0]
    want = [next(r.cold_start for r in table.resources if r.resource == res)
            for res in t.resources]
    # a reactive policy served: the first-window level still comes from the stored tables
    assert t.levels == tuple(want) and not t.reason and t.admits
    assert t.ceiling[t.resources.index("memory")] == 64 * GiB
    served = served_policy(PhaseModelSpec.model_validate(spec), policy_model)
    np.testing.assert_allclose(served.cold_start, want)
    # a model without tables (fitted before schema v2) has no level to admit with
    bare = json.loads(policy_model.to_document().model_dump_json(by_alias=True))
    bare.pop("policyTables"), bare.pop("policyChoice")
    t = admission_target(phasemodel({**spec, "model": bare}))
    assert "learned no first-window level" in t.reason


# ----------------------------------------------------------------------------- certificates
def test_self_signed_certificates_verify_and_renew(tmp_path):
    import datetime as dt
    import ssl

    from cryptography import x509

    from ai4dl.controller.webhook import SelfSignedCertificates, service_names

    certs = SelfSignedCertificates(service_names("ai4dl-webhook", "ops") + ["127.0.0.1"],
                                   tmp_path / "tls")
    assert oct((tmp_path / "tls").stat().st_mode & 0o777) == "0o700"
    assert oct(certs.keyfile.stat().st_mode & 0o777) == "0o600"
    cert = x509.load_pem_x509_certificate(certs.certfile.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "ai4dl-webhook.ops.svc" in sans.get_values_for_type(x509.DNSName)
    assert [str(a) for a in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    # the serving certificate verifies against the bundle, for the Service's name
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs.certfile, certs.keyfile)          # key and certificate agree
    ca = x509.load_pem_x509_certificate(certs.ca_bundle())
    cert.verify_directly_issued_by(ca)

    now = dt.datetime.now(dt.timezone.utc)
    assert not certs.renew(now)                                  # nothing due yet
    # two thirds of the serving certificate's life gone: renewed under the same CA
    first = certs.serving.cert_pem
    assert not certs.renew(now + dt.timedelta(days=61)) and certs.serving.cert_pem != first
    assert certs.ca_bundle(now) == certs.ca.cert_pem and certs.previous_ca is None
    # the CA's last tenth: a new CA, both in the bundle until the old one expires
    later = now + dt.timedelta(days=340)
    assert certs.renew(later)
    certs.write_serving()
    bundle = certs.ca_bundle(later)
    assert bundle.count(b"BEGIN CERTIFICATE") == 2
    new_ca = x509.load_pem_x509_certificate(certs.ca.cert_pem)
    x509.load_pem_x509_certificate(certs.certfile.read_bytes()).verify_directly_issued_by(new_ca)
    assert certs.ca_bundle(now + dt.timedelta(days=400)).count(b"BEGIN CERTIFICATE") == 1


# ----------------------------------------------------------------------------- client authentication
WEBHOOK_ARGS = ["--prometheus-url", "http://prometheus:9090", "--webhook-port", "9443",
                "--webhook-host", "127.0.0.1", "--webhook-configuration", "ai4dl-operator"]


def test_client_ca_flag_errors_are_one_line(tmp_path, capsys):
    from ai4dl.controller.__main__ import main
    from ai4dl.controller.webhook import make_ca, make_serving

    ca, key = make_ca()
    (tmp_path / "leaf.crt").write_bytes(make_serving(ca, key, ["x"]).cert_pem)
    (tmp_path / "junk.crt").write_text("not a certificate\n")
    cases = [
        (["--webhook-client-ca-file", str(tmp_path / "none.crt")], "no such file"),
        (["--webhook-client-ca-file", str(tmp_path / "junk.crt")], "not a PEM CA certificate"),
        (["--webhook-client-ca-file", str(tmp_path / "leaf.crt")], "holds no CA certificate"),
        (["--webhook-client-name", "kube-apiserver"],
         "--webhook-client-name needs --webhook-client-ca-file"),
        # issue 43: with no name, any certificate of the CA (an admin's, a node's) was answered
        (["--webhook-client-ca-file", str(tmp_path / "ca.crt")],
         "--webhook-client-ca-file needs at least one --webhook-client-name"),
    ]
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    for extra, message in cases:
        assert main(WEBHOOK_ARGS + extra) == 2
        err = capsys.readouterr().err
        assert err.startswith("ai4dl-operator: error: --webhook-client") and message in err, err
        assert err.count("\n") == 1 and "Traceback" not in err
    assert main(["--prometheus-url", "http://p:9090", "--webhook-client-ca-file", "x"]) == 2
    assert "need --webhook-port" in capsys.readouterr().err
