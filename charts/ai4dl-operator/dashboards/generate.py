"""Writes ai4dl-operator.json, the Grafana dashboard the chart ships (``grafanaDashboard``):
``python charts/ai4dl-operator/dashboards/generate.py`` (``make generate`` runs it). The panels'
PromQL reads only the operator's metrics and cAdvisor's (no kube-state-metrics needed);
tests/test_operator_integration.py runs every expression against a Prometheus that scrapes a
running operator."""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).with_name("ai4dl-operator.json")
PM = 'namespace=~"$namespace",phasemodel=~"$phasemodel"'
POD = 'namespace=~"$namespace",phasemodel=~"$phasemodel",pod=~"$pod"'
CADVISOR = 'namespace=~"$namespace",pod=~"$pod",container!="",container!="POD"'
DS = {"type": "prometheus", "uid": "${datasource}"}


def target(expr: str, legend: str, ref: str) -> dict:
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref}


def panel(pid: int, title: str, kind: str, targets: list[dict], grid: tuple[int, int, int, int],
          unit: str = "short", description: str = "", **extra) -> dict:
    x, y, w, h = grid
    out = {"id": pid, "type": kind, "title": title, "description": description,
           "datasource": DS, "gridPos": {"x": x, "y": y, "w": w, "h": h},
           "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
           "options": {}, "targets": [dict(t, refId=chr(65 + i)) for i, t in enumerate(targets)]}
    out.update(extra)
    return out


def saved(resource: str) -> str:
    return (f'1 - sum(ai4dl_request_seconds_total{{{PM},resource="{resource}",kind="allocated"}})'
            f' / sum(ai4dl_request_seconds_total{{{PM},resource="{resource}",kind="original"}})')


def requests_panel(pid: int, resource: str, title: str, grid, unit: str) -> dict:
    """The PhaseModel's requests now against as their authors wrote them (sum over its pods)."""
    sel = f'{PM},resource="{resource}"'
    return panel(pid, f"{title} requests: now vs as written", "timeseries",
                 [target(f"sum by (phasemodel) (ai4dl_pod_request{{{sel}}})",
                         "{{phasemodel}} now", "A"),
                  target(f"sum by (phasemodel) (ai4dl_pod_original_request{{{sel}}})",
                         "{{phasemodel}} as written", "B")],
                 grid, unit, "Sum over the PhaseModel's pods")


def per_pod_panel(pid: int, resource: str, title: str, usage: str, usage_name: str, grid,
                  unit: str) -> dict:
    """Per pod: cAdvisor's usage, the request it holds, the operator's recommendation."""
    sel = f'{POD},resource="{resource}"'
    return panel(pid, title, "timeseries",
                 [target(usage, "{{pod}} " + usage_name, "A"),
                  target(f"sum by (pod) (ai4dl_pod_request{{{sel}}})", "{{pod}} request", "B"),
                  target(f"sum by (pod) (ai4dl_recommendation{{{sel}}})",
                         "{{pod}} recommendation", "C")], grid, unit)


