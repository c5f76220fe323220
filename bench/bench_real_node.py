"""The product's proof on a real node: the same real PyTorch training jobs as Guaranteed pods
under four sizing policies, and what each cost. Writes the "On a real node" table.

    AI4DL_REAL_NODE=1 PYTHONPATH=$PWD/operator .venv/bin/python bench/bench_real_node.py \
        --out docs/results/real-node.md          # + docs/results/real-node.json (raw)

Needs root and the real-node tier's programs (``bash e2e/node/build.sh``; ``make e2e-deps``).
Starts a harness control plane (etcd + kube-apiserver, ``e2e/controlplane``), the CRD, the
operator's ServiceAccount and RBAC (``deploy/rbac.yaml``), a real node (kubelet + containerd,
``e2e/node/node.py``) and the real Prometheus scraping the kubelet's /metrics/cadvisor; then
runs the jobs (``e2e/node/jobs.py``: ``cnn.py`` and ``transformer.py``, 2 minutes each, both at
once, requests = limits = the author's 1 cpu / 2 GiB) in a namespace per policy, one policy
after the other, ``--runs`` times in a row each (default 3: each job one workload,
a pod ``<job>-<run>`` with the job's ``ai4dl.io/workload`` label and a new seed):

1. ``static``: the author's requests, nothing resizes them. Its cAdvisor series are the
   recording the model is fitted on (``ai4dl`` API: PhaseModel + the trainer's auto choice
   and head-room tables, for the operator's step and window);
2. ``adaptive-max``: the operator (``python -m ai4dl.controller``, its own ServiceAccount,
   serving its admission webhook and sealing workload profiles with a state key) serving a
   PhaseModel of that kind, InPlace;
3. ``vpa``: the VPA recommender replica (``ai4dl.policy.vpa``) fed the same cAdvisor series
   and the static runs' history, one recommender per job kept across its runs, sizing each
   new pod from its target (VPA's admission controller) and applying it in place each window;
4. ``auto``: the operator serving a PhaseModel with the CRD's defaults (kind auto: the
   trainer's choice stored in the model), InPlace.

The operator's workload profiles are pre-loaded with the static runs, as the VPA replica is
(what the trainer's batch fill writes from Prometheus history; ``J.preload_profiles``): each run
under the operator starts from its workload's profile (requests and limits: it stays
Guaranteed), updated by the operator when each run ends, and its memory is held at the
workload's peak (with VPA's 15 % margin) until the point in the run where it came. Everything
started is stopped at the end (also on Ctrl-C/SIGTERM); ``--keep`` keeps the work folder
(operator, kubelet, Prometheus logs). Takes about 35 minutes on 2 cores with 3 runs.

A run that measured nothing (no job finished, no sample recorded from the static runs, an
operator policy that resized nothing in any of its runs) writes neither file, so the committed
table stays; it says why in one line on stderr and exits 1 (issue 44).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for _p in (REPO, REPO / "tests", REPO / "bench"):
    if str(_p) not in sys.path:
        sys.path.append(str(_p))

POLICIES = ("static", "adaptive-max", "vpa", "auto")
#: The policies the operator serves: a run of one that resized nothing measured nothing of it.
OPERATOR_POLICIES = ("adaptive-max", "auto")

from measured import refuse  # noqa: E402


def log(msg: str) -> None:
    print(f"[real-node {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def machine() -> str:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    return (f"{os.cpu_count()} cores ({model}), {mem:.0f} GiB, Linux {platform.release()}, "
            f"shared (load average {os.getloadavg()[0]:.1f} at the start)")


def measured_nothing(results: list[dict], meta: dict) -> str | None:
    """Why the runs measured nothing (None when they measured something): no job finished (the
    table would compare cut-off runs), no sample recorded from the static runs (no history and
    no model for the others), or an operator policy that resized nothing in any run (a
    refused model reads as "the operator changed nothing")."""
    jobs = [j for r in results for j in r["jobs"]]
    if not any(j["finished"] for j in jobs):
        return f"none of the {len(jobs)} jobs finished"
    if any(r["policy"] == "static" for r in results) and \
            not sum(((meta.get("model") or {}).get("samples") or {}).values()):
        return "0 samples recorded from the static runs: no history, no model"
    for policy in OPERATOR_POLICIES:
        runs = [r for r in results if r["policy"] == policy]
        if runs and not any(r["totals"]["resizes"] for r in runs):
            return f"the operator serving {policy} resized nothing in its {len(runs)} runs"
    return None


def create_namespace(core, name: str) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        core.create_namespace({"metadata": {"name": name}})
    except ApiException as err:
        if err.status != 409:
            raise


def start_operator(api, kubeconfig: Path, workdir: Path, prometheus_url: str):
    """The operator with its admission webhook (the chart's MutatingWebhookConfiguration,
    pointed at 127.0.0.1) and a state key: it seals the workload profiles it learns from each
    run's end and admits the next run of a known workload from its profile."""
    import yaml
    from kubernetes import client

    from e2e_fixtures_operator import free_port, state_key_file, wait_for
    from operator_bench.cluster import OperatorProcess

    port = free_port()
    docs = yaml.safe_load_all((REPO / "deploy" / "ai4dl-operator.yaml").read_text())
    mwc = next(d for d in docs if d and d["kind"] == "MutatingWebhookConfiguration")
    for hook in mwc["webhooks"]:
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}/admission"}
    adm = client.AdmissionregistrationV1Api(api)
    adm.create_mutating_webhook_configuration(mwc)
    op = OperatorProcess(kubeconfig, prometheus_url, workdir / "operator.log",
                         timeout=5, settle=1.5, extra_args=(
                             "--webhook-port", str(port), "--webhook-host", "127.0.0.1",
                             "--webhook-configuration", mwc["metadata"]["name"],
                             "--state-key-file", str(state_key_file(workdir)))).start()
    # serving once its certificate is in the configuration (the operator writes the CA bundle)
    wait_for(lambda: adm.read_mutating_webhook_configuration(mwc["metadata"]["name"])
             .webhooks[0].client_config.ca_bundle, 60, what="the webhook's CA bundle")
    return op


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="docs/results/real-node.md", help="the markdown table")
    ap.add_argument("--json", default=None, help="the raw results (default: --out's .json)")
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds each job runs (default: the jobs' own, 120)")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help=f"comma-separated, in order (default {','.join(POLICIES)}); the "
                         "operator's policies need static first (the model's recording)")
    ap.add_argument("--runs", type=int, default=3,
                    help="runs of each job in a row under each policy, one workload (default "
                         "3): what a policy learned from a job's earlier runs shows in the next")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    args = ap.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policy {unknown[0]!r} (known: {', '.join(POLICIES)})")
    if policies[0] != "static" and any(p in ("vpa", "auto") for p in policies):
        ap.error("vpa and auto need the static run first (the history and the model)")
    if args.runs < 1:
        return refuse("bench_real_node", f"--runs {args.runs}: no run of any job")
    if os.geteuid() != 0:
        ap.error("a real node needs root (cgroups, mounts)")

    def on_term(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    from kubernetes import client

    from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION
    from operator_bench.cluster import setup_cluster
    from e2e.controlplane import cluster as cpmod
    from e2e.node import jobs as J
    from e2e.node.node import RealNode, ensure_programs
    from e2e.prometheus.server import find_prometheus

    jobs = list(J.DEFAULT_JOBS)
    if args.duration:
        jobs = [replace(j, duration=args.duration) for j in jobs]
    out = Path(args.out)
    out_json = Path(args.json) if args.json else out.with_suffix(".json")
    workdir = Path(tempfile.mkdtemp(prefix="ai4dl-real-node-"))
    t_start = time.time()
    meta = {"machine": machine(), "jobs": [asdict(j) for j in jobs], "step": J.STEP,
            "window": J.WINDOW, "scrape": "5s", "kubelet": cpmod.KUBE_VERSION,
            "command": "bench/bench_real_node.py " + " ".join(argv if argv is not None
                                                              else sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d"), "notes": []}
    cp = node = prom = op = None
    results: list[dict] = []
    try:
        log("binaries (control plane, kubelet + containerd, Prometheus)")
        cpmod.ensure_binaries(quiet=True)
        ensure_programs()
        prom_bin = find_prometheus(install=True)
        cp = cpmod.ControlPlane(startup_timeout=120).start()
        api, op_kubeconfig = setup_cluster(cp, workdir)
        core = client.CoreV1Api(api)
        node = RealNode(cp).start()
        log(f"node {node.name} Ready in {node.start_seconds:.1f} s")
        prom = J.cadvisor_prometheus(cp, node, workdir / "prometheus", prom_bin)
        history: dict = {}                  # job -> the static runs' recordings
        model_doc = None
        for policy in policies:
            ns = f"jobs-{policy}"
            create_namespace(core, ns)
            kw: dict = {}
            if policy in ("adaptive-max", "auto"):
                if op is None:
                    op = start_operator(api, op_kubeconfig, workdir, prom.url)
                client.CustomObjectsApi(api).create_namespaced_custom_object(
                    GROUP, VERSION, ns, PLURAL, J.phasemodel_body("pm", policy, model_doc))
                if history:
                    from e2e_fixtures_operator import state_key_file

                    wrote = J.preload_profiles(api, ns, history, state_key_file(workdir))
                    log(f"{policy}: {wrote} WorkloadProfiles pre-loaded with the static runs")
                    time.sleep(3)           # the webhook's watch of them, before the first pod
                kw = {"labels": {OPT_IN_LABEL: "true"}, "annotations": {MODEL_ANNOTATION: "pm"}}
            recommenders = None             # the VPA replica's, kept across the runs
            for k in range(1, args.runs + 1):
                # a pod of its own name each run (a Job's re-runs are): cAdvisor goes on
                # exporting an exited container's last values for a minute or more, which a
                # pod re-created under the same name would have summed with its own
                run_jobs_k = [replace(j, name=f"{j.name}-{k}", workload=j.name,
                                      seed=j.seed + 100 * (k - 1)) for j in jobs]
                if policy == "vpa":
                    vpa = J.VpaUpdater(core, prom.url, ns, [j.name for j in run_jobs_k],
                                       recommenders=recommenders,
                                       workloads={j.name: j.workload for j in run_jobs_k},
                                       history=history if recommenders is None else None)
                    recommenders = vpa.recs
                    kw = {"vpa": vpa}
                log(f"{policy} run {k}/{args.runs}: {len(jobs)} jobs in {ns}")
                res = J.run_jobs(core, node, prom, ns, run_jobs_k, policy=policy, log=log, **kw)
                res["run"] = k
                results.append(res)
                t = res["totals"]
                log(f"{policy} run {k}: OOM kills {t['oom_kills']}, throttled "
                    f"{t['throttled_seconds']} s, {t['requested_core_hours']:.4f} core-h, "
                    f"{t['requested_gib_hours']:.4f} GiB-h, resizes {t['resizes']}, "
                    f"unfinished {t['unfinished']}")
                if policy == "static":
                    spans = {j["pod"]: (j["record"]["created"], j["record"]["created"]
                                        + j["wall_seconds"]) for j in res["jobs"]}
                    workload = {j["pod"]: j["job"] for j in res["jobs"]}
                    started = {j["pod"]: min(t[2] for t in j["record"]["terminations"].values())
                               for j in res["jobs"] if all(
                                   t[2] for t in j["record"]["terminations"].values())
                               and j["record"]["terminations"]}
                    for pod, ex in J.record_executions(prom.url, ns, spans,
                                                       started=started).items():
                        history.setdefault(workload[pod], []).append(ex)
            if policy == "static":
                meta["model"] = {"samples": {k: sum(map(len, v)) for k, v in history.items()}}
                if not sum(meta["model"]["samples"].values()):
                    break                   # nothing to fit: refused below, nothing written
                t0 = time.time()
                model_doc = J.fit_model_doc([e for got in history.values() for e in got])
                choice = model_doc.get("policyChoice") or {}
                meta["model"].update(fit_seconds=time.time() - t0,
                                     winners=choice.get("winners"),
                                     reason=choice.get("reason"))
                log(f"model fitted in {meta['model']['fit_seconds']:.1f} s on "
                    f"{meta['model']['samples']} samples; auto serves {choice.get('winners')}")
        if op is not None:
            meta["operator_log_tail"] = "\n".join(op.log_lines()[-60:])
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        return 130
    finally:
        if op is not None:
            op.stop()
        if prom is not None:
            with contextlib.suppress(Exception):
                prom.cleanup()
        if node is not None:
            problems = node.stop()
            if problems:
                log(f"node teardown left: {problems}")
        if cp is not None:
            with contextlib.suppress(Exception):
                cp.stop()
        if args.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    why = measured_nothing(results, meta)
    if why:
        return refuse("bench_real_node", why)
    meta["seconds"] = time.time() - t_start
    out.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    out.write_text(J.report_markdown(results, meta))
    log(f"wrote {out} and {out_json} in {meta['seconds'] / 60:.1f} min")
    print(out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
