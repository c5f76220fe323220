"""The ``PhaseModel`` custom resource (group ai4dl.io, version v1alpha1): pydantic models are the
one source of its schema; ``crds/phasemodels.ai4dl.io.yaml`` is generated from them
(``python -m ai4dl.crd > crds/phasemodels.ai4dl.io.yaml``) and a test fails when they drift.

What the OpenAPI schema cannot check (array shapes that must agree with each other) is checked
by :meth:`PhaseModelSpec.validated_model`, which the operator calls before using a model; a
failure sets the ``Degraded`` condition and nothing is resized.
"""

from __future__ import annotations

import copy
import sys
from typing import Any, Literal

from pydantic import BaseModel, Field
import yaml

from ai4dl.crd_spec import PhaseModelSpec, CrdModel, default_features
from ai4dl.crd_status import PhaseModelStatus
from ai4dl.method.document import PhaseModelDocument
from ai4dl.policy import catalog

GROUP = "ai4dl.io"
VERSION = "v1alpha1"
KIND = "PhaseModel"
PLURAL = "phasemodels"
SINGULAR = "phasemodel"
SHORT_NAMES = ["pm"]

# Pods opt in with this label (so the operator's watch is filtered by the API server) and name
# their PhaseModel with the annotation.
OPT_IN_LABEL = "ai4dl.io/managed"
MODEL_ANNOTATION = "ai4dl.io/phasemodel"
# The batch trainer's field manager: it owns spec.model, spec.previousModel and status.training.
TRAINER_FIELD_MANAGER = "ai4dl-trainer"


class PhaseModelResource(CrdModel):
    api_version: Literal["ai4dl.io/v1alpha1"] = Field("ai4dl.io/v1alpha1", alias="apiVersion")
    kind: Literal["PhaseModel"] = "PhaseModel"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: PhaseModelSpec
    status: PhaseModelStatus | None = None


# ----------------------------------------------------------------------------- CRD generation
_DROP = {"title", "discriminator", "$defs"}


def _structural(schema: dict, defs: dict) -> dict:
    """pydantic JSON Schema -> Kubernetes structural OpenAPI v3: $refs inlined, Optional as
    nullable, const as a one-value enum, titles dropped."""
    if "$ref" in schema:
        target = defs[schema["$ref"].split("/")[-1]]
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        nullable = len(options) < len(schema["anyOf"])
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        if len(options) == 1:
            out = _structural({**options[0], **rest}, defs)
            if nullable:
                out["nullable"] = True
            return out
        raise ValueError(f"cannot express anyOf {schema['anyOf']} structurally")
    out: dict = {}
    for key, value in schema.items():
        if key in _DROP:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # JSON Schema 2020 (pydantic) gives the bound; OpenAPI v3.0 wants a flag + bound
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "properties":
            out["properties"] = {k: _structural(v, defs) for k, v in value.items()}
        elif key == "items":
            out["items"] = _structural(value, defs)
        elif key == "additionalProperties":
            out["additionalProperties"] = (_structural(value, defs) if isinstance(value, dict)
                                           else value)
        elif key == "propertyNames":
            continue  # not supported by the API server; keys are checked by pydantic
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" not in out and \
            "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "additionalProperties" in out and out["additionalProperties"] is False:
        del out["additionalProperties"]
    return out


def openapi_schema(model: type[BaseModel]) -> dict:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(schema, schema.get("$defs", {}))


def document_schema() -> dict:
    """The model document's schema, its ``policyChoice`` winners limited to the policies the
    catalogue serves (the pure method names no policy; ai4dl.policy.catalog does)."""
    schema = openapi_schema(PhaseModelDocument)
    winners = schema["properties"]["policyChoice"]["properties"]["winners"]
    winners["items"]["enum"] = list(catalog.servable())
    return schema


def crd_manifest() -> dict:
    spec_schema = openapi_schema(PhaseModelSpec)
    # The model document is validated in full by its own JSON schema too: malformed documents
    # (wrong types, missing fields) are refused by the API server itself.
    spec_schema["properties"]["model"] = {**document_schema(), "nullable": True}
    spec_schema["properties"]["previousModel"] = {**document_schema(), "nullable": True}
    # Object defaults, so the API server fills in nested defaults (policy.mode, the features'
    # queries) even when a user leaves the whole object out.
    props = spec_schema["properties"]
    props["policy"]["default"] = {}
    props["selector"]["default"] = {}
    props["refit"]["default"] = {}
    objectives = props["policy"]["properties"]["objectives"]
    objectives["default"] = {}
    objectives["properties"]["cpu"]["default"] = {}
    objectives["properties"]["memory"]["default"] = {}
    # No server-side default for the cpu fulfilment nor for its older name targetFulfilment:
    # which of the two a user wrote decides the value in force (Policy._target_fulfilment_is_cpu),
    # and a default filled in by the API server would look written. Pydantic's defaults (0.97)
    # apply when neither is there.
    del objectives["properties"]["cpu"]["properties"]["fulfilment"]["default"]
    del props["policy"]["properties"]["targetFulfilment"]["default"]
    props["features"]["default"] = [f.model_dump(by_alias=True) for f in default_features()]
    status_schema = openapi_schema(PhaseModelStatus)
    return namespaced_crd(KIND, PLURAL, SINGULAR, SHORT_NAMES, {
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Phases", "type": "string", "jsonPath": ".status.phaseSummary"},
                    {"name": "Pods", "type": "integer", "jsonPath": ".status.podsTracked"},
                    {"name": "Mode", "type": "string", "jsonPath": ".spec.policy.mode"},
                    {"name": "Policy", "type": "string", "jsonPath": ".status.policy",
                     "priority": 1},
                    {"name": "Score", "type": "number", "priority": 1,
                     "description": "last training run: the candidate's allocation ÷ oracle at "
                                    "the fulfilment target (lower is better)",
                     "jsonPath": ".status.training.candidateScore"},
                    {"name": "MemoryRisk", "type": "number", "priority": 1,
                     "description": "last training run: share of memory windows at risk under "
                                    "the served policy on the most recent training executions "
                                    "(objective: spec.policy.objectives.memory.maxRiskWindows)",
                     "jsonPath": '.status.training.objectives[?(@.resource=="memory")]'
                                 '.achievedRiskWindows'},
                    {"name": "Saved", "type": "string", "priority": 1,
                     "description": "share of the authors' requests not allocated so far",
                     "jsonPath": ".status.savings.summary"},
                    {"name": "Ready", "type": "string",
                     "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema,
                        "status": status_schema,
                    },
                    "required": ["spec"],
                }},
    })


def namespaced_crd(kind: str, plural: str, singular: str, short_names: list[str],
                   version: dict) -> dict:
    """A namespaced CRD of group ai4dl.io with one served, stored version (``version``: its
    subresources, printer columns and schema)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": singular,
                      "shortNames": short_names, "listKind": f"{kind}List"},
            "versions": [{"name": VERSION, "served": True, "storage": True, **version}],
        },
    }


HEADER = ("# Generated from the pydantic models in operator/ai4dl/crd.py — do not edit.\n"
          "# Regenerate: .venv/bin/python -m ai4dl.crd > crds/phasemodels.ai4dl.io.yaml\n")


def crd_yaml(manifest: dict | None = None, header: str = HEADER) -> str:
    """A CRD manifest (this one by default) as the committed YAML file, under its header."""
    body = crd_manifest() if manifest is None else manifest
    return header + yaml.safe_dump(copy.deepcopy(body), sort_keys=False, width=100)


if __name__ == "__main__":
    sys.stdout.write(crd_yaml())
