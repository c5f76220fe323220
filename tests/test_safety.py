"""Tests of the safety layer (ai4dl.rules.safety).

Known answers per rule (computed by hand on small (pods, resources) arrays), the chain
(``apply_safety``: NaN proposals, rule order) and property-based invariants of the guarantees
the module docstring promises, then ``apply_safety_sequence`` over several windows.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ai4dl.rules.safety import (
    SafetyConfig,
    SafetyState,
    apply_safety,
    apply_safety_sequence,
    approach_ceiling,
    cap_physical,
    clamp,
    cool_down,
    cover_working_set,
    hold_memory_while_rising,
    limit_change,
    skip_small_changes,
    working_set_rising,
)

A = lambda *rows: np.array(rows, np.float64)  # noqa: E731
BIG = 1 << 30


# ----------------------------------------------------------------------------- single rules
class TestLimitChange:
    def test_increase_capped(self):
        out = limit_change(A([10.0, 1.0], [3.0, 3.0]), A([4.0, 2.0], [2.0, 2.0]), 1.0, None)
        # at most x2: 10 -> 8, 1 stays (a decrease), 3 stays (<= 4), 3 stays
        np.testing.assert_allclose(out, A([8.0, 1.0], [3.0, 3.0]))

    def test_decrease_capped(self):
        out = limit_change(A([1.0, 5.0], [0.1, 3.0]), A([4.0, 2.0], [2.0, 2.0]), None, 0.5)
        # at most halved: 1 -> 2 (>= 4 * 0.5); 5 stays (increase); 0.1 -> 1; 3 stays
        np.testing.assert_allclose(out, A([2.0, 5.0], [1.0, 3.0]))

    def test_both_and_none(self):
        cur = A([4.0, 4.0, 4.0])
        prop = A([100.0, 0.0, 5.0])
        np.testing.assert_allclose(limit_change(prop, cur, 0.25, 0.25), A([5.0, 3.0, 5.0]))
        np.testing.assert_array_equal(limit_change(prop, cur, None, None), prop)


class TestWorkingSetRising:
    def test_known_answers(self):
        nan = np.nan
        mem = A([1.0, 1.1, 1.2],       # its line rises 20 % over the window > 10 %: rising
                [1.0, 2.0, 1.05],      # a spike that came back: the line rises 2.5 %
                [nan, 1.0, 1.11],      # two samples: from the first it has
                [1.0, 1.11, nan],      # ... to the last it has
                [nan, nan, 1.0],       # one sample: no line
                [nan, nan, nan],       # no sample
                [2.0, 1.5, 1.0])       # falling
        np.testing.assert_array_equal(working_set_rising(mem, 0.1),
                                      [True, False, True, True, False, False, False])

    def test_noise_is_not_a_rise_and_a_trend_through_noise_is(self):
        rng = np.random.default_rng(0)
        flat = 1.0 + rng.uniform(-0.1, 0.1, (200, 40))          # plateau, ±10 % noise
        assert working_set_rising(flat, 0.1).mean() < 0.01
        ramp = np.linspace(1.0, 1.3, 40) + rng.uniform(-0.1, 0.1, (200, 40))
        assert working_set_rising(ramp, 0.1).mean() > 0.99

    def test_a_container_that_started_in_the_window_rose_from_nothing(self):
        mem = A([5.0, 5.0], [np.nan, 5.0], [np.nan, np.nan])
        np.testing.assert_array_equal(working_set_rising(mem, 0.1), [False, False, False])
        np.testing.assert_array_equal(working_set_rising(mem, 0.1, [True, True, True]),
                                      [True, True, False])

    def test_off_without_margin_and_zero_margin_means_any_growth(self):
        mem = A([1.0, 1.01])
        assert not working_set_rising(mem, None).any()
        assert not working_set_rising(mem, None, [True]).any()
        assert working_set_rising(mem, 0.0).all()
        assert not working_set_rising(A([1.0, 1.0]), 0.0).any()


class TestHoldMemoryWhileRising:
    def test_only_memory_decreases_of_rising_containers_held(self):
        cur = A([4.0, 8.0], [4.0, 8.0], [4.0, 8.0])
        prop = A([1.0, 2.0], [1.0, 2.0], [9.0, 9.0])
        out = hold_memory_while_rising(prop, cur, np.array([True, False, True]), 1)
        # rising: memory held at 8 (cpu still comes down); not rising: lowered; increases pass
        np.testing.assert_array_equal(out, A([1.0, 8.0], [1.0, 2.0], [9.0, 9.0]))

    def test_off(self):
        prop = A([1.0, 2.0])
        assert hold_memory_while_rising(prop, A([4.0, 8.0]), None, 1) is prop
        assert hold_memory_while_rising(prop, A([4.0, 8.0]), np.array([True]), None) is prop


class TestCoolDown:
    def test_decrease_held_only_inside_window(self):
        prop = A([1.0, 1.0, 9.0, 1.0])
        cur = A([4.0, 4.0, 4.0, 4.0])
        since = np.array([[0, 2, 0, 1]])
        out = cool_down(prop, cur, since, 2)
        # since < 2 and a decrease -> held at 4; since 2 -> allowed; an increase is never held
        np.testing.assert_array_equal(out, A([4.0, 1.0, 9.0, 4.0]))

    def test_zero_windows_is_off(self):
        prop, cur = A([1.0]), A([4.0])
        np.testing.assert_array_equal(cool_down(prop, cur, np.array([[0]]), 0), prop)


class TestSkipSmallChanges:
    def test_threshold(self):
        cur = A([10.0, 10.0, 10.0, 10.0], [10.0, 10.0, 10.0, 0.0])
        prop = A([10.5, 9.5, 11.5, 8.0], [10.999, 9.001, 10.0, 0.5])
        out = skip_small_changes(prop, cur, 0.1)
        # rel changes 5 %, 5 %, 15 %, 20 % / 9.99 %, 9.99 %, 0 %, from zero (infinite)
        np.testing.assert_array_equal(out, A([10.0, 10.0, 11.5, 8.0],
                                             [10.0, 10.0, 10.0, 0.5]))

    def test_exactly_at_threshold_is_a_change(self):
        out = skip_small_changes(A([12.5]), A([10.0]), 0.25)
        np.testing.assert_array_equal(out, A([12.5]))

    def test_off(self):
        prop = A([10.01])
        np.testing.assert_array_equal(skip_small_changes(prop, A([10.0]), 0.0), prop)


class TestCoverWorkingSet:
    def test_memory_raised_to_working_set(self):
        prop = A([1.0, 2.0], [1.0, 8.0], [1.0, 4.0])
        ws = np.array([3.0, 3.0, np.nan])
        out = cover_working_set(prop, ws, 0.5, 1)
        # memory >= ws x 1.5 = 4.5; NaN working set = nothing known (0); cpu untouched
        np.testing.assert_array_equal(out, A([1.0, 4.5], [1.0, 8.0], [1.0, 4.0]))
        np.testing.assert_array_equal(prop, A([1.0, 2.0], [1.0, 8.0], [1.0, 4.0]))  # no mutation

    def test_other_column(self):
        out = cover_working_set(A([1.0, 2.0]), np.array([3.0]), 0.0, 0)
        np.testing.assert_array_equal(out, A([3.0, 2.0]))

    @pytest.mark.parametrize("margin,index,ws", [(None, 1, [9.0]), (0.1, None, [9.0]),
                                                 (0.1, 1, None)])
    def test_off(self, margin, index, ws):
        prop = A([1.0, 2.0])
        out = cover_working_set(prop, None if ws is None else np.array(ws), margin, index)
        np.testing.assert_array_equal(out, prop)


class TestClamp:
    def test_floor_and_ceiling_per_resource(self):
        out = clamp(A([0.5, 50.0], [5.0, 5.0]), (1.0, 2.0), (4.0, 10.0))
        np.testing.assert_array_equal(out, A([1.0, 10.0], [4.0, 5.0]))

    def test_one_sided(self):
        np.testing.assert_array_equal(clamp(A([0.5, 50.0]), (1.0, 1.0), None), A([1.0, 50.0]))
        np.testing.assert_array_equal(clamp(A([0.5, 50.0]), None, (1.0, 1.0)), A([0.5, 1.0]))
        np.testing.assert_array_equal(clamp(A([0.5, 50.0]), None, None), A([0.5, 50.0]))


# ----------------------------------------------------------------------------- the chain
class TestApplySafety:
    def test_nan_proposal_keeps_current(self):
        cfg = SafetyConfig(max_decrease=0.5, max_increase=1.0, cooldown_windows=1,
                           memory_margin=0.1, min_change=0.1, floor=(0.1, 0.1),
                           ceiling=(100.0, 100.0))
        state = SafetyState(A([4.0, 8.0], [2.0, 6.0]))
        prop = A([np.nan, np.nan], [np.inf, 3.0])
        out, new = apply_safety(prop, state, cfg, working_set=np.array([np.nan, 1.0]))
        # pod 0: all missing -> unchanged; pod 1: cpu inf -> unchanged, memory 3 is a decrease
        # of 50 % (allowed, no cool-down since no increase) and above ws 1 x 1.1
        np.testing.assert_array_equal(out, A([4.0, 8.0], [2.0, 3.0]))
        np.testing.assert_array_equal(new.current, out)
        np.testing.assert_array_equal(new.since_increase, np.full((2, 2), BIG + 1))

    def test_nan_proposal_no_config_no_resize(self):
        state = SafetyState(A([4.0, 8.0]))
        out, new = apply_safety(A([np.nan, np.nan]), state, SafetyConfig())
        np.testing.assert_array_equal(out, A([4.0, 8.0]))

    def test_order_working_set_beats_limit_and_cooldown(self):
        # decrease proposed right after an increase (held by the cool-down), and a limit on
        # the increase: the working-set guarantee still lifts memory above both
        cfg = SafetyConfig(max_increase=0.1, cooldown_windows=2, memory_margin=0.0)
        state = SafetyState(A([4.0, 4.0]), since_increase=np.array([[0, 0]]))
        out, new = apply_safety(A([1.0, 1.0]), state, cfg, working_set=np.array([10.0]))
        np.testing.assert_array_equal(out, A([4.0, 10.0]))
        np.testing.assert_array_equal(new.since_increase, np.array([[1, 0]]))

    def test_order_clamp_beats_working_set(self):
        cfg = SafetyConfig(memory_margin=0.5, ceiling=(10.0, 5.0), floor=(2.0, 2.0))
        out, _ = apply_safety(A([1.0, 1.0]), SafetyState(A([3.0, 3.0])), cfg,
                              working_set=np.array([6.0]))
        # memory would be 9 for the working set, the ceiling 5 wins; cpu floor 2
        np.testing.assert_array_equal(out, A([2.0, 5.0]))

    def test_order_limit_before_skip(self):
        # 12 -> limited to 10 x 1.05 = 10.5 -> a 5 % change, skipped at a 2 % threshold? no:
        # 5 % >= 2 %, so 10.5 is applied
        cfg = SafetyConfig(max_increase=0.05, min_change=0.02, memory_index=None)
        out, _ = apply_safety(A([12.0]), SafetyState(A([10.0])), cfg)
        np.testing.assert_allclose(out, A([10.5]))

    def test_working_set_cover_not_undone_by_min_change(self):
        # memory 10, working set 10.4: a 4 % raise is below the 10 % threshold, but the
        # working-set guarantee runs after the threshold rule and must hold
        cfg = SafetyConfig(memory_margin=0.0, min_change=0.1, memory_index=1)
        out, _ = apply_safety(A([1.0, 10.0]), SafetyState(A([1.0, 10.0])), cfg,
                              working_set=np.array([10.4]))
        np.testing.assert_array_equal(out, A([1.0, 10.4]))

    def test_limited_large_change_is_not_swallowed_by_min_change(self):
        cfg = SafetyConfig(max_increase=0.05, min_change=0.1, memory_index=None)
        props = np.full((6, 1, 1), 20.0)
        out = apply_safety_sequence(props, A([10.0]), cfg)
        assert out[-1, 0, 0] > 10.0

    def test_since_increase_bookkeeping(self):
        state = SafetyState(A([4.0, 4.0, 4.0]), since_increase=np.array([[5, 5, 5]]))
        out, new = apply_safety(A([5.0, 4.0, 3.0]), state, SafetyConfig())
        np.testing.assert_array_equal(out, A([5.0, 4.0, 3.0]))
        np.testing.assert_array_equal(new.since_increase, np.array([[0, 6, 6]]))


# ----------------------------------------------------------------------------- properties
POS = st.floats(0.01, 1000.0, allow_nan=False, allow_infinity=False)


@st.composite
def cases(draw):
    P = draw(st.integers(1, 6))
    cur = draw(hnp.arrays(np.float64, (P, 2), elements=POS))
    prop = draw(hnp.arrays(np.float64, (P, 2), elements=POS))
    # some proposals missing
    mask = draw(hnp.arrays(np.bool_, (P, 2)))
    prop = np.where(mask, np.nan, prop) if draw(st.booleans()) else prop
    ws = draw(hnp.arrays(np.float64, (P,), elements=POS))
    since = draw(hnp.arrays(np.int64, (P, 2), elements=st.integers(0, 4)))
    opt = lambda s: draw(st.one_of(st.none(), s))  # noqa: E731
    lo = draw(hnp.arrays(np.float64, (2,), elements=st.floats(0.01, 500.0)))
    hi = lo + draw(hnp.arrays(np.float64, (2,), elements=st.floats(0.0, 500.0)))
    use_floor, use_ceil = draw(st.booleans()), draw(st.booleans())
    cfg = SafetyConfig(
        floor=tuple(lo) if use_floor else None,
        ceiling=tuple(hi) if use_ceil else None,
        max_increase=opt(st.floats(0.0, 3.0)),
        max_decrease=opt(st.floats(0.0, 0.99)),
        cooldown_windows=draw(st.integers(0, 3)),
        memory_margin=opt(st.floats(0.0, 1.0)),
        min_change=draw(st.sampled_from([0.0, 0.05, 0.1, 0.3])),
        memory_index=draw(st.sampled_from([1, 1, None])),
    )
    return cur, prop, ws, since, cfg


def _run(cur, prop, ws, since, cfg):
    out, _ = apply_safety(prop, SafetyState(cur.copy(), since.copy()), cfg, working_set=ws)
    return out


def _bounds(cfg):
    floor = np.zeros(2) if cfg.floor is None else np.array(cfg.floor)
    ceil = np.full(2, np.inf) if cfg.ceiling is None else np.array(cfg.ceiling)
    return floor, ceil


def _ws_need(cfg, ws, P):
    """(P, 2) lower bound the working-set rule imposes (0 where off)."""
    need = np.zeros((P, 2))
    if cfg.memory_margin is not None and cfg.memory_index is not None:
        need[:, cfg.memory_index] = ws * (1.0 + cfg.memory_margin)
    return need


SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(cases())
def test_output_within_floor_and_ceiling(case):
    # Hard caps: never below the floor, never raised above the ceiling. A value above the
    # ceiling only remains while it comes down towards it at the decrease limit.
    cur, prop, ws, since, cfg = case
    out = _run(*case)
    floor, ceil = _bounds(cfg)
    assert np.all(np.isfinite(out))
    assert np.all(out >= floor)
    above = out > ceil
    assert np.all(out[above] <= cur[above])
    if cfg.max_decrease is None:
        assert not above.any()
    else:
        step = cur * (1.0 - cfg.max_decrease)
        np.testing.assert_allclose(out[above], np.broadcast_to(step, out.shape)[above])


@SETTINGS
@given(cases())
def test_memory_never_below_working_set(case):
    cur, prop, ws, since, cfg = case
    out = _run(*case)
    if cfg.memory_margin is None or cfg.memory_index is None:
        return
    _, ceil = _bounds(cfg)
    m = cfg.memory_index
    need = np.minimum(ceil[m], ws * (1.0 + cfg.memory_margin))
    assert np.all(out[:, m] >= need)


@SETTINGS
@given(cases())
def test_max_decrease_bound(case):
    # Not even the ceiling cuts more than max_decrease in one window.
    cur, prop, ws, since, cfg = case
    out = _run(*case)
    if cfg.max_decrease is None:
        return
    assert np.all(out >= cur * (1.0 - cfg.max_decrease))


@SETTINGS
@given(cases())
def test_max_increase_bound(case):
    # Symmetrically: out <= min(ceiling, max(floor, current x (1 + i), working-set need)).
    cur, prop, ws, since, cfg = case
    out = _run(*case)
    if cfg.max_increase is None:
        return
    floor, ceil = _bounds(cfg)
    up = np.maximum(cur * (1.0 + cfg.max_increase), _ws_need(cfg, ws, len(cur)))
    assert np.all(out <= np.maximum(floor[None, :], up))
    assert np.all((out <= ceil[None, :]) | (out <= cur))


@SETTINGS
@given(cases())
def test_min_change_keeps_current(case):
    cur, prop, ws, since, cfg = case
    out = _run(*case)
    floor, ceil = _bounds(cfg)
    with np.errstate(invalid="ignore"):
        small = ~np.isfinite(prop) | (np.abs(prop - cur) / cur < cfg.min_change)
    free = (cur >= floor) & (cur <= ceil) & (_ws_need(cfg, ws, len(cur)) <= cur)
    sel = small & free
    np.testing.assert_array_equal(out[sel], cur[sel])


@SETTINGS
@given(cases())
def test_every_change_is_large_or_forced(case):
    # A value that changed either changed by >= min_change, or is a per-window step towards a
    # proposal that itself was >= min_change away (the change limit cut it), or sits on a
    # guarantee's bound.
    cur, prop, ws, since, cfg = case
    out = _run(*case)
    floor, ceil = _bounds(cfg)
    need = _ws_need(cfg, ws, len(cur))
    changed = out != cur
    large = np.abs(out - cur) / cur >= cfg.min_change
    with np.errstate(invalid="ignore"):
        wanted_large = np.isfinite(prop) & (np.abs(prop - cur) / cur >= cfg.min_change)
    limited = np.zeros_like(changed)
    if cfg.max_increase is not None:
        limited |= np.isclose(out, cur * (1 + cfg.max_increase))
    if cfg.max_decrease is not None:
        limited |= np.isclose(out, cur * (1 - cfg.max_decrease))
    forced = (out == floor[None, :]) | (out == ceil[None, :]) | ((out == need) & (need > 0))
    if cfg.max_decrease is not None:   # a step down towards a ceiling below the current value
        forced |= (cur > ceil[None, :]) & np.isclose(out, cur * (1 - cfg.max_decrease))
    assert np.all(~changed | large | (wanted_large & limited) | forced)


@st.composite
def sequences(draw):
    T = draw(st.integers(2, 12))
    P = draw(st.integers(1, 4))
    props = draw(hnp.arrays(np.float64, (T, P, 2), elements=POS))
    if draw(st.booleans()):
        props = np.where(draw(hnp.arrays(np.bool_, (T, P, 2))), np.nan, props)
    init = draw(hnp.arrays(np.float64, (P, 2), elements=POS))
    ws = draw(hnp.arrays(np.float64, (T, P), elements=POS)) if draw(st.booleans()) else None
    opt = lambda s: draw(st.one_of(st.none(), s))  # noqa: E731
    lo = draw(hnp.arrays(np.float64, (2,), elements=st.floats(0.01, 500.0)))
    hi = lo + draw(hnp.arrays(np.float64, (2,), elements=st.floats(0.0, 500.0)))
    cfg = SafetyConfig(
        floor=tuple(lo) if draw(st.booleans()) else None,
        ceiling=tuple(hi) if draw(st.booleans()) else None,
        max_increase=opt(st.floats(0.0, 3.0)), max_decrease=opt(st.floats(0.0, 0.99)),
        cooldown_windows=draw(st.integers(1, 3)), memory_margin=opt(st.floats(0.0, 1.0)),
        min_change=draw(st.sampled_from([0.0, 0.1])), memory_index=1)
    return props, init, ws, cfg


@SETTINGS
@given(sequences())
def test_no_decrease_during_cool_down(case):
    props, init, ws, cfg = case
    out = apply_safety_sequence(props, init, cfg, ws)
    floor, ceil = _bounds(cfg)
    c = cfg.cooldown_windows
    assert np.all((out >= floor) & (out <= ceil))
    T = len(out)
    for w in range(1, T):
        for v in range(max(1, w - c), w):   # an increase in one of the c windows before w
            inc = out[v] > out[v - 1]
            assert np.all(out[w][inc] >= out[w - 1][inc]), (w, v)


@SETTINGS
@given(sequences(), st.data())
def test_no_memory_decrease_after_a_rising_window(case, data):
    props, init, ws, cfg = case
    rising = data.draw(hnp.arrays(np.bool_, props.shape[:2]))
    out = apply_safety_sequence(props, init, cfg, ws, rising)
    if cfg.memory_margin is None:
        return
    floor, ceil = _bounds(cfg)
    m = cfg.memory_index
    for w in range(1, len(out)):
        r = rising[w] & (out[w - 1, :, m] <= ceil[m])   # a ceiling below is still approached
        assert np.all(out[w, r, m] >= out[w - 1, r, m]), w


@SETTINGS
@given(sequences())
def test_sequence_window0_is_clamped_initial(case):
    props, init, ws, cfg = case
    out = apply_safety_sequence(props, init, cfg, ws)
    floor, ceil = _bounds(cfg)
    np.testing.assert_array_equal(out[0], np.minimum(np.maximum(init, floor), ceil))
    assert out.shape == props.shape


# ----------------------------------------------------------------------------- sequences
def test_sequence_known_answer():
    cfg = SafetyConfig(max_decrease=0.5, cooldown_windows=1, memory_margin=0.1, min_change=0.1,
                       memory_index=1)
    nan = np.nan
    props = np.array([[[9.0, 9.0]],        # window 0: ignored, the initial request holds
                      [[1.0, 2.0]],        # halved at most -> [2, 4]; ws 3 x 1.1 < 4
                      [[3.0, 4.2]],        # cpu +50 %; mem +5 % skipped, ws 3.9 x 1.1 = 4.29
                      [[1.0, 1.0]],        # decreases held: cool-down after the increase
                      [[1.0, 1.0]],        # allowed now, halved at most -> [1.5, 2.145]
                      [[nan, nan]],        # no data, ws unknown -> unchanged
                      [[1.6, 2.0]]])       # both changes < 10 % -> unchanged
    ws = np.array([[nan], [3.0], [3.9], [1.0], [1.0], [nan], [1.0]])
    out = apply_safety_sequence(props, A([4.0, 8.0]), cfg, ws)
    expected = np.array([[[4.0, 8.0]], [[2.0, 4.0]], [[3.0, 4.29]], [[3.0, 4.29]],
                         [[1.5, 2.145]], [[1.5, 2.145]], [[1.5, 2.145]]])
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_sequence_start_up_keeps_memory_until_growth_stops():
    """A training job's start on a real node (docs/results.md §8): its working set climbs
    for two windows. Covering only the latest sample, memory is halved at the first
    boundary (8 -> 4) and the next window's peak (5) is above it; held while rising, it
    comes down once the growth stops, to the plateau x (1 + margin)."""
    cfg = SafetyConfig(max_decrease=0.5, memory_margin=0.1, memory_index=0)
    props = np.full((4, 1, 1), 1.0)
    ws = np.array([[np.nan], [2.0], [5.0], [5.1]])             # latest sample before window w
    rising = np.array([[False], [True], [True], [False]])     # grew > 10 % in window w - 1
    held = apply_safety_sequence(props, A([8.0]), cfg, ws, rising)[:, 0, 0]
    np.testing.assert_allclose(held, [8.0, 8.0, 8.0, 5.61])
    cut = apply_safety_sequence(props, A([8.0]), cfg, ws)[:, 0, 0]
    np.testing.assert_allclose(cut, [8.0, 4.0, 5.5, 5.61])
    assert cut[1] < 5.0 <= held[1]     # the window-2 peak: short when cut, covered when held


def test_sequence_two_pods_independent():
    cfg = SafetyConfig(max_increase=1.0, cooldown_windows=2, memory_index=None)
    props = np.array([[[1.0], [1.0]],
                      [[4.0], [0.5]],     # pod 0 +100 % max (2); pod 1 down to 0.5
                      [[1.0], [2.0]],     # pod 0 held (cool-down); pod 1 up x2 -> 1.0
                      [[1.0], [0.1]],     # pod 0 held (2nd window); pod 1 held
                      [[1.0], [0.1]],     # pod 0 allowed -> 1; pod 1 held (2nd window)
                      [[1.0], [0.1]]])    # pod 1 allowed -> 0.1
    out = apply_safety_sequence(props, A([1.0], [1.0]), cfg)
    np.testing.assert_allclose(out[:, :, 0], np.array([[1.0, 1.0], [2.0, 0.5], [2.0, 1.0],
                                                       [2.0, 1.0], [1.0, 1.0], [1.0, 0.1]]))


def test_sequence_no_config_passes_through():
    rng = np.random.default_rng(0)
    props = rng.uniform(0.1, 10.0, (5, 3, 2))
    init = rng.uniform(0.1, 10.0, (3, 2))
    out = apply_safety_sequence(props, init, SafetyConfig(memory_index=None))
    np.testing.assert_array_equal(out[0], init)
    np.testing.assert_array_equal(out[1:], props[1:])


def test_operator_defaults():
    cfg = SafetyConfig.operator_defaults()
    assert (cfg.max_increase, cfg.max_decrease, cfg.cooldown_windows, cfg.memory_margin,
            cfg.min_change, cfg.memory_index) == (1.0, 0.5, 1, 0.1, 0.1, 1)
    from ai4dl.crd_spec import Policy

    pol = Policy()   # the operator's defaults are the CRD's
    assert (pol.max_increase, pol.max_decrease, pol.cooldown_windows, pol.memory_margin,
            pol.min_change) == (cfg.max_increase, cfg.max_decrease, cfg.cooldown_windows,
                                cfg.memory_margin, cfg.min_change)
    assert SafetyConfig.operator_defaults(memory_index=None).memory_index is None


# ----------------------------------------------------------------------------- bad numbers
class TestBadNumbers:
    """A proposal or a bound that cannot be right never turns into an allocation."""

    def test_negative_and_infinite_proposals_keep_current(self):
        cur = A([4.0, 4.0, 4.0])
        out, _ = apply_safety(A([-1.0, np.inf, -np.inf]), SafetyState(cur), SafetyConfig())
        np.testing.assert_array_equal(out, cur)

    def test_ceiling_below_current_is_approached_at_the_decrease_limit(self):
        # 32 Gi in force, a 2 Gi ceiling, maxDecrease 0.5: 16, 8, 4, 2 — never one cut
        cfg = SafetyConfig(ceiling=(np.inf, 2.0), max_decrease=0.5, memory_index=None)
        cur, seen = A([1.0, 32.0]), []
        for _ in range(5):
            cur, _ = apply_safety(A([1.0, 0.5]), SafetyState(cur), cfg)
            seen.append(cur[0, 1])
        assert seen == [16.0, 8.0, 4.0, 2.0, 1.0]   # then below it, as the proposal asks
        # nothing is raised above the ceiling on the way
        out, _ = apply_safety(A([1.0, 40.0]), SafetyState(A([1.0, 8.0])), cfg)
        assert out[0, 1] == 4.0
        np.testing.assert_array_equal(
            approach_ceiling(A([1.0]), A([3.0]), (2.0,), None), A([1.0]))   # no limit: no rule

    def test_contradictory_bounds_hold_the_current_value(self):
        cfg = SafetyConfig(floor=(64.0, 1.0), ceiling=(1.0, 2.0), memory_index=None)
        np.testing.assert_array_equal(cfg.invalid_bounds(), [True, False])
        out, _ = apply_safety(A([10.0, 10.0]), SafetyState(A([8.0, 32.0])), cfg)
        np.testing.assert_array_equal(out, A([8.0, 2.0]))   # cpu held; memory clamped
        seq = apply_safety_sequence(np.full((2, 1, 2), 5.0), A([8.0, 1.5]), cfg)
        np.testing.assert_array_equal(seq[0], A([8.0, 1.5]))

    def test_physical_maximum_caps_everything(self):
        cfg = SafetyConfig(max_value=(64.0, 2.0 ** 40), memory_index=None)
        out, _ = apply_safety(A([1e6, 1e30]), SafetyState(A([8.0, 2.0 ** 30])), cfg)
        np.testing.assert_array_equal(out, A([64.0, 2.0 ** 40]))
        # an allocation already above it (an earlier bad write) comes straight down
        out, _ = apply_safety(A([np.nan, np.nan]), SafetyState(A([1e5, 9.2e18])), cfg)
        np.testing.assert_array_equal(out, A([64.0, 2.0 ** 40]))
        np.testing.assert_array_equal(cap_physical(A([3.0]), None), A([3.0]))


def test_a_workload_peak_is_held_at_once_and_only_where_given():
    from ai4dl.rules.safety import hold_workload_peak

    cfg = SafetyConfig(max_increase=0.1, memory_margin=0.1, memory_index=1)
    cur = np.array([[1.0, 100.0], [1.0, 100.0]])
    out, _ = apply_safety(cur.copy(), SafetyState(cur), cfg, working_set=np.array([50.0, 50.0]),
                          held=np.array([400.0, np.nan]))
    assert out[0, 1] == 400.0 and out[1, 1] == 100.0          # past maxIncrease; NaN: nothing
    assert out[0, 0] == 1.0                                   # memory only
    # the ceiling still wins
    capped, _ = apply_safety(cur.copy(), SafetyState(cur),
                             SafetyConfig(memory_index=1, ceiling=(np.inf, 300.0)),
                             held=np.array([400.0, np.nan]))
    assert capped[0, 1] == 300.0
    assert hold_workload_peak(cur, None, 1) is cur


def test_the_replay_holds_each_executions_stretches_in_their_windows():
    from ai4dl.judge import ReplayInput, held_windows
    from ai4dl.rules.workload_profile import Hold, held_level

    usage = [np.ones((12, 2)), np.ones((8, 2))]
    hold = Hold(np.array([0.0, 60.0, 120.0]), np.array([7.0, 9.0]))
    data = ReplayInput(["a", "b"], usage, [None, None], [np.ones(2)] * 2, 15.0,
                       ("cpu", "memory"), ("cores", "bytes"), holds=[hold, None])
    held = held_windows(data, [3, 2], 4)                     # windows of 4 samples: 60 s
    assert held[:, 0][:2].tolist() == [7.0, 9.0] and np.isnan(held[2, 0])   # 0 s, 60 s; 120 s
    assert np.isnan(held[:, 1]).all()
    # a window is held at the highest stretch it overlaps (the operator's windows are not
    # aligned with a run's start); a point, at its own stretch's
    assert held_level(hold, 30.0, length=60.0) == 9.0 and held_level(hold, 30.0) == 7.0
    assert held_level(hold, -30.0, length=60.0) == 7.0      # a window begun before the run
    assert np.isnan(held_level(hold, 120.0, length=60.0)) and np.isnan(held_level(None, 0.0))
    # as a limit (a Guaranteed pod): the runs' peak until where it came, with VPA's margin
    limit = Hold(hold.edges, hold.levels, 9.0, 90.0)
    assert held_level(limit, 0.0, as_limit=True) == pytest.approx(9.0 * 1.15)
    assert held_level(limit, 90.0, as_limit=True) == pytest.approx(9.0 * 1.15)
    assert np.isnan(held_level(limit, 91.0, as_limit=True)) and np.isnan(
        held_level(hold, 0.0, as_limit=True))
    assert held_windows(ReplayInput(["a"], usage[:1], [None], [np.ones(2)], 15.0,
                                    ("cpu", "memory"), ("cores", "bytes")), [3], 4) is None
