"""``ai4dl train ... --phasemodel NS/NAME`` and ``ai4dl rollback``: the batch trainer's command
line (the decisions are in :mod:`ai4dl.trainer`, the I/O in :mod:`ai4dl.kube.phasemodels` and
:mod:`ai4dl.sources.prometheus_history`).

Logs: a progress bar and ``ai4dl: ...`` lines on a terminal; JSON lines on stderr when stderr
is not a terminal (a Job's log) or with ``--log-format json`` (one object per event: ``time``,
``level``, ``event``, ``message`` and the event's numbers).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from typing import NamedTuple

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from ai4dl import trainer as T
from ai4dl.cli.common import fit_with_progress, load_from_args, model_from_args
from ai4dl.controller.podstate import StateKey
from ai4dl.controller.profiles import ProfileStore
from ai4dl.crd import OPT_IN_LABEL
from ai4dl.crd_spec import PhaseModelSpec, parse_duration
from ai4dl.errors import Ai4dlError
from ai4dl.io.loaders import option_default
from ai4dl.kube.phasemodels import KubeUnavailable, PhaseModels, api_client, parse_ref
from ai4dl.kube.workload import owner_workload
from ai4dl.method.model import PhaseModel, validation_message
from ai4dl.method.plausibility import check_queried_levels
from ai4dl.method.traces import CANONICAL_UNITS, DEFAULT_MAX_GAP_STEPS, TraceSet
from ai4dl.serving import safety_config, window_samples
from ai4dl.sources import membership as mb, workloads as owners_src
from ai4dl.sources.prometheus import PrometheusSource
from ai4dl.sources.prometheus_history import PrometheusHistory, keep_newest, normalise_selector
from ai4dl.sources.prometheus_types import FeatureQuery, PrometheusUnavailable
from ai4dl.trainer import HELD_OUT_FRACTION, MAX_SAMPLES, TOLERANCE

EXIT_INPUT, EXIT_UNAVAILABLE, EXIT_REJECTED = 2, 3, 4


def add_trainer_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("refitting a PhaseModel (the batch trainer)")
    g.add_argument("--phasemodel", metavar="NAMESPACE/NAME", help="write the model into this "
                   "PhaseModel (server-side apply, field manager ai4dl-trainer), after scoring "
                   "it against the current one; its spec.features and spec.policy are used")
    g.add_argument("--prometheus", metavar="URL", help="read history from Prometheus "
                   "instead of TRACES")
    g.add_argument("--selector", metavar="MATCHERS", help="PromQL label matchers of the "
                   "containers to learn from, e.g. 'namespace=\"ml\",pod=~\"resnet-.*\"'")
    g.add_argument("--since", default="14d", help="history to read, e.g. 14d, 36h "
                   "(default 14d)")
    g.add_argument("--max-samples", type=int, default=MAX_SAMPLES, metavar="N",
                   help="keep at most N samples (training and held-out together): the newest, "
                   "across all pods; with --prometheus older history is not even read once "
                   "the newest day-long chunks hold N. The fit needs ~125 bytes "
                   f"per training sample: the default {MAX_SAMPLES:,} keeps it near 1.5 GiB "
                   "(0: no cap)")
    g.add_argument("--create", action="store_true", help="create the PhaseModel (default "
                   "features and policy) when it does not exist; without it a missing "
                   "PhaseModel is an error")
    g.add_argument("--force", action="store_true", help="apply the candidate even when it "
                   "scores worse than the current model")
    g.add_argument("--tolerance", type=float, default=TOLERANCE, help="the candidate replaces "
                   "the current model when its score <= current x (1 + tolerance) (default "
                   f"{TOLERANCE})")
    g.add_argument("--holdout", type=float, default=HELD_OUT_FRACTION, help="share of the most "
                   f"recent pods held out for scoring (default {HELD_OUT_FRACTION})")
    g.add_argument("--if-due", action="store_true", help="fit only when the PhaseModel has "
                   "no model, has RefitRecommended=True, or its last training run is older "
                   "than spec.refit.maxAge; else exit 0")
    g.add_argument("--fail-on-reject", action="store_true", help="exit 4 when the candidate "
                   "is rejected (default: exit 0, the current model stays)")
    g.add_argument("--state-key-file", metavar="PATH", help="the operator's state key (the "
                   "chart mounts its Secret): with --prometheus, the workloads of the executions "
                   "read are written to their WorkloadProfiles, sealed with it (the batch fill; "
                   "without it, profiles come from the operator alone)")
    g.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster when "
                   "KUBERNETES_SERVICE_HOST is set, else $KUBECONFIG or ~/.kube/config)")
    add_prometheus_client_args(g)
    g.add_argument("--log-format", choices=("auto", "text", "json"), default="auto",
                   help="auto (default): text on a terminal, JSON lines otherwise")


def add_prometheus_client_args(g) -> None:
    """How the history pull talks to Prometheus (the trainer's and the replay's)."""
    g.add_argument("--prometheus-timeout", type=float, default=60.0, help="seconds per query "
                   "(default 60)")
    g.add_argument("--prometheus-retries", type=int, default=3,
                   help="retries per query before giving up with exit code 3 (default 3)")
    g.add_argument("--prometheus-concurrency", type=int, default=2, metavar="N",
                   help="range queries in flight during the history pull (default 2)")


def check_pull_flags(args: argparse.Namespace) -> None:
    if args.prometheus_concurrency < 1:
        raise Ai4dlError(f"--prometheus-concurrency must be at least 1, got "
                         f"{args.prometheus_concurrency}")
    if args.max_samples < 0:
        raise Ai4dlError(f"--max-samples must not be negative (0: no cap), got "
                         f"{args.max_samples}")


# ----------------------------------------------------------------------------- logging
class RunLog:
    def __init__(self, fmt: str = "auto", quiet: bool = False):
        self.json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
        self.quiet = quiet

    def info(self, event: str, message: str, **fields) -> None:
        self._emit("info", event, message, fields)

    def warning(self, event: str, message: str, **fields) -> None:
        self._emit("warning", event, message, fields)

    def _emit(self, level: str, event: str, message: str, fields: dict) -> None:
        if self.json:
            now = time.time()
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + \
                f".{int(now % 1 * 1000):03d}Z"
            print(json.dumps({"time": stamp, "level": level, "event": event, "message": message,
                              **fields}, default=str), file=sys.stderr, flush=True)
        elif level != "info" or not self.quiet:
            prefix = "ai4dl: warning: " if level == "warning" else "ai4dl: "
            print(prefix + message, file=sys.stderr, flush=True)

    def progress(self, total: int, desc: str, unit: str):
        """A tqdm bar on a terminal in text mode; None otherwise."""
        if self.json or self.quiet or not sys.stderr.isatty():
            return None
        from tqdm import tqdm  # tqdm is an optional extra ([train]): imported where a bar is drawn

        return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False)


def exit_code(err: Ai4dlError) -> int:
    return EXIT_UNAVAILABLE if isinstance(err, (PrometheusUnavailable, KubeUnavailable)) \
        else EXIT_INPUT


def report_error(args: argparse.Namespace, err: Exception, code: int) -> None:
    line = f"ai4dl: error: {' '.join(str(err).split())}"
    if getattr(args, "log_format", None) is not None and \
            RunLog(args.log_format).json and (args.phasemodel or args.command == "rollback"):
        print(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                          "level": "error", "event": "failed", "message": line,
                          "exitCode": code}), file=sys.stderr, flush=True)
    else:
        print(line, file=sys.stderr)


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ----------------------------------------------------------------------------- train
def _check_flags(args: argparse.Namespace) -> None:
    if args.prometheus and args.traces:
        raise Ai4dlError("give either TRACES or --prometheus, not both")
    if not args.phasemodel:
        raise Ai4dlError("--prometheus needs --phasemodel NAMESPACE/NAME (its spec.features "
                         "say what to read)")
    if args.prometheus and not args.selector:
        raise Ai4dlError("--prometheus needs --selector (PromQL label matchers of the pods)")
    if not args.prometheus and not args.traces:
        raise Ai4dlError("--phasemodel needs TRACES or --prometheus URL --selector MATCHERS")
    if args.selector and not args.prometheus:
        raise Ai4dlError("--selector needs --prometheus")
    if args.tolerance < 0:
        raise Ai4dlError(f"--tolerance must not be negative, got {args.tolerance}")
    if not 0 < args.holdout < 1:
        raise Ai4dlError(f"--holdout must be in (0, 1), got {args.holdout}")
    if args.step is not None and not args.step > 0:
        raise Ai4dlError(f"--step must be positive, got {args.step}")
    check_pull_flags(args)


def open_source(args) -> tuple[str, PrometheusSource]:
    """(the normalised ``--selector``, a source for ``--prometheus`` with the client flags);
    a bad selector or URL is a one-line Ai4dlError."""
    try:
        return (normalise_selector(args.selector),
                PrometheusSource(args.prometheus, timeout=args.prometheus_timeout,
                                 retries=max(0, args.prometheus_retries)))
    except ValueError as err:
        raise Ai4dlError(str(err)) from None


def read_history(args, features, units, step: float, start: float, end: float, log: RunLog,
                 select_for=None, max_samples: int | None = None):
    """``--prometheus URL --selector MATCHERS``: the history pull of [start, end] (with a
    progress bar on a terminal). ``select_for(source)`` gives the pull's ``select`` (which
    containers to keep). Returns (HistoryResult, the normalised selector, the PodRefs found)."""
    selector, src = open_source(args)
    with src:
        hist = PrometheusHistory(
            src, list(features), selector, step, units=units,
            max_gap_steps=args.max_gap_steps or DEFAULT_MAX_GAP_STEPS,
            concurrency=args.prometheus_concurrency)
        bar = log.progress(0, "history", "query")

        def on_query(done: int, total: int) -> None:
            if bar is not None:
                bar.total = total
                bar.update(1)

        try:
            result = hist.executions(start, end, on_query=on_query, max_samples=max_samples,
                                     select=select_for(src) if select_for else None)
        finally:
            if bar is not None:
                bar.close()
    return result, selector, hist


def _pull(args, spec, since_s: float, now: float, log: RunLog, core_api=None):
    step = float(args.step or spec.step_seconds)
    units = [f.unit if f.unit != "unknown" else CANONICAL_UNITS.get(f.name, "unknown")
             for f in spec.features]

    def select_for(src):
        def served(refs, start, end):
            """Only the pods this PhaseModel serves: opted in and matching spec.selector."""
            namespaces = sorted({r.namespace for r in refs})
            verdict = mb.from_kube_state_metrics(src, spec.selector, namespaces, start, end)
            if verdict is None:
                if core_api is None:
                    raise Ai4dlError("cannot tell which pods the PhaseModel serves: no "
                                     "kube-state-metrics pod labels and no API server")
                verdict = mb.from_api_server(core_api, spec.selector, namespaces)
            kept, no, unknown = verdict.split(refs)
            return kept, no, unknown, verdict.source
        return served

    result, selector, hist = read_history(
        args, [FeatureQuery(f.name, f.query) for f in spec.features], units, step,
        now - since_s, now, log, select_for, args.max_samples or None)
    for w in dict.fromkeys(result.warnings):
        log.warning("prometheus-warning", w)
    members = None
    if result.not_served or result.unknown or result.membership:
        members = (f"kept {result.pods} of {result.found} containers: the pods PhaseModel "
                   f"{args.phasemodel} serves ({OPT_IN_LABEL}=true and its spec.selector, "
                   f"from {result.membership})")
        if result.not_served or result.unknown:
            members += f"; dropped {result.not_served + result.unknown}"
            parts = ([f"{result.not_served} not opted in or not selected"]
                     if result.not_served else [])
            parts += ([f"{result.unknown} not opted in, not selected or gone"]
                      if result.unknown else [])
            members += f" ({', '.join(parts)})"
        log.info("membership", members, found=result.found, kept=result.pods,
                 notServed=result.not_served, unknown=result.unknown,
                 source=result.membership)
    log.info("history", f"read {result.pods} containers ({result.series} series) from "
             f"{args.prometheus} in {result.queries} queries, {result.seconds:.1f} s: "
             f"{len(result.executions)} executions, {result.samples:,} samples",
             containers=result.pods, series=result.series, queries=result.queries,
             points=result.points, seconds=round(result.seconds, 3),
             executions=len(result.executions), samples=result.samples)
    if result.skipped_chunks or result.dropped_executions or result.dropped_samples:
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(result.pulled_from))
        cap = Cap(args.max_samples, result.dropped_executions, result.dropped_samples,
                  since if result.skipped_chunks else None)
        log.info("capped", cap.message(), maxSamples=args.max_samples,
                 droppedExecutions=result.dropped_executions,
                 droppedSamples=result.dropped_samples, skippedChunks=result.skipped_chunks,
                 historyFrom=since, trimmed=result.trimmed)
    else:
        cap = None
    if not result.executions:
        found = (f"{result.pods} containers matched but none has {hist.min_samples} samples "
                 "of every feature" if result.pods else
                 f"none of the {result.found} containers found is served by the PhaseModel "
                 f"({OPT_IN_LABEL}=true and its spec.selector)" if result.found else
                 "no series matched")
        raise Ai4dlError(f"no data for selector {{{selector}}} in the last {args.since} at "
                         f"{args.prometheus}: {found}")
    base = f"prometheus {args.prometheus} {{{selector}}} last {args.since}"
    if members and (result.not_served or result.unknown):
        base += f" ({result.pods} of {result.found} containers served)"
    return result.executions, _source(base, cap)


class Cap(NamedTuple):
    """What --max-samples left out."""
    max_samples: int
    executions: int
    samples: int
    not_read_before: str | None     # history older than this was not pulled

    def message(self) -> str:
        text = (f"--max-samples {self.max_samples:,}: kept the newest samples; left out "
                f"{self.samples:,} older samples ({self.executions:,} executions entirely)")
        if self.not_read_before:
            text += f" and did not read the history before {self.not_read_before}"
        return text

    def short(self) -> str:
        text = f"newest {self.max_samples:,} samples; left out {self.samples:,} samples " \
            f"({self.executions:,} executions)"
        return text + (f", history before {self.not_read_before}" if self.not_read_before
                       else "")


def _source(base: str, cap: Cap | None, limit: int = 300) -> str:
    """status.training.source: what was read, and what the cap left out (kept whole)."""
    if cap is None:
        return base[:limit]
    note = "; " + cap.short()
    return base[:max(0, limit - len(note))] + note


def _traces(args, spec, log: RunLog):
    default = option_default(args.traces, "step", args.format)
    if args.step is None and default is not inspect.Parameter.empty:
        # the operator reads the PhaseModel's pods at spec.stepSeconds: the model must learn
        # at that step (its history and phases are counted in steps)
        args.step = float(spec.step_seconds)
        if default != args.step:
            log.info("step", f"resampling at the PhaseModel's spec.stepSeconds, "
                     f"{spec.step_seconds} s (--step sets another; it must match)",
                     stepSeconds=spec.step_seconds)
    traces = load_from_args(args)
    names = [f.name for f in spec.features]
    traces = traces.select(names)          # TraceError (exit 2) names a missing feature
    where = f"PhaseModel {args.phasemodel}"
    if abs((traces.step or 0.0) - spec.step_seconds) > 1e-6 * spec.step_seconds:
        raise Ai4dlError(f"{args.traces}: the traces are at a step of {traces.step:g} s, "
                         f"{where} serves at spec.stepSeconds {spec.step_seconds}: pass "
                         f"--step {spec.step_seconds} where the format takes one (a model is "
                         f"served at the step it was fitted at), or change spec.stepSeconds")
    for f, unit in zip(spec.features, traces.units):
        wanted = f.unit if f.unit != "unknown" else CANONICAL_UNITS.get(f.name)
        if wanted and unit != wanted:
            raise Ai4dlError(f"{args.traces}: '{f.name}' is in {unit}, {where}'s query gives "
                             f"{wanted} (spec.features[{f.name}].unit): a model fitted on "
                             f"these traces would be served numbers in another unit")
    log.info("history", f"read {traces.summary()}", executions=len(traces),
             samples=traces.n_samples)
    executions, cap = list(traces), None
    if args.max_samples and traces.n_samples > args.max_samples:
        executions, n_ex, n_samples, trimmed = keep_newest(executions, args.max_samples)
        cap = Cap(args.max_samples, n_ex, n_samples, None)
        log.info("capped", cap.message(), maxSamples=args.max_samples, droppedExecutions=n_ex,
                 droppedSamples=n_samples, trimmed=trimmed)
    return executions, _source(f"traces {args.traces}", cap)


def train_phasemodel(args: argparse.Namespace) -> int:
    """``ai4dl train --phasemodel``: pull the PhaseModel's history, fit a candidate, choose
    the policy it serves, score it against the current model on the held-out executions and
    apply it when it is not worse (the decision in the status either way)."""
    _check_flags(args)
    log = RunLog(args.log_format, args.quiet)
    candidate = model_from_args(args)           # flag errors before any I/O
    ns, name = parse_ref(args.phasemodel)
    try:
        since_s = parse_duration(args.since)
    except ValueError as err:
        raise Ai4dlError(f"--since: {err}") from None
    kube = PhaseModels(api_client(args.kubeconfig))
    resource, spec = _phasemodel_spec(args, kube, ns, name)
    now = time.time()
    if args.if_due and not _due(resource, now, log):
        return 0
    executions, source, train, held = _training_data(args, spec, since_s, now, log, kube,
                                                     ns, name)
    log.info("fit-start", f"fitting on {len(train)} executions, {len(held)} held out for "
             f"scoring", executions=len(train), heldOut=len(held))
    fit_with_progress(candidate, TraceSet(train), quiet=log.json or args.quiet)
    choice, objectives = _served_choice(candidate, train, spec, log)
    record, decision = _decided(args, candidate, held, spec, source, len(train), choice,
                                objectives, log)
    if decision.replaces_model:
        _apply_model(kube, ns, name, candidate, spec, log)
    kube.apply_status(T.status_apply(ns, name, record))
    if args.prometheus and args.state_key_file:
        fill_profiles(args, spec, executions, tuple(choice.resources), kube, ns, name, now, log)
    log.info(decision.decision, f"PhaseModel {ns}/{name}: {decision.decision}: "
             f"{decision.reason}", decision=decision.decision)
    if decision.decision == "rejected" and args.fail_on_reject:
        return EXIT_REJECTED
    return 0


def _phasemodel_spec(args: argparse.Namespace, kube, ns: str, name: str) -> tuple:
    """(the PhaseModel resource or None, its spec): refused in one line when it is missing
    (without ``--create``) or invalid."""
    resource = kube.get(ns, name)
    if resource is None and not args.create:
        raise Ai4dlError(f"PhaseModel {ns}/{name} not found (create it first, or pass --create "
                         "to create it with the default features and policy)")
    try:
        spec = PhaseModelSpec.model_validate((resource or {}).get("spec") or {})
    except ValidationError as err:
        raise Ai4dlError(f"PhaseModel {ns}/{name}: "
                         f"{validation_message(err).replace('invalid phase model: ', '')}") \
            from None
    return resource, spec


def _due(resource: dict | None, now: float, log: RunLog) -> bool:
    """``--if-due``: whether the PhaseModel is due a refit (said in the log either way)."""
    due, why = (True, "the PhaseModel does not exist yet") if resource is None else \
        T.refit_due(resource, now)
    log.info("due" if due else "not-due", why, due=due)
    return due


def _training_data(args: argparse.Namespace, spec, since_s: float, now: float, log: RunLog,
                   kube, ns: str, name: str) -> tuple:
    """(every execution, where they came from, the training ones, the held-out ones), checked
    against the PhaseModel's window and, from Prometheus, for levels in the wrong unit."""
    executions, source = (_pull(args, spec, since_s, now, log, kube.core) if args.prometheus
                          else _traces(args, spec, log))
    try:
        train, held = T.split_recent(executions, args.holdout)
    except T.TooFewExecutions as err:
        raise Ai4dlError(str(err)) from None
    problem = T.window_problem(train, window_samples(spec), spec.step_seconds,
                               f"PhaseModel {ns}/{name}'s spec.windowSeconds")
    if problem:                             # before the fit, not after it
        raise Ai4dlError(problem)
    if args.prometheus:                     # a template's unit is the spec author's word
        check_queried_levels(TraceSet(executions), f"PhaseModel {ns}/{name}'s queries")
    return executions, source, train, held


