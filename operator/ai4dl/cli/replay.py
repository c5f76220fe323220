"""``ai4dl evaluate --prometheus URL --selector MATCHERS --since 7d``: what the policies would
have done on the pods a Prometheus has seen — per workload and in total, against the requests
the pods had.

The history pull is the batch trainer's (:func:`ai4dl.cli.trainer.read_history`: the same
chunking, caps, restart and gap cuts). Then either

- a phase model is fitted and every pod is replayed by what was fitted on the *other* pods
  (cross-fitting in ``--folds`` folds by pod: no policy is scored on what it was fitted on),
  or
- ``--phasemodel NS/NAME``: that PhaseModel's features, step, window, model, policy and safety
  layer, no fit; every pod is replayed as the operator would serve it.

Owners and requests come from kube-state-metrics when Prometheus has it
(:mod:`ai4dl.sources.workloads`). Output: the evaluator's report, a per-workload table and
the totals against the current requests, on the terminal and as ``--markdown``, ``--json`` and
``--plots``; nothing is written unless the whole run succeeded (a Prometheus that dies mid-pull
exits 3 with no file written).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from ai4dl.cli.common import evaluation_flags, say, window_in_samples
from ai4dl.cli.trainer import (RunLog, add_prometheus_client_args, check_pull_flags,
                               read_history)
from ai4dl.crd_spec import PhaseModelSpec, parse_duration
from ai4dl.errors import Ai4dlError
from ai4dl.evaluation import report, report_json, workload_report as wr
from ai4dl.evaluation.evaluate import EvaluationConfig, run_cross_fitted, run_served
from ai4dl.io.writers import figure_folder, save_figure, write_text_atomic
from ai4dl.judge import ORACLE
from ai4dl.kube.phasemodels import PhaseModels, api_client, parse_ref
from ai4dl.method.model import PhaseModel, validation_message
from ai4dl.method.traces import CANONICAL_UNITS, TraceSet
from ai4dl.rules.safety import SafetyConfig
from ai4dl.serving import safety_config, served_policy, window_samples
from ai4dl.sources import workloads as owners_src
from ai4dl.sources.prometheus import PrometheusSource
from ai4dl.sources.prometheus_types import FeatureQuery, PodRef, default_feature_queries

DEFAULT_FOLDS = 2


def add_replay_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("replay from Prometheus (instead of TRACES)")
    g.add_argument("--prometheus", metavar="URL", help="read the pods' history from this "
                   "Prometheus (or Prometheus-API store) instead of TRACES")
    g.add_argument("--selector", metavar="MATCHERS", help="PromQL label matchers of the "
                   "containers to replay, e.g. 'namespace=\"ml\"'")
    g.add_argument("--since", default="7d", help="history to replay, e.g. 7d, 36h (default 7d)")
    g.add_argument("--phasemodel", metavar="NAMESPACE/NAME", help="use this PhaseModel's "
                   "features, step, window, model, policy and safety layer (no fit)")
    g.add_argument("--phasemodel-file", metavar="PATH", help="a PhaseModel manifest (YAML or "
                   "JSON, as kubectl get -o yaml prints it) to replay as served, instead of "
                   "--phasemodel: a candidate before it is applied")
    g.add_argument("--kubeconfig", help="kubeconfig for --phasemodel (default: in-cluster, "
                   "else $KUBECONFIG or ~/.kube/config)")
    g.add_argument("--folds", type=int, default=DEFAULT_FOLDS, help="cross-fitting folds by "
                   f"pod when fitting (default {DEFAULT_FOLDS}): each pod is replayed by a model "
                   "fitted on the other folds")
    g.add_argument("--top", type=int, default=20, help="workloads shown on the terminal, the "
                   "largest (default 20; all in --markdown and --json)")
    g.add_argument("--max-samples", type=int, default=0, metavar="N",
                   help="keep at most N samples, the newest (default 0: no cap)")
    add_prometheus_client_args(g)


def check_replay_flags(args: argparse.Namespace) -> None:
    """Flag errors before any I/O (exit 2)."""
    if args.prometheus is None:
        for flag in ("selector", "phasemodel", "phasemodel_file"):
            if getattr(args, flag, None):
                raise Ai4dlError(f"--{flag.replace('_', '-')} needs --prometheus URL")
        return
    if args.phasemodel and args.phasemodel_file:
        raise Ai4dlError("give --phasemodel or --phasemodel-file, not both")
    if args.traces is not None:
        raise Ai4dlError("give either TRACES or --prometheus, not both")
    if not args.selector:
        raise Ai4dlError("--prometheus needs --selector (PromQL label matchers of the pods)")
    if args.model:
        raise Ai4dlError("--model with --prometheus: give --phasemodel NS/NAME (or "
                         "--phasemodel-file) to replay a stored model")
    if args.sweep:
        raise Ai4dlError("--sweep is not available with --prometheus")
    if args.folds < 2:
        raise Ai4dlError(f"--folds must be at least 2, got {args.folds}")
    if args.top < 1:
        raise Ai4dlError(f"--top must be at least 1, got {args.top}")
    check_pull_flags(args)


def read_phasemodel(args):
    """(spec, model or None, Served) of --phasemodel (read from the API server) or
    --phasemodel-file (a manifest)."""
    if getattr(args, "phasemodel_file", None):
        return served_from_spec(read_manifest(args.phasemodel_file),
                                f"--phasemodel-file {args.phasemodel_file}")
    ns, name = parse_ref(args.phasemodel)
    resource = PhaseModels(api_client(args.kubeconfig)).get(ns, name)
    if resource is None:
        raise Ai4dlError(f"PhaseModel {ns}/{name} not found")
    return served_from_spec(resource.get("spec") or {}, f"PhaseModel {ns}/{name}")


def phasemodel_name(args: argparse.Namespace) -> str | None:
    """What names the replayed PhaseModel: NAMESPACE/NAME or the manifest's path."""
    return args.phasemodel or getattr(args, "phasemodel_file", None)


