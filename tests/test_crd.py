"""The PhaseModel CRD: generated from pydantic (no drift), and what the schema cannot catch."""

import json
from pathlib import Path

import pytest
import yaml

from ai4dl.crd import PhaseModelResource, crd_manifest, crd_yaml
from ai4dl.crd_spec import PhaseModelSpec

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
    assert names == ["Phases", "Pods", "Mode", "Policy", "Score", "MemoryRisk", "Saved", "Ready",
                     "Age"]
    # -o wide only: the served policy, the last training score, the memory risk it achieved,
    # the savings so far
    assert [c.get("priority", 0) for c in version["additionalPrinterColumns"]] == \
        [0, 0, 0, 1, 1, 1, 1, 0, 0]
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


# ----------------------------------------------------------------------------- objectives
def _policy(**policy) -> "PhaseModelSpec":
    return PhaseModelSpec.model_validate({"policy": policy})


@pytest.mark.parametrize("path", [("cpu", "fulfilment"), ("cpu", "maxShortWindows"),
                                  ("memory", "maxRiskWindows")])
@pytest.mark.parametrize("value", [0, 1, -0.01, 1.5])
def test_objectives_are_shares_strictly_between_0_and_1(path, value):
    from pydantic import ValidationError

    resource, field = path
    with pytest.raises(ValidationError, match=field):
        _policy(objectives={resource: {field: value}})


def test_objectives_in_range_are_kept():
    pol = _policy(objectives={"cpu": {"fulfilment": 0.9, "maxShortWindows": 0.2},
                              "memory": {"maxRiskWindows": 0.05}}).policy
    assert (pol.cpu_fulfilment, pol.objectives.cpu.max_short_windows,
            pol.objectives.memory.max_risk_windows) == (0.9, 0.2, 0.05)


def test_objectives_default_to_97_percent_of_cpu_samples_and_1_percent_of_memory_windows():
    pol = _policy().policy
    assert pol.cpu_fulfilment == 0.97 and pol.objectives.cpu.max_short_windows is None
    assert pol.objectives.memory.max_risk_windows == 0.01
    assert pol.objective_note() is None


def test_target_fulfilment_is_the_cpu_fulfilment_when_objectives_cpu_fulfilment_is_unset():
    pol = _policy(targetFulfilment=0.9).policy
    assert pol.cpu_fulfilment == 0.9 and pol.objectives.cpu.fulfilment == 0.9
    assert pol.objective_note() == ("cpu fulfilment 0.9 from spec.policy.targetFulfilment "
                                    "(spec.policy.objectives.cpu.fulfilment is unset)")
    # an objectives block without the cpu fulfilment leaves it to targetFulfilment too
    pol = _policy(targetFulfilment=0.9, objectives={"cpu": {"maxShortWindows": 0.1},
                                                    "memory": {"maxRiskWindows": 0.02}}).policy
    assert pol.cpu_fulfilment == 0.9 and pol.objectives.memory.max_risk_windows == 0.02
    # a dumped and re-read spec keeps the value in force
    again = PhaseModelSpec.model_validate(
        PhaseModelSpec(policy=pol).model_dump(by_alias=True)).policy
    assert again.cpu_fulfilment == 0.9


def test_objectives_cpu_fulfilment_wins_over_target_fulfilment():
    pol = _policy(targetFulfilment=0.9, objectives={"cpu": {"fulfilment": 0.95}}).policy
    assert pol.cpu_fulfilment == 0.95 and pol.objective_note() is None


def _schema_at(schema: dict, *names: str) -> dict:
    for n in names:
        schema = schema["items"] if n == "[]" else schema["properties"][n]
    return schema


