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

A template is not a Python format string (issue 43: ``{selector[19]}`` was a hex digit of the
probe's token when checked and the closing quote of ``namespace="tenant-a"`` when sent, so one
text was a string literal to the check and live PromQL to Prometheus). :func:`render_template`
substitutes exactly two tokens, ``{selector}`` and ``{rate_window}``, and the escapes ``{{`` and
``}}``; any other brace is refused. The probe and the real selector then land at the same
places as whole string literals, and the operator checks the exact text it sends as well
(:func:`sent_problem`, the real matchers in every selector), so what is checked is what is sent.

A series scraped twice (two jobs, two targets for one exporter) is two series of one container
that differ only in the labels of the scrape. A template that does not aggregate hands both to
the source, which sees two series for one container's feature; one that sums or averages them
hides the double (issue 43: 1001m/2253Mi against 501m/1127Mi). :func:`duplicate_check` is the
expression that finds them whatever the template does: per container, the series its
selectors read that are the same series but for :data:`SCRAPE_LABELS`. Sent beside the
feature, it answers only for containers read twice.
"""

from __future__ import annotations

import re
import secrets

import promql_parser

#: Duration put in for ``{rate_window}`` when a template is checked.
_PROBE_RATE_WINDOW = "1m"
#: The longest range a template may read (a range vector or a subquery): the longest window a
#: PhaseModel may have (``windowSeconds`` ≤ 86,400). A feature describes the usage of a window;
#: ``count_over_time(x[30d:1ms])`` describes nothing a window needs and costs Prometheus
#: minutes (issue 43: 41.7 s a query, another namespace's windows starved).
MAX_RANGE_SECONDS = 86_400
#: The most points a subquery may evaluate per point of the grid (range ÷ step): its cost
#: grows with it, not with the data. A subquery without a step is evaluated at Prometheus'
#: global interval, which the template cannot know: a step is required.
MAX_SUBQUERY_POINTS = 1_000


#: Aggregations a series read twice cannot change (the max or min of two equal series is
#: either): a template aggregating with these alone needs no duplicate check.
DUPLICATE_SAFE_AGGREGATIONS = frozenset({"max", "min"})
#: Labels that tell two scrapes of one series apart (Prometheus's target labels, those the
#: prometheus-operator adds, and an HA pair's replica labels). Series of one container that
#: differ in other labels (a GPU's index, a restarted container's id) are different series.
SCRAPE_LABELS = ("job", "instance", "endpoint", "service", "metrics_path", "prometheus",
                 "prometheus_replica", "replica")
#: Where the duplicate check keeps a series' metric name (aggregation drops ``__name__``).
_NAME_LABEL = "ai4dl_name"
_MATCH_OPS = {"Equal": "=", "NotEqual": "!=", "Re": "=~", "NotRe": "!~"}


def _probe_matchers(token: str) -> list[tuple[str, str, str]]:
    """(label, op, value) of the probe selector; the op spelled as ``promql_parser`` names it."""
    return [("namespace", "Equal", f"ai4dlns{token}"), ("pod", "Re", f"ai4dlpod{token}"),
            ("container", "Re", f"ai4dlctr{token}")]


def _matcher_text(name: str, op: str, value: str) -> str:
    return f'{name}{"=" if op == "Equal" else "=~"}"{value}"'


#: The template language, token by token: the two substitutions, the two escapes, and any other
#: brace (refused). The CRD's CEL rule spells the same language (``ai4dl.crd_spec.TEMPLATE_RE2``).
_TOKENS = re.compile(r"\{\{|\}\}|\{(selector|rate_window)\}|[{}]")


class TemplateError(ValueError):
    """A template that is not one: a brace outside ``{selector}``, ``{rate_window}``, ``{{``,
    ``}}`` (one line, naming the character)."""


def render_template(template: str, selector: str, rate_window: str) -> str:
    """``template`` with ``{selector}`` and ``{rate_window}`` replaced and ``{{``/``}}`` made
    single braces: nothing else is interpreted (no attribute, index or format spec, as
    ``str.format`` would); :class:`TemplateError` for any other brace."""
    out, pos = [], 0
    for m in _TOKENS.finditer(template):
        out.append(template[pos:m.start()])
        token = m.group(0)
        if token == "{{" or token == "}}":
            out.append(token[0])
        elif m.group(1) == "selector":
            out.append(selector)
        elif m.group(1) == "rate_window":
            out.append(rate_window)
        else:
            raise TemplateError(f"a {token!r} at character {m.start() + 1} that is not part of "
                                f"{{selector}}, {{rate_window}}, {{{{ or }}}} (literal braces "
                                f"are doubled; nothing else is filled in)")
        pos = m.end()
    out.append(template[pos:])
    return "".join(out)


def template_problem(template: str) -> str | None:
    """Why ``template`` may not be sent for a PhaseModel (one line), or None when every
    selector in it is confined to the PhaseModel's own pods. Pure: no I/O."""
    if not isinstance(template, str):
        return "is not a string"
    token = secrets.token_hex(8)
    probe = _probe_matchers(token)
    selector = ",".join(_matcher_text(*m) for m in probe)
    try:
        rendered = render_template(template, selector, _PROBE_RATE_WINDOW)
    except TemplateError as e:
        return f"is not a template: {e}"
    if "{selector}" not in template:
        return ("has no {selector}: the operator must put its own namespace and pod matchers "
                "into every selector (e.g. metric{{{selector}}})")
    return _unconfined(rendered, set(probe), selector)


