"""The evaluator: whole runs of the judge (:mod:`ai4dl.judge`) over a trace set. Split by
execution group, fit the phase model, the head-room tables and ``auto`` on the train side,
replay the held-out side through every policy and score it (allocation ÷ oracle at matched
fulfilment and at a matched share of windows at risk, ../shared/docs/evaluation.md); the
cold-start table; cross-fitting over folds; the replay of a served PhaseModel.

Each policy sees only what it could have seen (``Policy.allocate`` row w uses samples before
window w); the shared safety layer wraps every policy but the oracle (the yardstick). Pure core:
no I/O, no plotting.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ai4dl.errors import TraceError
from ai4dl.judge import (TARGETS, Replay, ReplayInput, ResourceScore, replay, score, serve,
                         served_matches)
from ai4dl.method.model import PhaseModel
from ai4dl.policy import catalog
from ai4dl.policy.auto import choose_policy
from ai4dl.policy.headroom_levels import first_window_level
from ai4dl.rules.objectives import RISKS, Objective, default_objective
from ai4dl.policy.policies import Oracle, Policy
from ai4dl.policy.registry import FitInputs
from ai4dl.rules.safety import SafetyConfig
from ai4dl.rules.workload_profile import Hold
from ai4dl.method.traces import Execution, TraceSet
from ai4dl.evaluation.starts import (StartCounts, initial_request, served_starts,  # noqa: F401
                                     trace_request)


#: Where an execution starts (:mod:`ai4dl.evaluation.starts`): ``served`` as the operator
#: serves a new pod; ``peak`` (clairvoyant), ``trace`` and ``model`` for every execution alike.
INITIALS = ("served", "peak", "trace", "model")


def prepare(executions: Sequence[Execution], resources: Sequence[str], model=None,
            initial: str = "peak", level: np.ndarray | None = None,
            starts: Sequence[np.ndarray] | None = None,
            holds: Sequence[Hold | None] | None = None) -> ReplayInput:
    """Usage matrices, phases (one batched detection for all executions) and initial requests:
    ``starts`` where given (``served``: :func:`execution_starts`), else the execution's peak,
    the trace's own request (``trace``), or ``level`` for every execution (``model``: the
    learned first-window level, as admission sets it). ``holds``: each execution's memory hold
    from its workload's profile (``served``), kept by the safety layer."""
    if initial not in INITIALS:
        raise ValueError(f"initial must be one of {', '.join(INITIALS)}")
    if initial == "model" and level is None:
        raise ValueError("initial 'model' needs the learned first-window level")
    if initial == "served" and starts is None:
        raise ValueError("initial 'served' needs each execution's start (execution_starts)")
    usage = [e.select(resources).values.astype(np.float64) for e in executions]
    phases: list = [None] * len(executions)
    if model is not None:
        phases = model.predict(list(executions))
    if starts is not None:
        init = [np.asarray(s, np.float64).copy() for s in starts]
    else:
        init = [u.max(0) if initial == "peak" else initial_request(e, u, resources)
                if initial == "trace" else np.asarray(level, np.float64).copy()
                for e, u in zip(executions, usage)]
    ex0 = executions[0]
    return ReplayInput([e.name for e in executions], usage, phases, init,
                       float(ex0.step or 0.0), tuple(resources),
                       tuple(ex0.select(resources).units), [e.group for e in executions],
                       [float(e.times[0]) if len(e) else 0.0 for e in executions],
                       list(holds) if holds is not None else [])


def execution_starts(cfg: "EvaluationConfig", executions: Sequence[Execution],
                     history: Sequence[Execution], level: np.ndarray | None
                     ) -> tuple[list[np.ndarray] | None, StartCounts | None, list | None]:
    """With ``cfg.initial`` ``served``: each execution's served start and their sources
    (:func:`ai4dl.evaluation.starts.served_starts`; ``history`` without duplicates), and their
    memory holds. Else (None, None, None): :func:`prepare` sets the start itself."""
    if cfg.initial != "served":
        return None, None, None
    seen = list({id(h): h for h in history}.values())
    return served_starts(executions, seen, cfg.resources, cfg.window, level, cfg.workload_by,
                         cfg.safety.max_increase if cfg.safety is not None else None)


