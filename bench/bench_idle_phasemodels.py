"""Benchmark of idle PhaseModels against the real operator (issue 43 item 10): what PhaseModels
with no pod cost the API server and the operator's memory. Prints a markdown table; asserts
nothing about the bars, but refuses one that measured nothing (below).

    PYTHONPATH=operator .venv/bin/python bench/bench_idle_phasemodels.py \
        [--phasemodels 1000] [--namespaces 10] [--window 60] [--windows 3]

A real kube-apiserver + etcd (e2e/controlplane), the CRDs, the operator's RBAC
(deploy/rbac.yaml) and its ServiceAccount (the chart's webhook configuration is removed: no
webhook here); the operator as a subprocess (``python -m ai4dl.controller``, its own
ServiceAccount, --min-window-seconds 0 by default so that short windows are served every
window, no webhook, a Prometheus URL where nothing listens: a PhaseModel with no pod sends no
query). Once it is up with no PhaseModel, its RSS is the baseline; then --phasemodels
PhaseModels (stepSeconds 1, --window windowSeconds, a selector no pod matches) are created,
spread over --namespaces namespaces, one first and the others after its first window. After
every one of them has logged its first window (kopf's own writes at creation, its finalizer
and annotations, come before: shown per PhaseModel created), and --warmup-windows periods
more, --windows periods are measured, from the middle of a period (window boundaries are on a
common grid, so every PhaseModel's window falls inside the span once per period):

* requests the API server counted (its own /metrics, apiserver_request_total, read before
  and after the span; this script makes no API call in between): pod LISTs, and writes
  (POST, PUT, PATCH, DELETE, DELETECOLLECTION, APPLY) split into status PATCHes of
  PhaseModels, Events, other; the API server's own lease renewals (PUT leases, every 10 s,
  which the operator's RBAC does not allow it) are shown apart and not counted as the
  operator's;
* windows served: the operator's window log lines written during the span;
* the operator's RSS (VmRSS): the baseline (up, no PhaseModel); after one PhaseModel's first
  window (which loads the window code, some 90 MiB, once: so that the others are created
  only then); after every first window; once per period; at the end. Per PhaseModel: (end -
  baseline) / PhaseModels, and (end - one) / (PhaseModels - 1), what each adds once the code
  is loaded (the bar's figure; the other is shown beside it).

``--model-kib K`` puts a valid model document of about K KiB (at most the 192 KiB a document may
hold) in every PhaseModel, as a fitted PhaseModel carries one (issue 43 item 3: what the
operator keeps per PhaseModel must not grow with its document). The documents are random but
consistent (tests/bounds_docs.py), at stepSeconds 1, and differ from one PhaseModel to the next.

Bars (issue 43 item 10, reported, not asserted): writes per window at most 1 % of the
PhaseModels, RSS at most 50 KB per PhaseModel. --operator-arg passes a flag on to the operator
(e.g. ``--operator-arg=--idle-after-seconds=0``), --warmup-windows waits that many periods more
before measuring (a PhaseModel found empty lists its pods less often only after a few empty
windows).

Everything started here is stopped and its folders removed at the end. A run that measured
nothing (--phasemodels 0, --windows 0, or fewer windows served in the span than half of
PhaseModels x periods: the operator did not serve them) prints no table, says why in one line
on stderr and exits 1 (issue 44).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from measured import refuse  # noqa: E402
from operator_bench.common import parse_metrics, proc_status  # noqa: E402

WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"}
WINDOW_LINE = re.compile(r"PhaseModel (\S+)/(\S+) window ([0-9.]+): ")
WRITES_BAR_PCT = 1.0        # writes per window, % of the PhaseModels
RSS_BAR_KB = 50.0           # operator RSS per PhaseModel


def phasemodel(name: str, window: int, model: dict | None = None) -> dict:
    from ai4dl.crd import GROUP, VERSION

    spec = {"selector": {"matchLabels": {"app": "none"}}, "stepSeconds": 1,
            "windowSeconds": window, "policy": {"mode": "InPlace"}}
    if model is not None:
        spec["model"] = model
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel", "metadata": {"name": name},
            "spec": spec}


def model_document(kib: float, seed: int) -> dict | None:
    """A valid model document of about ``kib`` KiB (its history grown until it is that large,
    within MAX_DOCUMENT_BYTES), at stepSeconds 1; None for ``kib`` 0."""
    from bounds_docs import doc

    from ai4dl.method.document_bounds import MAX_DOCUMENT_BYTES, MAX_HISTORY

    if kib <= 0:
        return None
    if kib not in _HISTORY:         # the same size for every PhaseModel: found once
        _HISTORY[kib] = 1
        for history in range(1, MAX_HISTORY + 1):
            size = len(json.dumps(doc(hidden=100, history=history, phases=16),
                                  separators=(",", ":")))
            if size > MAX_DOCUMENT_BYTES:
                break
            _HISTORY[kib] = history
            if size >= kib * 1024:
                break
    return {**doc(hidden=100, history=_HISTORY[kib], phases=16, seed=seed), "stepSeconds": 1.0}


_HISTORY: dict[float, int] = {}     # --model-kib -> the history that makes it


def document_kib(d: dict | None) -> float:
    return len(json.dumps(d, separators=(",", ":"))) / 1024 if d else 0.0


def rss_kb(pid: int) -> float:
    """VmRSS of a process, KB (nan when it is gone)."""
    return proc_status(pid).get("VmRSS", float("nan")) * 1024.0


def sockets(pid: int) -> int:
    """The process's open sockets (its connections, to the API server above all)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return 0
    n = 0
    for fd in fds:
        try:
            n += os.readlink(fd).startswith("socket:")
        except OSError:
            pass                # closed meanwhile
    return n


