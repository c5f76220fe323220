"""Where each policy declares itself, once, in its own module (as scikit-learn registers its
scorers): its name, its kind, how it is built from training executions, how it is served from
a model document, its fitted table there, whether a PhaseModel may name it.

Everything that lists policies reads this registry (:mod:`ai4dl.policy.catalog`): the CRD's
``spec.policy.kind`` enum and the model document's ``policyChoice`` winners, the evaluator's
``--policies``, ``auto``'s candidates, the operator's serving, the figures and reports. How a
policy serves the next window from running statistics is its own method,
``next_from_running(lasts, last_phases, owns)`` (:mod:`ai4dl.policy.online`).

This module imports nothing from the package: the policy modules import it to declare.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

#: baseline: reactive, needs no model; phase: reads the phase model's levels; fitted: learned
#: on training executions for an objective; reference: scored for the record, never served.
KINDS = ("baseline", "phase", "fitted", "reference")


@dataclass(frozen=True)
class FitInputs:
    """What a policy is built from, by the evaluator and by ``auto`` alike."""
    train: object | None                # ai4dl.judge.ReplayInput of the training executions
    window: int                         # samples per window
    resources: tuple[str, ...]
    model: object | None = None         # the fitted PhaseModel (phase and phase-fitted ones)
    target: float = 0.97                # fulfilment, or the share of windows covered (1 − risk)
    #: the phase policies' parameters (ai4dl.policy.policies.make_phase_policy's keywords)
    options: Mapping = field(default_factory=dict)
    only: Sequence[int] | None = None   # the training executions fitted on (None: all)
    stat_k: float | None = None         # adaptive-stat's k (None: its default)

    @property
    def indices(self) -> list[int]:
        """The training executions fitted on: ``only``, else all of ``train``'s."""
        return list(range(len(self.train.usage))) if self.only is None else list(self.only)


@dataclass(frozen=True)
class StoredTable:
    """Where a fitted policy keeps its table in the model document, and how it is rebuilt."""
    document_key: str                   # e.g. "policyTables"
    attribute: str                      # the fitted PhaseModel's attribute holding them
    from_table: Callable[[object], object]


@dataclass(frozen=True)
class Declared:
    """One policy, declared by its module."""
    name: str
    kind: str                           # one of KINDS
    rank: int                           # where it stands in tables and the default list
    build: Callable[[FitInputs], object]
    summary: str = ""
    needs_phases: bool = False          # needs the phase model (the evaluator fits one)
    phase_optional: bool = False        # ... but fits phase-blind where there is none
    uses_training: bool = False         # built from the training executions
    fitted_per_target: bool = False     # the evaluator fits it once per scored target
    #: what ``auto`` fits it for: None (the same for every objective), "objective" (each
    #: objective's quantile), "risk" (a share of windows at risk only; it calibrates itself)
    fitted_for: str | None = None
    crd: bool = False                   # a PhaseModel's spec.policy.kind may name it
    #: served from a model document: (model, resources, window, options) -> policy; with
    #: ``table`` set and no ``serve``, rebuilt from its stored table
    serve: Callable | None = None
    table: StoredTable | None = None
    candidate: int | None = None        # auto's order (ties go to the earlier); None: never
    colour: str = "tab:gray"
    #: which figures draw it: "execution" (an execution's allocations), "risk" (cost vs risk)
    figures: tuple[str, ...] = ()
    baseline: bool = False              # the reactive baseline every choice must beat
    reactive_reference: bool = False    # a verdict's reference (the reactive policies)

    @property
    def servable(self) -> bool:
        """Served window by window by the operator (a ``policyChoice`` winner may name it)."""
        return self.serve is not None or self.table is not None


_DECLARED: dict[str, Declared] = {}


def declare(entry: Declared) -> Declared:
    """Add ``entry`` (a module calls this once per policy it defines); ValueError when the
    name is taken or the kind unknown."""
    if entry.kind not in KINDS:
        raise ValueError(f"policy {entry.name!r}: kind must be one of {', '.join(KINDS)}")
    if entry.name in _DECLARED and _DECLARED[entry.name] is not entry:
        raise ValueError(f"policy {entry.name!r} is declared twice")
    _DECLARED[entry.name] = entry
    return entry


def lookup(name: str) -> Declared | None:
    """The declaration of ``name``, or None."""
    return _DECLARED.get(name)


def withdraw(name: str) -> None:
    """Remove a declaration (a plug-in's or a test's own)."""
    _DECLARED.pop(name, None)


def declared_entries() -> list[Declared]:
    """Every declaration, in rank order (then name)."""
    return sorted(_DECLARED.values(), key=lambda e: (e.rank, e.name))