# ----------------------------------------------------------------------------- the whole run
def fitted_per_target(names: Sequence[str]) -> list[str]:
    """Those of ``names`` fitted for a target (once per scored target, on the train side)."""
    return [n for n in names if catalog.entry(n).fitted_per_target]


def needs_phases(names: Sequence[str]) -> bool:
    """Whether any of ``names`` needs the phase model."""
    return any(catalog.entry(n).needs_phases for n in names)


@dataclass
class EvaluationConfig:
    resources: tuple[str, ...] = ("cpu", "memory")
    window: int = 40                       # samples: 10 min at 15 s
    test_fraction: float = 0.3
    seed: int = 0
    split_by: str = "group"                # what is held out whole: a group, or a meta key
    #: the policies scored (default: every declared one, ai4dl.policy.catalog)
    policies: tuple[str, ...] = field(default_factory=catalog.names)
    statistic: str = "mean+kstd"
    k: float = 2.0
    margin: float = 0.0
    reader: str = "last"
    phase_scope: str = "model"             # or "execution": see PhasePolicy
    proactive_mode: str = "worst-likely"
    proactive_threshold: float = 0.2
    vpa_prewarm: bool = True               # VPA carries each workload's (group's) history
    include_cold_start: bool = False
    #: where each execution starts (INITIALS); ``ai4dl evaluate``'s default is ``served``
    initial: str = "peak"
    #: what names a workload for ``served`` starts: the execution group, or a meta key
    workload_by: str = "group"
    safety: SafetyConfig | None = None
    targets: tuple[float, ...] = TARGETS
    #: shares of windows at risk reported (and the fitted policies fitted for): memory's view
    risks: tuple[float, ...] = RISKS
    auto_holdout: float = 0.3              # auto: share of (most recent) train executions held out


@dataclass
class EvaluationResult:
    config: EvaluationConfig
    data: ReplayInput                       # the held-out executions
    replays: dict[str, Replay]
    scores: dict[str, list[ResourceScore]]  # aggregate over held-out executions
    per_execution: list[dict[str, list[ResourceScore]]]
    n_train: int
    model: object | None
    train_data: ReplayInput | None = None   # the train side (with phases), when fitted on
    per_target: dict = field(default_factory=dict)   # fitted name -> target -> Replay
    auto: dict = field(default_factory=dict)         # target -> AutoChoice
    fitted: dict = field(default_factory=dict)       # fitted name -> target -> policy
    cold_start: list = field(default_factory=list)   # ColdStartScore rows (cold_start_scores)
    #: cross-fitting (:func:`run_cross_fitted`): per fold, auto's choice per target
    folds: list = field(default_factory=list)
    #: target -> the train side's learned first-window level (per resource)
    first_window_levels: dict = field(default_factory=dict)
    #: fitted name -> share of windows at risk -> Replay (fitted for that share; ``auto``:
    #: chosen under the served objectives with memory at that share)
    per_risk: dict = field(default_factory=dict)
    auto_risk: dict = field(default_factory=dict)    # share -> AutoChoice
    #: the policies' own rows before the safety layer (name -> Replay; fitted name -> share
    #: -> Replay): where a matched share of windows at risk puts its factor (the served order)
    own: dict = field(default_factory=dict)
    per_risk_own: dict = field(default_factory=dict)
    #: with ``initial`` ``served``: how many held-out executions started from each source
    starts: StartCounts | None = None


@dataclass
class ColdStartScore:
    """One way of sizing a new pod's first window (before anything was observed), scored over
    the held-out executions' first windows, for one resource."""
    source: str                 # request | static peak | model @ <target>
    resource: str
    executions: int             # first windows scored (executions where it is known)
    vs_oracle: float            # allocation ÷ the first windows' own maxima
    vs_request: float           # allocation ÷ the requests (nan: no request in the trace)
    fulfilment: float           # share of first-window samples with usage <= allocation
    short_windows: float        # share of first windows with any sample above it


