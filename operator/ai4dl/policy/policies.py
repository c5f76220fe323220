"""Provisioning policies: one allocation per resource per window, from what was observable.

One interface serves the evaluator and the operator (one code path):

    policy.allocate(usage, phases, window, initial, step) -> array (n // window + 1, R)

``usage`` holds the samples seen so far (rows) of the managed resources (columns, e.g. cpu and
memory), ``phases`` the phase of each sample (from a PhaseModel; ``None`` for phase-blind
policies), ``window`` the samples per re-scheduling window, ``initial`` the pod's request
before any resize. Row ``w`` is the allocation for window ``w`` (samples ``[w*W, (w+1)*W)``)
and depends only on ``usage[:w*W]`` — a test checks that truncating the future never changes
a row. Row 0 is the cold start (nothing seen: the initial request). The evaluator scores rows
``0..ceil(n/W)-1`` against the usage; the operator passes the history up to a window boundary
and applies the last row, the window about to start. Everything here is pure numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from ai4dl.judge import ORACLE
from ai4dl.policy.registry import Declared, FitInputs, declare
from ai4dl.policy.vpa import VpaConfig, VpaRecommender

STATISTICS = ("mean+kstd", "p50", "p90", "p95", "p99", "max")
PHASE_READERS = ("last", "majority", "max")


class Policy(Protocol):
    name: str
    needs_phases: bool

    def allocate(self, usage: np.ndarray, phases: np.ndarray | None, window: int,
                 initial: np.ndarray, step: float) -> np.ndarray: ...


def serve_next(policy, lasts: np.ndarray, last_phases: np.ndarray | None, owns) -> np.ndarray:
    """(P, R): ``policy``'s next window for P containers from their last windows (P, W, R)
    and running statistics (ai4dl.policy.online); ValueError for a policy that cannot be
    served window by window (VPA needs days of per-pod decaying histograms)."""
    serve = getattr(policy, "next_from_running", None)
    if serve is None:
        raise ValueError(f"policy {getattr(policy, 'name', policy)!r} cannot be served window "
                         f"by window")
    return serve(lasts, last_phases, owns)


def n_rows(n: int, window: int) -> int:
    return n // window + 1


def _windows(x: np.ndarray, window: int) -> np.ndarray:
    """Complete windows of ``x`` as (n // window, window, ...)."""
    m = len(x) // window
    return x[: m * window].reshape(m, window, *x.shape[1:])


def _with_cold_start(initial: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return np.vstack([np.asarray(initial, np.float64)[None, :], rows])


# ----------------------------------------------------------------------------- baselines
@dataclass(frozen=True)
class Static:
    """The initial request, never changed (what most jobs get today)."""
    name: str = "static"
    needs_phases: bool = False

    def allocate(self, usage, phases, window, initial, step):
        return np.repeat(np.asarray(initial, np.float64)[None, :], n_rows(len(usage), window), 0)


@dataclass(frozen=True)
class AdaptiveMax:
    """The previous window's maximum (AI4DL's reactive baseline)."""
    name: str = "adaptive-max"
    needs_phases: bool = False

    def allocate(self, usage, phases, window, initial, step):
        return _with_cold_start(initial, _windows(np.asarray(usage, np.float64), window).max(1))

    def next_from_running(self, lasts, last_phases, owns):
        """(P, R): each container's last window's maximum (ai4dl.policy.online)."""
        return lasts.max(1)


@dataclass(frozen=True)
class AdaptiveStat:
    """The previous window's mean + k·σ (AI4DL's statistical reactive baseline)."""
    k: float = 2.0
    name: str = "adaptive-stat"
    needs_phases: bool = False

    def allocate(self, usage, phases, window, initial, step):
        w = _windows(np.asarray(usage, np.float64), window)
        return _with_cold_start(initial, w.mean(1) + self.k * w.std(1))

    def next_from_running(self, lasts, last_phases, owns):
        """(P, R): each container's last window's mean + k·σ (ai4dl.policy.online)."""
        return lasts.mean(1) + self.k * lasts.std(1)


@dataclass(frozen=True)
class Oracle:
    """Each window's own maximum, known in advance: 100 % fulfilment at the least allocation
    any per-window policy can have. Evaluator only (it reads the future); its last row, the
    unknown next window, repeats the last one."""
    name: str = ORACLE
    needs_phases: bool = False

    def allocate(self, usage, phases, window, initial, step):
        usage = np.asarray(usage, np.float64)
        rows = n_rows(len(usage), window)
        out = np.empty((rows, usage.shape[1]))
        for w in range(rows):
            chunk = usage[w * window:(w + 1) * window]
            out[w] = chunk.max(0) if len(chunk) else (out[w - 1] if w else initial)
        return out


# ----------------------------------------------------------------------------- phase policies
def phase_levels(phase_stats: Sequence[dict], feature_index: Sequence[int], statistic: str,
                 k: float) -> np.ndarray:
    """(n_phases, R) level per phase and resource from a model's phase statistics."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, not {statistic!r}")
    idx = list(feature_index)
    rows = []
    for s in phase_stats:
        if statistic == "mean+kstd":
            rows.append(np.asarray(s["mean"])[idx] + k * np.asarray(s["std"])[idx])
        else:
            rows.append(np.asarray(s[statistic])[idx])
    return np.asarray(rows, np.float64)


def read_phase(prev: np.ndarray, levels: np.ndarray, reader: str) -> np.ndarray:
    """Level (rows, R) implied by each previous window's phases (rows, W), per ``reader``:
    ``last`` the phase of the last sample; ``majority`` the most frequent phase; ``max`` the
    most demanding phase seen (per resource). ``levels`` is (k, R), or (rows, k, R) when each
    window has its own table (execution-scoped statistics)."""
    m = len(prev)
    L = levels if levels.ndim == 3 else np.broadcast_to(levels, (m, *levels.shape))
    rows = np.arange(m)
    if reader == "last":
        return L[rows, prev[:, -1]]
    if reader == "majority":
        k = L.shape[1]
        counts = (prev[:, :, None] == np.arange(k)[None, None, :]).sum(1)
        return L[rows, counts.argmax(1)]
    if reader == "max":
        return L[rows[:, None], prev].max(1)
    raise ValueError(f"phase reader must be one of {', '.join(PHASE_READERS)}, not {reader!r}")


def stat_bound(k: float) -> float:
    """The most mean + k·σ of non-negative samples can exceed their maximum by, as a factor:
    with values in [0, M] and mean μ = xM, σ² <= μ(M − μ), so mean + kσ <= M (x + k√(x(1−x)))
    <= M (1 + √(1 + k²)) / 2 (1.618 for k = 2, reached by a two-point distribution)."""
    return (1.0 + math.sqrt(1.0 + k * k)) / 2.0


def own_overall_levels(usage: np.ndarray, window: int, k: float) -> np.ndarray:
    """(rows, R): mean + k·σ of ALL this execution's samples before each window w >= 1."""
    m = len(usage) // window
    u = usage[: m * window]
    ends = np.arange(window, m * window + 1, window) - 1
    c = (ends + 1.0)[:, None]
    mean = np.cumsum(u, 0)[ends] / c
    var = np.maximum(np.cumsum(u * u, 0)[ends] / c - mean ** 2, 0.0)
    return mean + k * np.sqrt(var)


def own_cap(usage: np.ndarray, window: int, k: float) -> np.ndarray:
    """(rows, R): the most a mean + k·σ of the execution's own samples before each window
    w >= 1 could be, stat_bound(k) × their running maximum. The cap on model-scope levels:
    a pooled level belongs to other jobs' scale, and without evidence from the execution
    itself no forecast may exceed what its own samples could justify."""
    m = len(usage) // window
    if m == 0:
        return np.empty((0, usage.shape[1]))
    runmax = np.maximum.accumulate(usage[: m * window], 0)[window - 1:: window]
    return stat_bound(k) * runmax


def execution_levels(usage: np.ndarray, phases: np.ndarray, window: int, k_phases: int,
                     k: float, min_samples: int) -> np.ndarray:
    """(rows, k_phases, R): at the start of each window w >= 1, mean + k·σ of this execution's
    own samples of each phase seen so far. A phase with fewer than ``min_samples`` samples yet
    gets the execution's own overall mean + k·σ (all its samples so far) — never the model's
    pooled level, which belongs to other jobs' scale (small jobs got big jobs' levels for the
    phases they had not shown yet). Running sums make it one pass over the execution."""
    m = len(phases) // window
    onehot = (phases[: m * window, None] == np.arange(k_phases)[None, :]).astype(np.float64)
    u = usage[: m * window]
    ends = np.arange(window, m * window + 1, window) - 1
    count = np.cumsum(onehot, 0)[ends]                                    # (m, kp)
    s1 = np.cumsum(onehot[:, :, None] * u[:, None, :], 0)[ends]           # (m, kp, R)
    s2 = np.cumsum(onehot[:, :, None] * (u ** 2)[:, None, :], 0)[ends]
    c = np.maximum(count, 1)[:, :, None]
    mean = s1 / c
    std = np.sqrt(np.maximum(s2 / c - mean ** 2, 0.0))
    local = mean + k * std
    overall = own_overall_levels(usage, window, k)                        # (m, R)
    return np.where((count >= min_samples)[:, :, None], local, overall[:, None, :])


def scoped_levels(levels: np.ndarray, usage: np.ndarray, phases: np.ndarray, window: int,
                  scope: str, k: float, min_samples: int) -> np.ndarray:
    """(rows, n_phases, R) levels per window for a phase policy: ``execution`` scope from the
    execution's own samples (:func:`execution_levels`), ``model`` scope the model's levels
    capped at the execution's own scale (:func:`own_cap`)."""
    usage = np.asarray(usage, np.float64)
    if scope == "execution":
        return execution_levels(usage, phases, window, len(levels), k, min_samples)
    if scope == "model":
        cap = own_cap(usage, window, k)
        return np.minimum(np.asarray(levels)[None, :, :], cap[:, None, :])
    raise ValueError(f"scope must be 'model' or 'execution', not {scope!r}")


@dataclass(frozen=True)
class PhasePolicy:
    """The current phase's statistic (default mean + 2σ) times (1 + margin).

    ``scope="model"`` takes the statistic from the model (all training executions), capped at
    what the execution's own samples could justify (:func:`own_cap`); ``scope="execution"``
    from this execution's own samples of that phase so far (mean + k·σ), or of all its samples
    while the phase has fewer than ``min_samples``. The second keeps the phase structure but
    adapts to each job's own scale (jobs differ in size far more than their phases differ in
    shape).
    """
    levels: np.ndarray               # (n_phases, R), see phase_levels
    margin: float = 0.0
    reader: str = "last"
    scope: str = "model"
    k: float = 2.0
    min_samples: int = 10
    name: str = "phase"
    needs_phases: bool = True

    def next_from_running(self, lasts, last_phases, owns):
        """(P, R) from the last windows and each container's OwnHistory (ai4dl.policy.online)."""
        return _phase_next(self, lasts, last_phases, owns)

    def allocate(self, usage, phases, window, initial, step):
        phases = np.asarray(phases)
        prev = _windows(phases, window)
        levels = scoped_levels(np.asarray(self.levels), usage, phases, window, self.scope,
                               self.k, self.min_samples)
        return _with_cold_start(initial, read_phase(prev, levels, self.reader)
                                * (1.0 + self.margin))


def _phase_next(policy, lasts, last_phases, owns) -> np.ndarray:
    """(P, R): a phase policy's next window for every container, one by one, from its own
    running statistics (ai4dl.policy.online)."""
    out = np.empty((len(lasts), lasts.shape[2]))
    for i in range(len(lasts)):
        levels = _scoped_running(policy, owns[i])                          # (k, R)
        if isinstance(policy, PhasePolicy):
            out[i] = read_phase(np.asarray(last_phases[i])[None, :], levels[None],
                                policy.reader)[0]
        else:
            out[i] = _proactive_running(policy, levels, owns[i], lasts.shape[1])
    return out * (1.0 + policy.margin)


def _scoped_running(policy, own) -> np.ndarray:
    """The phase levels at the policy's scope, from an OwnHistory."""
    levels = np.asarray(policy.levels, np.float64)
    if policy.scope == "execution":
        return own.phase_levels(policy.k, policy.min_samples)
    if policy.scope == "model":
        return np.minimum(levels, stat_bound(policy.k) * own.peak[None, :])
    raise ValueError(f"scope must be 'model' or 'execution', not {policy.scope!r}")


def _proactive_running(policy, levels: np.ndarray, own, window: int) -> np.ndarray:
    """phase-proactive's forecast from the current run of an OwnHistory."""
    normal, overdue = policy._tables(window)
    cur = own.run_phase
    late = own.run_length > np.asarray(policy.dwell_p90)[cur]
    probs = overdue[cur] if late else normal[cur]
    if policy.mode == "worst-likely":
        ok = probs >= policy.threshold
        if not late:
            ok[cur] = True
        ok[int(probs.argmax())] = True
        return np.where(ok[:, None], levels, -np.inf).max(0)
    return probs @ levels


def visit_probabilities(P: np.ndarray, steps: int, start: np.ndarray | None = None) -> np.ndarray:
    """V[i, j] = probability that the chain, starting in phase i (or from the distribution
    ``start[i]``), is in phase j at least once within the next ``steps`` steps. Computed by
    making j absorbing, one matrix power per phase."""
    P = np.asarray(P, np.float64)
    k = len(P)
    S = np.eye(k) if start is None else np.asarray(start, np.float64)
    V = np.empty((k, k))
    for j in range(k):
        Q = P.copy()
        Q[j] = 0.0
        Q[j, j] = 1.0
        V[:, j] = (S @ np.linalg.matrix_power(Q, steps))[:, j]
    return V


@dataclass(frozen=True)
class PhaseProactive:
    """A forecast over the next window from the transition matrix and dwell times (the CLOUD'20
    follow-up). From the current phase i (last sample seen):

    - ``worst-likely``: the highest level among i and every phase j the chain visits within the
      window with probability >= ``threshold``;
    - ``expected``: the levels weighted by the expected share of the window spent in each phase.

    Dwell times: once the current run has lasted longer than the phase's p90 dwell time, the
    phase is overdue, and the forecast starts from the transition row without the self-loop
    (where the chain goes when it leaves).
    """
    levels: np.ndarray               # (n_phases, R)
    transitions: np.ndarray          # (n_phases, n_phases) per-step
    dwell_p90: np.ndarray            # (n_phases,) samples
    margin: float = 0.0
    mode: str = "worst-likely"
    threshold: float = 0.2
    scope: str = "model"             # as PhasePolicy: model levels (capped) or this execution's
    k: float = 2.0
    min_samples: int = 10
    name: str = "phase-proactive"
    needs_phases: bool = True

    def _tables(self, window: int) -> tuple[np.ndarray, np.ndarray]:
        P = np.asarray(self.transitions, np.float64)
        k = len(P)
        leave = P - np.diag(np.diag(P))
        sums = leave.sum(1, keepdims=True)
        overdue_start = np.where(sums > 0, leave / np.where(sums > 0, sums, 1), np.eye(k))
        if self.mode == "worst-likely":
            normal = visit_probabilities(P, window)
            overdue = visit_probabilities(P, window - 1, overdue_start)
            overdue = np.maximum(overdue, overdue_start)  # the first step itself is a visit
            return normal, overdue
        if self.mode == "expected":
            def occupancy(cur):
                # cur: the phase distribution of the window's first sample
                acc = np.zeros((k, k))
                for _ in range(window):
                    acc += cur
                    cur = cur @ P
                return acc / window
            # From phase i the first sample of the window is one step on (e_i P); an overdue
            # phase's first sample is where it leaves to (the leaving row itself).
            return occupancy(P.copy()), occupancy(overdue_start)
        raise ValueError(f"mode must be 'worst-likely' or 'expected', not {self.mode!r}")

    def next_from_running(self, lasts, last_phases, owns):
        """(P, R) from the last windows and each container's OwnHistory (ai4dl.policy.online)."""
        return _phase_next(self, lasts, last_phases, owns)

    def allocate(self, usage, phases, window, initial, step):
        phases = np.asarray(phases)
        m = len(phases) // window
        if m == 0:
            return _with_cold_start(initial, np.empty((0, len(initial))))
        normal, overdue = self._tables(window)
        current = phases[window - 1: m * window: window]        # last sample of each window
        elapsed = _run_length_at(phases[: m * window])[window - 1:: window]
        late = elapsed > np.asarray(self.dwell_p90)[current]
        probs = np.where(late[:, None], overdue[current], normal[current])   # (m, k)
        L = scoped_levels(np.asarray(self.levels), usage, phases, window, self.scope, self.k,
                          self.min_samples)
        if self.mode == "worst-likely":
            ok = probs >= self.threshold
            ok[np.arange(m), current] |= ~late
            ok[np.arange(m), probs.argmax(1)] = True   # never an empty forecast
            rows = np.where(ok[:, :, None], L, -np.inf).max(1)
        else:
            rows = np.einsum("mk,mkr->mr", probs, L)
        return _with_cold_start(initial, rows * (1.0 + self.margin))


def _run_length_at(labels: np.ndarray) -> np.ndarray:
    """For each sample, how many samples its phase's run has lasted up to and including it."""
    n = len(labels)
    if n == 0:
        return np.empty(0, int)
    starts = np.r_[True, labels[1:] != labels[:-1]]
    start_idx = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    return np.arange(n) - start_idx + 1


def make_phase_policy(model, resources: Sequence[str], kind: str = "phase",
                      statistic: str = "mean+kstd", k: float = 2.0, margin: float = 0.0,
                      reader: str = "last", scope: str = "model",
                      proactive_mode: str = "worst-likely", threshold: float = 0.2):
    """A phase policy for ``resources`` from a fitted PhaseModel: the one constructor the
    evaluator and the operator share."""
    missing = [r for r in resources if r not in model.features_]
    if missing:
        raise ValueError(f"the model has no feature {missing[0]!r} (it has "
                         f"{', '.join(model.features_)})")
    idx = [model.features_.index(r) for r in resources]
    levels = phase_levels(model.phase_stats_, idx, statistic, k)
    if kind == "phase":
        return PhasePolicy(levels, margin, reader, scope, k)
    if kind == "phase-proactive":
        dwell = np.array([s["dwell"]["p90"] for s in model.phase_stats_])
        return PhaseProactive(levels, np.asarray(model.transitions_), dwell, margin,
                              proactive_mode, threshold, scope, k)
    raise ValueError(f"unknown phase policy kind {kind!r}")


# ----------------------------------------------------------------------------- VPA
@dataclass
class VpaPolicy:
    """The VPA recommender's target (the faithful re-implementation in ai4dl.policy.vpa), fed
    the execution's samples window by window.

    VPA aggregates per workload, so a pod starts from what earlier (and concurrent) pods of the
    same workload taught it: pass the workload's recommender ``state`` (from
    :meth:`new_state`) to carry it across executions, or replay a workload's executions
    together with :meth:`allocate_group`, which interleaves them in time order with one
    container state per pod, as VPA does (the evaluator does, per execution group). With no
    state, every execution starts cold: the first window gets the pod minimums, as a new VPA
    recommends before its first sample (in units other than cores and bytes, 0).

    ``scale`` maps each resource to VPA's native unit (cores, bytes) — for traces in percent or
    fractions, a factor putting values in the histograms' range; the pod minimums (25
    millicores, 250 MiB) only apply when the units are native (``native_units``). Memory usage
    above the target within a window counts as an OOM for later recommendations (the OOM
    bump), as the kubelet's OOM kill would tell VPA.
    """
    resources: tuple[str, ...] = ("cpu", "memory")
    scale: tuple[float, ...] = (1.0, 1.0)
    native_units: bool = True
    name: str = "vpa"
    needs_phases: bool = False
    uses_workload_state: bool = True

    def new_state(self):
        cfg = VpaConfig() if self.native_units else VpaConfig(pod_min_cpu_millicores=0.0,
                                                              pod_min_memory_mb=0.0)
        return VpaRecommender(cfg)

    def _recommend(self, rec, now: float, R: int) -> np.ndarray:
        r = rec.recommend(now)
        return np.array([r.target[res] / s for res, s in zip(self.resources, self.scale)][:R])

    def _feed(self, rec, usage: np.ndarray, t0: float, step: float, pod) -> None:
        times = t0 + step * np.arange(len(usage))
        for j, r in enumerate(self.resources):
            col = usage[:, j] * self.scale[j]
            if r == "cpu":
                rec.add_cpu_samples(times, col, container=pod)
            elif r == "memory":
                rec.add_memory_samples(times, col, container=pod)

    def allocate_group(self, usages, phases, window, initials, step, starts, pods,
                       state=None) -> list[np.ndarray]:
        """Rows for several executions of one workload sharing one recommender: events in
        time order — each window's recommendation at its start, each window's samples fed
        (under its pod's container) at its end, a feed before a recommendation at the same
        instant — so a pod sees exactly the samples of every pod of the workload up to now."""
        rec = state if state is not None else self.new_state()
        usages = [np.asarray(u, np.float64) for u in usages]
        mem = self.resources.index("memory") if "memory" in self.resources else None
        outs = [np.empty((n_rows(len(u), window), u.shape[1])) for u in usages]
        events = []
        for i, u in enumerate(usages):
            for w in range(len(outs[i])):
                t = starts[i] + w * window * step
                events.append((t, 1, i, w))
                n = len(u[w * window:(w + 1) * window])
                if n:
                    events.append((t + n * step, 0, i, w))
        events.sort(key=lambda e: (e[0], e[1], e[2], e[3]))
        for t, kind, i, w in events:
            u, pod = usages[i], pods[i]
            now = starts[i] + w * window * step
            if kind == 1:
                outs[i][w] = self._recommend(rec, now, u.shape[1])
                continue
            chunk = u[w * window:(w + 1) * window]
            self._feed(rec, chunk, now, step, pod)
            if mem is not None and chunk[:, mem].max() > outs[i][w, mem]:
                rec.record_oom(t, outs[i][w, mem] * self.scale[mem], container=pod)
        return outs

    def allocate(self, usage, phases, window, initial, step, state=None, t0: float = 0.0,
                 pod=None):
        return self.allocate_group([usage], [phases], window, [initial], step, [t0], [pod],
                                   state)[0]


# ----------------------------------------------------------------------------- per resource
@dataclass
class PerResource:
    """One policy per resource column (``auto`` may choose a different winner for cpu and
    memory): column j of the rows is column j of ``policies[j]``'s rows. Each distinct policy
    runs once."""
    policies: tuple
    name: str = "auto"

    @property
    def needs_phases(self) -> bool:
        return any(p.needs_phases for p in self.policies)

    @property
    def uses_workload_state(self) -> bool:
        return any(getattr(p, "uses_workload_state", False) for p in self.policies)

    def _distinct(self):
        seen: dict = {}
        for j, p in enumerate(self.policies):
            seen.setdefault(id(p), (p, []))[1].append(j)
        return list(seen.values())

    def new_state(self):
        return {id(p): p.new_state() for p, _ in self._distinct()
                if getattr(p, "uses_workload_state", False)}

    def allocate_group(self, usages, phases, window, initials, step, starts, pods, state=None):
        outs = [np.empty((n_rows(len(u), window), np.shape(u)[1])) for u in usages]
        state = self.new_state() if state is None else state
        for p, cols in self._distinct():
            if getattr(p, "uses_workload_state", False):
                rows = p.allocate_group(usages, phases, window, initials, step, starts, pods,
                                        state.get(id(p)))
            else:
                rows = [p.allocate(u, ph if p.needs_phases else None, window, init, step)
                        for u, ph, init in zip(usages, phases, initials)]
            for o, r in zip(outs, rows):
                o[:, cols] = r[:, cols]
        return outs

    def next_from_running(self, lasts, last_phases, owns):
        """(P, R): column j from ``policies[j]``, each distinct policy served once."""
        out = np.empty((len(lasts), lasts.shape[2]))
        done: dict = {}
        for j, p in enumerate(self.policies):
            if id(p) not in done:
                done[id(p)] = serve_next(p, lasts, last_phases if p.needs_phases else None,
                                         owns)
            out[:, j] = done[id(p)][:, j]
        return out

    def allocate(self, usage, phases, window, initial, step, state=None, t0: float = 0.0,
                 pod=None):
        return self.allocate_group([usage], [phases], window, [initial], step, [t0], [pod],
                                   state)[0]


@dataclass(frozen=True)
class Calibrated:
    """A policy whose rows after the cold start are multiplied by one factor per resource:
    what ``auto`` serves for a resource judged by windows at risk, so that the share of windows
    at risk it realises on the executions it was calibrated on is the objective
    (:func:`ai4dl.policy.auto.calibration_factor`). The cold-start row is the inner policy's
    (the admission level is sized for the first window separately)."""
    policy: object
    factors: tuple[float, ...]
    name: str = "calibrated"

    @property
    def needs_phases(self) -> bool:
        return bool(getattr(self.policy, "needs_phases", False))

    def next_from_running(self, lasts, last_phases, owns):
        """(P, R): the inner policy's, times the factors."""
        inner = self.policy
        return serve_next(inner, lasts, last_phases if inner.needs_phases else None,
                          owns) * np.asarray(self.factors, np.float64)[None, :]

    def allocate(self, usage, phases, window, initial, step):
        rows = np.array(self.policy.allocate(usage, phases, window, initial, step), np.float64)
        rows[1:] *= np.asarray(self.factors, np.float64)[None, :]
        return rows


# ----------------------------------------------------------------------------- declarations
#: VPA's native unit per resource and a typical usage in it (what usage in other units is
#: scaled to, see :func:`vpa_scale`; 2**30: a GiB).
NATIVE_UNIT = {"cpu": ("cores", 1.0), "memory": ("bytes", float(2 ** 30))}


def vpa_scale(resource: str, unit: str, usage: np.ndarray) -> tuple[float, bool]:
    """Factor into VPA's native unit, and whether the unit already is native."""
    native, typical = NATIVE_UNIT.get(resource, ("", 1.0))
    if unit == native:
        return 1.0, True
    positive = usage[usage > 0]
    return (typical / float(np.median(positive)) if len(positive) else 1.0), False


def _fit_vpa(inputs: FitInputs) -> VpaPolicy:
    """VPA scaled into its native units by the training executions fitted on (the pooled
    usage's median where a unit is not native)."""
    train, resources = inputs.train, tuple(inputs.resources)
    if train is None:
        units, pooled = ("",) * len(resources), np.ones((1, len(resources)))
    else:
        idx = inputs.indices
        units = tuple(train.units)
        pooled = (np.concatenate([train.usage[i] for i in idx]) if idx else
                  np.ones((1, len(resources))))
    scales = [vpa_scale(r, u, pooled[:, j]) for j, (r, u) in enumerate(zip(resources, units))]
    return VpaPolicy(resources=resources, scale=tuple(s for s, _ in scales),
                     native_units=all(n for _, n in scales))


def _fit_phase(kind: str):
    def fit(inputs: FitInputs):
        if inputs.model is None:
            raise ValueError(f"policy {kind!r} needs a phase model")
        return make_phase_policy(inputs.model, inputs.resources, kind, **inputs.options)
    return fit


def _serve_phase(kind: str):
    def serve(model, resources, window, options):
        return make_phase_policy(model, resources, kind, **options)
    return serve


def _fit_adaptive_stat(inputs: FitInputs) -> AdaptiveStat:
    return AdaptiveStat() if inputs.stat_k is None else AdaptiveStat(k=inputs.stat_k)


declare(Declared(
    Static.name, "reference", rank=0, build=lambda inputs: Static(), colour="tab:brown",
    figures=("execution", "risk"),
    summary="the initial request, never changed (the author's request)"))
declare(Declared(
    AdaptiveMax.name, "baseline", rank=10, build=lambda inputs: AdaptiveMax(),
    serve=lambda model, resources, window, options: AdaptiveMax(), crd=True, candidate=0,
    colour="tab:orange", figures=("execution", "risk"), baseline=True,
    reactive_reference=True, summary="the previous window's maximum"))
declare(Declared(
    AdaptiveStat.name, "baseline", rank=20, build=_fit_adaptive_stat,
    serve=lambda model, resources, window, options: AdaptiveStat(), crd=True, candidate=1,
    colour="tab:green", figures=("risk",), reactive_reference=True,
    summary="the previous window's mean + k·σ"))
declare(Declared(
    PhasePolicy.name, "phase", rank=30, build=_fit_phase(PhasePolicy.name),
    serve=_serve_phase(PhasePolicy.name), needs_phases=True, crd=True, candidate=4,
    colour="tab:blue", summary="the current phase's statistic"))
declare(Declared(
    PhaseProactive.name, "phase", rank=40, build=_fit_phase(PhaseProactive.name),
    serve=_serve_phase(PhaseProactive.name), needs_phases=True, crd=True, candidate=5,
    colour="tab:purple", summary="a forecast of the next window's phases"))
declare(Declared(
    VpaPolicy.name, "reference", rank=80, build=_fit_vpa, uses_training=True, candidate=6,
    colour="tab:red",
    figures=("execution", "risk"),
    summary="the VPA recommender's target (scored, never served)"))
declare(Declared(
    Oracle.name, "reference", rank=110, build=lambda inputs: Oracle(), colour="0.35",
    figures=("execution",), summary="each window's own maximum, known in advance"))