def sent_problem(query: str, selector: str) -> str | None:
    """Why the rendered ``query`` may not be sent (one line), or None when every selector in
    it holds every matcher of ``selector`` (the real one: the PhaseModel's namespace and its
    pods): the check of the exact text that goes to Prometheus."""
    try:
        node = promql_parser.parse(f"ai4dl_probe{{{selector}}}")
    except Exception as e:   # the parser's own error type: one line
        return f"has a selector that is not PromQL: {' '.join(str(e).split())[:200]}"
    want = {(m.name, str(m.op).rpartition(".")[2], m.value) for m in node.matchers.matchers}
    return _unconfined(query, want, selector)


def _unconfined(rendered: str, want: set, selector: str) -> str | None:
    """Why ``rendered`` is not confined to the matchers ``want`` (the text of ``selector``,
    shown as ``{selector}`` in a message), or None."""
    try:
        expr = promql_parser.parse(rendered)
    except Exception as e:   # the parser's own error type (ValueError today): one line
        return f"is not valid PromQL: {' '.join(str(e).split())[:300]}"
    problems: list[str] = []
    selectors = 0

    def shown(node) -> str:
        return str(node).replace(selector, "{selector}")[:300]

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
        if kind in ("MatrixSelector", "SubqueryExpr"):
            problems.extend(_cost_problems(node, kind, shown))
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
        if not want <= have:
            problems.append(f"selector {shown(node)} lacks {{selector}}: a PhaseModel's "
                            f"query may read only its own namespace's pods")

    promql_parser.walk(expr, lambda node: visit(node))
    if problems:
        return problems[0]
    if not selectors:
        return "reads no series (a template must select its pods' metrics with {selector})"
    return None


def _cost_problems(node, kind: str, shown) -> list[str]:
    """A range vector's or subquery's range above ``MAX_RANGE_SECONDS``; a subquery without a
    step or of more than ``MAX_SUBQUERY_POINTS`` points."""
    out = []
    span = node.range.total_seconds() if node.range is not None else 0.0
    if span > MAX_RANGE_SECONDS:
        out.append(f"{shown(node)} reads a range of {span:g} s, more than {MAX_RANGE_SECONDS:,} "
                   f"s (the longest window; a query's cost grows with its range)")
    if kind == "SubqueryExpr":
        step = node.step.total_seconds() if node.step is not None else 0.0
        if step <= 0:
            out.append(f"{shown(node)} is a subquery without a step (give one: its cost is "
                       f"range ÷ step)")
        elif span / step > MAX_SUBQUERY_POINTS:
            out.append(f"{shown(node)} evaluates {span / step:,.0f} points per point of the "
                       f"grid (range ÷ step), more than {MAX_SUBQUERY_POINTS:,}")
    return out