def cold_start_scores(data: ReplayInput, requests: Sequence[np.ndarray], window: int,
                      levels: dict[float, np.ndarray], served: bool = False
                      ) -> list[ColdStartScore]:
    """The cold-start window (the first ``window`` samples of every held-out execution) sized
    three ways: the request the trace records (``requests``, NaN where none: AI4DL's
    cpu.num.cores / mem.limit; the row counts the executions that have one), the execution's
    static peak, and the learned first-window level of the train side at each target (what
    the admission webhook sets at pod creation); with ``served``, also the replay's own starts
    (``data.initial``: the workload's profile where it has one, the pooled level otherwise)."""
    first = [u[:window] for u in data.usage if len(u)]
    if not first:
        return []
    peaks = np.stack([f.max(0) for f in first])
    oracle = np.stack([f.max(0) * len(f) for f in first])          # allocation-time units
    n = np.array([len(f) for f in first], np.float64)[:, None]
    static = np.stack([u.max(0) for u in data.usage if len(u)])
    req = np.stack([np.asarray(r, np.float64) for r, u in zip(requests, data.usage) if len(u)])
    has_request = np.isfinite(req)
    sources = [("request", req), ("static peak", static)]
    # a level per resource (R,), or per execution (N, R) when folds learned different ones
    sources += [(f"model @ {100 * t:g} %", _per_execution(lv, data.usage))
                for t, lv in sorted(levels.items())]
    if served:
        sources.append(("served (workload profile, else pooled)",
                        np.stack([np.asarray(s, np.float64) for s, u in
                                  zip(data.initial, data.usage) if len(u)])))
    out = []
    for j, res in enumerate(data.resources):
        for name, alloc in sources:
            a = alloc[:, j]
            keep = has_request[:, j] if name == "request" else np.ones(len(a), bool)
            if not keep.any():
                continue
            u = [f[:, j] for f, k in zip(first, keep) if k]
            covered = sum(int(np.count_nonzero(x <= ai)) for x, ai in zip(u, a[keep]))
            total = int(sum(len(x) for x in u))
            with np.errstate(divide="ignore", invalid="ignore"):
                vs_req = (float((a[keep] * n[keep, 0]).sum() / (req[keep, j] * n[keep, 0]).sum())
                          if has_request[keep, j].all() else float("nan"))
            out.append(ColdStartScore(
                name, res, int(keep.sum()),
                float((a[keep] * n[keep, 0]).sum() / oracle[keep, j].sum())
                if oracle[keep, j].sum() > 0 else float("nan"),
                vs_req, covered / total if total else float("nan"),
                float(np.mean(peaks[keep, j] > a[keep]))))
    return out


def _per_execution(level: np.ndarray, usage: Sequence[np.ndarray]) -> np.ndarray:
    """(executions with samples, R): ``level`` as given per execution, or repeated."""
    lv = np.asarray(level, np.float64)
    keep = [i for i, u in enumerate(usage) if len(u)]
    if lv.ndim == 2:
        return lv[keep]
    return np.repeat(lv[None], len(keep), 0)


def phase_options(cfg: EvaluationConfig, scope: str | None = None) -> dict:
    """make_phase_policy's keywords from the config."""
    return dict(statistic=cfg.statistic, k=cfg.k, margin=cfg.margin, reader=cfg.reader,
                scope=cfg.phase_scope if scope is None else scope,
                proactive_mode=cfg.proactive_mode, threshold=cfg.proactive_threshold)


