"""The policies there are, read from their declarations (:mod:`ai4dl.policy.registry`): the
one place the CRD, the model document, the evaluator, ``auto``, the operator's serving, the
figures and the reports take their lists from. Importing this module declares every built-in
policy (their modules, imported below); a plug-in declares its own with
:func:`ai4dl.policy.registry.declare` and is listed from then on.

``auto`` is declared here: it is the catalogue's own chooser
(:func:`ai4dl.policy.auto.choose_policy` picks among :func:`candidates` per resource), not a
policy of one module.
"""

from __future__ import annotations

from typing import Sequence

from ai4dl.policy import headroom, krr, peak, policies
from ai4dl.policy.registry import Declared, FitInputs, declare, declared_entries, lookup

#: The modules whose import declares the built-in policies (besides ``auto``, below).
BUILT_IN = (policies, headroom, peak, krr)
#: The name a PhaseModel's spec gives to "the policy the trainer chose".
AUTO = "auto"


def _chosen_per_target(inputs: FitInputs):
    raise ValueError("policy 'auto' is chosen per target (ai4dl.policy.auto.choose_policy)")


declare(Declared(
    AUTO, "fitted", rank=100, build=_chosen_per_target, needs_phases=True, uses_training=True,
    fitted_per_target=True, crd=True, colour="tab:pink", figures=("execution", "risk"),
    summary="the candidate that won on the PhaseModel's own recent executions, per resource"))


def entry(name: str) -> Declared:
    """The declaration of ``name``; ValueError (one line, naming the known ones) otherwise."""
    e = lookup(name)
    if e is None:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(names())})")
    return e


def names(*, figure: str | None = None, **attributes) -> tuple[str, ...]:
    """The declared names in rank order, those whose attributes (of
    :class:`~ai4dl.policy.registry.Declared`: ``crd=True``, ``kind="fitted"``...) equal every
    one given, and that ``figure`` draws."""
    return tuple(e.name for e in declared_entries()
                 if all(getattr(e, k) == v for k, v in attributes.items())
                 and (figure is None or figure in e.figures))


def candidates() -> tuple[str, ...]:
    """What ``auto`` considers, in the order ties are broken (the baseline first)."""
    ranked = sorted((e for e in declared_entries() if e.candidate is not None),
                    key=lambda e: (e.candidate, e.name))
    return tuple(e.name for e in ranked)


def servable() -> tuple[str, ...]:
    """What the operator can serve window by window: the servable candidates in ``auto``'s
    order, then any other servable policy in rank order."""
    first = [n for n in candidates() if entry(n).servable]
    return tuple(first + [n for n in names(servable=True) if n not in first])


def baseline() -> str:
    """The reactive baseline: what ``auto`` serves until a candidate beats it."""
    return next(e.name for e in declared_entries() if e.baseline)


def reactive_references() -> tuple[str, ...]:
    """The reactive policies a verdict compares with."""
    return tuple(e.name for e in declared_entries() if e.reactive_reference)


def colours() -> dict[str, str]:
    return {e.name: e.colour for e in declared_entries()}


def build(name: str, inputs: FitInputs):
    """Policy ``name`` built from training executions (the evaluator's and ``auto``'s one
    constructor)."""
    return entry(name).build(inputs)


def serve(name: str, model, resources: Sequence[str], window: int,
          options: dict | None = None):
    """Policy ``name`` as served from a PhaseModel's model document (``model``: the fitted
    PhaseModel, None before one exists). ValueError (one line) when it cannot be served."""
    e = lookup(name)
    if e is None or not e.servable:
        raise ValueError(f"policy {name!r} cannot be served")
    if e.kind != "baseline" and model is None:
        raise ValueError(f"policy {name} needs a model: spec.model is empty (train one first)")
    if e.serve is not None:
        return e.serve(model, tuple(resources), window, options or {})
    return stored_table(model, e, resources, window)


def stored_table(model, e: Declared, resources: Sequence[str], window: int):
    """Policy ``e`` rebuilt from its fitted table in ``model``'s document, checked against the
    PhaseModel's resources and window."""
    t = e.table
    table = next((x for x in getattr(model, t.attribute, None) or [] if x.name == e.name), None)
    if table is None:
        raise ValueError(f"spec.model has no {e.name} table ({t.document_key}): retrain, or "
                         f"choose another spec.policy.kind")
    pol = t.from_table(table)
    if tuple(pol.resources_) != tuple(resources):
        raise ValueError(f"spec.model's {e.name} table is for {', '.join(pol.resources_)}, "
                         f"the PhaseModel manages {', '.join(resources)}")
    if pol.window_ != window:
        raise ValueError(f"spec.model's {e.name} table was fitted for windows of "
                         f"{pol.window_} samples, the PhaseModel's window is {window} "
                         f"(windowSeconds / stepSeconds): retrain")
    return pol


def choice_problem(doc) -> str | None:
    """What is wrong with a model document's ``policyChoice`` (a
    :class:`~ai4dl.method.document.PhaseModelDocument`), one line, or None: a winner no policy
    serves, or one served from a table the document does not hold for its resource."""
    choice = getattr(doc, "policy_choice", None)
    if choice is None:
        return None
    for res, w in zip(choice.resources, choice.winners):
        e = lookup(w)
        if e is None or not e.servable:
            return (f"policyChoice: {res} is served by {w!r}, which no policy serves "
                    f"(servable: {', '.join(servable())})")
        if e.table is None:
            continue
        held = {r.resource for t in getattr(doc, _field(e.table.document_key)) or []
                if t.name == w for r in t.resources}
        if res not in held:
            return (f"policyChoice: {res} is served by {w}, but {e.table.document_key} has no "
                    f"{w} table for it")
    return None


def _field(document_key: str) -> str:
    """The document model's attribute of a camelCase key (policyTables -> policy_tables)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in document_key)
