"""Benchmark of the 300-PhaseModel flood against the real operator (issue 26 item 4), before
and after the fair shares. Prints a markdown table; asserts nothing, but refuses one that
measured nothing (below).

    PYTHONPATH=operator .venv/bin/python bench/bench_fairness_operator.py \
        [--flood 300] [--seconds 40] [--before-ref COMMIT]

A real kube-apiserver + etcd (e2e/controlplane), the CRD, the operator's RBAC (deploy/rbac.yaml)
and its ServiceAccount, the chart's MutatingWebhookConfiguration reaching the webhook by URL on
127.0.0.1; --flood PhaseModels with 4 s windows (the CRD's smallest) in one namespace and one
with a 12 s window in another (no pods: each window lists none and writes its status, the
cheapest window there is). For each scenario the operator runs as a subprocess (webhook on)
for --seconds, while AdmissionReview requests go straight to its webhook over TLS every 50 ms:

* before: the operator's code at --before-ref (default: the parent of the commit that brought
  the fair shares; ``git archive`` into a temporary folder), as it ran then: every PhaseModel
  every 4 s, its work through asyncio.to_thread;
* after (no minimum): this tree with --min-window-seconds 0 (the fair queue only);
* after (defaults): this tree with its defaults (--min-window-seconds 60, 4 window workers),
  run at least 70 s (the tenant's 12 s window is served every 60 s too).

Each scenario runs for its length and then, while the tenant has finished no window after its
start-up one, up to GRACE_SECONDS more seconds: on a busy machine the first boundary after
start-up can come late in a 60 s period. --skip-before leaves out the first scenario (a shallow
clone has no history to take it from), --skip-defaults the last (at least 70 s: the suite's
smoke run measures the no-minimum scenario only, the same code with another flag).

Measured: when the tenant's windows finished after their boundary (the operator's log line
time minus the window id; the probe of issue 26 saw 1.6 s alone, 6-11 s under the flood), and
the webhook's round trip (p50, p95). Everything started here is stopped at the end. A
scenario in which the tenant finished no window or the webhook answered no request measured
nothing: no table, the reason in one line on stderr, exit 1 (issue 44), as for --flood 0.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import http.client
import json
import os
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from measured import refuse  # noqa: E402

TENANT_WINDOW = 12
GRACE_SECONDS = 75.0     # one 60 s minimum window, and the operator's own start-up


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def phasemodel(name, window):
    from ai4dl.crd import GROUP, VERSION

    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": "none"}}, "stepSeconds": 1,
                     "windowSeconds": window, "policy": {"mode": "InPlace"}}}


def tenant_lateness(log: Path, ns: str) -> list[float]:
    """Seconds after its boundary each of the tenant's windows finished (its log line)."""
    out = []
    for stamp, w in re.findall(rf"^(\S+ \S+) INFO \S+: PhaseModel {ns}/pm window ([0-9.]+):",
                               log.read_text(), re.M):
        # logging's asctime is local time, as a naive datetime's timestamp() reads it
        t = dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        out.append(t - float(w))
    return out[1:]        # the first is the start-up window, handled late on purpose


