"""``ai4dl evaluate --prometheus URL --selector MATCHERS --engine local|dask``: a cluster's
history replayed piece by piece, so that memory is bounded by a piece, not by the cluster
(issue 44; docs/scaling.md, "A cluster's history").

The containers are found once (``/api/v1/series``), with their owners and requests
(kube-state-metrics, :mod:`ai4dl.sources.workloads`), and packed into *pieces* of whole
workloads (``--piece-containers``; a larger workload is a piece of its own). Each piece is a
task (:func:`replay_piece`) that pulls only its containers' history (the trainer's chunked
pull), replays it as served (:func:`ai4dl.evaluation.evaluate.replay_served`: the PhaseModel of
``--phasemodel``/``--phasemodel-file`` and the policies that need no fit; without a PhaseModel,
those alone) and returns its sums (:mod:`ai4dl.evaluation.partitioned`), then lets its history
go. The pieces run on an engine (:mod:`ai4dl.cli.engines`); their sums are merged in piece
order (the same figures whatever the engine and the order the pieces finish), then matched.

Nothing is fitted: cross-fitting needs every pod's history at once (the replay without
``--engine``). The report: the policies at matched shares of windows at risk, the per-workload
table and the totals against the requests; ``--markdown`` and ``--json`` written once
everything is computed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ai4dl.cli.common import evaluation_flags, say
from ai4dl.cli.engines import ENGINES, engine
from ai4dl.cli.replay import (check_phasemodel_window, check_replay_flags, label_executions,
                              phasemodel_name, replay_setup, served_from_spec)
from ai4dl.cli.trainer import RunLog, open_source
from ai4dl.crd_spec import parse_duration
from ai4dl.errors import Ai4dlError
from ai4dl.evaluation import partitioned as part
from ai4dl.evaluation import workload_report as wr
from ai4dl.evaluation.evaluate import EvaluationConfig, replay_served
from ai4dl.evaluation.report import markdown_table
from ai4dl.evaluation.starts import trace_request
from ai4dl.io.writers import write_text_atomic
from ai4dl.method.traces import DEFAULT_MAX_GAP_STEPS, TraceSet
from ai4dl.policy import catalog
from ai4dl.sources import workloads as owners_src
from ai4dl.sources.prometheus import PrometheusSource
from ai4dl.sources.prometheus_history import PrometheusHistory
from ai4dl.sources.prometheus_types import PodRef

DEFAULT_PIECE_CONTAINERS = 50
SERVED = "phasemodel"


def add_engine_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("a cluster's replay, piece by piece (with --prometheus)")
    g.add_argument("--engine", choices=ENGINES, help="replay the history piece by piece "
                   "(whole workloads per piece, memory bounded by a piece) on this machine "
                   "(local) or on Dask (dask); nothing is fitted: give --phasemodel or "
                   "--phasemodel-file to replay a PhaseModel as served (default: the whole "
                   "history at once, cross-fitted)")
    g.add_argument("--workers", type=int, default=1, metavar="N", help="worker processes "
                   "(local: 1 runs in this process; dask: the LocalCluster's; default 1)")
    g.add_argument("--scheduler", metavar="ADDRESS", help="--engine dask: an existing "
                   "cluster's scheduler, e.g. tcp://dask-scheduler:8786 (default: a "
                   "LocalCluster of --workers processes)")
    g.add_argument("--piece-containers", type=int, default=DEFAULT_PIECE_CONTAINERS,
                   metavar="N", help="containers per piece, whole workloads (default "
                   f"{DEFAULT_PIECE_CONTAINERS})")


def check_engine_flags(args: argparse.Namespace) -> None:
    """Flag errors before any I/O (exit 2)."""
    if getattr(args, "engine", None) is None:
        if getattr(args, "scheduler", None):
            raise Ai4dlError("--scheduler needs --engine dask")
        return
    if not args.prometheus:
        raise Ai4dlError("--engine replays a Prometheus's history: give --prometheus URL")
    if args.piece_containers < 1:
        raise Ai4dlError(f"--piece-containers must be at least 1, got {args.piece_containers}")
    if args.workers < 1:
        raise Ai4dlError(f"--workers must be at least 1, got {args.workers}")
    if args.plots:
        raise Ai4dlError("--plots is not available with --engine (the pieces keep sums, not "
                         "series)")
    if args.max_samples:
        raise Ai4dlError("--max-samples is not available with --engine (each piece is "
                         "pulled whole)")


# ----------------------------------------------------------------------------- one piece
@dataclass(frozen=True)
class PieceTask:
    """What a worker needs to replay one piece (it pickles: no client, no open socket)."""
    prometheus: str
    timeout: float
    retries: int
    concurrency: int
    selector: str
    features: tuple
    units: tuple
    step: float
    start: float
    end: float
    max_gap_steps: float
    containers: dict             # PodRef -> raw series (PrometheusHistory.discover)
    owner_of: dict               # (namespace, pod) -> Owner
    requested: dict              # PodRef -> {"cpu": cores, "memory": bytes}
    config: EvaluationConfig
    spec: dict | None            # the PhaseModel's spec, served in the worker
    grid: np.ndarray


def replay_piece(task: PieceTask) -> part.PieceSummary | None:
    """One piece: its containers' history pulled, replayed as served, summed (None: no
    execution long enough)."""
    with PrometheusSource(task.prometheus, timeout=task.timeout, retries=task.retries) as src:
        hist = PrometheusHistory(src, list(task.features), task.selector, task.step,
                                 units=task.units, max_gap_steps=task.max_gap_steps,
                                 concurrency=task.concurrency)
        result = hist.executions(task.start, task.end, containers=task.containers)
    if not result.executions:
        return None
    label_executions(result.executions, task.owner_of, task.requested)
    policy = model = level = None
    if task.spec is not None:
        _, model, served = served_from_spec(task.spec, "the PhaseModel")
        policy, level = served.policy, served.cold_start
    traces = TraceSet(result.executions)
    res = replay_served(traces, task.config, policy, SERVED, model, level)
    by_name = {e.name: e for e in result.executions}
    replayed = [by_name[n] for n in res.data.names]
    owners = [task.owner_of[(e.meta["namespace"], e.meta["pod"])] for e in replayed]
    requests = [trace_request(e, res.data.resources) for e in replayed]
    return part.summarise(res, owners, requests, task.grid)


def plan_pieces(containers: dict[PodRef, int], owner_of: dict, size: int
                ) -> list[dict[PodRef, int]]:
    """The containers packed into pieces of at most ``size``, whole workloads (the pod's top
    controller and the container) in name order; a larger workload is a piece of its own."""
    by_workload: dict[str, list[PodRef]] = {}
    for ref in sorted(containers):
        key = f"{owner_of[(ref.namespace, ref.pod)].key}/{ref.container}"
        by_workload.setdefault(key, []).append(ref)
    pieces: list[dict[PodRef, int]] = []
    current: dict[PodRef, int] = {}
    for key in sorted(by_workload):
        refs = by_workload[key]
        if current and len(current) + len(refs) > size:
            pieces.append(current)
            current = {}
        current.update({r: containers[r] for r in refs})
    if current:
        pieces.append(current)
    return pieces


# ----------------------------------------------------------------------------- the run
def evaluate_cluster(args: argparse.Namespace) -> int:
    """``ai4dl evaluate --prometheus ... --engine``: found, planned, replayed piece by piece on
    the engine, merged, reported; the files written once everything is computed."""
    check_replay_flags(args)
    check_engine_flags(args)
    check_phasemodel_window(args)
    kw, model_params = evaluation_flags(args)
    if model_params:
        raise Ai4dlError("--engine fits no model: the model's flags (--phases, --epochs, ...) "
                         "do not apply")
    try:
        since_s = parse_duration(args.since)
    except ValueError as err:
        raise Ai4dlError(f"--since: {err}") from None
    setup = _setup(args, kw)
    now = time.time()
    start = now - since_s
    t0 = time.perf_counter()
    found = _found(args, setup, start, now)
    pieces = plan_pieces(found.containers, found.owner_of, args.piece_containers)
    tasks = [PieceTask(args.prometheus, args.prometheus_timeout,
                       max(0, args.prometheus_retries), args.prometheus_concurrency,
                       found.selector, tuple(setup.features), tuple(setup.units), setup.step,
                       start, now, args.max_gap_steps or DEFAULT_MAX_GAP_STEPS, piece,
                       {(r.namespace, r.pod): found.owner_of[(r.namespace, r.pod)]
                        for r in piece},
                       {r: found.requested[r] for r in piece if r in found.requested},
                       setup.config, setup.spec_doc, part.factor_grid())
             for piece in pieces]
    say(args, f"{len(found.containers)} containers in {len(pieces)} pieces of at most "
         f"{args.piece_containers}, on {args.engine} ({args.workers} worker"
         f"{'s' if args.workers > 1 else ''})")
    merged = _run_pieces(args, tasks)
    if merged is None:
        raise Ai4dlError(f"nothing to replay for selector {{{found.selector}}} in the last "
                         f"{args.since} at {args.prometheus}: {len(found.containers)} "
                         "containers matched but none has enough samples of every feature")
    merged = part.with_rows_sorted(merged)
    seconds = time.perf_counter() - t0
    terminal, full, doc = _rendered(args, merged, found, setup, len(pieces), seconds)
    written = []
    if args.markdown:
        write_text_atomic(Path(args.markdown), full)
        written.append(args.markdown)
    if doc is not None:
        write_text_atomic(Path(args.json),
                          json.dumps(doc, allow_nan=False, indent=1, ensure_ascii=False) + "\n")
        written.append(args.json)
    sys.stdout.write(terminal)
    if written:
        say(args, "wrote " + ", ".join(str(p) for p in written))
    return 0


@dataclass
class _Setup:
    features: list
    units: list
    step: float
    config: EvaluationConfig
    served: object | None
    spec_doc: dict | None        # the PhaseModel's spec as a plain document, for the workers


def _setup(args: argparse.Namespace, kw: dict) -> _Setup:
    """The features, step, window, policies and safety layer: the PhaseModel's where one is
    given (as :func:`ai4dl.cli.replay.replay_setup` reads them), else the flags'."""
    spec, _, served, features, units, step, resources, safety = replay_setup(args, kw)
    kw["workload_by"] = "workload"
    cfg = EvaluationConfig(resources=tuple(resources), safety=safety,
                           **{**kw, "test_fraction": 0.0})
    if served is not None and cfg.initial == "model" and served.cold_start is None:
        raise Ai4dlError("--initial model: the PhaseModel's model learned no first-window "
                         "level (no head-room tables)")
    return _Setup(features, units, step, cfg, served,
                  spec.model_dump(mode="json", by_alias=True, exclude_none=True)
                  if spec is not None else None)