def dashboard() -> dict:
    panels = [
        panel(1, "Pods tracked", "stat",
              [target(f"sum(ai4dl_pods_tracked{{{PM}}})", "pods", "A")], (0, 0, 4, 4),
              description="Opted-in pods the selected PhaseModels serve"),
        panel(2, "CPU saved so far", "stat", [target(saved("cpu"), "cpu", "A")],
              (4, 0, 4, 4), "percentunit",
              "Share of the authors' cpu requests × time not allocated (Recommend mode: not "
              "recommended), since the operator started counting"),
        panel(3, "Memory saved so far", "stat", [target(saved("memory"), "memory", "A")],
              (8, 0, 4, 4), "percentunit", "As for cpu, memory"),
        panel(4, "Novel windows", "stat",
              [target(f"max(ai4dl_novel_share{{{PM}}})", "novel", "A")], (12, 0, 4, 4),
              "percentunit", "Share of containers whose last window looked like no phase the "
              "model knows (RefitRecommended when it stays high)"),
        panel(5, "Window time (p90)", "stat",
              [target("histogram_quantile(0.9, sum by (le) (rate("
                      f"ai4dl_window_duration_seconds_bucket{{{PM}}}[$__rate_interval])))",
                      "p90", "A")], (16, 0, 8, 4), "s",
              "Time to process one window of one PhaseModel (query, encode, plan, write)"),
        requests_panel(6, "cpu", "CPU", (0, 4, 12, 8), "short"),
        requests_panel(7, "memory", "Memory", (12, 4, 12, 8), "bytes"),
        per_pod_panel(8, "cpu", "CPU per pod: usage, request, recommendation",
                      f"sum by (pod) (rate(container_cpu_usage_seconds_total{{{CADVISOR}}}"
                      "[$__rate_interval]))", "usage", (0, 12, 12, 9), "short"),
        per_pod_panel(9, "memory", "Memory per pod: working set, request, recommendation",
                      f"sum by (pod) (container_memory_working_set_bytes{{{CADVISOR}}})",
                      "working set", (12, 12, 12, 9), "bytes"),
        panel(10, "Phase per pod", "state-timeline",
              [target(f"max by (pod) (ai4dl_pod_phase{{{POD}}})", "{{pod}}", "A")],
              (0, 21, 24, 7), "short", "The phase the model reads in each pod's last window",
              options={"mergeValues": True, "showValue": "auto"}),
        panel(11, "Resizes", "timeseries",
              [target(f"sum by (phasemodel) (increase(ai4dl_resizes_total{{{PM}}}"
                      "[$__rate_interval]))", "{{phasemodel}}", "A")],
              (0, 28, 8, 7), "short", "In-place resizes patched"),
        panel(12, "Skipped windows, by reason", "timeseries",
              [target(f"sum by (reason) (increase(ai4dl_skipped_windows_total{{{PM}}}"
                      "[$__rate_interval]))", "{{reason}}", "A")],
              (8, 28, 8, 7), "short", "Pods (or whole windows) not resized, and why: gaps "
              "in the metrics, cooldown, a pending resize, a Prometheus outage..."),
        panel(13, "Pods skipped for their metrics", "timeseries",
              [target(f"sum by (reason) (ai4dl_pods_skipped{{{PM}}})", "{{reason}}", "A")],
              (16, 28, 8, 7), "short", "Last window: pods with gaps or bad samples"),
    ]
    variables = [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"},
        {"name": "namespace", "type": "query", "datasource": DS, "includeAll": True,
         "multi": True, "refresh": 2, "definition": "label_values(ai4dl_pods_tracked, namespace)",
         "query": {"query": "label_values(ai4dl_pods_tracked, namespace)", "refId": "ns"}},
        {"name": "phasemodel", "type": "query", "datasource": DS, "includeAll": True,
         "multi": True, "refresh": 2,
         "definition": 'label_values(ai4dl_pods_tracked{namespace=~"$namespace"}, phasemodel)',
         "query": {"query": 'label_values(ai4dl_pods_tracked{namespace=~"$namespace"}, '
                            'phasemodel)', "refId": "pm"}},
        {"name": "pod", "type": "query", "datasource": DS, "includeAll": True, "multi": True,
         "refresh": 2,
         "definition": f"label_values(ai4dl_pod_request{{{PM}}}, pod)",
         "query": {"query": f"label_values(ai4dl_pod_request{{{PM}}}, pod)", "refId": "pod"}},
    ]
    return {"title": "ai4dl operator", "uid": "ai4dl-operator", "tags": ["ai4dl", "kubernetes"],
            "schemaVersion": 39, "version": 1, "editable": True, "refresh": "1m",
            "time": {"from": "now-6h", "to": "now"}, "timezone": "browser",
            "templating": {"list": variables}, "panels": panels, "annotations": {"list": []}}


if __name__ == "__main__":
    OUT.write_text(json.dumps(dashboard(), indent=1) + "\n")
    print(f"wrote {OUT}")
