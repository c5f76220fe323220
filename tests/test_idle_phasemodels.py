"""An idle PhaseModel lists its pods less often, and admission wakes it (issue 43 item 10), on
the real API server: the operator (a subprocess, its own ServiceAccount) serves the chart's
webhook by URL with ``--idle-after-seconds 0``; a PhaseModel of 4 s windows and no model (the
reactive baseline) finds no pod three windows in a row, stops listing
(``ai4dl_pod_lists_total{outcome="idle"}``), and lists again at the first window after
``kubectl apply`` creates one of its pods through the webhook. What 1,000 idle PhaseModels
cost: bench/bench_idle_phasemodels.py."""

from __future__ import annotations

import json
import re
import time

import pytest
from kubernetes.client.exceptions import ApiException

from ai4dl.crd import GROUP, PLURAL, VERSION
from e2e_fixtures_operator import (Operator, crd, free_port,  # noqa: F401 (fixtures)
                                   operator_kubeconfig, wait_for)
from test_admission_webhook import (CONFIGURATION, apply_pod, chart_webhook_configuration,
                                    pod_manifest)

pytestmark = pytest.mark.integration
WINDOW = 4


def lists(op: Operator) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(
        r'^ai4dl_pod_lists_total\{outcome="(\w+)"\} (\S+)$', op.metrics(), re.M)}


def test_an_idle_phasemodel_stops_listing_until_admission_sees_its_pod(
        kube_cluster, k8s_namespace, crd, operator_kubeconfig, tmp_path):
    from kubernetes import client

    adm = client.AdmissionregistrationV1Api(kube_cluster.api_client)
    port = free_port()
    try:
        adm.delete_mutating_webhook_configuration(CONFIGURATION)
    except ApiException as err:
        if err.status != 404:
            raise
    adm.create_mutating_webhook_configuration(
        chart_webhook_configuration(f"https://127.0.0.1:{port}/admission"))
    client.CustomObjectsApi(kube_cluster.api_client).create_namespaced_custom_object(
        GROUP, VERSION, k8s_namespace, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel", "metadata": {"name": "pm"},
            "spec": {"selector": {"matchLabels": {"app": "train"}}, "stepSeconds": 1,
                     "windowSeconds": WINDOW, "policy": {"mode": "InPlace"}}})
    op = Operator(operator_kubeconfig, "http://127.0.0.1:9", tmp_path / "operator.log",
                  extra_args=("--webhook-port", str(port), "--webhook-host", "127.0.0.1",
                              "--webhook-configuration", CONFIGURATION,
                              "--orphan-check-seconds", "0", "--namespace", k8s_namespace,
                              "--idle-after-seconds", "0")).start()
    try:
        wait_for(lambda: all(h.client_config.ca_bundle for h in
                             adm.read_mutating_webhook_configuration(CONFIGURATION).webhooks),
                 60, what="the operator's CA in the configuration")
        # three empty windows listed, then two not
        idle = wait_for(lambda: (lambda c: c if c.get("idle", 0) >= 2 else None)(lists(op)),
                        8 * WINDOW + 15, what="two idle windows")
        assert idle["listed"] >= 3, idle
        created = time.time()
        apply_pod(kube_cluster, pod_manifest(k8s_namespace, "job-0"))
        woken = wait_for(lambda: (lambda c: c if c["listed"] > idle["listed"] else None)(
            lists(op)), 3 * WINDOW, what="a LIST after the pod was created")
        took = time.time() - created
        later = wait_for(lambda: (lambda c: c if c["listed"] >= woken["listed"] + 2 else None)(
            lists(op)), 4 * WINDOW, what="two more LISTs: no longer idle")
    finally:
        op.stop()
        try:
            adm.delete_mutating_webhook_configuration(CONFIGURATION)
        except ApiException:
            pass
    # listed at the first window after the pod was created (not the tenth), and every window
    # after: the pod ends the idleness
    assert took <= WINDOW + 3, (took, json.dumps(woken))
    assert later["idle"] == woken["idle"], (woken, later)
