"""The safety layer every policy's proposal passes through, as a chain of small rules (like
VPA's recommendation post-processors). Each rule is a pure function over arrays of shape
(pods, resources), so the operator applies it to all pods of a PhaseModel at once and the
evaluator to all executions of a replay at once.

Order: drop proposals that are not numbers -> skip changes below the threshold -> limit the
change per window -> hold decreases during the cool-down after an increase -> hold memory
decreases while the working set is rising -> cover the latest memory working set -> clamp to
floor and ceiling -> approach a ceiling below the allocation in force at the per-window
decrease limit -> hold resources whose bounds contradict each other -> cap at the physical
maximum. Between covering the working set and the clamp, where a workload profile says so
(:mod:`ai4dl.rules.workload_profile`), memory holds the peak the workload's runs reached until
the point in a run where it came has passed (at once: a level the runs reached is no guess).

The guarantees: memory is never set below the latest working set × (1 + margin) (unless the
ceiling forbids it), and never lowered in a window after one in which the working set grew by
more than that margin; nothing is ever raised above the ceiling nor left below the floor; a
ceiling below the allocation in force is reached step by step (``max_decrease`` per window,
like any decrease: a ceiling set below what a job uses must not cut it in one window); where
floor > ceiling nothing changes (the operator reports the contradiction); and no allocation
exceeds ``max_value``, the largest a container can physically have (a request above it
could only come from a broken sample or model, and the API server would cap it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class SafetyConfig:
    floor: tuple[float, ...] | None = None       # per resource; None = 0
    ceiling: tuple[float, ...] | None = None     # per resource; None = unbounded
    max_increase: float | None = None            # relative per window (1.0 = may double)
    max_decrease: float | None = None            # relative per window (0.5 = may halve)
    cooldown_windows: int = 0                    # no decrease until this many windows after an increase
    memory_margin: float | None = None           # memory >= latest working set x (1 + margin); None = off
    min_change: float = 0.0                      # relative change below which nothing is resized
    memory_index: int | None = 1                 # which resource column is memory
    max_value: tuple[float, ...] | None = None   # per resource: physical maximum; None = none

    @classmethod
    def operator_defaults(cls, n_resources: int = 2, memory_index: int | None = 1
                          ) -> "SafetyConfig":
        """Conservative settings for live pods, the PhaseModel CRD's defaults (VPA's updater
        skips changes under 10 %; at most double per window, at most halve)."""
        return cls(max_increase=1.0, max_decrease=0.5, cooldown_windows=1, memory_margin=0.1,
                   min_change=0.1, memory_index=memory_index)

    def invalid_bounds(self) -> np.ndarray | None:
        """Per resource: True where floor > ceiling (a contradiction nothing can satisfy)."""
        if self.floor is None or self.ceiling is None:
            return None
        return np.asarray(self.floor, np.float64) > np.asarray(self.ceiling, np.float64)


@dataclass
class SafetyState:
    """What the layer remembers between windows, per pod and resource."""
    current: np.ndarray                                  # allocation in force
    since_increase: np.ndarray = field(default=None)     # windows since the last increase

    def __post_init__(self):
        self.current = np.asarray(self.current, np.float64)
        if self.since_increase is None:
            self.since_increase = np.full(self.current.shape, 1 << 30, np.int64)


# ----------------------------------------------------------------------------- the rules
def limit_change(proposal, current, max_increase, max_decrease):
    """At most ×(1 + max_increase) up and ×(1 - max_decrease) down per window."""
    out = proposal
    if max_increase is not None:
        out = np.minimum(out, current * (1.0 + max_increase))
    if max_decrease is not None:
        out = np.maximum(out, current * (1.0 - max_decrease))
    return out


def cool_down(proposal, current, since_increase, windows):
    """No decrease within ``windows`` windows after an increase (hysteresis against flapping)."""
    if windows <= 0:
        return proposal
    return np.where((proposal < current) & (since_increase < windows), current, proposal)


def skip_small_changes(proposal, current, threshold):
    """Keep the current value where the relative change is below ``threshold``."""
    if threshold <= 0:
        return proposal
    rel = np.abs(proposal - current) / np.maximum(np.abs(current), 1e-300)
    return np.where(rel < threshold, current, proposal)


def working_set_rising(memory, margin, started=None) -> np.ndarray:
    """Per container, from its working set over the last window (``memory``: (pods, samples),
    NaN where there is no sample): True where it grew over the window by more than the memory
    margin — its least-squares line ends above where it starts × (1 + margin). The margin is
    the room kept for the next window's growth; a window that grew by more than it says the
    job is still growing (loading data, building its model) and the room is not enough. The
    line, not the first and last samples: a noisy plateau (±10 % sample to sample) is not a
    rise. No new constant: off when the margin is.

    ``started`` (pods,): True for a container that started during the window; its working
    set was 0 before its first sample, so any sample above 0 is a rise (a job's start is
    the growth this rule is for, and one sample of it says nothing about where it ends)."""
    memory = np.atleast_2d(np.asarray(memory, np.float64))
    if margin is None or memory.shape[1] == 0:
        return np.zeros(len(memory), bool)
    ok = np.isfinite(memory)
    n = ok.sum(axis=1)
    y = np.where(ok, memory, 0.0)
    x = np.broadcast_to(np.arange(memory.shape[1], dtype=np.float64), memory.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        xm = (x * ok).sum(axis=1) / n
        ym = y.sum(axis=1) / n
        dx = np.where(ok, x - xm[:, None], 0.0)
        slope = (dx * (y - ym[:, None])).sum(axis=1) / (dx * dx).sum(axis=1)
        x0 = ok.argmax(axis=1)
        x1 = memory.shape[1] - 1 - ok[:, ::-1].argmax(axis=1)
        y0 = ym + slope * (x0 - xm)
        y1 = ym + slope * (x1 - xm)
        rising = (n >= 2) & (slope > 0) & (y1 > np.maximum(y0, 0.0) * (1.0 + margin))
    if started is not None:
        rising |= np.asarray(started, bool) & (y > 0).any(axis=1)
    return rising


def hold_memory_while_rising(proposal, current, rising, memory_index):
    """No memory decrease for a container whose working set rose by more than the margin in
    the last window (:func:`working_set_rising`): covering its latest sample is not enough
    while it is still growing. On a real node this is the start of a training job: the
    working set climbs for minutes through imports and data loading, and a request halved
    at the first boundary is OOM-killed before the next (docs/results.md §8)."""
    if rising is None or memory_index is None:
        return proposal
    out = proposal.copy()
    m = memory_index
    held = np.asarray(rising, bool) & (out[..., m] < current[..., m])
    out[..., m] = np.where(held, current[..., m], out[..., m])
    return out


def cover_working_set(proposal, working_set, margin, memory_index):
    """Memory never below the latest working set × (1 + margin): lowering memory under what
    the container uses now invites the OOM killer."""
    if margin is None or memory_index is None or working_set is None:
        return proposal
    out = proposal.copy()
    ws = np.nan_to_num(np.asarray(working_set, np.float64), nan=0.0)
    out[..., memory_index] = np.maximum(out[..., memory_index], ws * (1.0 + margin))
    return out


def clamp(proposal, floor, ceiling):
    out = proposal
    if floor is not None:
        out = np.maximum(out, np.asarray(floor, np.float64))
    if ceiling is not None:
        out = np.minimum(out, np.asarray(ceiling, np.float64))
    return out


def approach_ceiling(proposal, current, ceiling, max_decrease):
    """A ceiling below the allocation in force is reached at most ``max_decrease`` per window:
    lowering a running job's memory from 32 Gi to a 2 Gi ceiling in one window invites the OOM
    killer as surely as any other cut. Only values already above the ceiling move this way;
    nothing is ever raised above it."""
    if ceiling is None or max_decrease is None:
        return proposal
    ceiling = np.asarray(ceiling, np.float64)
    step = current * (1.0 - max_decrease)
    return np.where((current > ceiling) & (proposal < step), np.minimum(step, current), proposal)


def hold_contradictory_bounds(proposal, current, floor, ceiling):
    """Where floor > ceiling no value satisfies both: keep the allocation in force rather than
    guess which one the user meant (the operator warns about the contradiction)."""
    if floor is None or ceiling is None:
        return proposal
    bad = np.asarray(floor, np.float64) > np.asarray(ceiling, np.float64)
    return np.where(bad, current, proposal)


def cap_physical(proposal, max_value):
    """Never above the largest value a container can physically have."""
    if max_value is None:
        return proposal
    return np.minimum(proposal, np.asarray(max_value, np.float64))


# ----------------------------------------------------------------------------- the chain
def hold_workload_peak(p, held, memory_index):
    """Memory at least ``held`` (pods,) where it is a number: what its workload's runs used in
    this stretch of the run (:func:`ai4dl.rules.workload_profile.held_level`; NaN: nothing
    held)."""
    if held is None or memory_index is None:
        return p
    held = np.asarray(held, np.float64)
    out = p.copy()
    m = memory_index
    with np.errstate(invalid="ignore"):
        out[:, m] = np.where(np.isfinite(held) & (held > out[:, m]), held, out[:, m])
    return out


def apply_safety(proposal: np.ndarray, state: SafetyState, config: SafetyConfig,
                 working_set: np.ndarray | None = None, rising: np.ndarray | None = None,
                 held: np.ndarray | None = None) -> tuple[np.ndarray, SafetyState]:
    """Final allocation for one window and the state for the next.

    ``proposal`` and ``state.current`` are (pods, R); ``working_set`` is (pods,) — the latest
    memory sample; ``rising`` (pods,) — :func:`working_set_rising` of the last window;
    ``held`` (pods,) — the memory a workload profile holds this window (NaN: none). A NaN
    proposal (no data) keeps the current allocation: never a resize based on missing data.
    """
    proposal = np.asarray(proposal, np.float64)
    cur = state.current
    # Not a number, or negative: no allocation can be read from it (never a resize based on it).
    with np.errstate(invalid="ignore"):
        p = np.where(np.isfinite(proposal) & (proposal >= 0), proposal, cur)
    # Whether a change is worth making is judged on the policy's own proposal: judged after
    # the per-window limit, a large change cut into small steps would never be made.
    p = skip_small_changes(p, cur, config.min_change)
    p = limit_change(p, cur, config.max_increase, config.max_decrease)
    p = cool_down(p, cur, state.since_increase, config.cooldown_windows)
    if config.memory_margin is not None:
        p = hold_memory_while_rising(p, cur, rising, config.memory_index)
    p = cover_working_set(p, working_set, config.memory_margin, config.memory_index)
    p = hold_workload_peak(p, held, config.memory_index)
    p = clamp(p, config.floor, config.ceiling)
    p = approach_ceiling(p, cur, config.ceiling, config.max_decrease)
    p = hold_contradictory_bounds(p, cur, config.floor, config.ceiling)
    p = cap_physical(p, config.max_value)
    since = np.where(p > cur, 0, state.since_increase + 1)
    return p, SafetyState(p, since)


def apply_safety_sequence(proposals: np.ndarray, initial: np.ndarray, config: SafetyConfig,
                          working_sets: np.ndarray | None = None,
                          rising: np.ndarray | None = None,
                          held: np.ndarray | None = None) -> np.ndarray:
    """Run the chain over windows: ``proposals`` (windows, pods, R) -> final allocations;
    ``working_sets`` and ``rising`` (windows, pods): at window w, of the window before it;
    ``held`` (windows, pods): the memory a workload profile holds in window w (NaN: none).

    Window 0 is the cold start: the initial request is in force and is what the pod gets
    (nothing has been observed, so there is nothing to resize on).
    """
    out = np.empty_like(np.asarray(proposals, np.float64))
    state = SafetyState(np.asarray(initial, np.float64))
    out[0] = cap_physical(hold_contradictory_bounds(
        clamp(state.current, config.floor, config.ceiling), state.current, config.floor,
        config.ceiling), config.max_value)
    state = SafetyState(out[0])
    for w in range(1, len(proposals)):
        ws = None if working_sets is None else working_sets[w]
        up = None if rising is None else rising[w]
        hold = None if held is None else held[w]
        out[w], state = apply_safety(proposals[w], state, config, ws, up, hold)
    return out
