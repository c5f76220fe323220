"""Benchmark of workload profiles at scale (issue 42). Prints markdown tables; when it measured
nothing (too few workloads or threads, no profile read back, fewer writes or profiles kept than
workloads, no profile deleted by the bound) it prints none, says why in one line on stderr and
exits 1 (issue 44).

    .venv/bin/python bench/bench_profiles.py [--workloads 10000] [--threads 4]

A real kube-apiserver + etcd (e2e/controlplane), the CRDs, the operator's RBAC
(deploy/rbac.yaml) and a kubeconfig for its ServiceAccount, the chart's webhook configuration
by URL, one PhaseModel (InPlace) with a model that carries a learned first-window level, and
the operator serving the webhook as a subprocess. Then:

1. --workloads executions end, one per workload (two containers, cpu and memory, a run of
   eight early windows each), folded into their workloads' profiles by the window loop's own
   code (``ai4dl.controller.profiles.ProfileStore.record_runs``, with the operator's
   ServiceAccount and key), on --threads threads: writes per execution end (the API server's
   count of workloadprofile writes), the time per execution end, the bytes per object as
   stored (its JSON, read back) and in all;
2. the same executions reported again (an operator that saw them end twice): writes 0;
3. the operator's RSS before and after its index holds every profile (VmRSS, VmHWM), and a pod
   of the last workload admitted from its profile (a server-side dry run);
4. the operator SIGKILLed and started again: every profile still listed, a pod of the first
   workload admitted from its profile, and the time until then;
5. the bound: ``ProfileStore.refresh`` (one paged LIST, the window loop's hourly check) timed
   at --workloads objects, then with a bound of half of them (the deletes it makes).
Everything started here is stopped, and its temporary folder removed, at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from measured import refuse  # noqa: E402

GiB = 2.0 ** 30


def run_of(i: int, now: float):
    from ai4dl.rules.workload_profile import EARLY_WINDOWS, SHAPE_BINS, RunSummary

    mem = (2.0 + (i % 17) / 4.0) * GiB
    early = tuple((0.5 + k / 10.0, mem * (1.0 + k / 8.0)) for k in range(EARLY_WINDOWS))
    # a full memory shape (every stretch a run may keep), climbing to its peak at its end
    shape = tuple(mem * (1.0 + k / (SHAPE_BINS - 1)) for k in range(SHAPE_BINS))
    return RunSummary(now - 600.0, 3600.0, early[0], (2.0, mem * 2.0), (120.0, 1800.0),
                      early=early, run_id=f"run-{i}", shape=shape,
                      shape_seconds=3600.0 / SHAPE_BINS)


def rss_kib(pid: int) -> tuple[int, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def write_count(cp) -> float:
    """workloadprofiles writes (create, update, patch) the API server has served so far."""
    from operator_bench.measure import apiserver_counts

    return sum(v for (verb, resource, _), v in apiserver_counts(cp).items()
               if resource == "workloadprofiles" and verb in ("POST", "PUT", "PATCH", "APPLY"))


def too_small(args) -> str | None:
    """Why these sizes measure nothing (None when they measure): the bound keeps half of the
    workloads, so one workload deletes nothing; no thread writes nothing."""
    if args.workloads < 2:
        return f"--workloads {args.workloads}: at least 2 (the bound deletes half of them)"
    if args.threads < 1:
        return f"--threads {args.threads}: no thread to write with"
    return None


def measured_nothing(n: int, writes: float, kept: int, deleted_half: int) -> str | None:
    """Why the run measured nothing usable (None when it measured): fewer writes than the
    ``n`` execution ends (a profile not written), fewer profiles kept after the SIGKILL than
    written, or a bound of half that deleted none."""
    if writes < n or kept < n or deleted_half < 1:
        return (f"{n} workloads: {writes:.0f} writes, {kept} profiles kept after a SIGKILL, "
                f"{deleted_half} deleted by a bound of {n // 2}")
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", type=int, default=10000)
    ap.add_argument("--threads", type=int, default=4)
    args = ap.parse_args(argv)
    why = too_small(args)
    if why:
        return refuse("bench_profiles", why)

    from kubernetes import client, config

    from ai4dl.controller.pods import A_ADMISSION
    from ai4dl.controller.podstate import StateKey
    from ai4dl.controller.profiles import ProfileStore
    from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, VERSION
    from ai4dl.crd_profile import PROFILE_PLURAL
    from ai4dl.kube.raw import paged_items
    from e2e.controlplane.cluster import ControlPlane, ensure_binaries
    from e2e_fixtures_operator import (Operator, free_port, install_for_operator,
                                       state_key_file, wait_for)
    from operator_bench.cluster import admitting_phasemodel

    ensure_binaries(quiet=True)
    work = Path(tempfile.mkdtemp(prefix="ai4dl-bench-profiles-"))
    cp = ControlPlane().start()
    op = None
    rows: list[tuple[str, str]] = []
    try:
        api = config.new_client_from_config(config_file=str(cp.kubeconfig))
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        port = free_port()
        kubeconfig, mwc = install_for_operator(cp, api, work, ["bench"], port)
        pm = admitting_phasemodel(custom, "bench", executions=12, epochs=5)
        op = Operator(kubeconfig, "http://127.0.0.1:9", work / "operator.log", extra_args=(
            "--webhook-port", str(port), "--webhook-host", "127.0.0.1",
            "--webhook-configuration", mwc["metadata"]["name"],
            "--orphan-check-seconds", "0")).start()

        def pod(workload: int) -> dict:
            return {"metadata": {"name": f"p-{workload}", "namespace": "bench",
                                 "labels": {OPT_IN_LABEL: "true", "app": "train",
                                            "ai4dl.io/workload": f"w{workload}"},
                                 "annotations": {MODEL_ANNOTATION: "pm"}},
                    "spec": {"containers": [
                        {"name": c, "image": "registry.k8s.io/pause",
                         "resources": {"requests": {"cpu": "4", "memory": "32Gi"}}}
                        for c in ("main", "loader")]}}

        def note(workload: int) -> str:
            got = core.create_namespaced_pod("bench", pod(workload), dry_run="All")
            return (got.metadata.annotations or {}).get(A_ADMISSION, "")
        wait_for(lambda: note(0).startswith("set by"), 90, what="the webhook admitting pods")
        rss_before = rss_kib(op.proc.pid)

        # 1. one execution end per workload, through the window loop's own store
        op_api = config.new_client_from_config(config_file=str(kubeconfig))
        op_api.configuration.connection_pool_maxsize = args.threads * 2
        key = StateKey.from_file(state_key_file(work))
        stores = [ProfileStore(client.CustomObjectsApi(op_api), "bench", "pm", key)
                  for _ in range(args.threads)]
        now = time.time()
        uid = pm["metadata"]["uid"]
        resources = ("cpu", "memory")

        def end(i: int) -> float:
            t = time.perf_counter()
            r = run_of(i, now)
            stores[i % args.threads].record_runs(f"Label/w{i}", [("main", r), ("loader", r)],
                                                 resources, uid, now, 1.0)
            return time.perf_counter() - t
        writes0 = write_count(cp)
        started = time.perf_counter()
        with ThreadPoolExecutor(args.threads) as pool:
            took = list(pool.map(end, range(args.workloads)))
        wall = time.perf_counter() - started
        writes = write_count(cp) - writes0
        # 2. the same ends again: nothing to write
        with ThreadPoolExecutor(args.threads) as pool:
            list(pool.map(end, range(min(args.workloads, 1000))))
        rewrites = write_count(cp) - writes0 - writes

        sizes = [len(json.dumps(item, separators=(",", ":")))
                 for item in paged_items(custom.list_namespaced_custom_object, GROUP, VERSION,
                                         "bench", PROFILE_PLURAL)]
        if not sizes:               # the finally below stops the cluster first
            return refuse("bench_profiles", "no WorkloadProfile was read back")
        last = args.workloads - 1
        wait_for(lambda: "profile" in note(last), 300, interval=1.0,
                 what="the last workload admitted from its profile")
        rss_after = rss_kib(op.proc.pid)

        # 4. SIGKILL, restart: every profile kept and served
        import signal

        op.stop(signal.SIGKILL)
        t = time.perf_counter()
        op.start()
        # admission waits for its profile index's first LIST (ai4dl.controller.profile_index)
        wait_for(lambda: "profile" in note(0), 900, interval=1.0,
                 what="the first workload admitted from its profile after a SIGKILL")
        back_in = time.perf_counter() - t
        kept = sum(1 for _ in paged_items(custom.list_namespaced_custom_object, GROUP, VERSION,
                                          "bench", PROFILE_PLURAL))
        rss_restarted = rss_kib(op.proc.pid)

        # 5. the bound: the hourly LIST, then a bound of half
        t = time.perf_counter()
        known, deleted = stores[0].refresh(args.workloads)
        unread = sum(1 for g in known.values() if g.problem is not None)
        listed_s = time.perf_counter() - t
        t = time.perf_counter()
        half, deleted_half = stores[0].refresh(args.workloads // 2)
        pruned_s = time.perf_counter() - t
    finally:
        if op is not None:
            op.stop()
        cp.stop()
        shutil.rmtree(work, ignore_errors=True)

    n = args.workloads
    why = measured_nothing(n, writes, kept, deleted_half)
    if why:
        return refuse("bench_profiles", why)
    from ai4dl.controller.profiles import profile_object
    from ai4dl.rules.workload_profile import MAX_RUNS, profile_from_runs

    full = profile_from_runs(("cpu", "memory"), [run_of(k, now + k) for k in range(MAX_RUNS)])
    full_bytes = len(json.dumps(profile_object("bench", "pm", uid, "Label/w0",
                                               {"main": full, "loader": full}, key, now, 1.0),
                                separators=(",", ":")))
    rows = [
        ("execution ends (one per workload, 2 containers)", f"{n:,}"),
        ("writes per execution end (API server's count)", f"{writes / n:.3f}"),
        ("writes when the same ends are reported again", f"{rewrites:.0f} (of "
                                                         f"{min(n, 1000):,} reports)"),
        ("time per execution end, median (GET + write)",
         f"{statistics.median(took) * 1000:.1f} ms ({args.threads} threads; "
         f"{n / wall:.0f} ends/s)"),
        ("bytes per WorkloadProfile object (JSON as stored), median",
         f"{statistics.median(sizes):,.0f}"),
        ("bytes of all profiles", f"{sum(sizes) / 2 ** 20:.1f} MiB"),
        (f"bytes of a full profile ({MAX_RUNS} runs × 2 containers; × {n:,})",
         f"{full_bytes:,} ({full_bytes * n / 2 ** 20:.0f} MiB)"),
        ("operator RSS, index empty → holding every profile",
         f"{rss_before[0] / 1024:.0f} → {rss_after[0] / 1024:.0f} MiB (peak "
         f"{rss_after[1] / 1024:.0f}); " + (
             f"{(rss_after[0] - rss_before[0]) / n:.1f} KiB per workload"
             if rss_after[0] >= rss_before[0] else
             "no growth to divide (start-up memory given back meanwhile)")),
        ("after SIGKILL: profiles kept", f"{kept:,} of {len(sizes):,}"),
        ("after SIGKILL: restarted to a pod admitted from its profile",
         f"{back_in:.1f} s (RSS {rss_restarted[0] / 1024:.0f} MiB)"),
        ("the window loop's hourly LIST (refresh: read and verify every profile)",
         f"{listed_s:.2f} s, {len(known):,} workloads ({unread} not verified), "
         f"{deleted} deleted"),
        (f"bound {n // 2:,}: refresh deleting the least recently ended",
         f"{pruned_s:.2f} s, {deleted_half:,} deleted, {len(half):,} kept"),
    ]
    print(f"## Workload profiles at {n:,} workloads (one PhaseModel; 2-core machine)\n")
    print("| measure | value |")
    print("|---|---|")
    for label, value in rows:
        print(f"| {label} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
