"""bench/bench_operator.py's tables: the results of a run as markdown on stdout. Separate so that
the measurement code carries no presentation."""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time

from ai4dl.controller.records import extra_writes
from ai4dl.controller.runtime import DEFAULT_RECORD_SHARE

from .common import fmt, table


def rss_flat(op: dict, field: str = "rss") -> str:
    """The operator's RSS over the last 10 measured windows: its range and spread, the soak's
    flatness (issue 44: within 5 %). ``field`` "rss": read 0.1 s after each window's line
    appeared (its round trimmed); "rss_window_peak": the peak since the previous window's line
    (VmHWM, reset at each line)."""
    rss = [r[field] for r in op.get("measured", [])[-10:] if r.get(field)]
    if len(rss) < 2:
        return "n/a (fewer than 2 measured windows)"
    spread = 100.0 * (max(rss) - min(rss)) / min(rss)
    return (f"{min(rss):.0f}-{max(rss):.0f} ({spread:.1f} %: "
            f"{'flat' if spread <= 5.0 else 'NOT flat'})")


def _records(r: dict) -> str:
    """A window's pod records written (the operator's counter's delta), needed / optional."""
    w = r.get("records_written")
    return f"{w.get('needed', 0):.0f} / {w.get('optional', 0):.0f}" if w else "n/a"


def records_str(measured: list[dict]) -> str:
    """The measured windows' pod records written, needed / optional: means and the most
    needed in one window."""
    got = [r["records_written"] for r in measured if r.get("records_written")]
    if not got:
        return "n/a"
    needed = [w.get("needed", 0.0) for w in got]
    optional = [w.get("optional", 0.0) for w in got]
    return (f"{statistics.mean(needed):.0f} / {statistics.mean(optional):.0f} "
            f"(needed: max {max(needed):.0f})")


