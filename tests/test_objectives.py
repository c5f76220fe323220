"""Objectives per resource: fulfilment for cpu, windows at risk for memory."""

import pytest

from ai4dl.rules.objectives import Objective, default_objective, resolve


def test_defaults_are_fulfilment_for_cpu_and_risk_for_memory():
    cpu, mem = resolve(None, ("cpu", "memory"))
    assert (cpu.kind, cpu.value) == ("fulfilment", 0.97)
    assert (mem.kind, mem.value) == ("risk", 0.01)
    assert mem.quantile == pytest.approx(0.99) and cpu.quantile == pytest.approx(0.97)
    assert default_objective("gpu_memory").kind == "fulfilment"


def test_a_float_keeps_its_old_meaning_a_fulfilment_for_every_resource():
    assert [o.kind for o in resolve(0.95, ("cpu", "memory"))] == ["fulfilment"] * 2
    assert [o.value for o in resolve({"cpu": 0.9, "memory": 0.95}, ("cpu", "memory"))] == \
        [0.9, 0.95]
    mixed = resolve([0.97, Objective("memory", "risk", 0.02)], ("cpu", "memory"))
    assert mixed[1].is_risk and mixed[1].value == 0.02


@pytest.mark.parametrize("bad, msg", [
    (1.2, "in \\(0, 1\\)"), ({"cpu": 0.9}, "no target fulfilment for resource 'memory'"),
    ([0.9], "1 targets for 2 resources"), (True, "not a target")])
def test_bad_targets_are_one_line_errors(bad, msg):
    with pytest.raises(ValueError, match=msg):
        resolve(bad, ("cpu", "memory"))


def test_objective_checks_its_fields():
    with pytest.raises(ValueError, match="kind"):
        Objective("memory", "samples", 0.01)
    with pytest.raises(ValueError, match="in \\(0, 1\\)"):
        Objective("memory", "risk", 0.0)
    with pytest.raises(ValueError, match="goes with a fulfilment"):
        Objective("memory", "risk", 0.01, max_short_windows=0.1)
    assert Objective("cpu", "fulfilment", 0.97, 0.1).as_dict() == {
        "resource": "cpu", "kind": "fulfilment", "value": 0.97, "maxShortWindows": 0.1}