def api_counts(cp) -> Counter:
    """apiserver_request_total summed by (verb, resource, subresource), from its /metrics."""
    status, text = cp.request("GET", "/metrics", headers={"Accept": "text/plain"})
    if status != 200 or not isinstance(text, str):
        raise RuntimeError(f"the API server's /metrics: HTTP {status}")
    out: Counter = Counter()
    for _, labels, v in parse_metrics(text, {"apiserver_request_total"}):
        out[(labels.get("verb", ""), labels.get("resource", ""),
             labels.get("subresource", ""))] += v
    return out


def per_window(before: Counter, after: Counter, windows: int) -> dict:
    """The requests between two api_counts, per window: pod LISTs, the operator's writes
    (status PATCHes of PhaseModels, Events, other, and the other's (verb, resource,
    subresource)), and the API server's own lease renewals, kept apart."""
    delta = {k: after[k] - before.get(k, 0.0) for k in after if after[k] - before.get(k, 0.0)}
    out = {"pod_lists": 0.0, "writes": 0.0, "status_patches": 0.0, "events": 0.0,
           "other": 0.0, "leases": 0.0, "other_writes": {}}
    for (verb, resource, sub), n in delta.items():
        if verb == "LIST" and resource == "pods":
            out["pod_lists"] += n
        if verb not in WRITE_VERBS:
            continue
        if verb == "PUT" and resource == "leases":
            out["leases"] += n          # the API server's own (its identity lease)
            continue
        out["writes"] += n
        if verb == "PATCH" and resource == "phasemodels" and sub == "status":
            out["status_patches"] += n
        elif resource == "events":
            out["events"] += n
        else:
            out["other"] += n
            key = f"{verb} {resource}{'/' + sub if sub else ''}"
            out["other_writes"][key] = out["other_writes"].get(key, 0.0) + n
    per = max(1, windows)
    return {k: ({w: n / per for w, n in v.items()} if isinstance(v, dict) else v / per)
            for k, v in out.items()}