def report(args, results: dict) -> None:
    op = results["op"]
    measured = op["measured"]
    secs = [r["seconds"] for r in measured if r["seconds"] is not None]
    done = [r["done_after_boundary"] for r in measured]
    n = len(measured)
    s0, s1 = op["snap0"], op["snap1"]
    writes = {}
    qr = qr_lat = float("nan")
    if s0 and s1 and n:
        for key, v in s1["api"].items():
            # leases: the API server's own heartbeat, not the operator's
            if key[0] in ("POST", "PUT", "PATCH", "DELETE", "APPLY") and key[1] != "leases":
                d = v - s0["api"].get(key, 0.0)
                if d > 0:
                    writes[key] = d / n
        qr = (s1["qr"] - s0["qr"]) / n
        dc = s1["qr_count"] - s0["qr_count"]
        qr_lat = (s1["qr_sum"] - s0["qr_sum"]) / dc if dc else float("nan")
    starts = [r["window_start"] for r in measured]
    if op["first_full"] is not None:
        starts = [op["records"][op["first_full"]]["window_start"]] + starts
    missed = sum(int(round((b - a) / args.window)) - 1 for a, b in zip(starts, starts[1:]))
    first = op["records"][op["first_full"]] if op["first_full"] is not None else None
    resized = [r["resized"] for r in measured]

    def write_str():
        if not writes:
            return "n/a"
        parts = [f"{v:.0f} {verb} {res}{'/' + sub if sub else ''}"
                 for (verb, res, sub), v in sorted(writes.items(), key=lambda kv: -kv[1])]
        return f"{sum(writes.values()):.0f} ({', '.join(parts)})"

    def cpu_str():
        if not (s0 and s1 and n):
            return "n/a"
        span = s1["t"] - s0["t"]
        d = {k: (s1["cpu"][k] - s0["cpu"][k]) / span for k in s0["cpu"]}
        return (f"{sum(d.values()):.2f} over {span:.0f} s (" +
                ", ".join(f"{k} {v:.2f}" for k, v in d.items()) + ")")

    def op_cpu_per_write():
        if not (s0 and s1 and n and writes):
            return "n/a"
        cpu = s1["cpu"]["operator"] - s0["cpu"]["operator"]
        return 1000.0 * cpu / (sum(writes.values()) * n)

    sc = results.get("scrape", {})
    rows = [
        ["pods", args.pods, ""],
        ["what the pods play", "5 real DLaaS training containers (ai4dl_samples)"
         if args.traces == "ai4dl-samples" else "6 synthetic DL jobs", f"at {args.speed:g}x"],
        ["load average before the benchmark started (1 min)",
         results.get("load_before", float("nan")), "< 1 for clean numbers"],
        ["windows measured (after the first with all pods)", f"{n} of {args.windows}", ""],
        ["window processing, median (s)", statistics.median(secs) if secs else None,
         f"<= {args.window}"],
        ["window processing, max (s)", max(secs) if secs else None, f"<= {args.window}"],
        ["window processing, first window with all pods (s)",
         first["seconds"] if first else None, ""],
        ["window done after its boundary, median / max (s) (incl. settle "
         f"{args.settle} s)", f"{fmt(statistics.median(done)) if done else 'n/a'} / "
                              f"{fmt(max(done)) if done else 'n/a'}", f"< {args.window}"],
        ["window boundaries missed while measuring", missed, "0"],
        ["operator start -> first window begins / ends (s)",
         f"{fmt(op['first_window_start'] + args.settle - op['started'], 1)} / "
         f"{fmt(op['first_window_done'] - op['started'], 1)}"
         if op.get("first_window_start") else "n/a", ""],
        ["operator RSS peak, VmHWM (MiB)", op["rss_peak"], "<= 286 (300 MB)"],
        ["operator RSS at end, VmRSS (MiB)", op["rss_now"], ""],
        ["operator RSS over the last 10 measured windows, each window's peak (VmHWM reset at "
         "each window's line), min-max (MiB)", rss_flat(op, "rss_window_peak"),
         "within 5 % (flat)"],
        ["operator RSS over the last 10 measured windows, read 0.1 s after each window's line, "
         "min-max (MiB)", rss_flat(op), "within 5 % (flat)"],
        ["Prometheus range queries per window", qr, "1"],
        ["query_range latency in Prometheus, mean (s)", qr_lat, ""],
        ["resizes per window, mean (min-max)",
         f"{statistics.mean(resized):.0f} ({min(resized)}-{max(resized)})" if resized else "n/a",
         ""],
        ["API writes per window (apiserver_request_total)", write_str(),
         f"<= {statistics.mean(resized) + 0.05 * args.pods:.0f} (resizes + 5 % of pods)"
         if resized else "resizes + 5 % of pods"],
        ["pod records written per window (the operator's count): needed before a resize / "
         "optional, mean (needed: max)", records_str(measured),
         f"optional <= {extra_writes(args.pods, DEFAULT_RECORD_SHARE)} (the operator's "
         "default share of pods less the PhaseModel's own); needed: a pod's first record, a "
         "lowered limit, a take-back"],
        [f"CPU used while measuring, cores (of {os.cpu_count()})", cpu_str(), ""],
        ["operator CPU per API write (ms)", op_cpu_per_write(), ""],
        ["exporter scrape duration, mean / max (s)",
         f"{fmt(sc.get('avg'), 3)} / {fmt(sc.get('max'), 3)}", "< 1 (scrape interval)"],
        ["samples per scrape", sc.get("samples"), ""],
        ["exporter render time, last (s)", results.get("render"), ""],
        [f"pod creation ({args.threads} threads) (s)", results.get("pod_create"), ""],
        ["control-plane start (s)", results.get("cp_start"), ""],
        ["model fit (s)", results.get("fit"), ""],
    ]
    print(f"\n## Operator at {args.pods} pods, window {args.window} s, step 1 s, "
          f"speed {args.speed:g}x ({os.cpu_count()} cores)\n")
    print(table(["metric", "value", "target"], rows))

    print("\nPer window (the operator's log and histogram):\n")
    wrows = []
    for i, r in enumerate(op["records"]):
        role = ("first full" if i == op["first_full"] else
                "measured" if op["first_full"] is not None and i > op["first_full"] else "warm-up")
        wrows.append([time.strftime("%H:%M:%S", time.localtime(r["window_start"])), role,
                      r["pods"], r["resized"], r["seconds"],
                      f"<= {r['bucket']:g}" if r["bucket"] else "n/a",
                      r["done_after_boundary"], r.get("rss_window_peak"), r.get("rss"),
                      _records(r), r["skipped"]])
    print(table(["window", "role", "pods", "resized", "processing (s)", "histogram bucket",
                 "done after boundary (s)", "operator RSS peak since the last window (MiB)",
                 "operator RSS 0.1 s after its line (MiB)", "pod records needed / optional",
                 "skipped"], wrows))

    breakdown(results)
    wi = results.get("whatif")
    if wi:
        print("\n## What-if: the same annotation patches (+1 changing key), other ways\n")
        print(table(["how", "patches", "seconds", "patches/s",
                     "client CPU per patch (ms, incl. exporter)", "new TLS connections"], wi))


