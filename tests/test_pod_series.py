"""The per-container gauges (ai4dl.controller.metrics.PodSeries, runtime_writes.pod_series):
a table per PhaseModel replaced by each window, exposed at scrape time."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ai4dl.controller import metrics as m
from ai4dl.controller.exposition import metrics_body
from ai4dl.controller.plan_types import ContainerPlan, PodPlan, WindowPlan
from ai4dl.controller.pods import Container, PodInfo
from ai4dl.controller.runtime_writes import pod_series


def _pod(name: str, phase: int | None, target: dict, current: dict, skipped=None) -> PodPlan:
    info = PodInfo("ns", name, f"uid-{name}", "pm", [Container("main", {}, {})])
    return PodPlan(info, [ContainerPlan("main", phase=phase, target=target, current=current)],
                   skipped=skipped)


def _samples(series: m.PodSeries) -> dict:
    """{(metric, pod, resource or ''): value} as a scrape of /metrics reads them."""
    out = {}
    body, _ = metrics_body(None, series, CollectorRegistry())
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, s.labels["pod"], s.labels.get("resource", ""))] = s.value
            assert s.labels["namespace"] == "ns" and s.labels["phasemodel"] == "pm"
    return out


def _window(series: m.PodSeries, pods: list[PodPlan], originals: list[dict]) -> None:
    plan = WindowPlan(pods, ("cpu", "memory"))
    series.replace("ns", "pm", plan.resources,
                   pod_series(plan, originals, series.table("ns", "pm")))


def test_a_window_sets_each_containers_series_and_a_gone_pod_loses_them():
    series = m.PodSeries()
    _window(series, [_pod("a", 2, {"cpu": 0.5, "memory": 1e9}, {"cpu": 1.0, "memory": 2e9}),
                     _pod("b", 0, {"cpu": 0.25}, {"cpu": 0.5, "memory": math.nan})],
            [{"main": {"cpu": 1.0, "memory": 2e9}}, {}])
    got = _samples(series)
    assert got[("ai4dl_pod_phase", "a", "")] == 2
    assert got[("ai4dl_recommendation", "a", "memory")] == 1e9
    assert got[("ai4dl_pod_request", "a", "cpu")] == 1.0
    assert got[("ai4dl_pod_original_request", "a", "memory")] == 2e9
    assert got[("ai4dl_pod_phase", "b", "")] == 0
    # no request, no recommendation, no author's request: no series (not NaN)
    assert ("ai4dl_pod_request", "b", "memory") not in got
    assert ("ai4dl_recommendation", "b", "memory") not in got
    assert not any(k[0] == "ai4dl_pod_original_request" and k[1] == "b" for k in got)
    # b is gone next window: every series of it goes; a skipped pod keeps its last values
    _window(series, [_pod("a", None, {}, {"cpu": math.nan}, skipped="gaps")], [{}])
    got = _samples(series)
    assert not any(k[1] == "b" for k in got)
    assert got[("ai4dl_pod_phase", "a", "")] == 2
    assert got[("ai4dl_recommendation", "a", "cpu")] == 0.5
    assert got[("ai4dl_pod_request", "a", "cpu")] == 1.0
    assert got[("ai4dl_pod_original_request", "a", "cpu")] == 1.0
    # new values replace the old
    _window(series, [_pod("a", 1, {"cpu": 0.75}, {"cpu": 0.75})], [{}])
    got = _samples(series)
    assert got[("ai4dl_pod_phase", "a", "")] == 1
    assert got[("ai4dl_recommendation", "a", "cpu")] == 0.75
    assert got[("ai4dl_pod_request", "a", "cpu")] == 0.75


def test_a_forgotten_phasemodel_loses_its_series_and_the_families_stay_declared():
    series = m.PodSeries()
    _window(series, [_pod("a", 2, {"cpu": 0.5}, {"cpu": 1.0})], [{}])
    series.forget("ns", "pm")
    registry = CollectorRegistry()
    registry.register(series)
    text = generate_latest(registry).decode()
    for name in ("ai4dl_pod_phase", "ai4dl_recommendation", "ai4dl_pod_request",
                 "ai4dl_pod_original_request"):
        assert f"# TYPE {name} gauge" in text
    assert 'pod="a"' not in text


def test_the_operators_registry_serves_the_series_and_forget_phasemodel_drops_them():
    _window(m.POD_SERIES, [_pod("a", 3, {"cpu": 0.5}, {"cpu": 1.0})], [{}])
    try:
        phases = [s for f in text_string_to_metric_families(metrics_body(None)[0].decode())
                  for s in f.samples if s.name == "ai4dl_pod_phase"]
        assert [(s.labels, s.value) for s in phases] == [
            ({"namespace": "ns", "pod": "a", "container": "main", "phasemodel": "pm"}, 3.0)]
    finally:
        m.forget_phasemodel("ns", "pm")
    assert 'pod="a"' not in metrics_body(None)[0].decode()
