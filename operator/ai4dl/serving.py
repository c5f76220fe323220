"""From a PhaseModel's spec and model to what is served: the one constructor the operator, the
trainer (which scores what the operator would serve) and the evaluator's ``auto`` call.

``spec.policy.kind``:

- ``auto`` (the default): the policy the trainer chose for this model on the PhaseModel's own
  recent executions (``policyChoice`` in the model document, per resource; it never chose one
  that lost to the reactive baseline). Before there is a model, or with a model that carries
  no choice (fitted before schema v2, or not by the trainer), the reactive baseline is served,
  under the same safety chain, so a fresh install sizes pods from its first window on;
- any other policy the CRD may name (ai4dl.policy.catalog), as its declaration serves it: a
  fitted table from the model document (the head-room tables, peak-risk), the phase
  statistics with the spec's statistic, k, margin, reader and scope, or a reactive policy
  (no model needed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ai4dl.quantity import parse_quantity
from ai4dl.crd_spec import PhaseModelSpec
from ai4dl.policy import catalog
from ai4dl.rules.objectives import Objective
from ai4dl.policy.policies import Calibrated, PerResource
from ai4dl.rules.safety import SafetyConfig
from ai4dl.method.traces import CANONICAL_UNITS

MANAGED = ("cpu", "memory")
NATIVE_UNITS = {"cpu": "cores", "memory": "bytes"}
#: What ``auto`` serves the phase policies with: the execution's own statistics (the scope
#: the trainer's choice scored; model-scope levels belong to other jobs' scale).
AUTO_PHASE_OPTIONS = {"scope": "execution"}


def managed_resources(model=None, spec: PhaseModelSpec | None = None) -> tuple[str, ...]:
    """cpu and memory, where the model (else the spec's features) has them in units a request
    can take."""
    if model is not None:
        names, units = model.features_, model.units_
    elif spec is not None:
        names = tuple(f.name for f in spec.features)
        units = tuple(f.unit if f.unit != "unknown" else CANONICAL_UNITS.get(f.name, "unknown")
                      for f in spec.features)
    else:
        raise ValueError("managed_resources needs a model or a spec")
    out = []
    for r in MANAGED:
        if r in names:
            unit = units[names.index(r)]
            if unit != NATIVE_UNITS[r]:
                raise ValueError(f"feature {r!r} is in {unit!r}; requests need "
                                 f"{NATIVE_UNITS[r]!r}")
            out.append(r)
    if not out:
        raise ValueError("neither a cpu nor a memory feature to provision from")
    return tuple(out)


def window_samples(spec: PhaseModelSpec) -> int:
    return max(1, spec.window_seconds // spec.step_seconds)


def target(spec: PhaseModelSpec) -> float:
    """The cpu fulfilment (``spec.policy.objectives.cpu.fulfilment``, else its older name
    ``targetFulfilment``): the single fulfilment of callers that predate per-resource
    objectives (the trainer's score, the head-room tables)."""
    return spec.policy.cpu_fulfilment


def objectives(spec: PhaseModelSpec, resources: Sequence[str]) -> tuple[Objective, ...]:
    """One :class:`~ai4dl.rules.objectives.Objective` per resource from
    ``spec.policy.objectives``: cpu a fulfilment of samples (with its optional bound on windows
    short), memory a bound on windows at risk, any other resource the cpu fulfilment."""
    obj = spec.policy.objectives
    out = []
    for r in resources:
        if r == "memory":
            out.append(Objective("memory", "risk", float(obj.memory.max_risk_windows)))
        elif r == "cpu":
            out.append(Objective("cpu", "fulfilment", spec.policy.cpu_fulfilment,
                                 obj.cpu.max_short_windows))
        else:
            out.append(Objective(r, "fulfilment", spec.policy.cpu_fulfilment))
    return tuple(out)


def safety_config(spec: PhaseModelSpec, resources: Sequence[str],
                  max_value: Mapping[str, float] | None = None) -> SafetyConfig:
    pol = spec.policy
    bounds = [pol.resources.get(r) for r in resources]
    floor = tuple(parse_quantity(b.floor) if b and b.floor else 0.0 for b in bounds)
    ceiling = tuple(parse_quantity(b.ceiling) if b and b.ceiling else np.inf for b in bounds)
    return SafetyConfig(floor=floor, ceiling=ceiling, max_increase=pol.max_increase,
                        max_decrease=pol.max_decrease, cooldown_windows=pol.cooldown_windows,
                        memory_margin=pol.memory_margin, min_change=pol.min_change,
                        memory_index=resources.index("memory") if "memory" in resources
                        else None,
                        max_value=tuple(float(max_value.get(r, np.inf)) for r in resources)
                        if max_value else None)


@dataclass
class Served:
    """The policy served for a PhaseModel, per resource, and why (one line for the status)."""
    policy: object
    names: tuple[str, ...]          # per resource
    resources: tuple[str, ...]
    reason: str
    baseline: bool = False          # the reactive baseline for want of a (chosen) model
    #: per resource, the first-window level the model's head-room tables learned (NaN: none);
    #: what a resource served by another policy starts with (set by served_policy)
    learned_cold_start: np.ndarray | None = None

    @property
    def needs_phases(self) -> bool:
        return bool(getattr(self.policy, "needs_phases", False))

    @property
    def cold_start(self) -> np.ndarray | None:
        """Per resource, the level a new pod's first window gets: learned from the training
        executions' first windows (the target quantile of their peaks) by the served head-room
        table, or by the model's stored tables where another policy is served (a reactive
        policy has nothing to go on before a pod's first window); NaN where there is none,
        None when no resource has one. The admission webhook sets it at pod creation."""
        pols = getattr(self.policy, "policies", None) or (self.policy,) * len(self.resources)
        learned = (self.learned_cold_start if self.learned_cold_start is not None
                   else np.full(len(self.resources), np.nan))
        # the fitted tables (head-room, peak-risk) carry their own first-window level
        out = np.array([p.cold_start_[j] if getattr(p, "cold_start_", None) is not None
                        else learned[j] for j, p in enumerate(pols)])
        return None if np.isnan(out).all() else out

    def summary(self) -> str:
        if len(set(self.names)) == 1:
            return self.names[0]
        return ", ".join(f"{r} {n}" for r, n in zip(self.resources, self.names))


def build(name: str, model, resources: Sequence[str], window: int,
          phase_options: dict | None = None):
    """A servable policy by name, for ``resources``, as its declaration serves it
    (:func:`ai4dl.policy.catalog.serve`: a fitted table from the model's document, checked
    against the PhaseModel's window)."""
    return catalog.serve(name, model, resources, window, phase_options)


def learned_cold_start(model, resources: Sequence[str], window: int) -> np.ndarray | None:
    """Per resource, the first-window level of the model's head-room tables fitted for this
    window (both tables learn the same one: the target quantile of the training executions'
    first-window peaks); None without such a table."""
    for table in getattr(model, "policy_tables_", None) or []:
        by_name = {r.resource: r.cold_start for r in table.resources}
        if table.window_samples == window and all(r in by_name for r in resources):
            return np.array([by_name[r] for r in resources], np.float64)
    return None


def served_policy(spec: PhaseModelSpec, model=None) -> Served:
    """What the operator serves for ``spec`` with ``model`` (None: no model yet). ValueError
    (one line) when it cannot be served."""
    served = _served_policy(spec, model)
    if model is not None:
        served.learned_cold_start = learned_cold_start(model, served.resources,
                                                       window_samples(spec))
    return served


def _served_policy(spec: PhaseModelSpec, model=None) -> Served:
    resources = managed_resources(model, spec)
    window = window_samples(spec)
    pol = spec.policy
    kind = pol.kind
    if kind == catalog.AUTO:
        choice = getattr(model, "policy_choice_", None) if model is not None else None
        if model is None or choice is None:
            why = ("no model yet" if model is None else
                   "the model carries no choice of policy (fitted before schema v2, or not by "
                   "the trainer)")
            baseline = catalog.baseline()
            return Served(build(baseline, None, resources, window), (baseline,) * len(resources),
                          resources, f"auto: {why}: serving the reactive baseline {baseline}",
                          True)
        winners = dict(zip(choice.resources, choice.winners))
        missing = [r for r in resources if r not in winners]
        if missing:
            raise ValueError(f"spec.model's policyChoice has no winner for {missing[0]}")
        # the choice (and a winner's calibration factor) was made for the window its tables
        # were fitted for, whichever policy won: served at another, its promise does not hold
        made_for = sorted({t.window_samples for t in getattr(model, "policy_tables_", None)
                           or []})
        if made_for and window not in made_for:
            raise ValueError(f"spec.model's policyChoice was made with tables fitted for windows "
                             f"of {made_for[0]} samples, the PhaseModel's window is {window} "
                             f"(windowSeconds / stepSeconds): retrain")
        factor = dict(zip(choice.resources, choice.factors()))
        built: dict = {}
        pols = []
        for j, r in enumerate(resources):
            w = winners[r]
            if w not in built:
                built[w] = build(w, model, resources, window, AUTO_PHASE_OPTIONS)
            pol = built[w]
            if factor[r] != 1.0:
                # calibrated for a share of windows at risk (auto.choose_policy)
                factors = np.ones(len(resources))
                factors[j] = factor[r]
                pol = Calibrated(pol, tuple(float(f) for f in factors), name=w)
            pols.append(pol)
        names = tuple(winners[r] for r in resources)
        at = ", ".join(
            f"{r} {100 * t:g} % of samples" if k == "fulfilment" else
            f"{r} ≤ {100 * t:g} % of windows at risk"
            for r, t, k in zip(choice.resources, choice.targets, choice.objective_kinds()))
        distinct = {id(p) for p in pols}
        served = Served(pols[0] if len(distinct) == 1 else PerResource(tuple(pols), name=catalog.AUTO),
                        names, resources, "")
        served.reason = (f"auto: {served.summary()} (won on the PhaseModel's own recent "
                         f"executions at {at})")
        return served
    options = {}
    if catalog.entry(kind).kind == "phase":
        # a phase policy's levels: the spec's statistic, k, margin, reader and scope
        options = {"statistic": pol.statistic, "k": pol.k, "margin": pol.margin,
                   "reader": pol.reader, "scope": pol.scope}
    policy = build(kind, model, resources, window, options)
    return Served(policy, (kind,) * len(resources), resources, f"{kind} (spec.policy.kind)")
