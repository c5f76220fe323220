"""A PhaseModel's PromQL reads only its own namespace's pods; several series for one container
are an error for that container; a window's answer is bounded (issue 26). Unit tests: the
template checker (ai4dl.promql), pydantic, the source's handling of duplicated and
excess series, the plan's skip, the operator's flags. The same cases against the real API
server, the real Prometheus and the operator: tests/test_tenancy_promql.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from pydantic import ValidationError

from ai4dl.crd import crd_manifest
from ai4dl.crd_spec import PhaseModelSpec, default_features
from ai4dl.crd_spec import PROMQL_UNCHECKED
from ai4dl.sources.prometheus import PrometheusSource, pod_selector
from ai4dl.sources.prometheus_types import (DEFAULT_QUERIES, FeatureQuery, PodRef,
                                            PrometheusQueryError, SeriesLimitExceeded)
from ai4dl.crd_spec import TEMPLATE_RE2
from ai4dl.promql import (SCRAPE_LABELS, TemplateError, check_template, duplicate_check,
                          render_template, sent_problem, template_problem)

# What a namespace owner could write to read elsewhere, and why each is refused.
REFUSED = [
    ("container_memory_working_set_bytes", "has no {selector}"),
    ('container_memory_working_set_bytes{{namespace="other"}}', "has no {selector}"),
    ('{{__name__=~"container_.*"}}', "has no {selector}"),
    # the probe's attack: another namespace's pod, relabelled onto one's own
    ('label_replace(label_replace(sum by (namespace, pod, container) '
     '(container_memory_working_set_bytes{{namespace="other",pod="v-0"}}), "namespace", "mine", '
     '"", ""), "pod", "o-0", "", "") or sum by (namespace, pod, container) '
     '(container_memory_working_set_bytes{{{selector}}})', "lacks {selector}"),
    ("sum by (namespace, pod, container) (container_memory_working_set_bytes{{{selector}}}) "
     "or container_memory_working_set_bytes", "selector container_memory_working_set_bytes"),
    ("foo{{{selector}}} + on() group_left bar", "lacks {selector}"),
    ('max_over_time(foo{{namespace="other"}}[5m:1m]) or foo{{{selector}}}', "lacks {selector}"),
    ('foo{{{selector} or namespace="other"}}', "joins label matchers with 'or'"),
    ("foo{{{selector}}} offset 1h", "has an offset"),
    ("rate(foo{{{selector}}}[5m] offset 1d)", "has an offset"),
    ("foo{{{selector}}} @ 1700000000", "has an @ modifier"),
    ("max_over_time(rate(foo{{{selector}}}[1m])[5m:1m] @ end())", "has an @ modifier"),
    ("max_over_time(rate(foo{{{selector}}}[1m])[5m:1m] offset 5m)", "has an offset"),
    ('label_replace(vector(1e12), "x", "{selector}", "", "")', "is not valid PromQL"),
    ("sum(foo{{{selector}}}", "is not valid PromQL"),
    ("foo{{{selector}}}{other}", "is not a template"),
    # issue 43: a template is not a format string (an index, an attribute, a conversion, a
    # format spec or a positional field of the selector is not the selector)
    ('foo{{{selector}}} or label_replace(bar{{namespace="x{selector[19]}",pod="y"}}, '
     '"namespace", "a", "", "")', "is not a template"),
    ("foo{{{selector.real}}}", "is not a template"),
    ("foo{{{selector!r}}}", "is not a template"),
    ("foo{{{selector:>300}}}", "is not a template"),
    ("foo{{{0}}}", "is not a template"),
    ("foo{{{selector}}} }", "is not a template"),
    ("foo{{{selector}}", "is not a template"),
    # issue 43: a confined but expensive query (the probe's: 41.7 s against a 10 s timeout)
    ("count_over_time(foo{{{selector}}}[30d:1ms])", "reads a range of 2.592e+06 s"),
    ("max_over_time(foo{{{selector}}}[2h:1ms])", "evaluates 7,200,000 points"),
    ("max_over_time(foo{{{selector}}}[1h:])", "is a subquery without a step"),
    ("count_over_time(foo{{{selector}}}[2d])", "reads a range of 172800 s"),
]
ACCEPTED = [
    *DEFAULT_QUERIES.values(),
    *(f.query for f in default_features()),
    '{{__name__=~"container_memory_.*",{selector}}}',
    "max_over_time(rate(foo{{{selector}}}[{rate_window}])[5m:1m])",
    'sum by (namespace, pod, container) (foo{{{selector},namespace="other"}})',  # ANDed: nothing
    "foo{{{selector}}} / on(namespace, pod, container) bar{{{selector}}}",
    'label_replace(foo{{{selector}}}, "container", "$1", "name", "(.*)")',
]


@pytest.mark.parametrize("template,problem", REFUSED)
def test_templates_that_could_read_elsewhere_are_refused(template, problem):
    got = template_problem(template)
    assert got is not None and problem in got, got
    assert "\n" not in got                                      # one line
    with pytest.raises(ValueError, match=r"^feature 'cpu': query "):
        check_template(template, "cpu")


@pytest.mark.parametrize("template", ACCEPTED)
def test_confined_templates_and_the_defaults_are_accepted(template):
    assert template_problem(template) is None


def test_the_crds_default_features_are_accepted():
    props = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    defaults = props["spec"]["properties"]["features"]["default"]
    assert defaults and all(template_problem(f["query"]) is None for f in defaults)
    # the CEL rule generated from the model: what the API server can check without a parser
    rules = props["spec"]["properties"]["features"]["items"]["x-kubernetes-validations"]
    assert [r["rule"] for r in rules] == ["self.query.contains('{selector}')",
                                          f"self.query.matches('{TEMPLATE_RE2}')"]


@pytest.mark.parametrize("template", [t for t, _ in REFUSED] + ACCEPTED)
def test_the_cel_pattern_and_the_renderer_agree_on_what_a_template_is(template):
    """The CRD's CEL rule (RE2) spells the renderer's language: a text it refuses is one the
    renderer refuses, and the other way round."""
    import re

    try:
        render_template(template, "s", "1m")
        renders = True
    except TemplateError:
        renders = False
    assert bool(re.fullmatch(TEMPLATE_RE2, template)) == renders


def test_the_exact_text_sent_is_checked_against_the_real_matchers():
    refs = [PodRef("tenant-a", "p-0", "main")]
    sel = pod_selector(refs)
    fine = FeatureQuery("memory", DEFAULT_QUERIES["memory"]).render(sel)
    assert sent_problem(fine, sel) is None and 'namespace="tenant-a"' in fine
    assert "lacks {selector}" in sent_problem('foo{namespace="tenant-b"} or ' + fine, sel)
    # the format-string bypass of issue 43 does not render at all
    with pytest.raises(PrometheusQueryError, match="is not a template"):
        FeatureQuery("memory", 'foo{{namespace="x{selector[19]}"}}').render(sel)


def test_a_literal_copy_of_the_operators_matchers_is_not_mistaken_for_them():
    """The probe's matchers hold a random token: a template cannot spell them in advance."""
    from ai4dl import promql

    probe = promql._probe_matchers("0" * 16)
    literal = ",".join(promql._matcher_text(*m) for m in probe)
    assert template_problem("foo{{" + literal + "}}") is not None


