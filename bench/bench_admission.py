"""Benchmark of the admission webhook (issue 13). Prints markdown tables; asserts nothing, but
a run in which the webhook did not size every pod it was sent (through the API server, or
straight), in which the "no webhook" series was mutated all the same, or in which the operator's
handler histogram counted no call, measured nothing: exit 1, the reason, no table (issue 44).

    .venv/bin/python bench/bench_admission.py [--pods 200]

A real kube-apiserver + etcd (e2e/controlplane), the PhaseModel CRD, the operator's RBAC
(deploy/rbac.yaml), the chart's MutatingWebhookConfiguration reaching the webhook by URL on
127.0.0.1, one PhaseModel (InPlace) whose model carries a learned first-window level, and the
operator serving the webhook as a subprocess (its self-signed certificate written into the
configuration by the operator itself). Then:

1. --pods pod creations through the API server with the webhook, one at a time, each timed
   from the client (create latency), and the same number with the configuration deleted (no
   webhook): the difference is what admission adds to a pod creation;
2. --pods AdmissionReview requests sent straight to the webhook over TLS (a new connection
   each, as an API server without keep-alive would): the webhook's round trip, which is what
   the API server waits for; target p99 < 20 ms on this machine;
3. the operator's own histogram of the handler's time (ai4dl_admission_duration_seconds).
Everything started here is stopped at the end.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import shutil
import ssl
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from measured import refuse  # noqa: E402


def pct(values, q) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, q))


def row(label, values) -> str:
    return (f"| {label} | {len(values)} | {pct(values, 50):.2f} | {pct(values, 90):.2f} | "
            f"{pct(values, 99):.2f} | {max(values) * 1000:.2f} |")


def handler_histogram(metrics: str) -> dict[str, float]:
    """The operator's ai4dl_admission_duration_seconds buckets: ``le`` -> calls."""
    hist = {}
    for line in metrics.splitlines():
        if line.startswith("ai4dl_admission_duration_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            hist[le] = float(line.rsplit(" ", 1)[1])
    return hist


def measured_nothing(m: dict) -> str | None:
    """Why the series in ``m`` measured nothing (None when they measured the webhook): a pod
    created with it on and not sized, a direct AdmissionReview answered without an allowed
    patch (or none sent), a pod of the "no webhook" series sized all the same (the configuration
    was still served: no baseline), or a handler histogram that counted no call."""
    n = len(m["with_hook"])
    if m["mutated"] < n:
        return (f"the webhook sized {m['mutated']} of {n} pods created with it on (every one "
                f"is asked for)")
    if not m["direct"] or m["unpatched"]:
        return (f"{m['unpatched']} of {len(m['direct'])} AdmissionReviews sent straight to the "
                "webhook came back without an allowed patch")
    if m["plain_mutated"]:
        return (f"{m['plain_mutated']} of {len(m['without'])} pods created with the webhook "
                "configuration deleted were sized by it: no baseline without the webhook")
    if m["handler_calls"] == 0:
        return "the operator's ai4dl_admission_duration_seconds counted 0 handler calls"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=200, help="pod creations per series (200)")
    args = ap.parse_args()
    if args.pods < 1:
        return refuse("bench_admission", f"--pods {args.pods}: nothing to create")

    from kubernetes import client, config

    from ai4dl.controller.pods import A_ADMISSION
    from ai4dl.crd import MODEL_ANNOTATION, OPT_IN_LABEL
    from e2e.controlplane.cluster import ControlPlane, ensure_binaries
    from e2e_fixtures_operator import Operator, free_port, install_for_operator, wait_for
    from operator_bench.cluster import admitting_phasemodel

    ensure_binaries(quiet=True)
    work = Path(tempfile.mkdtemp(prefix="ai4dl-bench-admission-"))
    cp = ControlPlane().start()
    op = None
    try:
        api = config.new_client_from_config(config_file=str(cp.kubeconfig))
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        adm = client.AdmissionregistrationV1Api(api)
        port = free_port()
        kubeconfig, mwc = install_for_operator(cp, api, work, ["bench"], port)

        # a model with a learned first-window level (the trainer's tables)
        wait_for(lambda: _established(client.ApiextensionsV1Api(api)), 30, what="CRD")
        admitting_phasemodel(custom, "bench")

        op = Operator(kubeconfig, "http://127.0.0.1:9", work / "operator.log", extra_args=(
            "--webhook-port", str(port), "--webhook-host", "127.0.0.1",
            "--webhook-configuration", mwc["metadata"]["name"],
            "--orphan-check-seconds", "0")).start()

        def pod(name):
            return {"metadata": {"name": name, "namespace": "bench",
                                 "labels": {OPT_IN_LABEL: "true", "app": "train"},
                                 "annotations": {MODEL_ANNOTATION: "pm"}},
                    "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause",
                                             "resources": {"requests": {"cpu": "4",
                                                                        "memory": "32Gi"}}}]}}

        def set_by_admission(got) -> bool:
            # the note, not the sealed record: this webhook authenticates no caller, so it
            # seals nothing (issue 43)
            return (got.metadata.annotations or {}).get(A_ADMISSION, "").startswith("set by")

        def admitted():
            got = core.create_namespaced_pod("bench", pod(f"probe-{uuid.uuid4().hex[:6]}"),
                                             dry_run="All")
            return set_by_admission(got)
        wait_for(admitted, 60, what="the webhook admitting pods")

        def series(prefix):
            out, mutated = [], 0
            for i in range(args.pods):
                t = time.perf_counter()
                got = core.create_namespaced_pod("bench", pod(f"{prefix}-{i}"))
                out.append(time.perf_counter() - t)
                mutated += set_by_admission(got)
            return out, mutated

        series("warm")                                   # connections, caches
        with_hook, mutated = series("hook")
        ca = adm.read_mutating_webhook_configuration(mwc["metadata"]["name"]) \
            .webhooks[0].client_config.ca_bundle
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "x", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                              "resource": {"group": "", "version": "v1", "resource": "pods"},
                              "namespace": "bench", "operation": "CREATE",
                              "userInfo": {"username": "bench"},
                              "object": {**pod("direct"), "apiVersion": "v1", "kind": "Pod"},
                              "dryRun": False}}
        ctx = ssl.create_default_context(cadata=base64.b64decode(ca).decode())
        body = json.dumps(review)
        direct, unpatched = [], 0
        for _ in range(args.pods):
            t = time.perf_counter()
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
            conn.request("POST", "/admission", body, {"Content-Type": "application/json"})
            answer = json.loads(conn.getresponse().read())
            conn.close()
            direct.append(time.perf_counter() - t)
            # a round trip that sized nothing is not the one the table reports
            unpatched += not (answer["response"]["allowed"] and answer["response"].get("patch"))
        adm.delete_mutating_webhook_configuration(mwc["metadata"]["name"])
        time.sleep(2)
        without, plain_mutated = series("plain")
        metrics = op.metrics()
    finally:
        if op is not None:
            op.stop()
        cp.stop()
        shutil.rmtree(work, ignore_errors=True)

    hist = handler_histogram(metrics)
    total = hist.get("+Inf", 0.0)
    why = measured_nothing({"with_hook": with_hook, "mutated": mutated, "direct": direct,
                            "unpatched": unpatched, "without": without,
                            "plain_mutated": plain_mutated, "handler_calls": total})
    if why:
        return refuse("bench_admission", why)
    p99_bound = next((le for le, c in hist.items() if total and c >= 0.99 * total), "n/a")
    print(f"## Admission webhook ({args.pods} pods per series; 2-core machine)\n")
    print("| series | n | p50 ms | p90 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|")
    print(row("pod creation, webhook on", with_hook))
    print(row("pod creation, no webhook", without))
    print(row("**webhook round trip (AdmissionReview over TLS, new connection)**", direct))
    print(f"\npods mutated with the webhook on: {mutated} of {len(with_hook)}; added to a pod "
          f"creation: p50 {pct(with_hook, 50) - pct(without, 50):+.2f} ms, p99 "
          f"{pct(with_hook, 99) - pct(without, 99):+.2f} ms (median "
          f"{statistics.median(with_hook) / statistics.median(without):.2f} ×); the handler "
          f"itself: {int(total)} calls, 99 % within {p99_bound} s "
          f"(ai4dl_admission_duration_seconds); target: round trip p99 < 20 ms")
    return 0


def _established(ext) -> bool:
    crd = ext.read_custom_resource_definition("phasemodels.ai4dl.io")
    return any(c.type == "Established" and c.status == "True"
               for c in crd.status.conditions or [])


if __name__ == "__main__":
    sys.exit(main())
