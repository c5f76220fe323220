"""ai4dl.policy.running.added_windows: one window added to every container's statistics at
once gives the numbers of OwnHistory.add, container by container, and changes none it was
given."""

from __future__ import annotations

import numpy as np
import pytest

from ai4dl.policy.running import OwnHistory, added_windows

FIELDS = ("count", "s1", "s2", "n", "t1", "t2", "peak", "run_phase", "run_length",
          "window_max", "previous_max", "ewma_max", "windows", "since_high", "low_since_high")


def _histories(rng, n: int, k: int, R: int, W: int, phased: bool) -> list[OwnHistory]:
    """Containers at different points: none seen, a few windows, a record of unknown
    peak-risk state (since_high -1), runs that go on or change."""
    out = []
    for i in range(n):
        h = OwnHistory(k, R)
        for _ in range(i % 4):
            u = rng.gamma(2.0, 1.0, (W, R)) * (1 + i % 3)
            h.add(u, None if not phased else rng.integers(0, k, W) if i % 5 else
                  np.full(W, i % k))
        if i % 7 == 3:
            h.since_high[:] = -1
            h.low_since_high[:] = np.nan
            h.windows = -1
        out.append(h)
    return out


def _same(a: OwnHistory, b: OwnHistory) -> None:
    for f in FIELDS:
        x, y = np.asarray(getattr(a, f), float), np.asarray(getattr(b, f), float)
        assert x.shape == y.shape, f
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=0, equal_nan=True, err_msg=f)


@pytest.mark.parametrize("with_phases", [True, False])
def test_the_batch_gives_the_numbers_of_add_and_changes_nothing_given(with_phases):
    rng = np.random.default_rng(4)
    k, R, W, n = 4, 2, 10, 40
    owns = _histories(rng, n, k, R, W, with_phases)
    before = [o.copy() for o in owns]
    usage = rng.gamma(2.0, 1.0, (n, W, R)) * rng.uniform(0.5, 3.0, (n, 1, 1))
    phases = rng.integers(0, k, (n, W)) if with_phases else None
    if with_phases:
        phases[::3] = phases[::3, :1]           # some windows in one phase all through
    got = added_windows(owns, usage, phases)
    for i in range(n):
        want = before[i].copy().add(usage[i], None if phases is None else phases[i])
        _same(got[i], want)
        _same(owns[i], before[i])                # the given statistics are unchanged
        assert got[i] is not owns[i]
        # its own buffer, not a row of the batch's (which would keep the batch alive)
        assert got[i]._v.base is None and not np.shares_memory(got[i]._v, got[i - 1]._v)
        assert all(np.shares_memory(getattr(got[i], f), got[i]._v)
                   for f in ("count", "s1", "peak", "ewma_max"))
    # the new objects are whole OwnHistory objects: they add and serialise as any other
    again = added_windows(got, usage, phases)
    _same(again[5], got[5].copy().add(usage[5], None if phases is None else phases[5]))
    assert OwnHistory.from_json(got[7].to_json()).n == got[7].n


def test_a_phase_outside_the_model_is_refused_and_nothing_to_add_is_nothing():
    owns = [OwnHistory(3, 2)]
    with pytest.raises(ValueError, match="outside the model's 3 phases"):
        added_windows(owns, np.ones((1, 5, 2)), np.full((1, 5), 3))
    assert added_windows([], np.empty((0, 5, 2)), None) == []


def test_the_arrays_are_views_of_one_buffer_and_setting_one_copies_the_values_in():
    import pickle

    h = OwnHistory(3, 2)
    assert all(np.shares_memory(getattr(h, f), h._v) for f in FIELDS if f not in (
        "n", "run_phase", "run_length", "windows"))
    given = np.array([1.0, 2.0])
    h.peak = given
    given[0] = 9.0                                  # the caller's array is not kept
    assert h.peak.tolist() == [1.0, 2.0]
    h.window_max = [5.0, 6.0]
    h.previous_max = h.window_max                   # values, not the view
    h.window_max = [7.0, 8.0]
    assert h.previous_max.tolist() == [5.0, 6.0] and h.window_max.tolist() == [7.0, 8.0]
    h.s1[1, 0] += 4.0                               # written through the view
    h.t1 += 1.0
    assert h.s1[1, 0] == 4.0 and h.s1.shape == (3, 2) and h.t1.tolist() == [1.0, 1.0]
    c = h.copy()
    c.peak[0] = -1.0
    assert h.peak[0] == 1.0 and not np.shares_memory(c._v, h._v)
    back = pickle.loads(pickle.dumps(h))
    _same(back, h)
    with pytest.raises(ValueError):
        h.peak = [1.0, 2.0, 3.0]                    # not its shape
