"""The judge: a policy replayed over executions, window by window, and scored as
../shared/docs/evaluation.md defines: allocation ÷ oracle at matched fulfilment (cpu) and at a
matched share of windows at risk (memory, and a second view of cpu), and the rule by which one
policy wins against another. Under a safety layer a matched share is found in the served order
(:func:`served_risk_match`: the factor on the policy's own rows, then the layer), so that a
figure is an allocation the operator would serve.

It sits below the policies: ``ai4dl.policy.auto`` uses it to choose, ``ai4dl.evaluation.evaluate``
orchestrates whole runs above it. So it imports no policy, only the safety chain every replay
applies (:mod:`ai4dl.rules.safety`) and the reported shares of windows at risk
(:mod:`ai4dl.rules.objectives`), both modules that import nothing from the package
(tests/test_imports.py keeps it so). A policy is anything with the
:class:`ai4dl.policy.policies.Policy` interface. Pure: no I/O, no plotting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ai4dl.rules.objectives import RISKS
from ai4dl.rules.safety import SafetyConfig, apply_safety_sequence, working_set_rising
from ai4dl.rules.workload_profile import held_levels

TARGETS = (0.95, 0.97)
#: The yardstick every allocation is judged against: the usage itself, never padded by the
#: safety layer (its name is a policy's, declared in ai4dl.policy.policies).
ORACLE = "oracle"
GiB = 1024.0 ** 3


def resource_unit_scale(unit: str) -> tuple[float, str]:
    """Divisor and name for reporting resource-time (bytes -> GiB-hours)."""
    return (GiB, "GiB-h") if unit == "bytes" else (1.0, f"{unit}-h" if unit != "cores"
                                                     else "core-h")


@dataclass
class Replay:
    """Allocations of one policy for every execution: per execution (n_windows, R)."""
    policy: str
    allocations: list[np.ndarray]


@dataclass
class ReplayInput:
    """What the evaluator replays: per execution the usage of the managed resources, the
    phases (if a model was given), the initial request and the step."""
    names: list[str]
    usage: list[np.ndarray]
    phases: list[np.ndarray | None]
    initial: list[np.ndarray]
    step: float
    resources: tuple[str, ...]
    units: tuple[str, ...]
    groups: list[str] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    #: per execution, the memory its workload's profile holds, stretch by stretch of the run
    #: (:class:`~ai4dl.rules.workload_profile.Hold`; None: nothing held)
    #: (:meth:`ai4dl.rules.workload_profile.WorkloadProfile.hold`; none: nothing held)
    holds: list = field(default_factory=list)


def replay(data: ReplayInput, policy, window: int,
           safety: SafetyConfig | None = None, workload_state: bool = True) -> Replay:
    """Allocation per window for every execution: the policy's rows, then the safety layer
    applied to all executions at once (padded windows carry NaN and are ignored).

    A policy that learns per workload (VPA) replays the executions of one group together
    (``allocate_group``: in time order, one container state per execution), carrying its state
    across them (``workload_state``); without it each execution starts cold."""
    raw: list = [None] * len(data.usage)
    stateful = getattr(policy, "uses_workload_state", False)
    n_windows = [-(-len(u) // window) for u in data.usage]
    if stateful:
        groups: dict = {}
        for i in range(len(data.usage)):
            key = data.groups[i] if (data.groups and workload_state) else i
            groups.setdefault(key, []).append(i)
        for idx in groups.values():
            rows = policy.allocate_group(
                [data.usage[i] for i in idx], [data.phases[i] for i in idx], window,
                [data.initial[i] for i in idx], data.step,
                [data.starts[i] if data.starts else 0.0 for i in idx],
                [data.names[i] for i in idx], policy.new_state())
            for i, r in zip(idx, rows):
                raw[i] = r[:n_windows[i]]
    else:
        for i, (u, p, init) in enumerate(zip(data.usage, data.phases, data.initial)):
            raw[i] = policy.allocate(u, p, window, init, data.step)[:n_windows[i]]
    if policy.name == ORACLE or safety is None:
        return Replay(policy.name, raw)
    return Replay(policy.name, through_safety(data, raw, window, safety))


def working_set_inputs(data: ReplayInput, lengths: Sequence[int], window: int,
                       safety: SafetyConfig) -> tuple[np.ndarray, np.ndarray] | None:
    """What the safety layer reads besides the allocations, per window and execution (windows
    ``lengths[i]`` long): the latest working set at the start of window w (the last sample
    before it) and whether it rose over window w - 1 (the operator sees the same window; the
    execution started in window 0). None where the layer has no memory column. They depend on
    the usage only, so a search over allocations computes them once."""
    mem = safety.memory_index
    if mem is None or mem >= len(data.resources):
        return None
    W = max(lengths)
    ws = np.full((W, len(lengths)), np.nan)
    rising = np.zeros((W, len(lengths)), bool)
    for i, (n, u) in enumerate(zip(lengths, data.usage)):
        last = u[window - 1:: window, mem][: n - 1]
        ws[1: 1 + len(last), i] = last
        full = len(last) * window
        if full:
            rising[1: 1 + len(last), i] = working_set_rising(
                np.asarray(u[:full, mem], np.float64).reshape(len(last), window),
                safety.memory_margin, np.arange(len(last)) == 0)
    return ws, rising


def held_windows(data: ReplayInput, lengths: Sequence[int], window: int) -> np.ndarray | None:
    """(windows, executions): the memory each execution's hold keeps in window w (NaN: none),
    for the window starting w × window samples into the run; None when nothing is held."""
    if not any(h is not None for h in data.holds):
        return None
    out = np.full((max(lengths), len(lengths)), np.nan)
    for i, (n, hold) in enumerate(zip(lengths, data.holds)):
        out[:n, i] = held_levels(hold, np.arange(n) * window * data.step, window * data.step)
    return out


#: ``through_safety(held=...)`` not given: computed from the executions' holds.
HELD_FROM_DATA = "from data"


def through_safety(data: ReplayInput, raw: Sequence[np.ndarray], window: int,
                   safety: SafetyConfig, inputs: tuple | None = None,
                   held: np.ndarray | None | str = HELD_FROM_DATA) -> list[np.ndarray]:
    """A policy's raw allocations per execution (windows x resources) as the safety layer
    serves them, window by window, with the working set the operator would see
    (``inputs``: :func:`working_set_inputs` for these lengths, computed when not given) and
    the memory the workloads' profiles hold (``held``: :func:`held_windows` for these
    lengths, computed when not given)."""
    lengths = [len(r) for r in raw]
    if inputs is None:
        inputs = working_set_inputs(data, lengths, window, safety)
    if isinstance(held, str):
        held = held_windows(data, lengths, window)
    stacked = np.full((max(lengths), len(raw), len(data.resources)), np.nan)
    for i, r in enumerate(raw):
        stacked[: len(r), i] = r
    ws, rising = inputs if inputs is not None else (None, None)
    final = apply_safety_sequence(stacked, np.array(data.initial), safety, ws, rising, held)
    return [final[: len(r), i] for i, r in enumerate(raw)]


def serve(data: ReplayInput, raw: Replay, window: int, safety: SafetyConfig | None) -> Replay:
    """``raw`` (a policy's own rows, :func:`replay` without a layer) as ``safety`` serves it;
    the oracle (the yardstick) and a run without a layer are served as they are."""
    if raw.policy == ORACLE or safety is None:
        return raw
    return Replay(raw.policy, through_safety(data, raw.allocations, window, safety))


def subset(data: ReplayInput, idx: Sequence[int]) -> ReplayInput:
    """The executions ``idx`` of ``data`` (in that order) as a ReplayInput of their own."""
    def pick(xs):
        return [xs[i] for i in idx] if xs else []
    return ReplayInput(pick(data.names), pick(data.usage), pick(data.phases),
                       pick(data.initial), data.step, data.resources, data.units,
                       pick(data.groups), pick(data.starts), pick(data.holds))


#: Halvings of the bracket in :func:`served_risk_match` (2^-16 of a factor of 2: far finer
#: than one window of any data set moves the share at risk).
SERVED_MATCH_STEPS = 16


@dataclass
class ServedMatch:
    """:func:`served_risk_match`'s answer, per group of executions: the factor on the policy's
    own rows (``factors``), whether it meets the share (``met``: False where no factor does,
    e.g. a ceiling below the usage), and the served rows at it (per execution of ``idx``)."""
    idx: list[int]
    factors: np.ndarray
    met: np.ndarray
    allocations: list[np.ndarray]


def served_risk_match(data: ReplayInput, raw: Sequence[np.ndarray], window: int, j: int,
                      share: float, safety: SafetyConfig, only: Sequence[int] | None = None,
                      include_cold_start: bool = False, per_execution: bool = False
                      ) -> ServedMatch:
    """The matched share of windows at risk in the order the operator serves it: the smallest
    factor ``f`` (to 2^-16 of the bracket) such that the policy's own rows ``raw`` with
    resource ``j`` multiplied by ``f`` after the cold start, then served through ``safety``,
    leave at most ``share`` of the scored windows of the executions ``only`` at risk.

    Multiplying the served rows instead (:func:`matched_risk_multiplier`) is exact without a
    layer but not with one: the layer's floors (the working-set cover, memory held while it
    rises, the minimums) do not scale with the policy's factor, and scaling them down prices a
    policy at allocations no pod would get. One factor for all of ``only``, or one per
    execution (``per_execution``), found together: the layer treats every pod on its own, so
    the search runs the layer once per step over all of them."""
    idx = list(range(len(data.usage)) if only is None else only)
    first = 0 if include_cold_start else 1
    sub = subset(data, idx)
    rows = [np.asarray(raw[i], np.float64) for i in idx]
    inputs = working_set_inputs(sub, [len(r) for r in rows], window, safety)
    wmax = [np.maximum.reduceat(u[:, j], np.arange(0, len(u), window))[first:]
            if len(u) else np.empty(0) for u in sub.usage]
    n_groups = len(idx) if per_execution else 1
    group = np.arange(len(idx)) if per_execution else np.zeros(len(idx), int)
    labels = np.concatenate([np.full(len(w), g) for w, g in zip(wmax, group)]) if idx else \
        np.empty(0, int)
    maxima = np.concatenate(wmax) if idx else np.empty(0)
    counted = np.bincount(labels, minlength=n_groups)
    allowed = np.floor(share * counted + 1e-9).astype(int)
    scored = counted > 0

    def served(factors):
        scaled = []
        for r, g in zip(rows, group):
            a = r.copy()
            a[first:, j] *= factors[g]
            scaled.append(a)
        return through_safety(sub, scaled, window, safety, inputs) if scaled else []

    def over(final) -> np.ndarray:
        if not len(maxima):
            return np.zeros(n_groups, bool)
        al = np.concatenate([f[first: first + len(w), j] for f, w in zip(final, wmax)])
        return np.bincount(labels, weights=maxima > al, minlength=n_groups) > allowed

    # start from the closed form on the policy's own rows (exact where the layer does nothing)
    hi = np.ones(n_groups)
    for g in np.flatnonzero(scored):
        k = np.flatnonzero(group == g)
        m = matched_risk_multiplier(np.concatenate([wmax[i] for i in k]),
                                    np.concatenate([rows[i][first: first + len(wmax[i]), j]
                                                    for i in k]), share)
        hi[g] = m if np.isfinite(m) and m > 0 else 1.0
    short = over(served(hi))
    for _ in range(20):                         # widen until the share is met
        if not short.any():
            break
        hi[short] *= 2.0
        short = over(served(hi))
    met = ~short
    lo = hi / 2.0
    moving = met & scored
    for _ in range(20):                         # ... and below, until it is not
        if not moving.any():
            break
        fine = ~over(served(lo)) & moving
        hi[fine] = lo[fine]
        lo[fine] /= 2.0
        moving = fine
    for _ in range(SERVED_MATCH_STEPS):
        mid = np.sqrt(lo * hi)
        o = over(served(mid))
        lo = np.where(o, mid, lo)
        hi = np.where(o | ~met | ~scored, hi, mid)
    return ServedMatch(idx, hi, met, served(hi))


# ----------------------------------------------------------------------------- scoring
@dataclass
class ResourceScore:
    """One policy, one resource, aggregated over the scored samples.

    The raw fields are at the policy's own allocation; the ``*_at`` maps are at the margin that
    makes it reach each target fulfilment (matched fulfilment, ../shared/docs/evaluation.md),
    so they compare across policies."""
    allocation: float            # resource-time (unit-hours, GiB-hours for bytes)
    usage: float
    vs_oracle: float             # allocation ÷ oracle allocation
    vs_static_peak: float        # allocation ÷ the execution's peak held for its whole life
    fulfilment: float            # share of samples with usage <= allocation
    fulfilment_10: float         # ... with usage <= 1.1 × allocation
    under_samples: int
    worst_shortfall: float       # max(usage - allocation), in the resource's unit
    worst_shortfall_rel: float   # max((usage - allocation) / allocation)
    oom_windows: int             # raw allocation: windows whose max usage exceeds it
    resizes: int                 # windows whose allocation differs from the previous one
    scored_windows: int = 0      # windows scored (the cold-start window excluded by default)
    margin_at: dict = field(default_factory=dict)      # target -> margin reaching it
    vs_oracle_at: dict = field(default_factory=dict)   # target -> allocation ÷ oracle there
    # at the matched margin of each target:
    short_windows_at: dict = field(default_factory=dict)       # windows with any shortfall
    short_window_share_at: dict = field(default_factory=dict)  # ... ÷ scored windows
    worst_shortfall_at: dict = field(default_factory=dict)     # max(usage - alloc), unit
    worst_shortfall_rel_at: dict = field(default_factory=dict)  # max((usage - alloc) / usage)
    # judged by risk (evaluation.md, "Memory is judged by risk"): at the multiplier that leaves
    # exactly a share s of the scored windows with any sample above the allocation
    risk_share: float = float("nan")         # raw allocation: share of scored windows at risk
    risk_multiplier_at: dict = field(default_factory=dict)     # s -> multiplier reaching it
    vs_oracle_risk_at: dict = field(default_factory=dict)      # s -> allocation ÷ oracle there
    fulfilment_risk_at: dict = field(default_factory=dict)     # s -> sample fulfilment there
    worst_shortfall_risk_at: dict = field(default_factory=dict)      # max(usage - alloc), unit
    worst_shortfall_risk_rel_at: dict = field(default_factory=dict)  # ... ÷ usage
    # where no multiplier reaches s (a start the multiplier cannot move, a zero allocation):
    # the least share of windows at risk any multiplier leaves, and allocation ÷ oracle there
    risk_floor_at: dict = field(default_factory=dict)          # s -> floor share
    vs_oracle_floor_at: dict = field(default_factory=dict)     # s -> allocation ÷ oracle at it
    # s -> each scored execution's allocation there (unit-hours, in the order scored): what a
    # comparison of two policies clustered by workload sums
    allocation_by_execution_risk_at: dict = field(default_factory=dict)


def per_sample_allocation(alloc_windows: np.ndarray, n: int, window: int) -> np.ndarray:
    """(n, R): each window's allocation row repeated over its samples."""
    return np.repeat(alloc_windows, window, axis=0)[:n]