def test_pydantic_refuses_it_in_one_line_and_the_operator_can_defer():
    spec = {"features": [{"name": "memory", "query": REFUSED[3][0]}]}
    with pytest.raises(ValidationError) as err:
        PhaseModelSpec.model_validate(spec)
    assert "feature 'memory': query selector" in str(err.value) and "lacks {selector}" in \
        str(err.value)
    # the operator validates with the check deferred (it reports QueryRefused itself)
    got = PhaseModelSpec.model_validate(spec, context=PROMQL_UNCHECKED)
    assert got.features[0].query == REFUSED[3][0]
    assert PhaseModelSpec.model_validate({}).features[0].name == "cpu"    # defaults pass


def test_one_namespace_is_matched_by_equality():
    sel = pod_selector([PodRef("team-a", "p-0", "main"), PodRef("team-a", "p.1", "main")])
    assert sel.startswith('namespace="team-a",pod=~') and "p\\\\.1" in sel
    # the trainer's history may ask for several namespaces at once: a regex then
    assert pod_selector([PodRef("a", "p", "c"), PodRef("b", "p", "c")]).startswith(
        'namespace=~"a|b"')


# ----------------------------------------------------------------------------- the source
class _Server:
    """A canned Prometheus answer over real HTTP (the source streams and caps what it reads)."""

    def __init__(self, result: list[dict]):
        body = json.dumps({"status": "success",
                           "data": {"resultType": "matrix", "result": result}}).encode()
        self.asked = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.asked += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _series(pod, feature, value, n=5, **extra):
    return {"metric": {"namespace": "ns", "pod": pod, "container": "main",
                       "ai4dl_feature": feature, **extra},
            "values": [[100 + i, str(value)] for i in range(n)]}


