"""``ai4dl evaluate`` on trace files: its flags, the managed resources and the run; the
Prometheus replay is :mod:`ai4dl.cli.replay`."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path

from ai4dl.cli.common import (add_trace_args, evaluation_flags, load_from_args, say,
                              window_in_samples)
from ai4dl.cli.replay import add_replay_args, check_replay_flags, evaluate_prometheus
from ai4dl.cli.replay_cluster import add_engine_args, check_engine_flags, evaluate_cluster
from ai4dl.errors import Ai4dlError
from ai4dl.evaluation import report, report_json, report_sweep
from ai4dl.evaluation.evaluate import EvaluationConfig, run_evaluation
from ai4dl.io.modelfile import load_model
from ai4dl.io.outputs import FOLDER, add_output
from ai4dl.io.writers import figure_folder, write_text_atomic
from ai4dl.policy import catalog
from ai4dl.policy.policies import PHASE_READERS, STATISTICS
from ai4dl.rules.safety import SafetyConfig


def _evaluation_resources(args: argparse.Namespace, traces) -> tuple[str, ...]:
    have = tuple(traces.features)
    if args.resources is None:
        chosen = tuple(r for r in ("cpu", "memory") if r in have)
        if not chosen:
            raise Ai4dlError(f"the traces have no cpu or memory feature (they have "
                             f"{', '.join(have)}); name the resources with --resources")
        return chosen
    chosen = tuple(dict.fromkeys(r.strip() for r in args.resources.split(",") if r.strip()))
    if not chosen:
        raise Ai4dlError("--resources expects a comma-separated list of features")
    for r in chosen:
        if r not in have:
            raise Ai4dlError(f"--resources: the traces have no feature {r!r} (they have "
                             f"{', '.join(have)})")
    return chosen


def check_workload_key(key: str, traces) -> None:
    """--workload-by names an attribute at least one execution has (a typo would otherwise
    make every execution its own workload without a word)."""
    if key == "group" or any(e.meta.get(key) not in (None, "") for e in traces):
        return
    have = sorted({k for e in traces for k in e.meta})
    raise Ai4dlError(f"--workload-by {key}: no execution has that attribute (they have: "
                     f"{', '.join(have) or 'none'}; or 'group')")


def check_window_fits(window: int, traces) -> None:
    """Refuse, before any fit, a window no execution outlasts (issue 45: ``--window 2000`` on
    runs of 356-1,014 samples fitted for 22 s, then printed 150 lines of n/a at exit 0): a
    policy acts from the second window on, so such a window leaves nothing to score. The
    error names the run lengths and a window that would do."""
    lengths = sorted(len(e) for e in traces)
    if not lengths or lengths[-1] > window:
        return
    step = f" ({lengths[0] * traces.step:g}-{lengths[-1] * traces.step:g} s at "\
        f"{traces.step:g} s)" if traces.step else ""
    raise Ai4dlError(f"a window of {window} samples leaves nothing to score: the executions "
                     f"are {lengths[0]}-{lengths[-1]} samples long{step}, none longer than one "
                     f"window; pass --window {max(1, lengths[-1] // 2)} or less")


def cmd_evaluate(args: argparse.Namespace) -> int:
    check_engine_flags(args)
    if args.prometheus:
        return evaluate_cluster(args) if args.engine else evaluate_prometheus(args)
    check_replay_flags(args)
    if args.traces is None:
        raise Ai4dlError("give TRACES, or --prometheus URL --selector MATCHERS")
    kw, model_params = evaluation_flags(args)
    phase_policies = [p for p in kw["policies"] if catalog.entry(p).needs_phases]
    model = None
    if args.model:
        model = load_model(args.model)
        if model_params:
            print("ai4dl: warning: --model given: the fit options (--phases, --epochs, "
                  "--hidden, --history) are ignored", file=sys.stderr)
            model_params = {}
        if not phase_policies:
            print("ai4dl: warning: --model given but no phase policy is evaluated: the model "
                  "is not used", file=sys.stderr)
    traces = load_from_args(args, model if phase_policies else None)
    kw["window"] = window_in_samples(args, traces.step)
    check_window_fits(kw["window"], traces)
    resources = _evaluation_resources(args, traces)
    check_workload_key(kw["workload_by"], traces)
    other = [r for r in resources if r not in ("cpu", "memory")]
    if "vpa" in kw["policies"] and other:
        raise Ai4dlError(f"policy 'vpa' recommends cpu and memory only, not {other[0]!r}: "
                         f"leave it out with --policies, or {other[0]!r} with --resources")
    if model is not None and phase_policies:
        missing = [f for f in (*resources, *model.features_) if f not in model.features_
                   or f not in traces.features]
        if missing:
            raise Ai4dlError(f"{args.model}: the model (features {', '.join(model.features_)}) "
                             f"does not fit these traces and resources (feature "
                             f"{missing[0]!r} missing)")
    safety = None
    if args.safety == "operator":
        safety = SafetyConfig.operator_defaults(
            len(resources), resources.index("memory") if "memory" in resources else None)
    cfg = EvaluationConfig(resources=resources, safety=safety, **kw)
    say(args, f"evaluating {', '.join(cfg.policies)} on {traces.summary()}")
    result = run_evaluation(traces, cfg, model=model, model_params=model_params or None,
                            on_stage=lambda msg: say(args, msg))
    ctx = report.make_context(traces, result, str(args.traces), args.model)
    sweep = None
    if args.sweep:
        sweep = report_sweep.run_sweep(result, on_stage=lambda msg: say(args, msg))
        if not sweep:
            print("ai4dl: warning: --sweep: none of phase, phase-proactive, adaptive-stat is "
                  "evaluated: nothing to sweep", file=sys.stderr)
    text = report.render_markdown(result, ctx)
    sys.stdout.write(text)
    written: list[Path] = []
    if args.markdown:
        written.append(write_text_atomic(args.markdown, text))
    if args.json:
        doc = report_json.to_json(result, ctx, sweep, model_params)
        written.append(write_text_atomic(
            args.json, json.dumps(doc, allow_nan=False, indent=1, ensure_ascii=False) + "\n"))
    if args.plots:
        # matplotlib is an optional extra ([train]): its figures are imported where they are drawn
        from ai4dl.evaluation.plots import write_evaluation_plots

        say(args, "plotting")
        with figure_folder(args.plots) as figures:     # stale figures go
            figures += write_evaluation_plots(result, args.plots, args.plot_executions, sweep)
        written += figures
    if written:
        say(args, "wrote " + ", ".join(str(p) for p in written))
    return 0


def add_evaluate_args(p: argparse.ArgumentParser) -> None:
    """The evaluate command's options: traces, replay, evaluation, policy parameters, model
    and output."""
    add_trace_args(p, optional=True)
    add_replay_args(p)
    add_engine_args(p)
    g = p.add_argument_group("evaluation")
    g.add_argument("--window", type=int, default=None, help="samples per re-scheduling window "
                   "(default 40 = 10 min at 15 s)")
    g.add_argument("--window-seconds", type=float, default=None, metavar="SECONDS",
                   help="the window in seconds instead, a whole number of the traces' steps "
                        "(as train --window-seconds and a PhaseModel's windowSeconds)")
    g.add_argument("--resources", help="comma-separated managed resources (default: cpu and "
                   "memory, those the traces have)")
    g.add_argument("--policies", help=f"comma-separated policies (default all: "
                   f"{','.join(catalog.names())})")
    g.add_argument("--test-fraction", type=float, default=0.3, help="share of execution groups "
                   "held out for scoring (default 0.3; 0 = no split, fit and score on all)")
    g.add_argument("--split-by", default="group", metavar="KEY", help="what is held out "
                   "whole: execution groups (default), or an attribute the format gives each "
                   "execution, e.g. 'family' for the DL corpus (unseen families)")
    g.add_argument("--seed", type=int, default=0, help="split and model seed (default 0)")
    cold = g.add_mutually_exclusive_group()
    cold.add_argument("--include-cold-start", dest="include_cold_start", action="store_true",
                      default=True, help="score each execution's first window (the default: "
                      "the start counts, ../shared/docs/evaluation.md)")
    cold.add_argument("--exclude-cold-start", dest="include_cold_start", action="store_false",
                      help="leave each execution's first window unscored (the older tables' "
                           "view: it hides the start)")
    g.add_argument("--risks", default="0.01,0.02,0.05", metavar="SHARES",
                   help="shares of windows at risk the policies are also judged at (memory's "
                        "view: allocation ÷ oracle at the multiplier that leaves exactly that "
                        "share of windows with any sample above the allocation; default "
                        "0.01,0.02,0.05; 'none' to skip)")
    g.add_argument("--initial", choices=("served", "peak", "trace", "model"), default="served",
                   help="request before the first resize: 'served' (default) as the operator "
                        "serves a new pod: the workload's profile from its executions that "
                        "ended before this one, else the learned first-window level of the train "
                        "side at the highest target, else the trace's request; 'peak' the "
                        "execution's own lifetime peak (clairvoyant); 'trace' the trace's own "
                        "request; 'model' the learned level for every execution")
    g.add_argument("--workload-by", default=None, metavar="KEY",
                   help="what names a workload for --initial served: the execution group "
                        "(default), or an attribute the format gives each execution, e.g. "
                        "'family' for the DL corpus (runs of one architecture)")
    g.add_argument("--safety", choices=("none", "operator"), default=None, help="safety layer "
                   "on every policy but the oracle: none or the operator's defaults (default: "
                   "none for TRACES; operator with --prometheus, and the PhaseModel's own with "
                   "--phasemodel: what the operator would have done)")
    _add_policy_parameter_args(p.add_argument_group("policy parameters"))
    _add_model_and_output_args(p)


def _add_policy_parameter_args(g) -> None:
    """The phase policies' and adaptive-stat's parameters, and VPA's prewarm."""
    g.add_argument("--statistic", choices=STATISTICS, default="mean+kstd",
                   help="phase level statistic (default mean+kstd)")
    g.add_argument("--k", type=float, default=2.0, help="k of mean + k·std, for the phase "
                   "policies and adaptive-stat (default 2)")
    g.add_argument("--margin", type=float, default=0.0, help="relative head-room of the phase "
                   "policies (default 0)")
    g.add_argument("--reader", choices=PHASE_READERS, default="last", help="how the phase "
                   "policy reads the previous window's phases (default last)")
    if "phase_scope" in {f.name for f in fields(EvaluationConfig)}:
        g.add_argument("--phase-scope", choices=("model", "execution"), default=None,
                       help="phase levels from the model (default) or from this execution's "
                            "own samples so far")
    g.add_argument("--proactive-mode", choices=("worst-likely", "expected"),
                   default="worst-likely", help="phase-proactive forecast (default worst-likely)")
    g.add_argument("--proactive-threshold", type=float, default=0.2, help="worst-likely: "
                   "phases visited with at least this probability count (default 0.2)")
    g.add_argument("--no-vpa-prewarm", action="store_true", help="VPA starts empty instead of "
                   "with the training executions' history (and krr has no earlier executions "
                   "of the workload: it keeps the initial request)")


def _add_model_and_output_args(p: argparse.ArgumentParser) -> None:
    """The phase model's options and where the results go."""
    g = p.add_argument_group("phase model")
    g.add_argument("--model", help="a fitted model file to use (no fit)")
    g.add_argument("--phases", help="number of phases or 'auto' (default auto)")
    g.add_argument("--epochs", type=int, help="maximum CRBM epochs (default 60)")
    g.add_argument("--hidden", type=int, help="CRBM hidden units (default 10)")
    g.add_argument("--history", type=int, help="CRBM history frames (default 3)")
    g = p.add_argument_group("output")
    add_output(g, "--json", metavar="FILE", help="write the full results (with per-execution "
               "scores) as JSON")
    add_output(g, "--markdown", metavar="FILE", help="write the printed report as markdown")
    add_output(g, "--plots", kind=FOLDER, metavar="DIR", help="write figures (PNG) into DIR")
    g.add_argument("--plot-executions", type=int, default=2, help="executions to plot, the "
                   "longest held-out ones (default 2)")
    g.add_argument("--sweep", action="store_true", help="also sweep k and margin of the phase "
                   "policies and k of adaptive-stat (trade-off figure, JSON 'sweep')")