def scored_mask(n: int, window: int, include_cold_start: bool) -> np.ndarray:
    """(n,): the samples an execution is scored on (its first window only when the start
    counts)."""
    mask = np.ones(n, bool)
    if not include_cold_start:
        mask[:window] = False
    return mask


def matched_margin(usage: np.ndarray, alloc: np.ndarray, target: float) -> float:
    """Smallest m with share(usage <= alloc × (1 + m)) >= target — exact (an order statistic
    of usage ÷ allocation), the limit the bisection of evaluation.md converges to."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(alloc > 0, usage / alloc, np.where(usage > 0, np.inf, 0.0))
    if len(ratio) == 0:
        return float("nan")
    need = int(np.ceil(target * len(ratio) - 1e-9))
    need = min(max(need, 1), len(ratio))
    k = int(np.argpartition(ratio, need - 1)[need - 1])
    m = float(ratio[k] - 1.0)
    if np.isfinite(m) and alloc[k] > 0:
        # alloc × (1 + (usage/alloc - 1)) can round just below usage: step m up until the
        # deciding sample is covered, so the margin returned really reaches the target.
        while alloc[k] * (1.0 + m) < usage[k]:
            m = float(np.nextafter(m, np.inf))
    return m


def matched_risk_multiplier(window_max: np.ndarray, alloc: np.ndarray, share: float) -> float:
    """Smallest multiplier m with at most ``share`` of the windows having max > alloc × m: the
    (1 − share) order statistic of window max ÷ allocation (evaluation.md, "Memory is judged by
    risk"). ``floor(share × n)`` windows may stay at risk; nan with no window."""
    wm = np.asarray(window_max, np.float64)
    a = np.asarray(alloc, np.float64)
    if len(wm) == 0:
        return float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(a > 0, wm / np.where(a > 0, a, 1.0),
                         np.where(wm > 0, np.inf, 0.0))
    allowed = int(np.floor(share * len(ratio) + 1e-9))
    k = max(len(ratio) - allowed - 1, 0)
    i = int(np.argpartition(ratio, k)[k])
    m = float(ratio[i])
    if np.isfinite(m) and a[i] > 0:
        # alloc × (wm / alloc) can round just below wm: step m up until that window is covered
        while a[i] * m < wm[i]:
            m = float(np.nextafter(m, np.inf))
    return m


def score(data: ReplayInput, replays: dict[str, Replay], window: int,
          include_cold_start: bool = False, targets: Sequence[float] = TARGETS,
          only: Sequence[int] | None = None,
          per_target: dict[str, dict[float, Replay]] | None = None,
          risks: Sequence[float] = RISKS,
          per_risk: dict[str, dict[float, Replay]] | None = None,
          safety: SafetyConfig | None = None, own: dict[str, Replay] | None = None,
          per_risk_own: dict[str, dict[float, Replay]] | None = None,
          matches: dict | None = None
          ) -> dict[str, list[ResourceScore]]:
    """Scores per policy and resource over the executions ``only`` (default: all).

    ``per_target`` gives, for a policy fitted for a target fulfilment (the head-room tables,
    ``auto``), the replay of its fit for each target: the figures at target t come from that
    replay, the raw ones from ``replays``. ``per_risk`` likewise for each share of windows at
    risk in ``risks`` (a policy fitted for that risk).

    Replays served through a safety layer (``safety``) are matched to a share of windows at
    risk in the served order when the policy's own rows are given (``own``, and
    ``per_risk_own`` for the fits per share): the factor goes on the policy's rows and the
    layer serves the result (:func:`served_risk_match`), as the operator does; the figures at
    the share are those of the served rows. ``matches`` ((name, share, j) -> a per-execution
    :class:`ServedMatch` of every execution, :func:`served_matches`) supplies them
    precomputed for a one-execution score. Without ``own`` the served rows are multiplied."""
    sc = _Scoring(data, window, include_cold_start, only, safety, matches)
    oracle = sc.per_sample(replays[ORACLE]) if ORACLE in replays else None
    per_target = per_target or {}
    per_risk = per_risk or {}
    out: dict[str, list[ResourceScore]] = {}
    for name, rep in replays.items():
        A, WA = sc.per_sample(rep), sc.per_window(rep)
        fits = {t: (sc.per_sample(r), sc.per_window(r))
                for t, r in per_target.get(name, {}).items()}
        risk_fits = {s: (sc.per_sample(r), sc.per_window(r))
                     for s, r in per_risk.get(name, {}).items()}
        rows = []
        for j, scale in enumerate(sc.scales):
            oracle_t = (float(oracle[:, j].sum() * sc.hours / scale) if oracle is not None
                        else np.nan)
            s = sc.raw(rep, A, WA, j, oracle_t)
            # as replayed: a policy fitted per share of windows at risk, its fit for the least
            wr = risk_fits[min(risk_fits)][1] if risk_fits else WA
            if len(sc.window_max):
                s.risk_share = float(np.mean(sc.window_max[:, j] > wr[:, j]))
            for share in risks:
                rows_own = (per_risk_own or {}).get(name, {}).get(share) \
                    if share in risk_fits else (own or {}).get(name)
                sc.at_risk(s, name, share, j, risk_fits.get(share, (A, WA)), rows_own,
                           oracle_t)
            for t in targets:
                sc.at_target(s, t, j, fits.get(t, (A, WA)), oracle_t)
            rows.append(s)
        out[name] = rows
    return out


class _Scoring:
    """What :func:`score` reads for every policy: the scored samples and windows of the
    executions ``only`` (default: all), and how a replay's rows become per-sample and
    per-window allocations there."""

    def __init__(self, data: ReplayInput, window: int, include_cold_start: bool,
                 only: Sequence[int] | None, safety: SafetyConfig | None,
                 matches: dict | None):
        self.data, self.window, self.safety, self.matches = data, window, safety, matches
        self.include_cold_start = include_cold_start
        self.idx = idx = list(range(len(data.usage)) if only is None else only)
        self.hours = data.step / 3600.0
        self.scales = [resource_unit_scale(u)[0] for u in data.units]
        self.first = first = 0 if include_cold_start else 1
        self.masks = masks = [scored_mask(len(data.usage[i]), window, include_cold_start)
                              for i in idx]
        #: per scored sample, the position in ``idx`` of its execution
        self.sample_execution = np.repeat(np.arange(len(idx)), [int(m.sum()) for m in masks])
        self.usage = (np.concatenate([data.usage[i][m] for i, m in zip(idx, masks)]) if idx
                      else np.empty((0, len(self.scales))))
        self.static_peak = (np.concatenate([np.repeat(data.usage[i].max(0)[None], m.sum(), 0)
                                            for i, m in zip(idx, masks)]) if idx
                            else self.usage)
        # per scored window: its max usage (a window is short when it exceeds the allocation)
        self.wmax = [np.maximum.reduceat(data.usage[i],
                                         np.arange(0, len(data.usage[i]), window),
                                         axis=0)[first:] for i in idx]
        self.window_max = (np.concatenate(self.wmax) if self.wmax
                           else np.empty((0, len(self.scales))))

    def per_sample(self, rep: Replay) -> np.ndarray:
        """The replay's allocation at every scored sample, (N, R)."""
        if not self.idx:
            return self.usage
        return np.concatenate([per_sample_allocation(rep.allocations[i], len(self.data.usage[i]),
                                           self.window)[m]
                               for i, m in zip(self.idx, self.masks)])

    def per_window(self, rep: Replay) -> np.ndarray:
        """The replay's allocation of every scored window, (N_w, R)."""
        if not self.idx:
            return self.window_max
        return np.concatenate([rep.allocations[i][self.first: self.first + len(w)]
                               for i, w in zip(self.idx, self.wmax)])

    def _samples_of(self, rows, j: int) -> np.ndarray:
        """Resource j's allocation at the scored samples, from one row array per execution."""
        return np.concatenate([per_sample_allocation(r, len(self.data.usage[i]),
                                                     self.window)[m][:, j]
                               for r, i, m in zip(rows, self.idx, self.masks)])

    def raw(self, rep: Replay, A: np.ndarray, WA: np.ndarray, j: int,
            oracle_t: float) -> ResourceScore:
        """Resource j's figures as replayed (no margin, no multiplier)."""
        scale, hours = self.scales[j], self.hours
        a, u = A[:, j], self.usage[:, j]
        alloc_t = float(a.sum() * hours / scale)
        short = u - a
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(a > 0, short / a, np.where(short > 0, np.inf, 0.0))
        # the change from the cold start's request at window 1 is a resize too
        resizes = sum(int(np.count_nonzero(np.diff(rep.allocations[i][:, j]) != 0))
                      for i in self.idx)
        peak_sum = float(self.static_peak[:, j].sum()) if len(a) else 0.0
        return ResourceScore(
            allocation=alloc_t, usage=float(u.sum() * hours / scale),
            vs_oracle=alloc_t / oracle_t if oracle_t else np.nan,
            # an execution idle at 0 all its life has a static peak of 0: no ratio then
            vs_static_peak=float(a.sum() / peak_sum) if peak_sum > 0 else np.nan,
            fulfilment=float(np.mean(u <= a)) if len(a) else np.nan,
            fulfilment_10=float(np.mean(u <= 1.1 * a)) if len(a) else np.nan,
            under_samples=int(np.count_nonzero(u > a)),
            worst_shortfall=float(max(short.max(), 0.0)) / scale if len(a) else 0.0,
            worst_shortfall_rel=float(max(rel.max(), 0.0)) if len(a) else 0.0,
            oom_windows=int(np.count_nonzero(self.window_max[:, j] > WA[:, j])),
            resizes=resizes, scored_windows=len(self.window_max),
            risk_share=float("nan"))

    def served_at(self, rows_own: Replay, name: str, share: float, j: int):
        """The served-order match on these executions: (factor, per-sample allocation of
        resource j at it); the factor is inf where no factor meets the share."""
        pre = (self.matches or {}).get((name, share, j))
        if pre is not None:
            factors = np.where(pre.met, pre.factors, np.inf)[self.idx]
            rows = [pre.allocations[i] for i in self.idx]
            f = float(factors[0]) if len(self.idx) == 1 else float("nan")
        else:
            got = served_risk_match(self.data, rows_own.allocations, self.window, j, share,
                                    self.safety, self.idx, self.include_cold_start)
            rows = got.allocations
            f = float(got.factors[0]) if got.met[0] else np.inf
        return f, (self._samples_of(rows, j) if self.idx else np.empty(0))

    def floor_at(self, rows_own: Replay | None, a_j: np.ndarray, wat: np.ndarray, j: int):
        """Where no multiplier reaches a share: (the least share of windows at risk one
        reaches, the per-sample allocation of resource j at the smallest that reaches it)."""
        window_max = self.window_max
        if not len(window_max):
            return np.nan, None
        if self.safety is not None and rows_own is not None:
            widest = served_risk_match(self.data, rows_own.allocations, self.window, j, 0.0,
                                       self.safety, self.idx, self.include_cold_start)
            al = np.concatenate([r[self.first: self.first + len(w), j]
                                 for r, w in zip(widest.allocations, self.wmax)])
            floor = float(np.mean(window_max[:, j] > al))
            got = served_risk_match(self.data, rows_own.allocations, self.window, j, floor,
                                    self.safety, self.idx, self.include_cold_start)
            rows = got.allocations if got.met.all() else widest.allocations
            return floor, self._samples_of(rows, j)
        # no layer: only windows allocated nothing stay at risk whatever the multiplier
        floor = float(np.mean((wat <= 0) & (window_max[:, j] > 0)))
        m = matched_risk_multiplier(window_max[:, j], wat, floor)
        return floor, (a_j * m if np.isfinite(m) else None)

    def at_risk(self, s: ResourceScore, name: str, share: float, j: int, fit: tuple,
                rows_own: Replay | None, oracle_t: float) -> None:
        """Resource j's figures at a matched ``share`` of windows at risk, into ``s``: served
        in order through the layer where the policy's own rows are given, else the rows times
        the matched multiplier; where no multiplier reaches it, the floor and its cost."""
        scale, u = self.scales[j], self.usage[:, j]
        at, wat = fit[0][:, j], fit[1][:, j]
        if self.safety is not None and rows_own is not None and name != ORACLE:
            m, at = self.served_at(rows_own, name, share, j)
            scaled = 1.0          # the served rows at the factor: as they are
        else:
            m = matched_risk_multiplier(self.window_max[:, j], wat, share)
            scaled = m
        s.risk_multiplier_at[share] = m
        total = float(at.sum() * self.hours / scale)
        s.vs_oracle_risk_at[share] = (total * scaled / oracle_t
                                      if oracle_t and np.isfinite(m) else np.inf)
        if np.isfinite(m) and len(u):
            s.allocation_by_execution_risk_at[share] = tuple((
                np.bincount(self.sample_execution, weights=at, minlength=len(self.idx))
                * (scaled * self.hours / scale)).tolist())
        if not np.isfinite(m) and len(u) and (self.matches or {}).get((name, share, j)) is None:
            floor, at_floor = self.floor_at(rows_own if self.safety is not None and
                                            name != ORACLE else None,
                                            fit[0][:, j], wat, j)
            s.risk_floor_at[share] = floor
            s.vs_oracle_floor_at[share] = (
                float(at_floor.sum() * self.hours / scale) / oracle_t
                if oracle_t and at_floor is not None else np.nan)
        if not np.isfinite(m) or not len(u):
            s.fulfilment_risk_at[share] = s.worst_shortfall_risk_at[share] = np.nan
            s.worst_shortfall_risk_rel_at[share] = np.nan
            return
        gap = u - at * scaled
        with np.errstate(divide="ignore", invalid="ignore"):
            rel_u = np.where(u > 0, gap / np.where(u > 0, u, 1.0), 0.0)
        s.fulfilment_risk_at[share] = float(np.mean(gap <= 0))
        s.worst_shortfall_risk_at[share] = float(max(gap.max(), 0.0)) / scale
        s.worst_shortfall_risk_rel_at[share] = float(max(rel_u.max(), 0.0))

    def at_target(self, s: ResourceScore, t: float, j: int, fit: tuple,
                  oracle_t: float) -> None:
        """Resource j's figures at the matched margin for fulfilment ``t``, into ``s``."""
        scale, u = self.scales[j], self.usage[:, j]
        at, wat = fit[0][:, j], fit[1][:, j]
        mm = matched_margin(u, at, t)
        s.margin_at[t] = mm
        total = float(at.sum() * self.hours / scale)
        s.vs_oracle_at[t] = (total * (1 + mm) / oracle_t
                             if oracle_t and np.isfinite(mm) else np.inf)
        if not np.isfinite(mm):
            s.short_windows_at[t] = s.short_window_share_at[t] = np.nan
            s.worst_shortfall_at[t] = s.worst_shortfall_rel_at[t] = np.nan
            return
        n_short = int(np.count_nonzero(self.window_max[:, j] > wat * (1.0 + mm)))
        gap = u - at * (1.0 + mm)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel_u = np.where(u > 0, gap / np.where(u > 0, u, 1.0), 0.0)
        s.short_windows_at[t] = n_short
        s.short_window_share_at[t] = (n_short / len(self.window_max) if len(self.window_max)
                                      else np.nan)
        s.worst_shortfall_at[t] = float(max(gap.max(), 0.0)) / scale if len(gap) else 0.0
        s.worst_shortfall_rel_at[t] = float(max(rel_u.max(), 0.0)) if len(gap) else 0.0


def served_matches(data: ReplayInput, own: dict[str, Replay], window: int,
                   resources: Sequence[int], risks: Sequence[float], safety: SafetyConfig,
                   per_risk_own: dict[str, dict[float, Replay]] | None = None,
                   include_cold_start: bool = False) -> dict:
    """For :func:`score` of one execution at a time: (name, share, j) -> the served-order
    match of every execution on its own (:func:`served_risk_match`, per execution), for every
    policy of ``own`` but the oracle, from its fit for the share where ``per_risk_own`` has
    one."""
    out = {}
    for name in dict.fromkeys((*own, *(per_risk_own or {}))):
        if name == ORACLE:
            continue
        for share in risks:
            src = (per_risk_own or {}).get(name, {}).get(share, own.get(name))
            if src is None:
                continue
            for j in resources:
                out[(name, share, j)] = served_risk_match(
                    data, src.allocations, window, j, share, safety, None, include_cold_start,
                    per_execution=True)
    return out


def wins_over(scores: dict[str, list[ResourceScore]], name: str, j: int, target: float,
              baseline: str) -> bool | None:
    """The rule of ../shared/docs/evaluation.md: ``name`` wins on resource ``j`` at ``target``
    when it is cheaper than ``baseline`` (allocation ÷ oracle at the matched margin) and has no
    more windows with a shortfall there. None when either was not scored or cannot reach it."""
    if name not in scores or baseline not in scores:
        return None
    a, b = scores[name][j], scores[baseline][j]
    va, vb = a.vs_oracle_at.get(target, np.nan), b.vs_oracle_at.get(target, np.nan)
    if not (np.isfinite(va) and np.isfinite(vb)):
        return None
    return bool(va < vb and a.short_windows_at[target] <= b.short_windows_at[target])


def wins_at_risk(scores: dict[str, list[ResourceScore]], name: str, j: int, share: float,
                 baseline: str) -> bool | None:
    """Judged by risk: ``name`` wins on resource ``j`` at ``share`` of windows at risk when it
    is cheaper than ``baseline`` there (both have, by construction, the same windows at risk).
    None when either was not scored or cannot reach it."""
    if name not in scores or baseline not in scores:
        return None
    va = scores[name][j].vs_oracle_risk_at.get(share, np.nan)
    vb = scores[baseline][j].vs_oracle_risk_at.get(share, np.nan)
    if not (np.isfinite(va) and np.isfinite(vb)):
        return None
    return bool(va < vb)
