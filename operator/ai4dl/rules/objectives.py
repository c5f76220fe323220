"""What a policy is asked to achieve, per resource (../shared/docs/evaluation.md).

CPU is compressible: a sample above the request is throttled time, so its objective is a share
of samples covered (``fulfilment``, default 97 %), optionally with a bound on the share of
windows with any sample above the request (``max_short_windows``). Memory is not: a window in
which the container uses more than its request is a window in which it may be evicted or, at a
Guaranteed pod's limit, OOM-killed, however few samples exceed. Its objective is a bound on the
share of *windows at risk* (``risk``, default 1 %).

Pure: no I/O, no imports from the evaluator or the policies (everything above may import it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

KINDS = ("fulfilment", "risk")
#: Defaults: what ``spec.policy.objectives`` gives when it says nothing.
DEFAULT_CPU_FULFILMENT = 0.97
DEFAULT_MEMORY_RISK = 0.01
#: The shares of windows at risk the evaluator reports memory (and, as a second view, cpu) at.
RISKS = (0.01, 0.02, 0.05)


@dataclass(frozen=True)
class Objective:
    """One resource's objective.

    ``kind`` ``fulfilment``: at least ``value`` of the samples at or below the allocation
    (and, when ``max_short_windows`` is set, at most that share of windows with any sample
    above it). ``kind`` ``risk``: at most ``value`` of the windows with any sample above the
    allocation."""
    resource: str
    kind: str
    value: float
    max_short_windows: float | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"objective kind must be one of {', '.join(KINDS)}, "
                             f"not {self.kind!r}")
        if not (isinstance(self.value, (int, float)) and 0.0 < float(self.value) < 1.0):
            raise ValueError(f"{self.resource}: objective {self.kind} must be in (0, 1), "
                             f"got {self.value!r}")
        if self.max_short_windows is not None:
            if self.kind != "fulfilment":
                raise ValueError(f"{self.resource}: max_short_windows goes with a fulfilment "
                                 f"objective")
            if not 0.0 < float(self.max_short_windows) < 1.0:
                raise ValueError(f"{self.resource}: max_short_windows must be in (0, 1), got "
                                 f"{self.max_short_windows!r}")

    @property
    def is_risk(self) -> bool:
        return self.kind == "risk"

    @property
    def quantile(self) -> float:
        """The share the fit covers: the fulfilment, or 1 − the risk (what the head-room
        tables and the cold-start level are fitted for)."""
        return float(self.value) if self.kind == "fulfilment" else 1.0 - float(self.value)

    def label(self) -> str:
        if self.kind == "risk":
            return f"≤ {100 * self.value:g} % of windows at risk"
        extra = (f", ≤ {100 * self.max_short_windows:g} % of windows short"
                 if self.max_short_windows is not None else "")
        return f"{100 * self.value:g} % of samples{extra}"

    def as_dict(self) -> dict:
        out = {"resource": self.resource, "kind": self.kind, "value": float(self.value)}
        if self.max_short_windows is not None:
            out["maxShortWindows"] = float(self.max_short_windows)
        return out


def default_objective(resource: str, fulfilment: float | None = None) -> Objective:
    """Memory: at most 1 % of windows at risk. Anything else: ``fulfilment`` of the samples
    (default 97 %)."""
    if resource == "memory":
        return Objective("memory", "risk", DEFAULT_MEMORY_RISK)
    return Objective(resource, "fulfilment",
                     DEFAULT_CPU_FULFILMENT if fulfilment is None else float(fulfilment))


def resolve(target, resources: Sequence[str]) -> tuple[Objective, ...]:
    """One :class:`Objective` per resource from what callers pass as a target:

    - a float: a fulfilment for every resource (the pre-objectives meaning of a target);
    - a sequence: one float or Objective per resource;
    - a mapping resource -> float or Objective;
    - None: the defaults (:func:`default_objective`)."""
    def one(r: str, t) -> Objective:
        if isinstance(t, Objective):
            if t.resource != r:
                raise ValueError(f"objective for {t.resource!r} given for resource {r!r}")
            return t
        if t is None:
            return default_objective(r)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or math.isnan(float(t)):
            raise ValueError(f"{r}: not a target: {t!r}")
        if not 0.0 < float(t) < 1.0:
            raise ValueError(f"target fulfilment must be in (0, 1), got {float(t):g}")
        return Objective(r, "fulfilment", float(t))

    resources = tuple(resources)
    if isinstance(target, (bool, str)):
        raise ValueError(f"not a target: {target!r}")
    if target is None:
        return tuple(default_objective(r) for r in resources)
    if isinstance(target, (int, float, Objective)) and not isinstance(target, bool):
        if isinstance(target, Objective):
            return tuple(one(r, target if target.resource == r else None) for r in resources)
        return tuple(one(r, target) for r in resources)
    if isinstance(target, Mapping):
        missing = [r for r in resources if r not in target]
        if missing:
            raise ValueError(f"no target fulfilment for resource {missing[0]!r}")
        return tuple(one(r, target[r]) for r in resources)
    items = list(target)
    if len(items) != len(resources):
        raise ValueError(f"{len(items)} targets for {len(resources)} resources")
    return tuple(one(r, t) for r, t in zip(resources, items))
