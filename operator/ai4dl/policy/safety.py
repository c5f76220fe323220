"""The safety layer every policy's proposal passes through, as a chain of small rules (like
VPA's recommendation post-processors). Each rule is a pure function over arrays of shape
(pods, resources), so the operator applies it to all pods of a PhaseModel at once and the
evaluator to all executions of a replay at once.

Order: skip changes below the threshold -> limit the change per window -> hold decreases during
the cool-down after an increase -> cover the latest memory working set -> clamp to floor and
ceiling. The last two run last because they are the guarantees: memory is never set below the
latest working set × (1 + margin) (unless the ceiling forbids it), and the result is always
within [floor, ceiling].
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

    @classmethod
    def operator_defaults(cls, n_resources: int = 2, memory_index: int | None = 1
                          ) -> "SafetyConfig":
        """Conservative settings for live pods (VPA's updater skips changes under 10 %)."""
        return cls(max_decrease=0.5, cooldown_windows=1, memory_margin=0.1, min_change=0.1,
                   memory_index=memory_index)


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


# ----------------------------------------------------------------------------- the chain
def apply_safety(proposal: np.ndarray, state: SafetyState, config: SafetyConfig,
                 working_set: np.ndarray | None = None) -> tuple[np.ndarray, SafetyState]:
    """Final allocation for one window and the state for the next.

    ``proposal`` and ``state.current`` are (pods, R); ``working_set`` is (pods,) — the latest
    memory sample. A NaN proposal (no data) keeps the current allocation: never a resize
    based on missing data.
    """
    proposal = np.asarray(proposal, np.float64)
    cur = state.current
    p = np.where(np.isfinite(proposal), proposal, cur)
    # Whether a change is worth making is judged on the policy's own proposal: judged after
    # the per-window limit, a large change cut into small steps would never be made.
    p = skip_small_changes(p, cur, config.min_change)
    p = limit_change(p, cur, config.max_increase, config.max_decrease)
    p = cool_down(p, cur, state.since_increase, config.cooldown_windows)
    p = cover_working_set(p, working_set, config.memory_margin, config.memory_index)
    p = clamp(p, config.floor, config.ceiling)
    since = np.where(p > cur, 0, state.since_increase + 1)
    return p, SafetyState(p, since)


def apply_safety_sequence(proposals: np.ndarray, initial: np.ndarray, config: SafetyConfig,
                          working_sets: np.ndarray | None = None) -> np.ndarray:
    """Run the chain over windows: ``proposals`` (windows, pods, R) -> final allocations.

    Window 0 is the cold start: the initial request is in force and is what the pod gets
    (nothing has been observed, so there is nothing to resize on).
    """
    out = np.empty_like(np.asarray(proposals, np.float64))
    state = SafetyState(np.asarray(initial, np.float64))
    out[0] = clamp(state.current, config.floor, config.ceiling)
    state = SafetyState(out[0])
    for w in range(1, len(proposals)):
        ws = None if working_sets is None else working_sets[w]
        out[w], state = apply_safety(proposals[w], state, config, ws)
    return out