PODS = [PodRef("ns", "dup", "main"), PodRef("ns", "good", "main")]


def test_several_series_for_one_container_drop_its_samples_only():
    srv = _Server([_series("dup", "memory", 22368 * 2 ** 20, id="inflated"),   # inflated first
                   _series("dup", "memory", 128 * 2 ** 20),
                   _series("dup", "cpu", 0.1),
                   _series("good", "memory", 2 ** 30), _series("good", "cpu", 0.5)])
    try:
        got = PrometheusSource(srv.url, max_series_factor=4).fetch(
            ["cpu", "memory"], PODS, 100, 104, 1)
    finally:
        srv.close()
    assert got.duplicated == {PODS[0]: ("memory",)}
    assert np.isnan(got[PODS[0]].values).all()            # neither the max nor the first
    np.testing.assert_array_equal(got[PODS[1]].values, [[0.5, 2 ** 30]] * 5)
    assert any("more than one series" in w for w in got.warnings)


def test_a_duplicate_check_answer_blanks_that_container_and_is_never_a_value():
    """The check's series (ai4dl_check) names a container read twice under a summing template:
    that container is blanked, and a check series is never taken for the feature's value (for
    "good" it is the only series of gpu_memory in the answer)."""
    srv = _Server([_series("dup", "gpu_memory", 2 ** 31), _series("dup", "cpu", 0.2),
                   _series("dup", "gpu_memory", 2, n=2, ai4dl_check="duplicates"),
                   _series("good", "cpu", 0.5),
                   _series("good", "gpu_memory", 2, n=1, ai4dl_check="duplicates")])
    try:
        got = PrometheusSource(srv.url, max_series_factor=4).fetch(
            ["cpu", "gpu_memory"], PODS, 100, 104, 1)
    finally:
        srv.close()
    assert got.duplicated == {PODS[0]: ("gpu_memory",), PODS[1]: ("gpu_memory",)}
    assert np.isnan(got[PODS[0]].values).all() and np.isnan(got[PODS[1]].values).all()


@pytest.mark.parametrize("name, wanted", [("cpu", False), ("memory", False),
                                          ("gpu_util", True), ("gpu_memory", True)])
def test_the_duplicate_check_goes_with_templates_a_double_can_change(name, wanted):
    """max and min of a series read twice are its value: no check. avg and sum are not: a
    check, confined like the query it restates (every selector holds the real matchers), its
    strings escaped again (the parser's own text of a selector is not PromQL)."""
    selector = pod_selector([PodRef("ns", "a.b", "main"), PodRef("ns", 'q"x', "main")])
    query = FeatureQuery(name, DEFAULT_QUERIES[name]).render(selector, "1m")
    check = duplicate_check(query)
    assert (check is not None) == wanted
    if check:
        assert sent_problem(check, selector) is None
        assert f"count without ({', '.join(SCRAPE_LABELS)})" in check and check.endswith("> 1")


