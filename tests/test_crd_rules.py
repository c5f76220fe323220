"""The CRD's cross-field CEL rules (generated from the pydantic models in ai4dl.crd) on the real
API server: specs a new user could write and the operator would have to guess at are refused at
`kubectl apply`; pydantic refuses the same specs (the operator's own check, for objects stored
before the rules existed)."""

from __future__ import annotations

import json
import subprocess

import pytest
from pydantic import ValidationError

from ai4dl.crd import GROUP, VERSION
from ai4dl.crd_spec import PhaseModelSpec
from e2e_fixtures_operator import crd  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration

# (spec, the API server's message, whether pydantic refuses it too: floor > ceiling is not a spec
# error to the operator but a per-resource contradiction it holds and reports, BoundsConflict;
# a string: pydantic refuses it in its own words, which this matches)
REFUSED = [
    ({"policy": {"resources": {"memory": {"floor": "64Gi", "ceiling": "1Gi"}}}},
     "floor must not be above ceiling", False),
    ({"policy": {"resources": {"cpu": {"floor": "1500m", "ceiling": "1"}}}},
     "floor must not be above ceiling", False),
    ({"stepSeconds": 600, "windowSeconds": 15}, "must hold at least 4 steps", True),
    ({"stepSeconds": 15, "windowSeconds": 45}, "must hold at least 4 steps", True),
    ({"stepSeconds": 15, "windowSeconds": 100}, "whole number of steps", True),
    ({"policy": {"objectives": {"cpu": {"fulfilment": 0}}}},
     "fulfilment must be in (0, 1): the share of cpu samples", "greater than 0"),
    ({"policy": {"objectives": {"cpu": {"fulfilment": 1}}}},
     "fulfilment must be in (0, 1): the share of cpu samples", "less than 1"),
    ({"policy": {"objectives": {"cpu": {"maxShortWindows": 1.5}}}},
     "maxShortWindows must be in (0, 1)", "less than 1"),
    ({"policy": {"objectives": {"memory": {"maxRiskWindows": -0.01}}}},
     "maxRiskWindows must be in (0, 1): the share of windows", "greater than 0"),
    ({"policy": {"objectives": {"memory": {"maxRiskWindows": 1}}}},
     "maxRiskWindows must be in (0, 1): the share of windows", "less than 1"),
    # a query the operator cannot confine to the PhaseModel's namespace (issue 26; what CEL
    # cannot see, a selector without {selector} beside one with it, the operator refuses at
    # run time: tests/test_tenancy_promql.py)
    ({"features": [{"name": "cpu", "query": 'sum by (namespace, pod, container) (rate('
                    'container_cpu_usage_seconds_total{{namespace="other"}}[1m]))'}]},
     "query must contain {selector}", "has no {selector}"),
    # issue 43: a template is not a format string: a brace outside the language is refused
    ({"features": [{"name": "cpu", "query": 'sum by (namespace, pod, container) (rate('
                    'container_cpu_usage_seconds_total{{{selector[19]}}}[1m]))'}]},
     "query is not a template", "is not a template"),
]
ACCEPTED = [
    {"policy": {"resources": {"memory": {"floor": "1Gi", "ceiling": "1Gi"}}}},
    {"policy": {"resources": {"cpu": {"floor": "250m"}, "memory": {"ceiling": "64Gi"}}}},
    {"policy": {"resources": {"memory": {"floor": None, "ceiling": "1Gi"}}}},
    {"stepSeconds": 15, "windowSeconds": 60},
    {"policy": {"mode": "Initial"}},
    {"policy": {"objectives": {"cpu": {"fulfilment": 0.9, "maxShortWindows": 0.2},
                               "memory": {"maxRiskWindows": 0.05}}}},
    {"policy": {"objectives": {"cpu": {"maxShortWindows": None}}}},
    {"policy": {"targetFulfilment": 0.9, "objectives": {"cpu": {"fulfilment": 0.95}}}},
    {"features": [{"name": "cpu", "query": "sum by (namespace, pod, container) (rate("
                   "container_cpu_usage_seconds_total{{{selector}}}[2m]))"}]},
]