@dataclass
class _Found:
    selector: str
    containers: dict
    owner_of: dict
    from_ksm: int
    requested: dict


def _found(args: argparse.Namespace, setup: _Setup, start: float, end: float) -> _Found:
    """The containers with history, their owners and requests: asked once, for all pieces."""
    selector, src = open_source(args)
    with src:
        hist = PrometheusHistory(src, list(setup.features), selector, setup.step,
                                 units=setup.units)
        containers = hist.discover(start, end)
        if not containers:
            raise Ai4dlError(f"nothing to replay for selector {{{selector}}} in the last "
                             f"{args.since} at {args.prometheus}: no series matched")
        refs = sorted(containers)
        owner_of, from_ksm = owners_src.owners(src, refs, start, end)
        requested = owners_src.requests(src, refs, start, end)
    say(args, f"owners: {from_ksm} of {len(owner_of)} pods from kube_pod_owner, the rest from "
         f"their names; requests known for {len(requested)} of {len(refs)} containers")
    return _Found(selector, containers, owner_of, from_ksm, requested)


def _run_pieces(args: argparse.Namespace, tasks: list[PieceTask]):
    """Every piece on the engine (with a progress bar on a terminal), merged in piece order."""
    log = RunLog("text", args.quiet)
    bar = log.progress(len(tasks), "pieces", "piece")
    got: list = [None] * len(tasks)
    try:
        with engine(args.engine, args.workers, args.scheduler) as run:
            for i, summary in run(replay_piece, tasks):
                got[i] = summary
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    merged = None
    for s in got:
        if s is not None:
            merged = s if merged is None else merged + s
    return merged