def breakdown(results: dict, out=None) -> None:
    """Where the in-process window's time went (none with ``--no-breakdown``), on ``out``
    (stdout); a run that measured nothing prints it on stderr: where its window went instead."""
    say = functools.partial(print, file=out if out is not None else sys.stdout)
    bd = results.get("bd")
    if not bd:
        return
    tm, total = bd["timer"], bd["total"]
    sec, calls = tm.seconds, tm.calls
    rep = bd["report"]
    apply_s = sec.get("_apply", 0.0)
    fetch = sec.get("fetch", 0.0)
    http = sec.get("fetch: HTTP + JSON decode", 0.0)
    status_s = sec.get("status patch (PhaseModel)", 0.0)
    writers = getattr(__import__("ai4dl.controller.runtime", fromlist=["x"]), "WRITERS", 1)

    def row(stage, key=None, wall=None):
        c = calls.get(key, 0) if key else ""
        v = sec.get(key, 0.0) if key else None
        if wall is not None:
            v = wall
        share = f"{100 * v / total:.0f} %" if (wall is not None or key in (
            "fetch", "plan_window", "_apply", "status patch (PhaseModel)")) and total else ""
        per = f"{1000 * sec.get(key, 0.0) / c:.1f}" if key and c else ""
        return [stage, c, v, share, per]

    brows = [
        row("source.fetch (one range query)", "fetch"),
        row("  of which HTTP + JSON decode (_post)", "fetch: HTTP + JSON decode"),
        ["  of which placing points (numpy)", "", fetch - http, "", ""],
        row("plan_window (detect + policy + safety)", "plan_window"),
        row(f"_apply: pod writes ({writers} writer threads), wall", "_apply"),
        row("  resize patches (pods/resize), thread-seconds", "resize patches"),
        row("  annotation patches (pods), thread-seconds", "annotation patches"),
        row("  events (Resized), thread-seconds", "events"),
        row("  client answer -> models, all calls, thread-seconds",
            "client: response -> models"),
        row("status patch (PhaseModel)", "status patch (PhaseModel)"),
        row("rest of run (spec, selector, model cache, own metrics)",
            wall=total - fetch - sec.get("plan_window", 0.0) - apply_s - status_s),
        row("**WindowRunner.run total (wall)**", wall=total),
    ]
    say(f"\n## Where one window's time goes ({bd['pods']} pods, {rep.resized} resized, "
        f"skipped {rep.skipped}; one WindowRunner.run in the benchmark process before the "
        "operator starts)\n")
    say(table(["stage", "calls", "seconds", "share of wall", "ms per call"], brows))
    cpu = bd.get("cpu") or {}
    say(f"\nCPU seconds during that run ({total:.2f} s wall, 2 cores): "
        + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
        + f". Not in the window above: model built from the document once "
        f"{bd['model_build']:.2f} s (first window only); list + pod_info of {bd['pods']} "
        f"pods {bd['snapshot']:.2f} s (the operator does the same LIST at the start of "
        f"each window). Range queries sent: {bd['queries']}.")