def window_lines(log: Path) -> list[tuple[str, str, float]]:
    """The operator's window log lines so far: (namespace, PhaseModel, window id)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    return [(ns, name, float(w)) for ns, name, w in WINDOW_LINE.findall(text)]


def measured_nothing(phasemodels: int, windows: int, served: int) -> str | None:
    """Why a run measured nothing (None when it measured something): no PhaseModel, no
    window measured, or fewer windows served in the span than half of PhaseModels x windows
    (the operator did not serve them)."""
    if phasemodels < 1:
        return f"--phasemodels {phasemodels}: no PhaseModel to measure"
    if windows < 1:
        return f"--windows {windows}: no window to measure"
    if served < phasemodels * windows / 2:
        return (f"{served} windows served in the measured span, fewer than half of "
                f"{phasemodels} PhaseModels x {windows} windows: the operator did not serve "
                "them")
    return None


def start_operator(work: Path, kubeconfig: Path, args) -> tuple[subprocess.Popen, Path]:
    """The operator as a subprocess (this tree's operator/), its log in ``work``."""
    log = work / "operator.log"
    # TMPDIR: whatever it leaves there goes with the work folder
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), PYTHONUNBUFFERED="1",
               PYTHONPATH=str(REPO / "operator"), TMPDIR=str(work))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ai4dl.controller", "--prometheus-url", "http://127.0.0.1:9",
         "--metrics-port", "0", "--health-port", "0", "--orphan-check-seconds", "0",
         "--min-window-seconds", f"{args.min_window_seconds:g}", *args.operator_arg],
        env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    return proc, log


def wait_up(proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    """Until kopf has started watching (its first watch-stream line, or the log quiet for a
    few seconds after it began), or the operator ended."""
    deadline, last, quiet_since = time.time() + timeout, -1, time.time()
    while time.time() < deadline and proc.poll() is None:
        text = log.read_text(errors="replace") if log.exists() else ""
        if len(text) != last:
            last, quiet_since = len(text), time.time()
        elif text and time.time() - quiet_since > 3.0:
            return
        time.sleep(0.5)


def create_phasemodels(custom, args, which: range) -> None:
    from ai4dl.crd import GROUP, PLURAL, VERSION

    def one(i: int) -> None:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, f"idle-{i % args.namespaces}", PLURAL,
            phasemodel(f"pm{i}", args.window, model_document(args.model_kib, seed=i)))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, which))


def wait_first_windows(proc: subprocess.Popen, log: Path, n: int, timeout: float) -> int:
    """Until each of the ``n`` PhaseModels has logged a window (or ``timeout`` s, or the
    operator ended); how many have."""
    deadline = time.time() + timeout
    seen = 0
    while time.time() < deadline and proc.poll() is None:
        seen = len({(ns, name) for ns, name, _ in window_lines(log)})
        if seen >= n:
            break
        time.sleep(0.5)
    return seen


def create_the_others(cp, proc: subprocess.Popen, log: Path, custom, args, period: int) -> dict:
    """Create PhaseModels 1 .. N-1 and wait for each one's first window: how long, the RSS
    then, and the requests in between per PhaseModel created (the creates themselves, kopf's
    PATCHes at creation: its finalizer and annotations, and the first windows')."""
    before, t = api_counts(cp), time.time()
    create_phasemodels(custom, args, range(1, args.phasemodels))
    created = time.time() - t
    first = wait_first_windows(proc, log, args.phasemodels, 120.0 + 3 * period)
    got = {"create_seconds": created, "first_windows": first, "first_seconds": time.time() - t,
           "rss_first": rss_kb(proc.pid)}
    got["creation"] = per_window(before, api_counts(cp), args.phasemodels - 1)
    return got


def sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


def measure(cp, proc: subprocess.Popen, log: Path, args, period: int) -> dict:
    """--windows periods from the middle of a period (after --warmup-windows more): the
    API server's counts and the window log lines at both ends, the RSS once per period."""
    settle = min(1.0, args.window / 2)      # the operator's --settle-seconds (default 1)
    now = time.time()
    t0 = (math.floor((now - settle) / period) + 0.5) * period + settle
    t0 += period * (args.warmup_windows + (t0 <= now))
    sleep_until(t0)
    before, lines0 = api_counts(cp), len(window_lines(log))
    rss = [rss_kb(proc.pid)]
    for i in range(1, args.windows + 1):
        sleep_until(t0 + i * period)
        rss.append(rss_kb(proc.pid))
    after, lines1 = api_counts(cp), len(window_lines(log))
    return {"requests": per_window(before, after, args.windows), "served": lines1 - lines0,
            "rss": rss, "span": time.time() - t0, "alive": proc.poll() is None,
            "sockets": sockets(proc.pid)}