def _served_choice(candidate, train, spec, log: RunLog) -> tuple:
    """(``auto``'s choice for the fitted candidate, its objectives' status), logged."""
    try:
        choice = T.choose_served_policy(candidate, train, spec)
    except ValueError as err:
        raise Ai4dlError(f"cannot choose the policy to serve: {err}") from None
    objectives = T.objectives_status(choice, spec)
    note = spec.policy.objective_note()
    log.info("policy", f"auto: {choice.reason}" + (f" ({note})" if note else ""),
             served=dict(zip(choice.resources, choice.winners)), objectives=objectives)
    return choice, objectives


def _decided(args: argparse.Namespace, candidate, held, spec, source: str, n_train: int,
             choice, objectives, log: RunLog) -> tuple:
    """The candidate and the current model scored on the held-out executions, the decision,
    and the training record for the status (logged)."""
    rep = candidate.fit_report_
    try:
        cand_score = T.score_model(candidate, held, spec)
    except ValueError as err:
        raise Ai4dlError(f"cannot score the candidate on the held-out executions: {err}") \
            from None
    cur_score, problem = None, None
    if spec.model is not None:
        try:
            current = PhaseModel.from_document(spec.validated_model())
            cur_score = T.score_model(current, held, spec)
        except (ValueError, Ai4dlError) as err:
            problem = str(err)
    decision = T.decide(cand_score.value, None if cur_score is None else cur_score.value,
                        args.tolerance, args.force, problem)
    record = T.TrainingRecord(
        decision=decision.decision, reason=decision.reason, trained_at=_now_iso(),
        source=source, executions=n_train, samples=rep.n_samples,
        held_out_executions=cand_score.executions, fit_seconds=candidate.fit_seconds_,
        reconstruction_error=rep.reconstruction_error, silhouette=rep.silhouette,
        novelty_rate=rep.novelty_rate, phases=candidate.n_phases_,
        candidate_score=cand_score.value,
        current_score=None if cur_score is None else cur_score.value, tolerance=args.tolerance,
        policy=T.policy_status(choice), objectives=objectives)
    log.info("fitted", f"candidate: {candidate.n_phases_} phases, {rep.crbm_epochs} epochs on "
             f"{candidate.fit_report_.device}, reconstruction error "
             f"{rep.reconstruction_error:.4f}, {candidate.fit_seconds_:.1f} s; score "
             f"{cand_score}; current {cur_score if cur_score else problem or 'none'}",
             **record.to_status())
    return record, decision