# ----------------------------------------------------------------------------- the report
def matched_table(summary: part.PieceSummary, shares) -> str:
    """Per policy and resource, at each share of windows at risk: allocation ÷ oracle at the
    first grid factor that meets it (the factor), or the floor and the cost there."""
    rows: dict = {}
    for m in part.matched(summary, shares):
        if math.isfinite(m.factor):
            cell = (f"{m.vs_oracle:.3f} (× {m.factor:.3f}; worst window "
                    f"{100 * m.worst_shortfall_rel:.0f} % short)")
        else:
            cell = f"floor {100 * m.floor:.1f} %: {m.vs_oracle:.3f} (× {m.grid_factor:.3f})"
        rows.setdefault((m.policy, m.resource), []).append(cell)
    header = ["policy", "resource", *[f"{100 * s:g} % of windows at risk" for s in shares]]
    order = [p for p in catalog.names() if p in summary.sums] + \
        [p for p in summary.sums if p not in catalog.names()]
    body = [[p, r, *rows[(p, r)]] for p in order for r in summary.resources]
    return markdown_table(header, body)


def _rendered(args, merged: part.PieceSummary, found: _Found, setup: _Setup, pieces: int,
              seconds: float) -> tuple[str, str, dict | None]:
    """(what the terminal shows, the markdown file, the JSON document or None)."""
    cfg = setup.config
    shares = cfg.risks
    names = list(merged.sums)
    shown = SERVED if SERVED in merged.sums else next(
        (p for p in (catalog.baseline(), *names) if p in merged.sums))
    served = (f"PhaseModel {phasemodel_name(args)} "
              f"({setup.served.summary()})" if setup.served is not None
              else "no PhaseModel: the policies that need no fit")
    head = (f"# A cluster's replay: {args.prometheus} {{{found.selector}}}, last {args.since}"
            f"\n\n{merged.total.pods} pods, {merged.executions} executions, "
            f"{merged.samples:,} samples of {setup.step:g} s in {pieces} pieces on "
            f"{args.engine} ({args.workers} worker{'s' if args.workers > 1 else ''}), "
            f"{seconds:.1f} s. {served}. Window {cfg.window} samples; first window "
            f"{'scored' if cfg.include_cold_start else 'not scored'}; initial request "
            f"{cfg.initial}"
            + (f" ({merged.starts.describe()})" if merged.starts is not None else "") + ".")
    risk = ("At a matched share of windows at risk (the allocation ÷ the oracle's at the "
            "first factor of the grid, 64 to a factor of two, whose windows at risk are "
            "within the share; the factor goes on the policy's own rows and the safety layer "
            "serves them):\n\n" + matched_table(merged, shares))
    intro = (f"{len(merged.rows)} workloads. Per workload: the mean request, usage and "
             f"allocation of **{shown}**, its fulfilment and windows short (cpu / memory), "
             f"and the saving against the requests.")
    totals = ("Every policy in total, at its own allocation:\n\n"
              + wr.totals_table(merged.total, merged.resources, merged.units, names))

    def page(top):
        return "\n\n".join([head, risk, intro,
                            wr.workload_table(merged.rows, merged.total, shown,
                                              merged.resources, merged.units, top),
                            totals]) + "\n"

    doc = _json(args, merged, found, setup, pieces, seconds, shown) if args.json else None
    return page(args.top), page(None), doc