def run(args) -> tuple[dict, str | None]:
    """Start everything, measure, stop everything; (the measurements, why nothing was)."""
    from kubernetes import client, config

    from ai4dl.controller.fairness import period_seconds
    from e2e.controlplane.cluster import ControlPlane, ensure_binaries
    from e2e_fixtures_operator import free_port, install_for_operator, stop_process

    ensure_binaries(quiet=True)
    work = Path(tempfile.mkdtemp(prefix="ai4dl-bench-idle-"))
    cp = ControlPlane().start()
    proc = None
    try:
        api = config.new_client_from_config(config_file=str(cp.kubeconfig))
        namespaces = [f"idle-{k}" for k in range(args.namespaces)]
        kubeconfig, mwc = install_for_operator(cp, api, work, namespaces, free_port())
        client.AdmissionregistrationV1Api(api).delete_mutating_webhook_configuration(
            mwc["metadata"]["name"])                                  # no webhook here
        proc, log = start_operator(work, kubeconfig, args)
        t = time.time()
        wait_up(proc, log)
        got = {"up_seconds": time.time() - t, "rss_baseline": rss_kb(proc.pid),
               "sockets_baseline": sockets(proc.pid)}
        custom = client.CustomObjectsApi(api)
        period = period_seconds(args.window, args.min_window_seconds)
        # one PhaseModel first: what its first window loads (the window code's imports) is
        # paid once, not per PhaseModel
        create_phasemodels(custom, args, range(1))
        wait_first_windows(proc, log, 1, 60.0 + 2 * period)
        got.update(rss_one=rss_kb(proc.pid), period=period)
        got.update(create_the_others(cp, proc, log, custom, args, period))
        got.update(measure(cp, proc, log, args, period))
        if not got["alive"]:
            print(f"[bench] the operator exited (status {proc.returncode}); log tail:\n"
                  + "\n".join(log.read_text(errors="replace").splitlines()[-20:]),
                  file=sys.stderr)
    finally:
        stop_process(proc)
        cp.stop()
        if args.operator_log and (work / "operator.log").exists():
            shutil.copyfile(work / "operator.log", args.operator_log)
        shutil.rmtree(work, ignore_errors=True)
    return got, measured_nothing(args.phasemodels, args.windows, got["served"])


def creation_writes(c: dict) -> str:
    """per_window's figures over the creation, as one cell."""
    parts = [f"{k}: {v:.2f}" for k, v in sorted(c["other_writes"].items())]
    parts += [f"status PATCHes: {c['status_patches']:.2f}", f"Events: {c['events']:.2f}",
              f"pod LISTs: {c['pod_lists']:.2f}"]
    return f"{c['writes']:.2f} (" + "; ".join(parts) + ")"


