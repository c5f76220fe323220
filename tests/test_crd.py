"""The PhaseModel CRD: generated from pydantic (no drift), and what the schema cannot catch."""

import json
from pathlib import Path

import pytest
import yaml

from ai4dl.crd import PhaseModelResource, PhaseModelSpec, crd_manifest, crd_yaml

CRD_FILE = Path(__file__).resolve().parent.parent / "crds" / "phasemodels.ai4dl.io.yaml"


def test_committed_crd_matches_the_pydantic_models():
    assert CRD_FILE.read_text() == crd_yaml(), (
        "crds/phasemodels.ai4dl.io.yaml is out of date: run "
        ".venv/bin/python -m ai4dl.crd > crds/phasemodels.ai4dl.io.yaml")


def _walk(node, path=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + "/" + str(k), k, v
            yield from _walk(v, path + "/" + str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


def test_schema_is_structural():
    schema = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, key, value in _walk(schema):
        assert key not in ("$ref", "anyOf", "oneOf", "allOf", "$defs", "title", "const"), path
        if key == "properties":
            for name, sub in value.items():
                assert "type" in sub or "x-kubernetes-preserve-unknown-fields" in sub, \
                    f"{path}/{name} has no type"
    version = crd_manifest()["spec"]["versions"][0]
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names == ["Phases", "Pods", "Mode", "Policy", "Score", "Saved", "Ready", "Age"]
    # -o wide only: the served policy, the last training score, the savings so far
    assert [c.get("priority", 0) for c in version["additionalPrinterColumns"]] == \
        [0, 0, 0, 1, 1, 1, 0, 0]
    assert crd_manifest()["spec"]["names"]["shortNames"] == ["pm"]
    assert yaml.safe_load(CRD_FILE.read_text())["metadata"]["name"] == "phasemodels.ai4dl.io"


def _model_doc(fitted_model) -> dict:
    doc = json.loads(fitted_model.to_document().model_dump_json(by_alias=True, exclude_none=True))
    return doc


def test_spec_defaults_and_a_valid_model(fitted_model):
    spec = PhaseModelSpec.model_validate({
        "selector": {"matchLabels": {"team": "vision"}},
        "features": [{"name": f, "query": "x{{{selector}}}"} for f in fitted_model.features_],
        "model": _model_doc(fitted_model)})
    assert spec.policy.mode == "Recommend" and spec.step_seconds == 15
    assert spec.window_seconds == 600
    doc = spec.validated_model()
    assert len(doc.centroids) == fitted_model.n_phases_
    PhaseModelResource.model_validate({"metadata": {"name": "a"}, "spec": spec.model_dump()})


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["model"]["crbm"]["W"].pop(), "spec.model: crbm.W has shape"),
    (lambda d: d.__setitem__("model", None), "spec.model is empty"),
    (lambda d: d["features"].pop(), "spec.model has features"),
])
def test_what_the_schema_cannot_catch_is_one_clear_line(fitted_model, mutate, message):
    d = {"features": [{"name": f, "query": "x{{{selector}}}"} for f in fitted_model.features_],
         "model": _model_doc(fitted_model)}
    mutate(d)
    spec = PhaseModelSpec.model_validate(d)
    with pytest.raises(ValueError) as err:
        spec.validated_model()
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("bad", [
    {"policy": {"mode": "Sometimes"}},
    {"policy": {"margin": 0.5}},
    {"policy": {"resources": {"cpu": {"floor": "lots"}}}},
    {"stepSeconds": 0},
    {"features": []},
    {"surprise": 1},
])
def test_pydantic_refuses_what_the_crd_schema_refuses(bad):
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        PhaseModelSpec.model_validate(bad)