def _json(args, merged: part.PieceSummary, found: _Found, setup: _Setup, pieces: int,
          seconds: float, shown: str) -> dict:
    def num(x):
        return x if isinstance(x, (int, str)) or x is None or math.isfinite(x) else None

    return {
        "engine": {"name": args.engine, "workers": args.workers, "pieces": pieces,
                   "piece_containers": args.piece_containers, "seconds": round(seconds, 3)},
        "history": {"prometheus": args.prometheus, "selector": found.selector,
                    "since": args.since, "containers": len(found.containers),
                    "executions": merged.executions, "samples": merged.samples,
                    "scored_windows": merged.windows},
        "config": {"window": setup.config.window, "step": setup.step,
                   "initial": setup.config.initial,
                   "include_cold_start": setup.config.include_cold_start,
                   "safety": setup.config.safety is not None,
                   "phasemodel": phasemodel_name(args)},
        "policies": list(merged.sums),
        "matched_risk": [{k: num(v) for k, v in asdict(m).items()}
                         for m in part.matched(merged, setup.config.risks)],
        "starts": dict(merged.starts.counts) if merged.starts is not None else None,
        "workloads": {"shown_policy": shown,
                      "owners_from_kube_state_metrics": found.from_ksm,
                      "containers_with_requests": len(found.requested),
                      "rows": [wr.row_dict(r) for r in merged.rows],
                      "total": wr.row_dict(merged.total)},
    }