def build_policies(cfg: EvaluationConfig, model, train: ReplayInput | None,
                   target: float | None = None) -> list[Policy]:
    """The named policies (their declared constructors, ai4dl.policy.catalog), parameterised
    from the config and the fitted model; the fitted ones are fitted on ``train`` (with
    phases) for ``target`` (default: the first scored target). ``auto`` is not built here (see
    :func:`run_evaluation`)."""
    t = cfg.targets[0] if target is None else target
    inputs = FitInputs(train, cfg.window, tuple(cfg.resources), model, t, phase_options(cfg),
                       stat_k=cfg.k)
    return [catalog.build(name, inputs) for name in cfg.policies]


def primary(targets: Sequence[float]) -> float:
    """The target the raw columns of a fitted policy come from (95 % when scored)."""
    return 0.95 if 0.95 in targets else targets[0]


def run_evaluation(traces, cfg: EvaluationConfig, model=None, model_params: dict | None = None,
                   on_stage=None, split: tuple | None = None) -> EvaluationResult:
    """Split by execution group (seeded), fit the phase model on the train side only (unless
    one is given), fit the head-room tables and let ``auto`` choose on the train side only
    (once per scored target), replay the test side through every policy and score it.
    ``split``: (train, test) given instead (the folds of :func:`run_cross_fitted`)."""
    say = on_stage or (lambda msg: None)
    needs_model = needs_phases(cfg.policies)
    if split is not None:
        train, test = split
    elif cfg.test_fraction > 0:
        train, test = traces.split_by_group(cfg.test_fraction, cfg.seed, cfg.split_by)
    else:
        train, test = traces, traces
    if needs_model and model is None:
        say(f"fitting the phase model on {len(train)} train executions")
        model = PhaseModel(random_state=cfg.seed, **(model_params or {})).fit(train)
    say(f"replaying {len(test)} held-out executions")
    train_usage = [e.select(cfg.resources).values.astype(np.float64) for e in train]
    # the learned first-window level at each target (the cold start; admission's level)
    levels = {t: first_window_level(train_usage, cfg.window, t) for t in cfg.targets}
    level = levels[max(cfg.targets)]
    # the replay's past: the train side and the held-out side (a held-out execution's own
    # workload may have run before it on either); the train side's fits see only their side
    starts, counts, holds = execution_starts(cfg, list(test), [*train, *test], level)
    data = prepare(list(test), cfg.resources, model if needs_model else None, cfg.initial,
                   level, starts, holds)
    fitted_names = fitted_per_target(cfg.policies)
    train_data = None
    if any(catalog.entry(p).uses_training for p in cfg.policies):
        train_starts, _, train_holds = execution_starts(cfg, list(train), list(train), level)
        train_data = prepare(list(train), cfg.resources, model if needs_model else None,
                             cfg.initial, level, train_starts, train_holds)
    plain = dataclasses.replace(cfg, policies=tuple(p for p in cfg.policies
                                                    if p not in fitted_names))
    policies = build_policies(plain, model, train_data)
    if Oracle.name not in cfg.policies:
        policies.append(Oracle())
    replays, own = {}, {}
    for p in policies:
        say(f"policy {p.name}")
        own[p.name] = replay(data, p, cfg.window, None, cfg.vpa_prewarm)
        replays[p.name] = serve(data, own[p.name], cfg.window, cfg.safety)
    per_target, autos, fitted = _fit_per_target(cfg, fitted_names, train_data, data, model,
                                                say)
    for name in fitted_names:
        replays[name] = per_target[name][primary(cfg.targets)]
    per_risk_own, auto_risk = _fit_for_risks(cfg, fitted_names, train_data, data, model, say)
    per_risk = {n: {s: serve(data, r, cfg.window, cfg.safety) for s, r in by.items()}
                for n, by in per_risk_own.items()}
    # a policy fitted per target has no own rows at the other shares: matched as served there
    judged = dict(safety=cfg.safety, own=own, per_risk_own=per_risk_own)
    scores = score(data, replays, cfg.window, cfg.include_cold_start, cfg.targets,
                   per_target=per_target, risks=cfg.risks, per_risk=per_risk, **judged)
    matches = (served_matches(data, own, cfg.window, range(len(cfg.resources)), cfg.risks,
                              cfg.safety, per_risk_own, cfg.include_cold_start)
               if cfg.safety is not None else None)
    per_exec = [score(data, replays, cfg.window, cfg.include_cold_start, cfg.targets, only=[i],
                      per_target=per_target, risks=cfg.risks, per_risk=per_risk,
                      matches=matches, **judged)
                for i in range(len(data.usage))]
    cold = cold_start_scores(data, [trace_request(e, cfg.resources) for e in test], cfg.window,
                             levels, cfg.initial == "served")
    return EvaluationResult(cfg, data, replays, scores, per_exec, len(train), model,
                            train_data, per_target, autos, fitted, cold,
                            first_window_levels=levels, per_risk=per_risk, auto_risk=auto_risk,
                            own=own, per_risk_own=per_risk_own, starts=counts)