def test_no_duplicate_check_without_aggregation_or_for_a_selector_it_cannot_restate():
    assert duplicate_check('rate(foo{namespace="ns"}[1m])') is None       # two series reach us
    assert duplicate_check('sum by (namespace, pod, container) (foo{a="1" or b="2"})') is None
    assert duplicate_check("not promql (") is None
    two = duplicate_check('sum by (namespace, pod, container) (foo{namespace="ns"}) '
                          '/ count by (namespace, pod, container) (bar{namespace="ns"})')
    assert two.count("label_replace(") == 2 and 'foo{namespace="ns"}' in two \
        and 'bar{namespace="ns"}' in two


def test_an_answer_with_far_more_series_than_asked_is_refused():
    flood = [_series(f"x-{i}", "memory", 1) for i in range(200)]
    srv = _Server([_series("good", "memory", 1), *flood])
    try:
        src = PrometheusSource(srv.url, retries=0, max_series_factor=4)
        assert src.series_limit(2, 2) == 4 * 2 * 2 + 16
        with pytest.raises(SeriesLimitExceeded, match=r"^Prometheus at .*: the answer has 201 "
                           r"series, more than the 32 a query for 2 containers x 2 features"):
            src.fetch(["cpu", "memory"], PODS, 100, 104, 1)
        # a bound in bytes too: with max_series 1 the answer is refused before it is parsed
        with pytest.raises(SeriesLimitExceeded, match="larger than .* bytes .* refused unparsed"):
            PrometheusSource(srv.url, retries=0, max_series=1).fetch(
                ["cpu", "memory"], PODS, 100, 104, 1)
        assert srv.asked == 2                                      # refused, not retried
        # no bound unless asked for (the trainer's history plans its own sizes)
        assert len(PrometheusSource(srv.url).fetch(["memory"], PODS, 100, 104, 1)) == 2
    finally:
        srv.close()


# ----------------------------------------------------------------------------- the plan
def test_the_plan_skips_a_rejected_container_and_serves_the_others():
    from ai4dl.controller.plan import plan_window
    from ai4dl.controller.plan_types import DATA_SKIPS, SKIP_ORDER
    from ai4dl.controller.pods import pod_info

    def pod(name):
        return pod_info({
            "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                         "labels": {"ai4dl.io/managed": "true"},
                         "annotations": {"ai4dl.io/phasemodel": "pm"}},
            "spec": {"containers": [{"name": "main", "resources": {
                "requests": {"cpu": "8", "memory": "32Gi"}}}]},
            "status": {"phase": "Running", "startTime": "2020-01-01T00:00:00Z",
                       "containerStatuses": [{"name": "main", "state": {"running": {
                           "startedAt": "2020-01-01T00:00:00Z"}}}]}})

    spec = PhaseModelSpec.model_validate({"stepSeconds": 1, "windowSeconds": 10,
                                          "policy": {"mode": "InPlace",
                                                     "minChange": 0.05, "cooldownWindows": 0}})
    window = np.tile([[0.5, 2.0 ** 30]], (10, 1))
    samples = {("ns", "good", "main"): window, ("ns", "dup", "main"): window * np.nan}
    rejected = {("ns", "dup", "main"): ("duplicate-series", "more than one series for memory")}
    plan = plan_window(spec, None, [pod("dup"), pod("good")], samples, 0, 1000.0,
                       "1970-01-01T00:16:40Z", rejected=rejected)
    dup, good = plan.pods
    assert dup.skipped == "duplicate-series" and dup.resize is None
    assert dup.containers[0].detail == "more than one series for memory"
    assert [r for r, _ in dup.notices] == ["DuplicateSeries"]
    assert good.skipped is None and good.resize is not None
    assert plan.data_skips() == {"duplicate-series": 1}
    assert "duplicate-series" in DATA_SKIPS and SKIP_ORDER[0] == "duplicate-series"


# ----------------------------------------------------------------------------- the flags
def test_operator_flags():
    from ai4dl.controller.__main__ import build_parser, main

    args = build_parser().parse_args(["--prometheus-url", "http://p:9090"])
    assert args.allow_free_promql is False and args.max_series_per_query == 0
    args = build_parser().parse_args(["--allow-free-promql", "--max-series-per-query", "500"])
    assert args.allow_free_promql is True and args.max_series_per_query == 500
    assert main(["--prometheus-url", "http://p:9090", "--max-series-per-query", "-1"]) == 2
