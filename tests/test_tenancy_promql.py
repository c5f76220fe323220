"""A PhaseModel's PromQL reads only its own namespace; duplicated and excess series (issue 26).

The operator (a subprocess, its own ServiceAccount, under the chart's admission policy) against
a real kube-apiserver + etcd and:

1. the real Prometheus and two namespaces: a namespace owner's PhaseModel whose query reads
   another namespace's pod and relabels it onto their own (the probe's attack; it contains
   ``{selector}``, so the CRD's CEL rule lets it be stored, as any object stored before the
   rules) -> Degraded QueryRefused, no resize, nothing of the other tenant written anywhere;
   a confined PhaseModel beside it is served. A third PhaseModel sums its series (issue 43
   item 6): its pod scraped by two targets is skipped (``duplicate-series``), never sized from
   the double, and its pod scraped once is served. Then the same with
   ``--allow-free-promql``: the query is sent as written (what the flag means, and proof that
   the first part can fail);
2. the fake Prometheus: two series for one container, the inflated one first -> that container
   is skipped (``duplicate-series``: condition, metric, one Warning Event, one log line), the
   other pod is resized; a refused query is never sent; an answer with far more series than
   asked for -> Degraded TooManySeries, no resize.

Each case adds rows to the fault table (``write_report``). The chart value that turns the check
off renders the operator's flag (offline, like tests/test_helm.py). Window 10 s, step 1 s.

FakeKubelet, not the real node: the queries' confinement is tested against a fake Prometheus's
series; the pods only have to exist and be Running.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
from pydantic import ValidationError

from ai4dl.controller.pods import OWNED_ANNOTATIONS
from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION
from ai4dl.crd_spec import PhaseModelSpec
from e2e.prometheus.fake import FakePrometheus
from e2e_fixtures_k8s import FakeKubelet, create_namespace
from e2e_fixtures_operator import (Operator, crd, operator_kubeconfig,  # noqa: F401
                                   wait_for, write_report)
from test_faults_bad_input import age, metric_values, window_lines
from test_operator_integration import (STEP, WINDOW, condition, events, jobs,  # noqa: F401
                                       model_doc, read_pm, requests_of, stack, start_pods,
                                       wait_condition)

ROWS: list[tuple[str, str, str]] = []     # (bad input, wrong writes, signals)
SMALL = {"cpu": "100m", "memory": "128Mi"}


@pytest.fixture(scope="module", autouse=True)
def table(request):
    yield
    write_report(request, "tenancy: PromQL", "| bad input | wrong writes | signals raised |",
                 ROWS, append=True)


def new_namespace(kube_cluster, what: str) -> tuple[str, FakeKubelet]:
    ns = f"pq-{what}-{uuid.uuid4().hex[:6]}"
    create_namespace(kube_cluster, ns)
    kubelet = FakeKubelet(kube_cluster.api_client, namespace=ns)
    kubelet.ensure_node()
    return ns, kubelet


def phasemodel(kube_cluster, ns: str, name: str, model_doc, features=None) -> None:
    from kubernetes import client

    spec = {"selector": {"matchLabels": {"app": "train"}}, "stepSeconds": STEP,
            "windowSeconds": WINDOW, "model": model_doc,
            "policy": {"mode": "InPlace", "minChange": 0.05, "cooldownWindows": 0}}
    if features is not None:
        spec["features"] = features
    client.CustomObjectsApi(kube_cluster.api_client).create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
                                     "metadata": {"name": name}, "spec": spec})


def attack(victim_ns: str, victim_pod: str, owner_ns: str, owner_pod: str) -> list[dict]:
    """The probe's query: the other namespace's pod, relabelled onto the owner's pod, `or` the
    owner's own series (so it contains {selector} and passes the CRD's CEL rule)."""
    def one(expr: str) -> str:
        other = expr.format(sel=f'namespace="{victim_ns}",pod="{victim_pod}"')
        mine = expr.format(sel="{selector}")
        return (f'label_replace(label_replace({other}, "namespace", "{owner_ns}", "", ""), '
                f'"pod", "{owner_pod}", "", "") or {mine}')
    return [{"name": "cpu", "unit": "cores", "query": one(
                "sum by (namespace, pod, container) "
                "(rate(container_cpu_usage_seconds_total{{{{{sel}}}}}[1m]))")},
            {"name": "memory", "unit": "bytes", "query": one(
                "sum by (namespace, pod, container) "
                "(container_memory_working_set_bytes{{{{{sel}}}}})")}]


def owned(kube_cluster, ns: str, pod: str) -> dict[str, str]:
    ann = kube_cluster.core.read_namespaced_pod(pod, ns).metadata.annotations or {}
    return {k: v for k, v in ann.items() if k in OWNED_ANNOTATIONS}


def wait_windows(op: Operator, ns: str, n: int, timeout: float, name: str = "pm") -> None:
    def enough():
        text = op.log.read_text() if op.log.exists() else ""
        return len(re.findall(rf"PhaseModel {ns}/{name} window ", text)) >= n
    try:
        wait_for(enough, timeout, what=f"{n} windows of {ns}/{name}")
    except AssertionError as err:
        raise AssertionError(f"{err}\n--- operator log:\n{op.tail(30)}") from None


# ------------------------------------------------------------- 0. a template is not a format
#: The second probe's bypass (issue 43): as a Python format string, ``{selector[19]}`` was a hex
#: digit of the random token when checked and the closing quote of ``namespace="tenant-a"``
#: when sent, so the other namespace's matcher below was a string literal to the check and live
#: PromQL to Prometheus. ``{selector.real}`` left the PhaseModel with no status (a traceback).
FORMAT_BYPASS = ('sum by (namespace, pod, container) (container_memory_working_set_bytes'
                 '{{{selector}}}) or label_replace(container_memory_working_set_bytes'
                 '{{namespace="x{selector[19]},namespace="victim",pod="v-0"}}, '
                 '"namespace", "tenant-a", "", "")')


@pytest.mark.integration
@pytest.mark.parametrize("query", [FORMAT_BYPASS, "foo{{{selector.real}}}"])
def test_a_template_that_is_a_format_string_is_refused_by_the_api_server(
        kube_cluster, model_doc, crd, query):  # noqa: F811
    from kubernetes.client.exceptions import ApiException

    ns, _ = new_namespace(kube_cluster, "fmt")
    with pytest.raises(ApiException) as err:
        phasemodel(kube_cluster, ns, "pm", model_doc, [{"name": "memory", "unit": "bytes",
                                                       "query": query}])
    assert err.value.status == 422 and "query is not a template" in err.value.body
    # pydantic (the trainer, the CLI) says the same in one line
    with pytest.raises(ValidationError, match=r"feature 'memory': query is not a template: "
                                              r"a '\{' at character \d+"):
        PhaseModelSpec.model_validate({"features": [{"name": "memory", "query": query}]})
    from kubernetes import client

    stored = client.CustomObjectsApi(kube_cluster.api_client).list_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL)["items"]
    assert stored == []
    if query == FORMAT_BYPASS:
        ROWS.append(("a template as a Python format string: `{selector[19]}` (the probe's "
                     "bypass) or `{selector.real}`", "0 (nothing stored)",
                     "the API server refuses it (CEL: query is not a template); pydantic, the "
                     "operator (QueryRefused, for objects stored before the rule) and the "
                     "trainer refuse it in one line naming the character; every query is "
                     "checked again as the exact text sent"))


# ----------------------------------------------------------------------------- 1. real
#: Templates that sum a container's series: a series scraped twice doubles them.
SUMMED = [{"name": "cpu", "unit": "cores", "query": "sum by (namespace, pod, container) "
           "(rate(container_cpu_usage_seconds_total{{{selector}}}[{rate_window}]))"},
          {"name": "memory", "unit": "bytes", "query": "sum by (namespace, pod, container) "
           "(container_memory_working_set_bytes{{{selector}}})"}]


@pytest.mark.integration
def test_a_query_reading_another_namespace_is_refused(kube_cluster, stack, jobs, model_doc,
                                                      operator_kubeconfig, crd, tmp_path,
                                                      trace_exporter):
    exporter, prom = stack
    victim, kl_v = new_namespace(kube_cluster, "victim")
    owner, kl_o = new_namespace(kube_cluster, "owner")
    start_pods(kl_v, exporter, jobs, victim, ["v-0"], model="theirs")        # real usage
    kl_o.create_pod("o-0", requests=SMALL, labels={OPT_IN_LABEL: "true", "app": "train"},
                    annotations={MODEL_ANNOTATION: "pm"})
    start_pods(kl_o, exporter, jobs, owner, ["o-1"], model="ok")             # the control
    # issue 43 item 6: s-0's series scraped by two targets, s-1's once; both summed
    twice = trace_exporter({}, speed=exporter.speed, loop=True)
    prom.set_targets([exporter.url, twice.url, twice.url.replace("127.0.0.1", "localhost")])
    start_pods(kl_o, twice, jobs, owner, ["s-0"], model="summed")
    start_pods(kl_o, exporter, jobs, owner, ["s-1"], model="summed")
    features = attack(victim, "v-0", owner, "o-0")
    phasemodel(kube_cluster, owner, "pm", model_doc, features)   # stored: CEL cannot tell
    phasemodel(kube_cluster, owner, "ok", model_doc)
    phasemodel(kube_cluster, owner, "summed", model_doc, SUMMED)
    # the same spec is refused by pydantic (the trainer, the CLI): one line naming the feature
    with pytest.raises(ValidationError, match=r"feature 'cpu': query selector .* lacks "
                                              r"\{selector\}"):
        PhaseModelSpec.model_validate({"features": features})
    before = {p: requests_of(kube_cluster, ns, p) for ns, p in
              ((owner, "o-0"), (owner, "o-1"), (victim, "v-0"), (owner, "s-0"), (owner, "s-1"))}
    # the victim's pod really uses far more than the owner's requests (what the attack reads)
    from ai4dl.sources.prometheus import PrometheusSource

    wait_for(lambda: any(v > 2 ** 30 for _, v in PrometheusSource(prom.url).instant(
        f'container_memory_working_set_bytes{{namespace="{victim}",pod="v-0"}}', time.time())),
        30, what="the victim's usage in Prometheus")

    op = Operator(operator_kubeconfig, prom.url, tmp_path / "operator.log",
                  extra_args=("--namespace", owner, "--orphan-check-seconds", "0")).start()
    try:
        for pod in ("o-1", "s-1"):
            wait_for(lambda pod=pod: requests_of(kube_cluster, owner, pod) != before[pod],
                     2 * WINDOW + 15, what=f"the confined PhaseModel's pod {pod} resized")
        wait_windows(op, owner, 3, 2 * WINDOW + 15)
        wait_windows(op, owner, 3, 2 * WINDOW + 15, name="summed")
        pm = wait_condition(kube_cluster, owner, "Degraded", "True", WINDOW)
        summed = wait_condition(kube_cluster, owner, "MetricsIncomplete", "True", WINDOW,
                                name="summed")
        metrics = op.metrics()
    finally:
        op.stop()
        prom.set_targets([exporter.url])
    scraped_twice(kube_cluster, owner, summed, before, metrics)
    cond = condition(pm, "Degraded")
    assert cond["reason"] == "QueryRefused", cond
    assert cond["message"].startswith("spec.features[cpu].query selector ") and \
        "lacks {selector}: a PhaseModel's query may read only its own namespace's pods" in \
        cond["message"], cond["message"]
    assert condition(pm, "Ready")["status"] == "False"
    # zero writes from the other tenant's usage: no resize, not one annotation of ours
    assert requests_of(kube_cluster, owner, "o-0") == before["o-0"]
    assert owned(kube_cluster, owner, "o-0") == {}
    assert not [e for e in events(kube_cluster, owner) if e.involved_object.name == "o-0"]
    assert requests_of(kube_cluster, victim, "v-0") == before["v-0"]
    assert owned(kube_cluster, victim, "v-0") == {}
    errors = [ln for ln in metrics.splitlines() if ln.startswith("ai4dl_errors_total{")
              and f'namespace="{owner}"' in ln and 'kind="promql-refused"' in ln]
    assert errors and float(errors[0].rsplit(" ", 1)[1]) >= 2, errors
    ROWS.append(("a PhaseModel's query reads another namespace's pod, relabelled onto the "
                 "owner's (stored past CEL: it contains {selector})", "0",
                 "Ready False, Degraded QueryRefused naming the feature (the query is not "
                 "sent: next rows); "
                 "ai4dl_errors_total{kind=\"promql-refused\"}; the confined PhaseModel "
                 "beside it served"))

    # The flag's meaning (and proof that the check above is what held): sent as written, the
    # owner's small pod is resized from the other tenant's usage.
    op = Operator(operator_kubeconfig, prom.url, tmp_path / "operator-free.log",
                  extra_args=("--namespace", owner, "--orphan-check-seconds", "0",
                              "--allow-free-promql")).start()
    try:
        wait_for(lambda: requests_of(kube_cluster, owner, "o-0")["memory"] > 2 ** 30,
                 3 * WINDOW + 15, what="o-0 resized from the victim's usage")
    finally:
        op.stop()
    ROWS.append(("the same query with --allow-free-promql (chart operator.allowFreePromQL: "
                 "true)", "by design: sent as written",
                 "o-0 resized from the other namespace's usage (128Mi -> "
                 f"{requests_of(kube_cluster, owner, 'o-0')['memory'] / 2 ** 20:.0f}Mi)"))


def scraped_twice(kube_cluster, owner: str, summed: dict, before: dict, metrics: str) -> None:
    """s-0 (scraped twice, summed) skipped and never resized; s-1 (once) resized."""
    assert requests_of(kube_cluster, owner, "s-0") == before["s-0"]
    assert not [e for e in events(kube_cluster, owner, "Resized")
                if e.involved_object.name == "s-0"]
    assert [e.involved_object.name for e in events(kube_cluster, owner)
            if e.reason == "DuplicateSeries"] == ["s-0"]
    msg = condition(summed, "MetricsIncomplete")["message"]
    assert msg.startswith("1 of 2 pods (50 %) skipped") and "duplicate-series 1" in msg, msg
    assert metric_values(metrics, "ai4dl_pods_skipped", namespace=owner,
                         phasemodel="summed")["duplicate-series"] == 1
    got = requests_of(kube_cluster, owner, "s-1")
    ROWS.append(("one container scraped by two targets, under templates that sum its series",
                 "0", "that container skipped `duplicate-series` (found by the duplicate check "
                 "sent beside each summing template); MetricsIncomplete 1 of 2 pods; one "
                 "DuplicateSeries Event; the pod scraped once resized "
                 f"({before['s-1']['memory'] / 2 ** 30:.0f}Gi -> "
                 f"{got['memory'] / 2 ** 30:.1f}Gi)"))


# ----------------------------------------------------------------------------- 2. fake
@pytest.mark.integration
def test_duplicate_series_skip_that_container_and_excess_series_are_refused(
        kube_cluster, model_doc, operator_kubeconfig, crd, tmp_path):
    ns, kubelet = new_namespace(kube_cluster, "dup")
    refused_ns, kl_r = new_namespace(kube_cluster, "refused")
    fake = FakePrometheus().start()
    requests = {"cpu": "100m", "memory": "128Mi"}
    for pod, mode in (("d-dup", "duplicate"), ("d-good", "good")):
        kubelet.create_pod(pod, requests=requests, labels={OPT_IN_LABEL: "true", "app": "train"},
                           annotations={MODEL_ANNOTATION: "pm"})
        age(kube_cluster, ns, pod)
        fake.pods[(ns, pod, "main")] = mode
    kl_r.create_pod("r-0", requests=requests, labels={OPT_IN_LABEL: "true", "app": "train"},
                    annotations={MODEL_ANNOTATION: "pm"})
    phasemodel(kube_cluster, ns, "pm", model_doc)
    phasemodel(kube_cluster, refused_ns, "pm", model_doc,
               attack(ns, "d-good", refused_ns, "r-0"))
    before = {pod: requests_of(kube_cluster, ns, pod) for pod in ("d-dup", "d-good")}
    op = Operator(operator_kubeconfig, fake.url, tmp_path / "operator.log",
                  extra_args=("--namespace", ns, "--namespace", refused_ns,
                              "--orphan-check-seconds", "0")).start()
    try:
        wait_windows(op, ns, 3, 4 * WINDOW + 15)
        pm = wait_condition(kube_cluster, ns, "MetricsIncomplete", "True", WINDOW)
        wait_for(lambda: requests_of(kube_cluster, ns, "d-good") != before["d-good"], WINDOW,
                 what="d-good resized")
        metrics = op.metrics()
        refused = wait_condition(kube_cluster, refused_ns, "Degraded", "True", WINDOW)
        # far more series than asked for: refused unparsed, the window skipped
        fake.extra_series = 200
        flooded = wait_for(lambda: (lambda o: o if condition(o, "Ready")["reason"] ==
                                    "TooManySeries" else None)(read_pm(kube_cluster, ns, "pm")),
                           2 * WINDOW + 10, what="Ready False, TooManySeries")
        held = {pod: requests_of(kube_cluster, ns, pod) for pod in ("d-dup", "d-good")}
        n = len(window_lines(op, ns))
        wait_windows(op, ns, n + 1, 2 * WINDOW + 10)
        after_flood = {pod: requests_of(kube_cluster, ns, pod) for pod in ("d-dup", "d-good")}
        log = op.log.read_text()
    finally:
        op.stop()
        fake.stop()
    # the duplicated container: skipped, never a max nor the first series' value
    assert requests_of(kube_cluster, ns, "d-dup") == before["d-dup"]
    assert not [e for e in events(kube_cluster, ns, "Resized")
                if e.involved_object.name == "d-dup"]
    msg = condition(pm, "MetricsIncomplete")["message"]
    assert msg.startswith("1 of 2 pods (50 %) skipped") and "duplicate-series 1" in msg, msg
    assert metric_values(metrics, "ai4dl_pods_skipped", namespace=ns)["duplicate-series"] == 1
    assert metric_values(metrics, "ai4dl_skipped_windows_total",
                         namespace=ns)["duplicate-series"] >= 2
    warned = [e for e in events(kube_cluster, ns) if e.reason == "DuplicateSeries"]
    assert [e.involved_object.name for e in warned] == ["d-dup"]      # once per pod
    lines = re.findall(rf"container {ns}/d-dup/main: more than one series for cpu, memory", log)
    assert len(lines) == 1, lines                               # once, not every window
    # the other pod is served, from its own (good) series: memory near 2 GiB, not 20
    good = requests_of(kube_cluster, ns, "d-good")
    assert 2 ** 30 < good["memory"] < 8 * 2 ** 30, good
    ROWS.append(("two series for one container, the inflated one (x 10) first", "0",
                 "that container skipped `duplicate-series`; MetricsIncomplete 1 of 2 pods; "
                 "ai4dl_skipped_windows_total{reason=\"duplicate-series\"}; one DuplicateSeries "
                 "Event, one log line; the other pod resized"))

    # a refused query is never sent
    assert condition(refused, "Degraded")["reason"] == "QueryRefused"
    assert fake.asked and not [q for q in fake.asked if refused_ns in q]
    assert all(f'namespace="{ns}"' in q for q in fake.asked)        # equality, not a regex
    assert owned(kube_cluster, refused_ns, "r-0") == {}
    assert requests_of(kube_cluster, refused_ns, "r-0")["memory"] == 128 * 2 ** 20
    ROWS.append(("a refused query (reads another namespace)", "0",
                 "never sent to Prometheus (0 of the queries received)"))

    # excess series: refused, nothing resized while it lasts
    cond = condition(flooded, "Degraded")
    assert cond["reason"] == "TooManySeries" and re.search(
        r"the answer has 20[0-9] series, more than the 32 a query for 2 containers x 2 "
        r"features may give", cond["message"]), cond
    assert after_flood == held
    ROWS.append(("an answer with 200 more series than the 2 x 2 asked for", "0",
                 "refused: Ready False, Degraded TooManySeries (\"the answer has 2xx series, "
                 "more than the 32 ...\"); window skipped (an answer beyond its bound in "
                 "bytes is not even parsed: tests/test_promql_confinement.py)"))


# ------------------------------------------------------------ 2b. the query budget (fake)
@pytest.mark.integration
def test_an_expensive_query_rests_its_own_phasemodel_and_no_other(
        kube_cluster, model_doc, operator_kubeconfig, crd, tmp_path):
    """Issue 43 item 2: one tenant's query that takes 1.3 s (over a budget of 1 s + 2 ms for its
    one container) and another's
    that Prometheus gives up on at its timeout (1.6 s: 0.8 x --prometheus-timeout 2): each is
    the PhaseModel marked, with the cause, and rests (1, 2, 4 ... windows unqueried); a third
    namespace's windows all run and its pods are resized. The fake Prometheus delays by the
    namespace a query reads (the real one's timeout answer: tests/test_prometheus_source.py)."""
    fake = FakePrometheus().start()
    spaces = {what: new_namespace(kube_cluster, what) for what in ("costly", "timeout", "fair")}
    for what, (ns, kubelet) in spaces.items():
        kubelet.create_pod(f"{what}-0", requests=SMALL,
                           labels={OPT_IN_LABEL: "true", "app": "train"},
                           annotations={MODEL_ANNOTATION: "pm"})
        age(kube_cluster, ns, f"{what}-0")
        fake.pods[(ns, f"{what}-0", "main")] = "good"
        phasemodel(kube_cluster, ns, "pm", model_doc)
    costly, timed_out, fair = (spaces[w][0] for w in ("costly", "timeout", "fair"))
    fake.slow = {costly: 1.3, timed_out: 30.0}
    flags = [a for ns, _ in spaces.values() for a in ("--namespace", ns)]
    op = Operator(operator_kubeconfig, fake.url, tmp_path / "operator.log",
                  extra_args=(*flags, "--orphan-check-seconds", "0",
                              "--query-budget-seconds", "1")).start()
    try:
        wait_windows(op, fair, 4, 6 * WINDOW + 15)
        wait_for(lambda: requests_of(kube_cluster, fair, "fair-0")["memory"] > 2 ** 30, WINDOW,
                 what="the fair namespace's pod resized")
        states = {ns: read_pm(kube_cluster, ns, "pm") for ns in (costly, timed_out, fair)}
        log, metrics = op.log.read_text(), op.metrics()
    finally:
        op.stop()
        fake.stop()
    asked = {ns: sum(f'namespace="{ns}"' in q for q in fake.asked) for ns in spaces_ns(spaces)}
    windows = {ns: len(window_lines(op, ns)) for ns in spaces_ns(spaces)}
    # the fair namespace: every window queried, none degraded
    assert asked[fair] >= windows[fair] >= 4 and condition(states[fair], "Ready")["status"] == \
        "True", (asked, windows, condition(states[fair], "Ready"))
    assert f"PhaseModel {fair}/pm degraded" not in log
    # the costly one: its answers used (its pod resized from them), then rests, named
    rested = re.findall(rf"PhaseModel {costly}/pm degraded \(QueryOverBudget\): (.*)", log)
    # the fake answers after 1.3 s; the operator's clock adds its own share (1.4 s on a
    # loaded machine)
    assert rested and re.search(r"it took 1\.[3-9] s, over its budget of 1 s "
                                r"\(--query-budget-seconds 1 \+ 2 ms per container\)",
                                rested[0]), rested
    assert asked[costly] < windows[costly], (asked, windows)
    # the timed-out one: QueryTimeout, sent once a queried window (no retry), never resized
    timeouts = re.findall(rf"PhaseModel {timed_out}/pm degraded \(QueryTimeout\): (.*)", log)
    assert timeouts and timeouts[0].startswith(f"Prometheus at {fake.url} rejected the query "
                                               f"(timeout): query timed out"), timeouts
    assert "PrometheusUnavailable" not in log
    # (one more may have been in flight when the operator was stopped)
    assert len(timeouts) <= asked[timed_out] <= len(timeouts) + 1, (asked, timeouts)
    assert len(timeouts) < windows[timed_out], (timeouts, windows)
    assert requests_of(kube_cluster, timed_out, "timeout-0")["memory"] == 128 * 2 ** 20
    assert condition(states[timed_out], "Ready")["reason"] in ("QueryTimeout", "QueryOverBudget")
    errors = {re.search(r'kind="([^"]+)"', ln).group(1): float(ln.rsplit(" ", 1)[1])
              for ln in metrics.splitlines() if ln.startswith("ai4dl_errors_total{")
              and f'namespace="{timed_out}"' in ln}
    assert errors.get("query-timeout", 0) >= 1 and errors.get("query-over-budget", 0) >= 1, \
        errors
    ROWS.append(("a confined query that takes 1.3 s a window (budget 1 s, "
                 "--query-budget-seconds)", "0 (its answers used: paid for)",
                 f"Ready False, QueryOverBudget naming the cost and the flag; {asked[costly]} "
                 f"queries in {windows[costly]} windows (1, 2, 4 ... rest); another "
                 f"namespace's {windows[fair]} windows all served"))
    ROWS.append(("a query Prometheus gives up on at its timeout", "0",
                 f"Ready False, QueryTimeout (not PrometheusUnavailable), sent once a queried "
                 f"window ({asked[timed_out]} in {windows[timed_out]}), no retry; "
                 f"ai4dl_errors_total{{kind=\"query-timeout\"}}"))


def spaces_ns(spaces: dict) -> list[str]:
    return [ns for ns, _ in spaces.values()]


# ----------------------------------------------------------------------------- 3. chart
def test_the_chart_value_renders_the_flag(helm, helm_env):
    from test_helm import URL, template

    def args(*sets):
        docs = template(helm, helm_env, "--set", f"prometheus.url={URL}", *sets)
        (dep,) = [d for d in docs if d["kind"] == "Deployment"]
        return dep["spec"]["template"]["spec"]["containers"][0]["args"]

    default = args()
    assert "--allow-free-promql" not in default                      # off by default
    assert not any(a.startswith("--max-series-per-query") for a in default)
    on = args("--set", "operator.allowFreePromQL=true", "--set",
              "operator.maxSeriesPerQuery=5000")
    assert "--allow-free-promql" in on and "--max-series-per-query=5000" in on
    ROWS.append(("chart operator.allowFreePromQL (default false)", "-",
                 "renders --allow-free-promql only when true"))


from test_helm import helm, helm_env  # noqa: E402,F401 (fixtures)