def _kubectl(kube_cluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    from e2e.controlplane.cluster import bin_dir

    return subprocess.run([str(bin_dir() / "kubectl"), "--kubeconfig",
                           str(kube_cluster.kubeconfig), *args],
                          input=stdin, text=True, capture_output=True, timeout=60)


def _apply(kube_cluster, namespace: str, name: str, spec: dict) -> subprocess.CompletedProcess:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    return _kubectl(kube_cluster, "apply", "-f", "-", stdin=json.dumps(body))


def _get(kube_cluster, namespace: str, name: str) -> dict:
    r = _kubectl(kube_cluster, "get", "-n", namespace, "pm", name, "-o", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("spec,message,pydantic_too", REFUSED)
def test_kubectl_apply_refuses_what_cannot_hold(kube_cluster, k8s_namespace, crd,  # noqa: F811
                                                spec, message, pydantic_too):
    r = _apply(kube_cluster, k8s_namespace, "bad", spec)
    assert r.returncode != 0 and message in r.stderr, r.stderr
    if pydantic_too:
        with pytest.raises(ValidationError, match=pydantic_too if isinstance(pydantic_too, str)
                           else message.split(" (")[0]):
            PhaseModelSpec.model_validate(spec)


@pytest.mark.parametrize("spec", ACCEPTED)
def test_sound_specs_are_accepted(kube_cluster, k8s_namespace, crd, spec):  # noqa: F811
    r = _apply(kube_cluster, k8s_namespace, "good", spec)
    assert r.returncode == 0, r.stderr
    PhaseModelSpec.model_validate(spec)


def test_api_server_defaults_memory_risk_and_leaves_the_cpu_fulfilment_to_the_user(
        kube_cluster, k8s_namespace, crd):  # noqa: F811
    assert _apply(kube_cluster, k8s_namespace, "plain", {}).returncode == 0
    stored = _get(kube_cluster, k8s_namespace, "plain")["spec"]["policy"]
    assert stored["objectives"] == {"cpu": {}, "memory": {"maxRiskWindows": 0.01}}
    assert "targetFulfilment" not in stored
    policy = PhaseModelSpec.model_validate({"policy": stored}).policy
    assert policy.cpu_fulfilment == 0.97 and policy.objective_note() is None
    # a spec written with the older name keeps meaning it for cpu after the server's defaulting
    assert _apply(kube_cluster, k8s_namespace, "older",
                  {"policy": {"targetFulfilment": 0.9}}).returncode == 0
    stored = _get(kube_cluster, k8s_namespace, "older")["spec"]["policy"]
    policy = PhaseModelSpec.model_validate({"policy": stored}).policy
    assert policy.cpu_fulfilment == 0.9 and "targetFulfilment" in policy.objective_note()


def test_wide_listing_shows_the_memory_risk_achieved(kube_cluster, k8s_namespace,
                                                     crd):  # noqa: F811
    assert _apply(kube_cluster, k8s_namespace, "trained", {}).returncode == 0
    training = {"decision": "applied", "objectives": [
        {"resource": "cpu", "kind": "fulfilment", "value": 0.97, "achievedFulfilment": 0.971,
         "achievedRiskWindows": 0.25},
        {"resource": "memory", "kind": "risk", "value": 0.01, "achievedFulfilment": 0.9993,
         "achievedRiskWindows": 0.0042}]}
    r = _kubectl(kube_cluster, "patch", "-n", k8s_namespace, "pm", "trained",
                 "--subresource=status", "--type=merge", "-p",
                 json.dumps({"status": {"training": training}}))
    assert r.returncode == 0, r.stderr
    r = _kubectl(kube_cluster, "get", "-n", k8s_namespace, "pm", "trained", "-o", "wide")
    assert r.returncode == 0, r.stderr
    header, row = r.stdout.splitlines()[:2]
    # cells start where their header does (an empty cell would shift a split())
    start = header.index("MEMORYRISK")
    assert row[start:].split()[0] == "0.0042"     # memory's, not cpu's 0.25
    # the status schema keeps what the trainer wrote (nothing pruned; defaults added)
    stored = _get(kube_cluster, k8s_namespace, "trained")["status"]["training"]["objectives"]
    assert [{k: o[k] for k in wrote} for o, wrote in zip(stored, training["objectives"])] == \
        training["objectives"]
