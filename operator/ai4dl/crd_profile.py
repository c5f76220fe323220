"""The ``WorkloadProfile`` custom resource (ai4dl.io/v1alpha1): what the operator remembers of
one workload of one PhaseModel (issue 42), as VPA keeps a VerticalPodAutoscalerCheckpoint per
VPA and container. The pydantic models are the one source of its schema;
``crds/workloadprofiles.ai4dl.io.yaml`` is generated from them
(``python -m ai4dl.crd_profile``) and a test fails when they drift.

One object per (PhaseModel, workload), in the PhaseModel's namespace, owned by it (deleted
with it). ``status.record`` is what the operator trusts: the profiles of the workload's
containers (:class:`ai4dl.rules.workload_profile.WorkloadProfile`), sealed with the operator's
key for this namespace, PhaseModel and workload — an object edited, or copied from another
workload, reads as absent. The rest of the status is for people (``kubectl get wp``): the
counts and the first request the profile gives now.

There is no status subresource: the operator writes the object whole, once per execution end
at most (a checkpoint, not a spec someone edits). Tenants get no role on it (the chart
aggregates none), and the seal holds where a cluster admin grants one anyway.
"""

from __future__ import annotations

import sys
from typing import Literal

from pydantic import Field

from ai4dl.crd import namespaced_crd, openapi_schema, crd_yaml as as_yaml
from ai4dl.crd_spec import CrdModel

PROFILE_KIND = "WorkloadProfile"
PROFILE_PLURAL = "workloadprofiles"
PROFILE_SINGULAR = "workloadprofile"
PROFILE_SHORT_NAMES = ["wp"]
#: the sealed record's largest size (16 containers of 8 runs fit in a tenth of it)
MAX_RECORD_CHARS = 256 * 1024


class ProfileContainer(CrdModel):
    name: str = Field(max_length=253)
    runs: int = Field(0, ge=0, description="executions remembered (at most 8)")
    first_request: dict[str, str] = Field(
        default_factory=dict, alias="firstRequest",
        description="the first request the profile gives a new execution, when last written")
    peak: dict[str, str] = Field(default_factory=dict,
                                 description="the peak its remembered runs reached")


class WorkloadProfileSpec(CrdModel):
    phase_model: str = Field(alias="phaseModel", max_length=253)
    workload: str = Field(max_length=600, description="kind/name (ai4dl.kube.workload)")


class WorkloadProfileStatus(CrdModel):
    executions: int = Field(0, ge=0)
    oom_kills: int = Field(0, ge=0, alias="oomKills")
    last_execution_end: str | None = Field(None, alias="lastExecutionEnd")
    containers: list[ProfileContainer] = Field(default_factory=list, max_length=64)
    record: str = Field("", max_length=MAX_RECORD_CHARS,
                        description="the profiles, sealed by the operator (the only part read)")


class WorkloadProfileResource(CrdModel):
    api_version: Literal["ai4dl.io/v1alpha1"] = Field("ai4dl.io/v1alpha1", alias="apiVersion")
    kind: Literal["WorkloadProfile"] = "WorkloadProfile"
    metadata: dict = Field(default_factory=dict)
    spec: WorkloadProfileSpec
    status: WorkloadProfileStatus | None = None


def crd_manifest() -> dict:
    return namespaced_crd(PROFILE_KIND, PROFILE_PLURAL, PROFILE_SINGULAR, PROFILE_SHORT_NAMES, {
        "additionalPrinterColumns": [
            {"name": "PhaseModel", "type": "string", "jsonPath": ".spec.phaseModel"},
            {"name": "Workload", "type": "string", "jsonPath": ".spec.workload"},
            {"name": "Executions", "type": "integer", "jsonPath": ".status.executions"},
            {"name": "OOMKills", "type": "integer", "jsonPath": ".status.oomKills"},
            {"name": "LastEnd", "type": "date", "jsonPath": ".status.lastExecutionEnd"},
        ],
        "schema": {"openAPIV3Schema": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": openapi_schema(WorkloadProfileSpec),
                "status": openapi_schema(WorkloadProfileStatus),
            },
            "required": ["spec"],
        }},
    })


HEADER = ("# Generated from the pydantic models in operator/ai4dl/crd_profile.py — do not edit.\n"
          "# Regenerate: .venv/bin/python -m ai4dl.crd_profile > "
          "crds/workloadprofiles.ai4dl.io.yaml\n")


def crd_yaml() -> str:
    return as_yaml(crd_manifest(), HEADER)


if __name__ == "__main__":
    sys.stdout.write(crd_yaml())