def read_manifest(path: str) -> dict:
    """The ``spec`` of a PhaseModel manifest file (YAML or JSON)."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise Ai4dlError(f"--phasemodel-file {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise Ai4dlError(f"--phasemodel-file {path}: not YAML or JSON "
                         f"({' '.join(str(err).split())[:160]})") from None
    if not isinstance(doc, dict) or doc.get("kind") != "PhaseModel" or \
            not isinstance(doc.get("spec"), dict):
        raise Ai4dlError(f"--phasemodel-file {path}: not a PhaseModel manifest (kind "
                         "PhaseModel with a spec)")
    return doc["spec"]


def served_from_spec(spec_doc: dict, where: str):
    """(spec, model or None, Served) of a PhaseModel's spec; a one-line Ai4dlError naming
    ``where`` when it does not validate or cannot be served."""
    try:
        spec = PhaseModelSpec.model_validate(spec_doc)
        model = (PhaseModel.from_document(spec.validated_model()) if spec.model is not None
                 else None)
    except ValidationError as err:
        raise Ai4dlError(f"{where}: "
                         f"{validation_message(err).replace('invalid phase model: ', '')}") \
            from None
    except ValueError as err:
        raise Ai4dlError(f"{where}: {str(err).splitlines()[0]}") from None
    try:
        served = served_policy(spec, model)
    except ValueError as err:
        raise Ai4dlError(f"{where} cannot be served: {err}") from None
    return spec, model, served


def evaluate_prometheus(args: argparse.Namespace) -> int:
    """``ai4dl evaluate --prometheus``: the history pulled, each container's workload and
    requests read, replayed (a PhaseModel as served, or every policy cross-fitted), reported
    per workload; the files written once everything is computed."""
    check_replay_flags(args)
    check_phasemodel_window(args)
    kw, model_params = evaluation_flags(args)
    try:
        since_s = parse_duration(args.since)
    except ValueError as err:
        raise Ai4dlError(f"--since: {err}") from None
    log = RunLog("text", args.quiet)
    spec, model, served, features, units, step, resources, safety = replay_setup(args, kw)
    history = _owned_history(args, features, units, step, since_s, log)
    if not getattr(args, "workload_by", None):
        kw["workload_by"] = "workload"
    cfg = EvaluationConfig(resources=tuple(resources), safety=safety,
                           **{**kw, "test_fraction": 0.0})
    res, ctx, shown = _replayed(args, history.traces, cfg, served, model, model_params)
    rows, total = wr.rows_for(res, history.traces, history.owner_of)
    terminal, full, doc = _rendered(args, res, ctx, shown, rows, total, history, model_params)
    # Everything is computed: now write (each file whole or not at all).
    written = _write_outputs(args, full, doc, res, rows, shown)
    sys.stdout.write(terminal)
    if written:
        say(args, "wrote " + ", ".join(str(p) for p in written))
    return 0


def check_phasemodel_window(args: argparse.Namespace) -> None:
    """A replayed PhaseModel's window is its own: no --window or --window-seconds beside it."""
    if phasemodel_name(args) and (args.window is not None or
                                  getattr(args, "window_seconds", None) is not None):
        raise Ai4dlError("--phasemodel: the window is the PhaseModel's spec.windowSeconds; "
                         "drop --window/--window-seconds")


