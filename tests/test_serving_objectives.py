"""Per-resource objectives from a PhaseModel's spec to the trainer and its status:
``serving.objectives``, what the trainer passes to ``auto`` and to the head-room tables, what it
writes into ``status.training.objectives``, and ``ai4dl train``'s objective flags."""

from __future__ import annotations

import copy

import pytest

from ai4dl import trainer as T
from ai4dl.cli import main as cli_main
from ai4dl.crd_spec import PhaseModelSpec
from ai4dl.crd_status import TrainingStatus
from ai4dl import serving
from ai4dl.policy.auto import AutoChoice
from ai4dl.rules.objectives import Objective


def spec(**policy) -> PhaseModelSpec:
    return PhaseModelSpec.model_validate({"policy": policy})


# ----------------------------------------------------------------------------- serving
def test_objectives_per_resource_from_the_spec():
    s = spec(objectives={"cpu": {"fulfilment": 0.95, "maxShortWindows": 0.2},
                         "memory": {"maxRiskWindows": 0.02}})
    assert serving.objectives(s, ("cpu", "memory")) == (
        Objective("cpu", "fulfilment", 0.95, 0.2), Objective("memory", "risk", 0.02))
    # in the order asked; a resource other than cpu and memory gets the cpu fulfilment
    assert serving.objectives(s, ("memory", "gpu")) == (
        Objective("memory", "risk", 0.02), Objective("gpu", "fulfilment", 0.95))
    assert serving.target(s) == 0.95


def test_objectives_default_and_target_fulfilment():
    assert serving.objectives(spec(), ("cpu", "memory")) == (
        Objective("cpu", "fulfilment", 0.97), Objective("memory", "risk", 0.01))
    old = spec(targetFulfilment=0.9)
    assert serving.objectives(old, ("cpu", "memory")) == (
        Objective("cpu", "fulfilment", 0.9), Objective("memory", "risk", 0.01))
    assert serving.target(old) == 0.9
    both = spec(targetFulfilment=0.9, objectives={"cpu": {"fulfilment": 0.99}})
    assert serving.target(both) == 0.99
    assert serving.objectives(both, ("cpu",)) == (Objective("cpu", "fulfilment", 0.99),)


# ----------------------------------------------------------------------------- trainer
def test_choice_objectives_and_the_tables_fulfilment():
    s = spec(targetFulfilment=0.9, objectives={"memory": {"maxRiskWindows": 0.05}})
    objectives = T.choice_objectives(s, ("cpu", "memory"))
    assert objectives == {"cpu": Objective("cpu", "fulfilment", 0.9),
                          "memory": Objective("memory", "risk", 0.05)}
    # one table for both resources: fitted at the cpu fulfilment; memory alone at 1 − risk
    assert T.table_fulfilment(objectives) == 0.9
    assert T.table_fulfilment({"memory": objectives["memory"]}) == pytest.approx(0.95)


def _choice(resources=("cpu", "memory")) -> AutoChoice:
    """An AutoChoice built by hand: the baseline on every resource, at 0.97."""
    from ai4dl.policy.policies import AdaptiveMax, PerResource

    return AutoChoice(resources, (0.97,) * len(resources), ("adaptive-max",) * len(resources),
                      [], 3, 1, "scored on the 1 most recent of 4 training executions",
                      PerResource((AdaptiveMax(),) * len(resources), name="auto"))


def test_trainer_chooses_under_the_spec_objectives(fitted_model, synthetic_train):
    s = PhaseModelSpec.model_validate({
        "features": [{"name": f, "query": f + "{{{selector}}}"} for f in fitted_model.features_],
        "stepSeconds": 15, "windowSeconds": 600,
        "policy": {"objectives": {"cpu": {"fulfilment": 0.95},
                                  "memory": {"maxRiskWindows": 0.02}}}})
    model = copy.deepcopy(fitted_model)
    choice = T.choose_served_policy(model, list(synthetic_train[0])[:8], s)
    assert choice.objectives == (Objective("cpu", "fulfilment", 0.95),
                                 Objective("memory", "risk", 0.02))
    # what the model document keeps, for the operator to serve the same thing
    pc = model.policy_choice_
    assert pc.kinds == ["fulfilment", "risk"] and pc.targets == [0.95, 0.02]
    assert pc.calibration == [float(c) for c in choice.calibration]
    assert pc.calibration[0] == 1.0          # cpu judged by samples: no calibration
    served = serving.served_policy(s, model)
    assert "memory ≤ 2 % of windows at risk" in served.reason
    assert "cpu 95 % of samples" in served.reason


def test_status_shows_objectives_and_what_the_winner_achieved():
    s = spec(targetFulfilment=0.95, objectives={"cpu": {"maxShortWindows": 0.2}})
    choice = _choice()
    objectives = serving.objectives(s, choice.resources)
    summary = {**choice.as_dict(), "objectives": [o.as_dict() for o in objectives],
               "achieved": [{"resource": "cpu", "fulfilment": 0.9612345678,
                             "riskWindows": 0.18},
                            {"resource": "memory", "fulfilment": 0.9991,
                             "riskWindows": float("nan")}]}
    choice.as_dict = lambda: summary
    rows = T.objectives_status(choice, s)
    assert rows == [
        {"resource": "cpu", "kind": "fulfilment", "value": 0.95, "maxShortWindows": 0.2,
         "source": "cpu fulfilment 0.95 from spec.policy.targetFulfilment "
                   "(spec.policy.objectives.cpu.fulfilment is unset)",
         "achievedFulfilment": 0.961235, "achievedRiskWindows": 0.18},
        {"resource": "memory", "kind": "risk", "value": 0.01, "achievedFulfilment": 0.9991}]
    record = T.TrainingRecord("applied", "no current model", "2026-01-01T00:00:00Z",
                              objectives=rows)
    status = record.to_status()
    assert status["objectives"] == rows
    # what the trainer writes is what the CRD's status schema takes
    assert TrainingStatus.model_validate(status).model_dump(
        by_alias=True, exclude_defaults=True)["objectives"] == rows


def test_status_of_a_choice_made_before_objectives_says_what_it_was_chosen_at():
    choice = _choice()
    summary = {k: v for k, v in choice.as_dict().items() if k not in ("objectives", "achieved")}
    choice.as_dict = lambda: summary
    rows = T.objectives_status(choice, spec())
    assert rows == [{"resource": "cpu", "kind": "fulfilment", "value": 0.97},
                    {"resource": "memory", "kind": "fulfilment", "value": 0.97}]


# ----------------------------------------------------------------------------- command line
@pytest.mark.parametrize("argv, message", [
    (["--memory-risk", "0"], "--memory-risk must be in (0, 1), got 0"),
    (["--memory-risk", "1.5"], "--memory-risk must be in (0, 1), got 1.5"),
    (["--target-fulfilment", "1"], "--target-fulfilment must be in (0, 1), got 1"),
])
def test_objective_flags_out_of_range_are_one_line_exit_2(argv, message, capsys, tmp_path):
    # checked before the traces are read: the file need not exist
    assert cli_main(["train", str(tmp_path / "none.csv"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ai4dl: error: {message}"]