def _fit_per_target(cfg: EvaluationConfig, fitted_names: Sequence[str], train_data, data,
                    model, say) -> tuple[dict, dict, dict]:
    """The policies fitted for a target, fitted on the train side once per scored target and
    replayed on the held-out side. Returns (name -> target -> Replay, target -> AutoChoice,
    name -> target -> policy)."""
    per_target: dict = {}
    autos: dict = {}
    fitted: dict = {}
    for name in fitted_names:
        for t in cfg.targets:
            say(f"policy {name}: fitting for {100 * t:g} % on the train side")
            pol, choice = _fitted(cfg, name, train_data, model, t, t)
            if choice is not None:
                autos[t] = choice
                say(f"auto at {100 * t:g} %: {choice.reason}")
            fitted.setdefault(name, {})[t] = pol
            per_target.setdefault(name, {})[t] = replay(data, pol, cfg.window, cfg.safety,
                                                        cfg.vpa_prewarm)
    return per_target, autos, fitted


def _fitted(cfg: EvaluationConfig, name: str, train_data, model, target: float, objectives
            ) -> tuple[Policy, object | None]:
    """``name`` fitted on the train side: (the policy, ``auto``'s choice or None). ``auto`` is
    chosen under ``objectives``; any other is fitted for ``target``."""
    if name == catalog.AUTO:
        choice = choose_policy(train_data, cfg.window, model, objectives,
                               holdout=cfg.auto_holdout,
                               phase_options=phase_options(cfg, "execution"),
                               safety=cfg.safety)
        return choice.policy, choice
    return build_policies(dataclasses.replace(cfg, policies=(name,)), model, train_data,
                          target)[0], None


def risk_objectives(resources: Sequence[str], share: float) -> dict:
    """The served objectives with memory's share of windows at risk set to ``share``: what
    ``auto`` is chosen under in the evaluator's risk view (cpu keeps its default fulfilment)."""
    return {r: Objective(r, "risk", share) if r == "memory" else default_objective(r)
            for r in resources}


def _fit_for_risks(cfg: EvaluationConfig, fitted_names, train_data, data, model, say):
    """Per share of windows at risk, the fitted policies fitted for it (the head-room tables
    at the fulfilment 1 − share, their nearest sample objective) and ``auto`` chosen under the
    served objectives with memory at that share: name -> share -> Replay of the policy's own
    rows (before the safety layer), share -> choice."""

    per_risk: dict = {}
    autos: dict = {}
    for name in fitted_names:
        for share in cfg.risks:
            say(f"policy {name}: fitting for {100 * share:g} % of windows at risk")
            pol, choice = _fitted(cfg, name, train_data, model, 1.0 - share,
                                  risk_objectives(cfg.resources, share)
                                  if name == catalog.AUTO else None)
            if choice is not None:
                autos[share] = choice
            per_risk.setdefault(name, {})[share] = replay(data, pol, cfg.window, None,
                                                          cfg.vpa_prewarm)
    return per_risk, autos


