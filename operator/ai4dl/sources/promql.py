"""Confinement of a PhaseModel's PromQL templates to its own pods (issue 26).

A feature's query is a template (``{selector}``: the label matchers the operator fills in,
``{rate_window}``: a duration). Sent as written, a template could read any namespace's series
and relabel them onto the PhaseModel's own pods, so a namespace owner could be sized from
another tenant's usage (and read it back in the pod's annotations). :func:`check_template`
refuses a template unless EVERY vector and matrix selector in it carries ``{selector}``: the
operator's own ``namespace="<the PhaseModel's namespace>"`` and pod/container matchers,
ANDed with whatever else the selector says (which can only narrow it).

How: the template is rendered with a selector of matchers holding a random token no template
can spell in advance, parsed by ``promql_parser`` (the Prometheus grammar, not a hand-written
parser), and every selector of the AST must hold those matchers, as such (not inside an ``or``
of matchers). Besides, ``offset`` and ``@`` are refused (they read other times than the window
the operator asked for: never what a feature of a window means), and a template must read at
least one selector (a constant relabelled onto pods would be usage made up).

Rendering the real selector gives the same AST as the probe: the real matchers' values (DNS
names, an alternation of regex-escaped pod names) are string literals exactly where the
token's are, so what is checked is what is sent.
"""

from __future__ import annotations

import secrets

#: Duration put in for ``{rate_window}`` when a template is checked.
_PROBE_RATE_WINDOW = "1m"


def _probe_matchers(token: str) -> list[tuple[str, str, str]]:
    """(label, op, value) of the probe selector; the op spelled as ``promql_parser`` names it."""
    return [("namespace", "Equal", f"ai4dlns{token}"), ("pod", "Re", f"ai4dlpod{token}"),
            ("container", "Re", f"ai4dlctr{token}")]


def _matcher_text(name: str, op: str, value: str) -> str:
    return f'{name}{"=" if op == "Equal" else "=~"}"{value}"'


def template_problem(template: str) -> str | None:
    """Why ``template`` may not be sent for a PhaseModel (one line), or None when every
    selector in it is confined to the PhaseModel's own pods. Pure: no I/O."""
    import promql_parser

    if not isinstance(template, str) or "{selector}" not in template:
        return ("has no {selector}: the operator must put its own namespace and pod matchers "
                "into every selector (e.g. metric{{{selector}}})")
    token = secrets.token_hex(8)
    probe = _probe_matchers(token)
    selector = ",".join(_matcher_text(*m) for m in probe)
    try:
        rendered = template.format(selector=selector, rate_window=_PROBE_RATE_WINDOW)
    except (KeyError, IndexError, ValueError) as e:
        return (f"is not a template ({type(e).__name__}: {e}; only {{selector}} and "
                f"{{rate_window}} are filled in, literal braces are doubled)")
    try:
        expr = promql_parser.parse(rendered)
    except Exception as e:   # the parser's own error type (ValueError today): one line
        return f"is not valid PromQL: {' '.join(str(e).split())[:300]}"
    problems: list[str] = []
    selectors = 0

    def shown(node) -> str:
        return str(node).replace(selector, "{selector}")

    def visit(node) -> None:
        nonlocal selectors
        kind = type(node).__name__
        if kind in ("VectorSelector", "SubqueryExpr"):
            if getattr(node, "offset", None) is not None:
                problems.append(f"{shown(node)} has an offset (reads another time than the "
                                f"window)")
            if getattr(node, "at", None) is not None:
                problems.append(f"{shown(node)} has an @ modifier (reads another time than the "
                                f"window)")
        if kind != "VectorSelector":
            return
        selectors += 1
        ms = node.matchers
        if ms.or_matchers:
            problems.append(f"{shown(node)} joins label matchers with 'or' (the operator's "
                            f"matchers must hold for every series)")
            return
        # MatchOp is neither hashable nor named: compared by its text, "MatchOp.Equal"
        have = {(m.name, str(m.op).rpartition(".")[2], m.value) for m in ms.matchers}
        if not all(m in have for m in probe):
            problems.append(f"selector {shown(node)} lacks {{selector}}: a PhaseModel's "
                            f"query may read only its own namespace's pods")

    promql_parser.walk(expr, lambda node: visit(node))
    if problems:
        return problems[0]
    if not selectors:
        return "reads no series (a template must select its pods' metrics with {selector})"
    return None


def check_template(template: str, feature: str = "") -> None:
    """Raise ValueError (one line, naming ``feature``) unless :func:`template_problem` finds
    nothing wrong."""
    problem = template_problem(template)
    if problem is not None:
        what = f"feature {feature!r}: query" if feature else "query"
        raise ValueError(f"{what} {problem}")
