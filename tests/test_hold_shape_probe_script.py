"""docs/results/hold_shape_probe.py (docs/results.md §9, "The hold follows the runs' shape"):
the holds it compares, built from a workload's earlier runs as the evaluator's served start
builds the product's."""

from __future__ import annotations

import numpy as np
import pytest

from ai4dl.method.traces import Execution
from ai4dl.rules.workload_profile import held_level

RESULTS_SCRIPT = "hold_shape_probe.py"
GiB = 1024.0 ** 3


@pytest.fixture(scope="module")
def probe(results_script):
    return results_script


def _run(name, start, mem_per_window, window=4, step=15.0):
    mem = np.repeat(np.asarray(mem_per_window, np.float64), window) * GiB
    return Execution(name, start + step * np.arange(len(mem)),
                     np.stack([np.ones(len(mem)), mem], 1).astype(np.float32),
                     ("cpu", "memory"), ("cores", "bytes"), group="job", step=step)


def test_each_hold_is_built_from_the_runs_that_ended_before(probe):
    # two earlier runs that peaked late (4 GiB in their last two windows of 40, 1 GiB before)
    early = [_run("job/1", 0.0, [1] * 38 + [4] * 2), _run("job/2", 5000.0, [1] * 38 + [3] * 2)]
    new = _run("job/3", 10000.0, [1] * 40)
    level = np.array([1.0, 1.0 * GiB])
    holds = {}
    for kind in probe.HOLDS:
        serve = probe.patched(kind, 4, "group")
        _, _, got = serve([new], [*early, new], ("cpu", "memory"), 4, level)
        holds[kind] = got[0]
    assert holds["none"] is None

    def at(kind, w):
        return held_level(holds[kind], 60.0 * w, length=60.0) / GiB

    # the old rule: their peak from the start until the point where it came
    assert at("peak-until", 0) == pytest.approx(4.0)
    assert at("peak-until", 38) == pytest.approx(4.0)
    # the served shape (40 windows: stretches of 2) and window by window: low until the climb
    for kind in ("shape", "window"):
        assert at(kind, 0) == pytest.approx(1.0) and at(kind, 38) == pytest.approx(4.0)
        assert np.isnan(held_level(holds[kind], 2400.0, length=60.0))        # past their end
    assert at("window", 37) == pytest.approx(1.0) and at("shape", 37) == pytest.approx(1.0)