def print_table(args, got: dict) -> None:
    n, req = args.phasemodels, got["requests"]
    rss0, rss1 = got["rss_baseline"], got["rss"][-1]
    per_pm_kb = (rss1 - rss0) / n
    # what each PhaseModel adds once one has loaded the window code (nan for one)
    marginal_kb = (rss1 - got["rss_one"]) / (n - 1) if n > 1 else float("nan")
    writes_pct = 100.0 * req["writes"] / n
    met = {True: "met", False: "**not met**"}
    flags = " ".join([f"--min-window-seconds {args.min_window_seconds:g}", *args.operator_arg])
    print(f"\n{n} idle PhaseModels (no pod) in {args.namespaces} namespaces, windowSeconds "
          f"{args.window}, served every {got['period']} s (operator: {flags}); "
          f"{os.cpu_count()} CPUs (shared); created in {got['create_seconds']:.1f} s, all "
          f"{got['first_windows']} first windows logged {got['first_seconds']:.1f} s after the "
          f"next create\n")
    rows = [
        ("PhaseModels", f"{n}"), ("namespaces", f"{args.namespaces}"),
        ("model document per PhaseModel (KiB, serialised)",
         f"{document_kib(model_document(args.model_kib, seed=0)):.0f}"),
        ("windows measured", f"{args.windows} ({got['span']:.0f} s, after "
                             f"{args.warmup_windows} warm-up)"),
        ("windows served (log lines in the measured span)", f"{got['served']}"),
        ("pod LISTs per window", f"{req['pod_lists']:.1f}"),
        ("writes per window (% of PhaseModels)", f"{req['writes']:.1f} ({writes_pct:.2f} %)"),
        ("of which status PATCHes of PhaseModels", f"{req['status_patches']:.1f}"),
        ("of which Events", f"{req['events']:.1f}"),
        ("of which other", f"{req['other']:.1f}" + "".join(
            f"; {k}: {v:.1f}" for k, v in sorted(req["other_writes"].items()))),
        ("API server's own lease renewals per window (not counted)", f"{req['leases']:.1f}"),
        ("before the span: writes per PhaseModel created, until its first window",
         creation_writes(got["creation"])),
        ("operator RSS baseline, no PhaseModel (MiB)", f"{rss0 / 1024:.1f}"),
        ("operator RSS after one PhaseModel's first window (MiB)",
         f"{got['rss_one'] / 1024:.1f}"),
        ("operator RSS after every first window (MiB)", f"{got['rss_first'] / 1024:.1f}"),
        ("operator RSS per window (MiB)", ", ".join(f"{r / 1024:.1f}" for r in got["rss"])),
        ("operator RSS end (MiB)", f"{rss1 / 1024:.1f}"),
        ("operator's open sockets, baseline -> end",
         f"{got['sockets_baseline']} -> {got['sockets']}"),
        ("operator RSS per PhaseModel (KB): (end - baseline) / PhaseModels",
         f"{per_pm_kb:.1f}"),
        ("operator RSS per PhaseModel after the first (KB): (end - one) / (PhaseModels - 1)",
         f"{marginal_kb:.1f}"),
        (f"bar: writes per window <= {WRITES_BAR_PCT:g} % of PhaseModels",
         met[writes_pct <= WRITES_BAR_PCT]),
        (f"bar: RSS <= {RSS_BAR_KB:g} KB per PhaseModel (after the first; with the first: "
         f"{met[per_pm_kb <= RSS_BAR_KB]})",
         met[marginal_kb <= RSS_BAR_KB] if n > 1 else "n/a (one PhaseModel)"),
    ]
    print("| measure | value |")
    print("|---|---|")
    for label, value in rows:
        print(f"| {label} | {value} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phasemodels", type=int, default=1000)
    ap.add_argument("--namespaces", type=int, default=10, help="PhaseModels spread over them")
    ap.add_argument("--window", type=int, default=60, help="windowSeconds (the CRD's least: 4)")
    ap.add_argument("--windows", type=int, default=3, help="windows (periods) to measure")
    ap.add_argument("--warmup-windows", type=int, default=0,
                    help="periods to wait after every PhaseModel's first window (default 0)")
    ap.add_argument("--min-window-seconds", type=float, default=0.0,
                    help="the operator's --min-window-seconds (default 0: every window)")
    ap.add_argument("--model-kib", type=float, default=0.0,
                    help="a model document of about this many KiB in every PhaseModel "
                         "(default 0: none)")
    ap.add_argument("--operator-log", default=None, metavar="PATH",
                    help="keep the operator's log there (the rest is removed)")
    ap.add_argument("--operator-arg", action="append", default=[],
                    help="another flag for the operator (repeatable), e.g. "
                         "--operator-arg=--idle-after-seconds=0")
    args = ap.parse_args(argv)
    why = measured_nothing(args.phasemodels, args.windows, args.phasemodels * args.windows)
    if why:
        return refuse("bench_idle_phasemodels", why)
    args.namespaces = max(1, min(args.namespaces, args.phasemodels))
    got, why = run(args)
    if why:
        return refuse("bench_idle_phasemodels", why)
    print_table(args, got)
    return 0


if __name__ == "__main__":
    sys.exit(main())