def measured_nothing(rows) -> str | None:
    """Why the scenarios' ``rows`` measured nothing (None when each measured something): a
    scenario with no tenant window after the start-up one, or no webhook reply (its p50s are
    then nan, which reads as a figure in a table)."""
    for label, n, _, _, _, _, nreq in rows:
        if n == 0 or nreq == 0:
            return (f"scenario {label!r}: {n} tenant windows, {nreq} webhook replies (the "
                    f"tenant's window is {TENANT_WINDOW} s)")
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flood", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=40.0, help="length of each scenario")
    ap.add_argument("--before-ref", default="",
                    help="git commit of the operator before the change (default: the parent "
                         "of the fair shares' first commit)")
    ap.add_argument("--skip-before", action="store_true",
                    help="measure this tree only (no operator from the git history)")
    ap.add_argument("--skip-defaults", action="store_true",
                    help="leave out the scenario with the operator's defaults (70 s or more)")
    args = ap.parse_args(argv)
    if args.flood < 1:
        return refuse("bench_fairness_operator", f"--flood {args.flood}: no flood to measure "
                                                 "the tenant against")

    from kubernetes import client, config

    from ai4dl.crd import GROUP, PLURAL, VERSION
    from e2e.controlplane.cluster import ControlPlane, ensure_binaries
    from e2e_fixtures_operator import free_port, install_for_operator, stop_process, wait_for

    ensure_binaries(quiet=True)
    work = Path(tempfile.mkdtemp(prefix="ai4dl-bench-fairness-"))
    before = work / "before"
    if not args.skip_before:
        ref = args.before_ref or subprocess.run(
            ["git", "-C", str(REPO), "log", "-1", "--format=%H^", "--grep",
             "fair shares between namespaces (issue 26 item 4)"], capture_output=True,
            text=True, check=True).stdout.strip()
        if not ref:
            return refuse("bench_fairness_operator", "the commit that brought the fair shares "
                          "is not in this clone's history: pass --before-ref or --skip-before")
        before.mkdir()
        subprocess.run(f"git -C {REPO} archive {ref} operator | tar -x -C {before}",
                       shell=True, check=True)
    cp = ControlPlane().start()
    rows = []
    try:
        api = config.new_client_from_config(config_file=str(cp.kubeconfig))
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        adm = client.AdmissionregistrationV1Api(api)
        ext = client.ApiextensionsV1Api(api)
        port = free_port()
        kubeconfig, mwc = install_for_operator(cp, api, work, ["flood", "tenant"], port)
        wait_for(lambda: any(c.type == "Established" and c.status == "True" for c in
                             ext.read_custom_resource_definition("phasemodels.ai4dl.io")
                             .status.conditions or []), 30, what="CRD")
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: custom.create_namespaced_custom_object(
                GROUP, VERSION, "flood", PLURAL, phasemodel(f"pm{i}", 4)), range(args.flood)))
        custom.create_namespaced_custom_object(GROUP, VERSION, "tenant", PLURAL,
                                               phasemodel("pm", TENANT_WINDOW))
        review = json.dumps({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "x", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "namespace": "tenant", "operation": "CREATE",
                        "userInfo": {"username": "bench"}, "dryRun": False,
                        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {
                            "name": "p", "namespace": "tenant",
                            "labels": {"ai4dl.io/managed": "true", "app": "none"},
                            "annotations": {"ai4dl.io/phasemodel": "pm"}},
                            "spec": {"containers": [{"name": "main", "image": "pause",
                                                     "resources": {"requests": {"cpu": "1"}}}]}}}})
        scenarios = [("before (to_thread, every window)", str(before / "operator"), (),
                      args.seconds),
                     ("after, --min-window-seconds 0 (fair queue only)", str(REPO / "operator"),
                      ("--min-window-seconds", "0"), args.seconds),
                     ("after, defaults (minimum 60 s, 4 workers)", str(REPO / "operator"), (),
                      max(args.seconds, 70.0))][args.skip_before:3 - args.skip_defaults]

        def ca():
            return adm.read_mutating_webhook_configuration(
                mwc["metadata"]["name"]).webhooks[0].client_config.ca_bundle

        for label, src, extra, seconds in scenarios:
            old_ca = ca()
            log = work / f"operator-{len(rows)}.log"
            # TMPDIR: what an operator leaves there when stopped (its webhook's certificate
            # folder) goes with the work folder
            env = dict(os.environ, KUBECONFIG=str(kubeconfig), PYTHONUNBUFFERED="1",
                       PYTHONPATH=src, TMPDIR=str(work))
            proc = subprocess.Popen(
                [sys.executable, "-m", "ai4dl.controller", "--prometheus-url",
                 "http://127.0.0.1:9", "--metrics-port", "0", "--health-port", "0",
                 "--orphan-check-seconds", "0", "--webhook-port", str(port),
                 "--webhook-host", "127.0.0.1", "--webhook-configuration",
                 mwc["metadata"]["name"], *extra], env=env, stdout=open(log, "w"),
                stderr=subprocess.STDOUT)
            try:
                # each operator makes its own self-signed CA and writes it into the
                # configuration
                wait_for(lambda: ca() and ca() != old_ca, 60, what="the CA bundle")
                ctx = ssl.create_default_context(cadata=base64.b64decode(ca()).decode())
                rtt = []
                start = time.time()
                while (time.time() < start + seconds or (
                        not tenant_lateness(log, "tenant")
                        and time.time() < start + seconds + GRACE_SECONDS)):
                    t = time.perf_counter()
                    try:
                        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx,
                                                           timeout=10)
                        conn.request("POST", "/admission", review,
                                     {"Content-Type": "application/json"})
                        conn.getresponse().read()
                        conn.close()
                        rtt.append(time.perf_counter() - t)
                    except (OSError, ssl.SSLError):
                        pass                     # not serving yet (a fresh CA): next one
                    time.sleep(0.05)
            finally:
                stop_process(proc)
            late = tenant_lateness(log, "tenant")
            rows.append((label, len(late), statistics.median(late) if late else float("nan"),
                         max(late) if late else float("nan"), pct(rtt, 0.5) * 1000,
                         pct(rtt, 0.95) * 1000, len(rtt)))
            if measured_nothing(rows[-1:]):
                break                   # the table is refused below: no need for the rest
    finally:
        cp.stop()
        shutil.rmtree(work, ignore_errors=True)
    why = measured_nothing(rows)
    if why:
        return refuse("bench_fairness_operator", why)
    print(f"\n{args.flood} PhaseModels with 4 s windows in one namespace, one {TENANT_WINDOW} s "
          f"PhaseModel in another (no pods); {args.seconds:g} s per scenario; "
          f"{os.cpu_count()} CPUs (shared)\n")
    print("| operator | tenant windows | tenant finished after boundary p50 (s) | max (s) | "
          "webhook round trip p50 (ms) | p95 (ms) | requests |")
    print("|---|---|---|---|---|---|---|")
    for label, n, l50, lmax, a50, a95, nreq in rows:
        print(f"| {label} | {n} | {l50:.2f} | {lmax:.2f} | {a50:.1f} | {a95:.1f} | {nreq} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