def check_template(template: str, feature: str = "") -> None:
    """Raise ValueError (one line, naming ``feature``) unless :func:`template_problem` finds
    nothing wrong."""
    problem = template_problem(template)
    if problem is not None:
        what = f"feature {feature!r}: query" if feature else "query"
        raise ValueError(f"{what} {problem}")


def duplicate_check(query: str) -> str | None:
    """A PromQL expression with one series (labels namespace, pod, container) for each
    container that ``query`` (rendered) reads more than once: two series of one metric equal
    but for :data:`SCRAPE_LABELS`. None when ``query`` needs no check: it does not aggregate
    (a duplicate then reaches the source as two series of one container), aggregates only
    with max or min (:data:`DUPLICATE_SAFE_AGGREGATIONS`), or has a selector this cannot
    restate (``or`` between matchers, only with ``--allow-free-promql``)."""
    try:
        expr = promql_parser.parse(query)
    except Exception:   # the parser's own error type: Prometheus will say what is wrong
        return None
    selectors: dict[str, None] = {}
    aggregations: set[str] = set()
    restated = True

    def visit(node) -> None:
        nonlocal restated
        kind = type(node).__name__
        if kind == "AggregateExpr":
            aggregations.add(str(node.op))
        elif kind == "VectorSelector":
            text = _selector_text(node)
            restated = restated and text is not None
            selectors[text or ""] = None

    promql_parser.walk(expr, lambda node: visit(node))
    if not restated or not selectors or aggregations <= DUPLICATE_SAFE_AGGREGATIONS:
        return None
    scrape = ", ".join(SCRAPE_LABELS)
    counts = " or ".join(
        f'count without ({scrape}) (label_replace({s}, "{_NAME_LABEL}", "$1", "__name__", '
        f'"(.*)"))' for s in selectors)
    return f"max by (namespace, pod, container) ({counts}) > 1"


def rate_range_seconds(query: str) -> float:
    """The range in seconds of ``query``'s ``rate()`` when the query reads one range, and that
    is a ``rate``'s (``max by (...) (rate(x[1m]))``, scaled or aggregated as it likes): a
    young container's reading is then its rate diluted over the range
    (:mod:`ai4dl.sources.young_rates`). 0 for anything else: no range, a subquery,
    ``increase``, ``max_over_time``, two ranges (a ratio of two rates is not diluted), not
    PromQL."""
    try:
        expr = promql_parser.parse(query)
    except Exception:   # the parser's own error type: nothing to say about its range
        return 0.0
    ranges: list[float] = []
    in_rate: list[float] = []

    def visit(node) -> None:
        kind = type(node).__name__
        if kind == "SubqueryExpr":
            ranges.append(-1.0)
        elif kind == "MatrixSelector":
            ranges.append(node.range.total_seconds())
        elif kind == "Call" and node.func.name == "rate":
            in_rate.extend(a.range.total_seconds() for a in node.args
                           if type(a).__name__ == "MatrixSelector")

    promql_parser.walk(expr, lambda node: visit(node))
    if len(ranges) != 1 or in_rate != ranges:
        return 0.0
    return max(ranges[0], 0.0)


def _selector_text(node) -> str | None:
    """A vector selector as PromQL text (``str()`` of the parser's node does not escape its
    strings again), without offset or @; None for one with ``or`` between its matchers."""
    if node.matchers.or_matchers:
        return None
    matchers = [f"{m.name}{_MATCH_OPS[str(m.op).rpartition('.')[2]]}{promql_string(m.value)}"
                for m in node.matchers.matchers]
    return f"{node.name or ''}{{{','.join(matchers)}}}"


def promql_string(text: str) -> str:
    """A double-quoted PromQL string literal of ``text``."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