# ----------------------------------------------------------------------------- cross-fitting
def fold_splits(traces, folds: int, seed: int = 0) -> list[tuple]:
    """``folds`` (train, test) splits by execution group (seeded): every group is on the test
    side of exactly one fold, and never on both sides of one."""
    groups = np.array(traces.groups(), dtype=object)
    if folds < 2:
        raise ValueError(f"cross-fitting needs at least 2 folds, got {folds}")
    if len(groups) < folds:
        raise TraceError(f"cannot cross-fit {len(groups)} execution group(s) in {folds} folds",
                         path=traces.source or None)
    rng = np.random.default_rng(seed)
    rng.shuffle(groups)
    out = []
    for k in range(folds):
        held = set(groups[k::folds])
        train = [e for e in traces if e.group not in held]
        test = [e for e in traces if e.group in held]
        out.append((TraceSet(train, source=traces.source), TraceSet(test, source=traces.source)))
    return out


def _concat_inputs(parts: Sequence[ReplayInput]) -> ReplayInput:
    first = parts[0]
    return ReplayInput([n for p in parts for n in p.names], [u for p in parts for u in p.usage],
                       [x for p in parts for x in p.phases],
                       [x for p in parts for x in p.initial], first.step, first.resources,
                       first.units, [g for p in parts for g in p.groups],
                       [t for p in parts for t in p.starts],
                       [h for p in parts for h in (p.holds or [None] * len(p.names))])


def merge_results(parts: Sequence[EvaluationResult], levels: dict | None = None,
                  requests: Sequence[np.ndarray] | None = None) -> EvaluationResult:
    """One result from the folds of a cross-fitting: every fold's held-out executions
    (each replayed by what its own fold fitted), scored together. ``levels`` (target ->
    (executions, R) learned first-window levels) and ``requests`` give the cold-start table."""
    cfg = parts[0].config
    data = _concat_inputs([p.data for p in parts])
    replays = {name: Replay(name, [a for p in parts for a in p.replays[name].allocations])
               for name in parts[0].replays}
    per_target = {name: {t: Replay(name, [a for p in parts for a in p.per_target[name][t]
                                          .allocations]) for t in by_t}
                  for name, by_t in parts[0].per_target.items()}
    per_risk = {name: {s: Replay(name, [a for p in parts for a in p.per_risk[name][s]
                                        .allocations]) for s in by_s}
                for name, by_s in parts[0].per_risk.items()}
    own = {name: Replay(name, [a for p in parts for a in p.own[name].allocations])
           for name in parts[0].own}
    per_risk_own = {name: {s: Replay(name, [a for p in parts
                                            for a in p.per_risk_own[name][s].allocations])
                           for s in by_s}
                    for name, by_s in parts[0].per_risk_own.items()}
    scores = score(data, replays, cfg.window, cfg.include_cold_start, cfg.targets,
                   per_target=per_target, risks=cfg.risks, per_risk=per_risk,
                   safety=cfg.safety, own=own, per_risk_own=per_risk_own)
    cold = (cold_start_scores(data, requests, cfg.window, levels, cfg.initial == "served")
            if levels is not None and requests is not None else [])
    return EvaluationResult(cfg, data, replays, scores,
                            [x for p in parts for x in p.per_execution],
                            int(round(np.mean([p.n_train for p in parts]))), parts[0].model,
                            None, per_target, {}, {}, cold, [p.auto for p in parts],
                            per_risk=per_risk, own=own, per_risk_own=per_risk_own,
                            starts=_summed_starts([p.starts for p in parts]))


def _summed_starts(parts: Sequence[StartCounts | None]) -> StartCounts | None:
    """The folds' start counts added up (None when no fold had served starts)."""
    got = [p for p in parts if p is not None]
    if not got:
        return None
    return StartCounts(tuple((s, sum(p.get(s) for p in got)) for s, _ in got[0].counts))