def test_api_server_fills_nested_objective_defaults_but_not_the_cpu_fulfilment():
    spec = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"]
    objectives = _schema_at(spec, "policy", "objectives")
    assert _schema_at(spec, "policy")["default"] == {} and objectives["default"] == {}
    assert _schema_at(objectives, "cpu")["default"] == {}
    assert _schema_at(objectives, "memory")["default"] == {}
    assert _schema_at(objectives, "memory", "maxRiskWindows")["default"] == 0.01
    # a default filled in by the server would look written and hide targetFulfilment
    assert "default" not in _schema_at(objectives, "cpu", "fulfilment")
    assert "default" not in _schema_at(spec, "policy", "targetFulfilment")
    assert "objectives.cpu.fulfilment" in _schema_at(spec, "policy", "targetFulfilment")[
        "description"]
    rules = [r["message"] for r in _schema_at(objectives, "memory")["x-kubernetes-validations"]]
    assert any(m.startswith("maxRiskWindows must be in (0, 1)") for m in rules)


def test_memory_risk_printer_column_points_at_the_training_status():
    committed = yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"][0]
    column = next(c for c in committed["additionalPrinterColumns"] if c["name"] == "MemoryRisk")
    assert column["priority"] == 1 and column["type"] == "number"
    assert column["jsonPath"] == \
        '.status.training.objectives[?(@.resource=="memory")].achievedRiskWindows'
    # the path exists in the status schema (a renamed field would leave the column empty)
    status = committed["schema"]["openAPIV3Schema"]["properties"]["status"]
    item = _schema_at(status, "training", "objectives", "[]")
    assert item["properties"]["achievedRiskWindows"]["type"] == "number"
    assert "resource" in item["properties"]


def test_training_status_round_trips_objectives_and_achieved():
    from ai4dl.crd_status import TrainingStatus

    status = {"decision": "applied", "reason": "no current model",
              "trainedAt": "2026-01-01T00:00:00Z", "objectives": [
                  {"resource": "cpu", "kind": "fulfilment", "value": 0.95,
                   "maxShortWindows": 0.2, "source": "cpu fulfilment 0.95 from "
                   "spec.policy.targetFulfilment (spec.policy.objectives.cpu.fulfilment is unset)",
                   "achievedFulfilment": 0.962, "achievedRiskWindows": 0.18},
                  {"resource": "memory", "kind": "risk", "value": 0.01,
                   "achievedFulfilment": 0.9991, "achievedRiskWindows": 0.004}]}
    parsed = TrainingStatus.model_validate(status)
    assert parsed.objectives[1].achieved_risk_windows == 0.004
    assert parsed.model_dump(by_alias=True, exclude_defaults=True) == status
    # and as part of the whole resource
    PhaseModelResource.model_validate({"spec": {}, "status": {"training": status}})


@pytest.mark.parametrize("bad", [
    {"kind": "samples"},
    {"value": 1.0},
    {"achievedRiskWindows": 1.5},
])
def test_training_status_refuses_objectives_that_cannot_be(bad):
    from pydantic import ValidationError

    from ai4dl.crd_status import ObjectiveStatus

    with pytest.raises(ValidationError):
        ObjectiveStatus.model_validate({"resource": "memory", "kind": "risk", "value": 0.01,
                                        **bad})


def test_committed_workload_profile_crd_matches_the_pydantic_models():
    from ai4dl.crd_profile import crd_yaml as profile_crd_yaml

    path = CRD_FILE.parent / "workloadprofiles.ai4dl.io.yaml"
    assert path.read_text() == profile_crd_yaml(), (
        "crds/workloadprofiles.ai4dl.io.yaml is out of date: run `make generate`")


def test_kopfs_own_annotation_never_carries_the_model():
    """Issue 43: kopf keeps a PhaseModel's essence in an annotation; with a model inside, a
    valid PhaseModel passed the API server's 256 KiB annotation limit and kopf retried the
    refused patch for ever. The operator's settings leave the models out of it."""
    import asyncio
    import json as _json

    import kopf
    from kopf._cogs.structs import bodies

    from ai4dl.controller import handlers

    settings = kopf.OperatorSettings()
    asyncio.run(handlers.configure(settings))
    big = {"weights": "x" * 400_000}
    body = bodies.Body({"metadata": {"name": "pm", "annotations": {}},
                        "spec": {"stepSeconds": 15, "model": big, "previousModel": big}})
    essence = settings.persistence.diffbase_storage.build(body=body)
    assert essence == {"spec": {"stepSeconds": 15}}
    assert len(_json.dumps(essence)) < 1000