def _apply_model(kube, ns: str, name: str, candidate, spec, log: RunLog) -> None:
    """The candidate's document applied as spec.model, the current one kept as
    spec.previousModel, in one apply."""
    doc = json.loads(candidate.to_document().model_dump_json(by_alias=True, exclude_none=True))
    try:
        plan = T.model_apply(ns, name, doc, spec.model)
    except ValueError as err:
        raise Ai4dlError(str(err)) from None
    if plan.warning:
        log.warning("previous-not-kept", plan.warning)
    kube.apply_spec(plan.body)              # model + previousModel in one apply


def fill_profiles(args, spec, executions, resources: tuple[str, ...], kube, ns: str, name: str,
                  now: float, log: RunLog) -> None:
    """The batch fill (issue 42): the executions read from Prometheus that have ended, by
    workload (the pod's top owner from kube-state-metrics, else its name), into the
    PhaseModel's WorkloadProfiles: one GET and at most one write per workload, the runs the
    operator already reported counted once. A failure is a warning: the model is written."""
    try:
        key = StateKey.from_file(args.state_key_file)
    except ValueError as err:
        raise Ai4dlError(f"--state-key-file: {err}") from None
    window = window_samples(spec)
    # the PhaseModel serves its own namespace's pods: a selector reaching further is not its
    executions = [e for e in executions if (e.meta or {}).get("namespace") == ns]
    refs = owners_src.containers_of(executions)
    src = PrometheusSource(args.prometheus, timeout=args.prometheus_timeout,
                           retries=max(0, args.prometheus_retries))
    with src:
        owner_of, from_ksm = owners_src.owners(src, refs, now - 14 * 86400.0, now)

    def workload(e) -> str:
        owner = owner_of[(e.meta["namespace"], e.meta["pod"])]
        return owner_workload(owner.kind, owner.name).key
    ended_before = now - 2 * spec.window_seconds
    runs = T.batch_runs(executions, resources, window, workload, ended_before)
    resource = kube.get(ns, name) or {}
    uid = (resource.get("metadata") or {}).get("uid", "")
    store = ProfileStore(kube.api, ns, name, key)
    max_increase = safety_config(spec, resources).max_increase
    failed = 0
    for w, got in runs.items():
        try:
            store.record_runs(w, got, resources, uid, now, max_increase)
        except ApiException as err:
            failed += 1
            log.warning("profiles", f"WorkloadProfile of {w}: HTTP {err.status}")
    log.info("profiles", f"{sum(map(len, runs.values()))} ended executions of {len(runs)} "
             f"workloads ({from_ksm} of {len(owner_of)} pods named by kube_pod_owner, the rest "
             f"by their names): {store.writes} WorkloadProfiles written"
             + (f", {failed} failed" if failed else ""),
             workloads=len(runs), written=store.writes, failed=failed)


# ----------------------------------------------------------------------------- rollback
def rollback(args: argparse.Namespace) -> int:
    """``ai4dl rollback``: the PhaseModel's previous model back in spec.model."""
    log = RunLog(args.log_format, args.quiet)
    ns, name = parse_ref(args.phasemodel)
    kube = PhaseModels(api_client(args.kubeconfig))
    resource = kube.get(ns, name)
    if resource is None:
        raise Ai4dlError(f"PhaseModel {ns}/{name} not found")
    try:
        body = T.rollback_apply(ns, name, resource)
    except ValueError as err:
        raise Ai4dlError(str(err)) from None
    kube.apply_spec(body)
    previous = ((resource.get("status") or {}).get("training") or {})
    record = T.TrainingRecord(
        decision="rolled-back", reason="the previous model was put back by `ai4dl rollback` "
        "(the replaced one is now spec.previousModel)",
        trained_at=previous.get("trainedAt") or _now_iso(), source=previous.get("source", ""))
    kube.apply_status(T.status_apply(ns, name, record))
    log.info("rolled-back", f"PhaseModel {ns}/{name}: rolled back to the previous model",
             decision="rolled-back")
    return 0