def run_cross_fitted(traces, cfg: EvaluationConfig, folds: int = 2,
                     model_params: dict | None = None, on_stage=None) -> EvaluationResult:
    """Every execution replayed by a model, head-room tables and ``auto`` choice fitted on the
    other folds only (``folds`` splits by group): a replay of *all* the workloads that never
    scores a policy on what it was fitted on (what ``ai4dl evaluate --prometheus`` reports
    per workload)."""
    say = on_stage or (lambda msg: None)
    parts, levels, requests = [], {t: [] for t in cfg.targets}, []
    for k, (train, test) in enumerate(fold_splits(traces, folds, cfg.seed)):
        say(f"fold {k + 1} of {folds}: fit on {len(train)} executions, replay {len(test)}")
        part = run_evaluation(traces, cfg, model_params=model_params, on_stage=say,
                              split=(train, test))
        parts.append(part)
        for t in cfg.targets:     # each held-out execution with its own fold's level
            levels[t].extend(part.first_window_levels[t] for _ in test)
        requests.extend(trace_request(e, cfg.resources) for e in test)
    return merge_results(parts, {t: np.array(v) for t, v in levels.items()}, requests)


def run_served(traces, cfg: EvaluationConfig, policy: Policy, name: str, model=None,
               level: np.ndarray | None = None, on_stage=None) -> EvaluationResult:
    """Every execution replayed, without any fit, through ``policy`` (a PhaseModel's served
    policy, reported as ``name``) and the policies of ``cfg`` that need no fitting (the
    reactive ones, VPA, static, the oracle). What ``ai4dl evaluate --phasemodel`` reports:
    that PhaseModel's model, tables and choice as the operator would serve them. ``level``: the
    first-window level of ``initial`` ``model`` (the served policy's cold start)."""
    got = replay_served(traces, cfg, policy, name, model, level, on_stage)
    cfg, data = got.config, got.data
    replays, own = got.replays, got.own
    judged = dict(safety=cfg.safety, own=own)
    scores = score(data, replays, cfg.window, cfg.include_cold_start, cfg.targets, **judged)
    matches = (served_matches(data, own, cfg.window, range(len(cfg.resources)), RISKS,
                              cfg.safety, None, cfg.include_cold_start)
               if cfg.safety is not None else None)
    per_exec = [score(data, replays, cfg.window, cfg.include_cold_start, cfg.targets, only=[i],
                      matches=matches, **judged)
                for i in range(len(data.usage))]
    return dataclasses.replace(got, scores=scores, per_execution=per_exec)


def replay_served(traces, cfg: EvaluationConfig, policy: Policy | None, name: str,
                  model=None, level: np.ndarray | None = None, on_stage=None
                  ) -> EvaluationResult:
    """:func:`run_served`'s replay without its scores (``scores`` and ``per_execution``
    empty): every policy's served and own rows. ``policy`` None: only the policies that need
    no fitting (a cluster's replay without a PhaseModel). A replay partitioned by workload
    (:mod:`ai4dl.evaluation.partitioned`) scores its pieces itself."""
    say = on_stage or (lambda msg: None)
    plain = tuple(p for p in cfg.policies if not catalog.entry(p).fitted_per_target
                  and not catalog.entry(p).needs_phases)
    cfg = dataclasses.replace(cfg, policies=(*plain, name) if policy is not None else plain,
                              test_fraction=0.0)
    needs = bool(getattr(policy, "needs_phases", False))
    starts, counts, holds = execution_starts(cfg, list(traces), list(traces), level)
    data = prepare(list(traces), cfg.resources, model if needs else None, cfg.initial, level,
                   starts, holds)
    policies = build_policies(dataclasses.replace(cfg, policies=plain), None, data)
    if Oracle.name not in plain:
        policies.append(Oracle())
    replays, own = {}, {}
    for p in (*policies, *([policy] if policy is not None else [])):
        label = name if p is policy else p.name
        say(f"policy {label}")
        rep = replay(data, p, cfg.window, None, cfg.vpa_prewarm)
        own[label] = Replay(label, rep.allocations)
        replays[label] = Replay(label, serve(data, rep, cfg.window, cfg.safety).allocations)
    return EvaluationResult(cfg, data, replays, {}, [], 0, model, own=own, starts=counts)