def replay_setup(args: argparse.Namespace, kw: dict) -> tuple:
    """What is replayed and how: (spec, model, served, features, units, step, resources,
    safety) from ``--phasemodel`` (as the operator serves it) or the flags; sets
    ``kw["window"]``."""
    spec = served = model = None
    if phasemodel_name(args):
        spec, model, served = read_phasemodel(args)
        features = [FeatureQuery(f.name, f.query) for f in spec.features]
        units = [f.unit if f.unit != "unknown" else CANONICAL_UNITS.get(f.name, "unknown")
                 for f in spec.features]
        step = float(spec.step_seconds)
        kw["window"] = window_samples(spec)
        resources = served.resources
        safety = safety_config(spec, resources) if args.safety != "none" else None
        say(args, f"PhaseModel {phasemodel_name(args)}: {served.reason}; window {kw['window']} "
             f"samples of {step:g} s")
        return spec, model, served, features, units, step, resources, safety
    features = default_feature_queries(("cpu", "memory"))
    units = [CANONICAL_UNITS[f.name] for f in features]
    step = float(args.step or 15.0)
    kw["window"] = window_in_samples(args, step)
    resources = tuple(args.resources.split(",")) if args.resources else ("cpu", "memory")
    unknown = [r for r in resources if r not in ("cpu", "memory")]
    if unknown:
        raise Ai4dlError(f"--resources: the Prometheus replay reads cpu and memory, not "
                         f"{unknown[0]!r}")
    safety = (SafetyConfig.operator_defaults(
        len(resources), resources.index("memory") if "memory" in resources else None)
        if args.safety in (None, "operator") else None)
    return spec, model, served, features, units, step, resources, safety


@dataclass
class _OwnedHistory:
    """The history pulled, as traces whose executions know their workload and requests."""
    result: object            # ai4dl.sources.prometheus_history.HistoryResult
    selector: str
    traces: object            # TraceSet
    refs: list
    owner_of: dict
    from_ksm: int
    requested: dict


def _owned_history(args: argparse.Namespace, features, units, step: float, since_s: float,
                   log: RunLog) -> _OwnedHistory:
    """The last ``--since`` of history from Prometheus, each execution given its workload (the
    pod's top controller and the container: what a served start learns from) and its
    container's requests."""
    now = time.time()
    start = now - since_s
    result, selector, hist = read_history(args, features, units, step, start, now, log,
                                          max_samples=args.max_samples or None)
    for w in dict.fromkeys(result.warnings):
        log.warning("prometheus-warning", w)
    if not result.executions:
        why = (f"{result.pods} containers matched but none has {hist.min_samples} samples of "
               "every feature" if result.pods else "no series matched")
        raise Ai4dlError(f"nothing to replay for selector {{{selector}}} in the last "
                         f"{args.since} at {args.prometheus}: {why}")
    say(args, f"read {result.pods} containers from {args.prometheus} in {result.queries} "
         f"queries, {result.seconds:.1f} s: {len(result.executions)} executions, "
         f"{result.samples:,} samples")
    refs = owners_src.containers_of(result.executions)
    with PrometheusSource(args.prometheus, timeout=args.prometheus_timeout,
                          retries=max(0, args.prometheus_retries)) as src:
        owner_of, from_ksm = owners_src.owners(src, refs, start, now)
        requested = owners_src.requests(src, refs, start, now)
    label_executions(result.executions, owner_of, requested)
    say(args, f"owners: {from_ksm} of {len(owner_of)} pods from kube_pod_owner, the rest from "
         f"their names; requests known for {len(requested)} of {len(refs)} containers")
    traces = TraceSet(result.executions,
                      source=f"prometheus {args.prometheus} {{{selector}}} last {args.since}")
    return _OwnedHistory(result, selector, traces, refs, owner_of, from_ksm, requested)


def label_executions(executions, owner_of: dict, requested: dict) -> None:
    """Each execution's ``meta`` given its workload and its container's requests."""
    for e in executions:
        ref = PodRef(e.meta["namespace"], e.meta["pod"], e.meta["container"])
        # the workload a served start learns from: the pod's top controller and the container
        # (a Job re-created, a CronJob's Jobs, a Deployment's pods are one workload each;
        # owners() has every pod, from kube-state-metrics or its name)
        e.meta["workload"] = f"{owner_of[(ref.namespace, ref.pod)].key}/{ref.container}"
        req = requested.get(ref, {})
        if "cpu" in req:
            e.meta["cpu_limit_cores"] = req["cpu"]
        if "memory" in req:
            e.meta["memory_limit_bytes"] = req["memory"]


