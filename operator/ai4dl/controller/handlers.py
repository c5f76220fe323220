"""kopf registration: small handlers that call the runtime. Only an index of opted-in pods
(server-side label selector: the operator never lists or caches other pods) and one daemon per
PhaseModel (one loop per model, never one timer per pod). No create/update handlers on pods,
so kopf writes none of its last-handled annotations onto them."""

from __future__ import annotations

import asyncio
import logging
import os
import time

import kopf

from ai4dl.controller.pods import pod_info
from ai4dl.controller.runtime import WindowRunner, window_start
from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION

log = logging.getLogger("ai4dl.operator")

# Filled in by ai4dl.controller.__main__ (or tests) before kopf starts.
CONFIG: dict = {"prometheus_url": os.environ.get("AI4DL_PROMETHEUS_URL", ""),
                "prometheus_timeout": 10.0, "prometheus_retries": 3}


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_) -> None:
    # Server-side filtering: the watch asks the API server for opted-in pods only.
    settings.watching.label_selectors["v1", "pods"] = f"{OPT_IN_LABEL}=true"
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 4


@kopf.index("pods")
def opted_in_pods(namespace, name, body, **_):
    """(namespace, PhaseModel name) -> the pods that name it."""
    model = (body.get("metadata", {}).get("annotations") or {}).get(MODEL_ANNOTATION)
    if not model:
        return None
    return {(namespace, model): pod_info(dict(body))}


def _clients():
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    from ai4dl.controller.runtime import WRITERS

    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = WRITERS + 2
    api = client.ApiClient(cfg)
    return client.CoreV1Api(api), client.CustomObjectsApi(api)


def _source():
    from ai4dl.sources.prometheus import PrometheusSource

    if not CONFIG["prometheus_url"]:
        raise kopf.PermanentError("no Prometheus URL (--prometheus-url or AI4DL_PROMETHEUS_URL)")
    return PrometheusSource(CONFIG["prometheus_url"], timeout=CONFIG["prometheus_timeout"],
                            retries=CONFIG["prometheus_retries"])


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10.0)
async def phasemodel_windows(namespace, name, body, stopped, opted_in_pods: kopf.Index, **_):
    """One loop per PhaseModel: at each window boundary, process all its pods at once."""
    core, custom = _clients()
    runner = WindowRunner(core, custom, _source(), namespace, name)
    while not stopped:
        window = int((body.get("spec") or {}).get("windowSeconds") or 600)
        now = time.time()
        # Wake just after the boundary, so the window's last samples are in Prometheus.
        delay = window_start(now, window) + window - now + CONFIG.get("settle_seconds", 1.0)
        await stopped.wait(delay)
        if stopped:
            break
        pods = list(opted_in_pods.get((namespace, name), []))
        snapshot = {"spec": dict(body.get("spec") or {}), "status": dict(body.get("status") or {}),
                    "metadata": dict(body.get("metadata") or {})}
        try:
            report = await asyncio.to_thread(runner.run, snapshot, pods)
            log.info("PhaseModel %s/%s window %s: %d pods, %d resized, skipped %s", namespace,
                     name, report.window_start, report.pods, report.resized, report.skipped)
        except Exception:   # one bad window must not end the loop of this PhaseModel
            log.exception("PhaseModel %s/%s: window failed", namespace, name)
