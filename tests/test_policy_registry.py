"""The policy registry (issue 46): each policy declares itself once, in its own module, and
every list is read from the declarations. A toy policy written in one file, and nowhere else,
shows up in the CRD's enum, in ``ai4dl evaluate --policies``, in the model document's served
names and in the operator's serving."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
import textwrap

import numpy as np
import pytest

from ai4dl.cli import main
from ai4dl.crd import crd_manifest
from ai4dl.crd_spec import PhaseModelSpec
from ai4dl.method.document import PhaseModelDocument
from ai4dl.policy import catalog
from ai4dl.policy.online import next_allocations
from ai4dl.policy.registry import Declared, declare, withdraw
from ai4dl.policy.running import OwnHistory
from ai4dl.serving import served_policy

TOY = "toy-half-max"

#: The whole toy policy: one file.
TOY_MODULE = textwrap.dedent(f'''
    """A toy policy: half the previous window's maximum (a test's own)."""
    from dataclasses import dataclass

    import numpy as np

    from ai4dl.policy.registry import Declared, declare


    @dataclass(frozen=True)
    class HalfMax:
        name: str = "{TOY}"
        needs_phases: bool = False

        def allocate(self, usage, phases, window, initial, step):
            usage = np.asarray(usage, np.float64)
            rows = [np.asarray(initial, np.float64)]
            for w in range(1, len(usage) // window + 1):
                rows.append(0.5 * usage[(w - 1) * window:w * window].max(0))
            return np.array(rows)

        def next_from_running(self, lasts, last_phases, owns):
            return 0.5 * lasts.max(1)


    declare(Declared(HalfMax.name, "baseline", rank=15, build=lambda inputs: HalfMax(),
                     serve=lambda model, resources, window, options: HalfMax(), crd=True,
                     summary="half the previous window's maximum"))
''')


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "toy_policy.py"
    path.write_text(TOY_MODULE)
    spec = importlib.util.spec_from_file_location("toy_policy", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["toy_policy"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        withdraw(TOY)
        sys.modules.pop("toy_policy", None)
    assert TOY not in catalog.names()


def _doc_with_winner(winner: str) -> PhaseModelDocument:
    """A minimal valid model document whose policyChoice names ``winner`` for memory."""
    from ai4dl.method.model import PhaseModel
    from ai4dl.method.synthetic import generate

    traces, _ = generate(4, seed=3)
    m = PhaseModel(n_phases=2, n_hidden=4, n_history=2, epochs=2, random_state=0).fit(traces)
    doc = m.to_document().model_dump(by_alias=True, exclude_none=True)
    doc["policyChoice"] = {"resources": ["memory"], "winners": [winner], "targets": [0.99]}
    return PhaseModelDocument.model_validate(doc)


def test_a_toy_policy_in_one_file_is_seen_everywhere(toy, tmp_path):
    # the CRD: spec.policy.kind may name it, a policyChoice may serve it
    schema = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec_props = schema["properties"]["spec"]["properties"]
    assert TOY in spec_props["policy"]["properties"]["kind"]["enum"]
    winners = spec_props["model"]["properties"]["policyChoice"]["properties"]["winners"]
    assert TOY in winners["items"]["enum"]
    # the document: a choice of it is served from nothing stored
    assert catalog.choice_problem(_doc_with_winner(TOY)) is None
    # the operator's serving: a PhaseModel naming it serves it, window by window
    spec = PhaseModelSpec.model_validate({"policy": {"kind": TOY}})
    served = served_policy(spec)
    assert served.names == (TOY,) * len(served.resources)
    lasts = np.array([[[1.0, 4.0], [3.0, 2.0]]])                     # one pod, W 2, R 2
    np.testing.assert_array_equal(next_allocations(served.policy, lasts, None,
                                                   [OwnHistory(1, 2)]), [[1.5, 2.0]])
    # the evaluator: --policies names it, its rows are scored
    from ai4dl.io.writers import write_long_csv
    from ai4dl.method.synthetic import generate

    csv = write_long_csv(generate(6, seed=4)[0], tmp_path / "jobs.csv")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(["evaluate", str(csv), "--policies", f"adaptive-max,{TOY}", "--window", "20"])
    assert rc == 0
    rows = [line for line in out.getvalue().splitlines() if line.startswith(f"| {TOY} ")]
    assert len(rows) >= 2                                          # cpu and memory
    # and in the tables' order by its rank: after adaptive-max (10), before adaptive-stat (20)
    assert catalog.names().index(TOY) == catalog.names().index("adaptive-max") + 1


def test_a_name_no_policy_serves_is_refused(toy):
    assert "'vpa', which no policy serves" in catalog.choice_problem(_doc_with_winner("vpa"))
    with pytest.raises(ValueError, match="Input should be 'auto'"):
        PhaseModelSpec.model_validate({"policy": {"kind": "vpa"}})


def test_declarations_are_checked():
    with pytest.raises(ValueError, match="declared twice"):
        declare(Declared("adaptive-max", "baseline", rank=1, build=lambda inputs: None))
    with pytest.raises(ValueError, match="kind must be one of"):
        declare(Declared("toy-x", "clever", rank=1, build=lambda inputs: None))
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        catalog.entry("nope")


def test_the_lists_read_from_the_declarations():
    # what used to be seven hand-kept lists, in their order
    assert catalog.names() == ("static", "adaptive-max", "adaptive-stat", "phase",
                               "phase-proactive", "phase-headroom", "burst-headroom",
                               "peak-risk", "vpa", "krr", "auto", "oracle")
    assert catalog.candidates() == ("adaptive-max", "adaptive-stat", "phase-headroom",
                                    "burst-headroom", "phase", "phase-proactive", "vpa",
                                    "peak-risk")
    assert catalog.servable() == tuple(c for c in catalog.candidates() if c != "vpa")
    assert catalog.baseline() == catalog.candidates()[0]
    assert catalog.names(fitted_per_target=True) == ("phase-headroom", "burst-headroom",
                                                     "peak-risk", "auto")
    # the CRD names every servable policy and auto (peak-risk included: it is served from its
    # stored table, and the CRD used to refuse it)
    from ai4dl.crd_spec import policy_kinds

    assert set(policy_kinds()) == {*catalog.servable(), "auto"}