def _replayed(args: argparse.Namespace, traces, cfg, served, model, model_params) -> tuple:
    """(the result, its report context, the policy shown per workload): the PhaseModel as
    served, or every policy cross-fitted over ``--folds``."""
    on_stage = (lambda msg: say(args, msg))
    if served is not None:
        level = served.cold_start
        if cfg.initial == "model" and level is None:
            raise Ai4dlError("--initial model: the PhaseModel's model learned no first-window "
                             "level (no head-room tables)")
        res = run_served(traces, cfg, served.policy, "phasemodel", model, level, on_stage=on_stage)
        ctx = report.RunContext(traces.source, 0, 0, len(traces), len(traces.groups()), False,
                                f"PhaseModel {phasemodel_name(args)} ({served.summary()})",
                                getattr(model, "n_phases_", None))
        return res, ctx, "phasemodel"
    try:
        res = run_cross_fitted(traces, cfg, args.folds, model_params or None,
                               on_stage=on_stage)
    except ValueError as err:
        raise Ai4dlError(str(err).splitlines()[0]) from None
    ctx = report.RunContext(traces.source, res.n_train, 0, len(traces),
                            len(traces.groups()), False,
                            f"fitted per fold on the other {args.folds - 1} fold(s)",
                            getattr(res.model, "n_phases_", None), folds=args.folds)
    shown = "auto" if "auto" in res.scores else next(
        p for p in report.policy_order(list(res.scores)) if p != ORACLE)
    return res, ctx, shown


def _rendered(args: argparse.Namespace, res, ctx, shown: str, rows, total,
              history: _OwnedHistory, model_params) -> tuple[str, str, dict | None]:
    """(what the terminal shows, the markdown file, the JSON document or None)."""
    names = [p for p in report.policy_order(list(res.scores))]
    data = res.data
    top = max(res.config.targets)
    intro = (f"{len(rows)} workloads, {len(history.refs)} containers, {total.hours:,.0f} "
             f"container-hours scored. Per workload: the mean request, usage and allocation of "
             f"**{shown}** (fitted policies at {100 * top:g} %), its own fulfilment and windows "
             f"short (cpu / memory), and the saving against the requests.")
    workload_md = wr.workload_table(rows, total, shown, data.resources, data.units)
    totals_md = ("Every policy in total, at its own allocation (the matched-fulfilment tables "
                 "above compare them at equal fulfilment):\n\n"
                 + wr.totals_table(total, data.resources, data.units, names))
    base = report.render_markdown(res, ctx)
    terminal = "\n\n".join([base.rstrip(), intro,
                            wr.workload_table(rows, total, shown, data.resources, data.units,
                                              args.top), totals_md]) + "\n"
    full = "\n\n".join([base.rstrip(), intro, workload_md, totals_md]) + "\n"
    doc = None
    if args.json:
        result = history.result
        doc = report_json.to_json(res, ctx, None, model_params)
        doc["workloads"] = {"shown_policy": shown, "fitted_target": top,
                            "owners_from_kube_state_metrics": history.from_ksm,
                            "containers_with_requests": len(history.requested),
                            "rows": [wr.row_dict(r) for r in rows],
                            "total": wr.row_dict(total)}
        doc["history"] = {"prometheus": args.prometheus, "selector": history.selector,
                          "since": args.since, "containers": result.pods,
                          "queries": result.queries, "seconds": round(result.seconds, 3),
                          "samples": result.samples}
    return terminal, full, doc


def _write_outputs(args: argparse.Namespace, full: str, doc: dict | None, res, rows,
                   shown: str) -> list[Path]:
    """The markdown, the JSON and the figures asked for, each file whole or not at all."""
    written: list[Path] = []
    if args.markdown:
        write_text_atomic(Path(args.markdown), full)
        written.append(Path(args.markdown))
    if doc is not None:
        write_text_atomic(Path(args.json),
                          json.dumps(doc, allow_nan=False, indent=1, ensure_ascii=False) + "\n")
        written.append(Path(args.json))
    if args.plots:
        # matplotlib is an optional extra ([train]): imported where a figure is drawn
        from ai4dl.evaluation.plots import workloads_figure, write_evaluation_plots
        import matplotlib.pyplot as plt

        data = res.data
        with figure_folder(args.plots) as figures:     # stale figures go
            figures += write_evaluation_plots(res, args.plots, args.plot_executions)
            fig = workloads_figure(rows, shown, data.resources, data.units, args.top)
            figures.append(save_figure(fig, Path(args.plots) / "workloads.png"))
            plt.close(fig)
        written += figures
    return written
