"""The CRD's cross-field CEL rules (generated from the pydantic models in ai4dl.crd) on the real
API server: specs a new user could write and the operator would have to guess at are refused at
`kubectl apply`; pydantic refuses the same specs (the operator's own check, for objects stored
before the rules existed)."""

from __future__ import annotations

import json
import subprocess

import pytest
from pydantic import ValidationError

from ai4dl.crd import GROUP, VERSION, PhaseModelSpec
from e2e_fixtures_operator import crd  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration

# (spec, the API server's message, whether pydantic refuses it too: floor > ceiling is not a spec
# error to the operator but a per-resource contradiction it holds and reports, BoundsConflict)
REFUSED = [
    ({"policy": {"resources": {"memory": {"floor": "64Gi", "ceiling": "1Gi"}}}},
     "floor must not be above ceiling", False),
    ({"policy": {"resources": {"cpu": {"floor": "1500m", "ceiling": "1"}}}},
     "floor must not be above ceiling", False),
    ({"stepSeconds": 600, "windowSeconds": 15}, "must hold at least 4 steps", True),
    ({"stepSeconds": 15, "windowSeconds": 45}, "must hold at least 4 steps", True),
    ({"stepSeconds": 15, "windowSeconds": 100}, "whole number of steps", True),
]
ACCEPTED = [
    {"policy": {"resources": {"memory": {"floor": "1Gi", "ceiling": "1Gi"}}}},
    {"policy": {"resources": {"cpu": {"floor": "250m"}, "memory": {"ceiling": "64Gi"}}}},
    {"policy": {"resources": {"memory": {"floor": None, "ceiling": "1Gi"}}}},
    {"stepSeconds": 15, "windowSeconds": 60},
    {"policy": {"mode": "Initial"}},
]


def _apply(kube_cluster, namespace: str, name: str, spec: dict) -> subprocess.CompletedProcess:
    from e2e.controlplane.cluster import bin_dir

    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    return subprocess.run([str(bin_dir() / "kubectl"), "--kubeconfig",
                           str(kube_cluster.kubeconfig), "apply", "-f", "-"],
                          input=json.dumps(body), text=True, capture_output=True, timeout=60)


@pytest.mark.parametrize("spec,message,pydantic_too", REFUSED)
def test_kubectl_apply_refuses_what_cannot_hold(kube_cluster, k8s_namespace, crd,  # noqa: F811
                                                spec, message, pydantic_too):
    r = _apply(kube_cluster, k8s_namespace, "bad", spec)
    assert r.returncode != 0 and message in r.stderr, r.stderr
    if pydantic_too:
        with pytest.raises(ValidationError, match=message.split(" (")[0]):
            PhaseModelSpec.model_validate(spec)


@pytest.mark.parametrize("spec", ACCEPTED)
def test_sound_specs_are_accepted(kube_cluster, k8s_namespace, crd, spec):  # noqa: F811
    r = _apply(kube_cluster, k8s_namespace, "good", spec)
    assert r.returncode == 0, r.stderr
    PhaseModelSpec.model_validate(spec)
