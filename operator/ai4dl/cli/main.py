"""``ai4dl``: train, detect, describe, plot and demo from the command line.

Errors caused by input print one line (``ai4dl: error: ...``) and exit with status 2. The batch
trainer (``ai4dl train ... --phasemodel NS/NAME``) adds: 3 when Prometheus or the Kubernetes API
cannot be reached (worth a retry), 4 for a rejected candidate with ``--fail-on-reject`` (by
default a rejection exits 0: the current model stays, which is a good outcome for a CronJob).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Sequence

import numpy as np
from pydantic import ValidationError

from ai4dl.cli.common import (model_from_args, add_trace_args, fit_with_progress,
                              load_from_args, say)
from ai4dl.cli.evaluate import add_evaluate_args, cmd_evaluate
from ai4dl.cli.trainer import (add_trainer_args, exit_code, report_error, rollback,
                               train_phasemodel)
from ai4dl import __version__
from ai4dl.crd_spec import MIN_WINDOW_STEPS, PhaseModelSpec
from ai4dl.errors import Ai4dlError, one_line
from ai4dl.io.loaders import DL_CORPUS, load_corpus_phases, load_dl_corpus
from ai4dl.io.modelfile import load_model, read_document, save_model
from ai4dl.io.outputs import FOLDER, add_output, claimed_outputs
from ai4dl.io.writers import (atomic_output, figure_folder, save_figure, write_long_csv,
                              write_text_atomic)
from ai4dl.method import synthetic
from ai4dl.method.model import PhaseModel
from ai4dl.method.phases import mostly_novel_warning
from ai4dl.policy.headroom import from_table
from ai4dl.recording import record
from ai4dl.reporting.report import describe
from ai4dl.serving import managed_resources
from ai4dl.trainer import choose_served_policy, window_problem

EXIT_INPUT = 2
EXIT_UNAVAILABLE = 3
EXIT_REJECTED = 4


def cmd_train(args: argparse.Namespace) -> int:
    if args.phasemodel or args.prometheus:
        return train_phasemodel(args)
    if args.traces is None:
        raise Ai4dlError("give TRACES, or --prometheus URL --selector MATCHERS --phasemodel "
                         "NAMESPACE/NAME")
    for flag in ("selector", "create", "force", "if_due", "fail_on_reject"):
        if getattr(args, flag):
            raise Ai4dlError(f"--{flag.replace('_', '-')} needs --phasemodel NAMESPACE/NAME")
    if not args.no_policy:
        for flag, value in (("--target-fulfilment", args.target_fulfilment),
                            ("--memory-risk", args.memory_risk)):
            if not 0.0 < value < 1.0:
                raise Ai4dlError(f"{flag} must be in (0, 1), got {value:g}")
    model = model_from_args(args)  # flags first: a typo should not wait for the data to load
    traces = load_from_args(args)
    # what the policy choice needs of the data, checked before the fit (not after minutes)
    spec = None if args.no_policy else _policy_spec(args, traces)
    say(args, f"training on {traces.summary()}")
    model = fit_with_progress(model, traces, args.quiet)
    if spec is not None:
        _choose_policy(args, model, traces, spec)
    path = save_model(model, args.output)
    r = model.fit_report_
    say(args, f"wrote {path} ({path.stat().st_size / 1024:.1f} KiB): {model.n_phases_} phases, "
         f"{r.crbm_epochs} epochs, reconstruction error {r.reconstruction_error:.4f}, "
         f"silhouette {r.silhouette if r.silhouette is None else round(r.silhouette, 3)}, "
         f"novelty {100 * r.novelty_rate:.2f}%, {model.fit_seconds_:.1f} s")
    return 0


def _policy_spec(args: argparse.Namespace, traces):
    """The PhaseModelSpec ``auto``'s choice is made for (windows of ``--window-seconds`` at the
    data's step), or None when the data has nothing a request can take (percent, fractions:
    said, the model is stored without a choice). A window the data cannot fill, or one that
    does not fit the step, is an Ai4dlError naming the flag and a value that fits: head-room
    tables fitted on no window would be stored as if they had learnt something."""
    try:
        managed_resources(SimpleNamespace(features_=traces.features, units_=traces.units))
    except ValueError as err:
        say(args, f"no policy choice stored: {err} (nothing to size)")
        return None
    step = max(1, int(round(traces.step)))
    window = args.window_seconds
    if window < MIN_WINDOW_STEPS * step or window % step:
        fits = max(MIN_WINDOW_STEPS * step, -(-window // step) * step)
        raise Ai4dlError(f"--window-seconds {window} must be a whole number of steps, at least "
                         f"{MIN_WINDOW_STEPS}, of the data's {step} s step: pass "
                         f"--window-seconds {fits} (or --no-policy)")
    problem = window_problem(list(traces), window // step, step)
    if problem:
        raise Ai4dlError(f"{args.traces}: {problem}; or --no-policy")
    try:
        return PhaseModelSpec.model_validate({
            "stepSeconds": step, "windowSeconds": window,
            "features": [{"name": f, "query": f"{f}{{{{{{selector}}}}}}"}
                         for f in traces.features],
            "policy": {"objectives": {"cpu": {"fulfilment": args.target_fulfilment},
                                      "memory": {"maxRiskWindows": args.memory_risk}}}})
    except ValidationError as err:
        raise Ai4dlError(f"the policy choice's PhaseModel: {one_line(err)}") from None


def _choose_policy(args: argparse.Namespace, model, traces, spec) -> None:
    """``auto``'s choice and the head-room tables into the model file, as the batch trainer
    stores them, for a PhaseModel with windows of ``--window-seconds`` (else ``kind: auto``
    would serve the reactive baseline with this model)."""
    try:
        choice = choose_served_policy(model, list(traces), spec)
    except ValueError as err:
        say(args, f"no policy choice stored: {str(err).splitlines()[0]}")
        return
    say(args, f"auto: {choice.reason}")


def cmd_rollback(args: argparse.Namespace) -> int:
    return rollback(args)


def cmd_detect(args: argparse.Namespace) -> int:
    model = load_model(args.model)
    traces = load_from_args(args, model)
    detections = model.detect(traces)
    with contextlib.ExitStack() as stack:
        out = (stack.enter_context(atomic_output(args.output, "w", newline=""))
               if args.output else sys.stdout)
        if args.json:
            json.dump({"features": list(model.features_), "executions": [
                {"name": e.name, "group": e.group, "start": float(e.times[0]),
                 "step": e.step, "phase": d.phase.tolist(), "novel": d.novel.tolist()}
                for e, d in zip(traces, detections)]}, out)
            out.write("\n")
        else:
            w = csv.writer(out)
            w.writerow(["execution", "timestamp", "phase", "distance", "novel"])
            for e, d in zip(traces, detections):
                for t, p, dist, nov in zip(e.times, d.phase, d.distance, d.novel):
                    w.writerow([e.name, f"{t:.0f}", int(p), f"{dist:.4f}", int(nov)])
    labels = np.concatenate([d.phase for d in detections])
    novel = np.concatenate([d.novel for d in detections])
    shares = ", ".join(f"{j}: {100 * np.mean(labels == j):.1f}%" for j in range(model.n_phases_))
    say(args, f"{len(traces)} executions, {len(labels)} samples; phase shares {shares}; "
         f"novel {100 * novel.mean():.2f}%")
    warning = mostly_novel_warning(float(novel.mean()) if len(novel) else 0.0)
    if warning:                  # even with -q: the output above is mostly noise
        print(f"ai4dl: warning: {warning}", file=sys.stderr)
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    doc = read_document(args.model)
    model = PhaseModel.from_document(doc)
    if args.json:
        print(doc.model_dump_json(by_alias=True, exclude_none=True,
                                  exclude={"crbm", "centroids", "scaler"}, indent=2))
    else:
        print(describe(model), end="")
    if args.heatmap:
        tables = getattr(model, "policy_tables_", None)
        if not tables:
            raise Ai4dlError(f"{args.model} holds no fitted policy table (schema "
                             f"{doc.schema_version}): nothing to draw for --heatmap")
        # matplotlib and sklearn are optional extras ([train]): imported where they are used
        import matplotlib.pyplot as plt

        from ai4dl.reporting.plots import headroom_figure

        fig = headroom_figure([from_table(t) for t in tables])
        save_figure(fig, args.heatmap)
        plt.close(fig)
        say(args, f"wrote {args.heatmap}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    model = load_model(args.model)
    traces = load_from_args(args, model)
    written = write_plots(model, traces, Path(args.output), args.execution, args.max_executions)
    say(args, "wrote " + ", ".join(str(p) for p in written))
    return 0


def write_plots(model, traces, outdir: Path, names: Sequence[str] | None = None,
                max_executions: int = 3, title: str = "",
                logged: dict[str, tuple[np.ndarray, Sequence[str]]] | None = None) -> list[Path]:
    """Trace figures of the chosen executions, distributions, the phase graph and the one-page
    report. ``logged``: execution name -> (codes per sample, names) of the phases the program
    logged itself, drawn under the detected ones."""
    import matplotlib.pyplot as plt

    by_name = {e.name: e for e in traces}
    if names:
        missing = [n for n in names if n not in by_name]
        if missing:
            raise Ai4dlError(f"no execution named {missing[0]!r} (have e.g. "
                             f"{', '.join(list(by_name)[:5])})")
        chosen = [by_name[n] for n in names]
    else:
        # The longest executions show the most phases.
        chosen = sorted(traces, key=len, reverse=True)[:max_executions]
    with figure_folder(outdir) as written:     # stale figures go
        labels = model.predict(traces)
        chosen_labels = model.predict(chosen)
        values = np.concatenate([e.select(model.features_).values for e in traces])
        all_labels = np.concatenate(labels)

        def save(fig, name: str) -> None:
            path = save_figure(fig, outdir / name)
            plt.close(fig)
            written.append(path)

        _draw(model, chosen, chosen_labels, values, all_labels, save, title, logged)
    return written


def _draw(model, chosen, chosen_labels, values, all_labels, save, title, logged) -> None:
    """The figures of :func:`write_plots`, each handed to ``save`` with its file name."""
    from ai4dl.reporting import plots

    for ex, lab in zip(chosen, chosen_labels):
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in ex.name)
        save(plots.trace_figure(ex.select(model.features_), lab, model.n_phases_,
                                (logged or {}).get(ex.name)), f"trace-{safe}.png")
    save(plots.distributions_figure(model, values, all_labels), "distributions.png")
    save(plots.graph_figure(model), "phase-graph.png")
    shown_logged = None
    if logged and all(e.name in logged for e in chosen[:2]):
        shown_logged = [logged[e.name] for e in chosen[:2]]
    save(plots.report_figure(model, [e.select(model.features_) for e in chosen[:2]],
                             chosen_labels[:2], values, all_labels, title, shown_logged),
         "report.png")


def cmd_synthetic(args: argparse.Namespace) -> int:
    if args.executions < 1:
        raise Ai4dlError("--executions must be at least 1")
    if args.runs_per_workload < 1:
        raise Ai4dlError("--runs-per-workload must be at least 1")
    cfg = synthetic.SyntheticConfig(n_features=4 if args.gpu else 2)
    traces, _ = synthetic.generate(args.executions, seed=args.seed, config=cfg,
                                   runs_per_workload=args.runs_per_workload)
    path = write_long_csv(traces, args.output)
    say(args, f"wrote {path}: {traces.summary()}")
    return 0


def corpus_truth(test, phase_logs: dict) -> tuple[list[np.ndarray], list[str]]:
    """Each corpus execution's own phase per sample (codes into the returned names): the phase
    its program logged at the middle of the sample's interval."""
    names: list[str] = []
    codes = []
    for e in test:
        log = phase_logs.get(e.name.split("#", 1)[0], [])
        starts = np.array([t for t, _ in log])
        idx = np.searchsorted(starts, e.times - (e.step or 1.0) / 2, side="right") - 1
        labels = [log[i][1] if i >= 0 else "startup" for i in idx]
        for lab in labels:
            if lab not in names:
                names.append(lab)
        codes.append(np.array([names.index(lab) for lab in labels]))
    return codes, names


def _demo_corpus(args: argparse.Namespace, out: Path, start: float) -> int:
    """The demo on the recorded corpus of real PyTorch runs: fit on some jobs, detect the phases
    of the others, and score them against the programs' own phase logs."""
    traces = load_dl_corpus(DL_CORPUS)
    train, test = traces.split_by_group(0.3, args.seed)
    say(args, f"embedded data: the recorded corpus of real PyTorch training runs "
         f"({DL_CORPUS}), sampled every {traces.step:g} s; seed {args.seed}")
    truth, names = corpus_truth(test, load_corpus_phases(DL_CORPUS))
    families = sorted({e.meta["family"] for e in test})
    return _demo_fit_and_report(
        args, out, start, train, test, truth,
        lambda ari: f"{len(test)} executions of {len(test.groups())} jobs not fitted on "
                    f"({', '.join(families)}): adjusted Rand index against the phases the "
                    f"programs logged themselves = {ari:.3f} (logged phases: {', '.join(names)})",
        "ai4dl demo: phases of recorded PyTorch training runs", logged_names=names)


def _demo_fit_and_report(args: argparse.Namespace, out: Path, start: float, train, test, truth,
                         check: Callable[[float], str], title: str,
                         logged_names: Sequence[str] | None = None) -> int:
    """Both demos: fit on ``train``, score ``test``'s detected phases against ``truth`` (ARI),
    write the model, describe.md (with the ``check(ari)`` line) and the plots; with
    ``logged_names`` (the names of ``truth``'s codes) the plots show ``truth`` under the
    detected phases."""
    from sklearn.metrics import adjusted_rand_score

    say(args, f"train: {train.summary()}")
    model = fit_with_progress(PhaseModel(random_state=args.seed), train, args.quiet)
    save_model(model, out / "model.json")
    pred = model.predict(test)
    ari = adjusted_rand_score(np.concatenate(truth), np.concatenate(pred))
    text = describe(model) + f"\n## Held-out check\n\n{check(ari)}\n"
    write_text_atomic(out / "describe.md", text)
    print(text)
    logged = ({e.name: (codes, logged_names) for e, codes in zip(test, truth)}
              if logged_names else None)
    written = write_plots(model, test, out, max_executions=2, title=title, logged=logged)
    say(args, f"wrote {out / 'model.json'}, {out / 'describe.md'}, "
         + ", ".join(str(p) for p in written) + f" in {time.perf_counter() - start:.0f} s")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    out = Path(args.output)
    if args.data == "dl-corpus":
        return _demo_corpus(args, out, start)
    train, _ = synthetic.generate(args.executions, seed=args.seed)
    test, truth = synthetic.generate(10, seed=args.seed + 1)
    say(args, f"embedded data: synthetic DL training jobs (download, preprocessing, epochs with "
         f"validation and checkpoints), seed {args.seed}")
    true_names = ", ".join(f"{k} {v}" for k, v in synthetic.PHASE_NAMES.items())
    return _demo_fit_and_report(
        args, out, start, train, test, truth,
        lambda ari: f"10 new executions (seed {args.seed + 1}): adjusted Rand index against the "
                    f"generator's true phases = {ari:.3f} (true phases: {true_names})",
        "ai4dl demo: phases of synthetic DL training jobs")


# ----------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ai4dl", description="Phase discovery for "
                                     "deep-learning resource-usage traces (CRBM + k-means).")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress or summaries")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_train_parser(sub)
    _add_rollback_parser(sub)
    _add_detect_parser(sub)
    _add_describe_parser(sub)
    _add_plot_parser(sub)
    _add_demo_parser(sub)
    _add_synthetic_parser(sub)
    _add_evaluate_parser(sub)

    record.add_parser(sub)
    return parser


def _add_train_parser(sub) -> None:
    """``ai4dl train``: fit a model from traces, or refit a PhaseModel."""
    p = sub.add_parser("train", help="fit a phase model on traces (-o model.json), or refit a "
                       "PhaseModel from Prometheus history or traces (--phasemodel NS/NAME)")
    add_trace_args(p, optional=True)
    add_output(p, "-o", "--output", default="model.json", unless=("phasemodel", "prometheus"),
               help="model file (default model.json)")
    p.add_argument("--phases", default="auto", help="number of phases, or 'auto' (default)")
    p.add_argument("--k-range", default="2-10", help="candidate k for auto (default 2-10)")
    p.add_argument("--window-seconds", type=int, default=600, metavar="SECONDS",
                   help="the PhaseModel's windowSeconds the policy choice is made for (default "
                        "600; the trainer uses the PhaseModel's own)")
    p.add_argument("--target-fulfilment", type=float, default=0.97, metavar="SHARE",
                   help="the policy choice's cpu objective: share of samples at or below the "
                        "request (default 0.97; the trainer uses the PhaseModel's "
                        "spec.policy.objectives)")
    p.add_argument("--memory-risk", type=float, default=0.01, metavar="SHARE",
                   help="the policy choice's memory objective: at most this share of windows "
                        "with any sample above the request (default 0.01; memory is not "
                        "compressible, so it is judged by windows at risk, not samples)")
    p.add_argument("--no-policy", action="store_true",
                   help="store no policy choice nor head-room tables (kind auto then serves "
                        "the reactive baseline with this model)")
    p.add_argument("--k-rule", default="silhouette", choices=("silhouette", "elbow"),
                   help="how --phases auto picks k: best silhouette, or the WCSS elbow "
                        "(default silhouette)")
    p.add_argument("--hidden", type=int, default=10, help="CRBM hidden units (default 10)")
    p.add_argument("--history", type=int, default=3, help="CRBM history frames (default 3)")
    p.add_argument("--epochs", type=int, default=60, help="maximum CRBM epochs (default 60)")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed of the CRBM, k-means and the validation split (default 0)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="CRBM training device (default auto: cuda when torch sees one and the "
                        "fit is large enough for it to be faster, by the cost model in "
                        "ai4dl.method.crbm_train.FitSize)")
    add_trainer_args(p)
    p.set_defaults(func=cmd_train)


def _add_rollback_parser(sub) -> None:
    """``ai4dl rollback``: swap a PhaseModel's model and previous model."""
    p = sub.add_parser("rollback", help="put a PhaseModel's previous model back (swaps "
                       "spec.model and spec.previousModel)")
    p.add_argument("--phasemodel", required=True, metavar="NAMESPACE/NAME",
                   help="the PhaseModel whose spec.model and spec.previousModel are swapped")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster when "
                   "KUBERNETES_SERVICE_HOST is set, else $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--log-format", choices=("auto", "text", "json"), default="auto",
                   help="text lines, JSON lines (a Job's logs), or auto: JSON when not a "
                        "terminal (default auto)")
    p.set_defaults(func=cmd_rollback)


def _add_detect_parser(sub) -> None:
    """``ai4dl detect``: the phase of every sample."""
    p = sub.add_parser("detect", help="phase per sample for traces, as CSV or JSON")
    p.add_argument("model", help="model file written by 'ai4dl train'")
    add_trace_args(p)
    add_output(p, "-o", "--output", help="output file (default: standard output)")
    p.add_argument("--json", action="store_true", help="JSON instead of CSV")
    p.set_defaults(func=cmd_detect)


def _add_describe_parser(sub) -> None:
    """``ai4dl describe``: what a model file holds."""
    p = sub.add_parser("describe", help="phase table, prototypes, transition matrix, fit report")
    p.add_argument("model")
    p.add_argument("--json", action="store_true", help="the document's statistics as JSON")
    add_output(p, "--heatmap", metavar="PNG", help="also draw the learned head-room per "
                   "state (the model's fitted policy tables) into this PNG")
    p.set_defaults(func=cmd_describe)


def _add_plot_parser(sub) -> None:
    """``ai4dl plot``: figures of traces and their phases."""
    p = sub.add_parser("plot", help="traces with phase bands, distributions, phase graph (PNG)")
    p.add_argument("model")
    add_trace_args(p)
    add_output(p, "-o", "--output", kind=FOLDER, default="plots",
               help="output folder (default plots)")
    p.add_argument("--execution", action="append", help="execution to plot; repeatable "
                   "(default: the longest ones)")
    p.add_argument("--max-executions", type=int, default=3,
                   help="executions drawn per figure (default 3)")
    p.set_defaults(func=cmd_plot)


def _add_demo_parser(sub) -> None:
    """``ai4dl demo``: the whole method on embedded data."""
    p = sub.add_parser("demo", help="train, detect, describe and plot on embedded data")
    add_output(p, "-o", "--output", kind=FOLDER, default="ai4dl-demo",
               help="output folder (default ai4dl-demo)")
    p.add_argument("--data", choices=("synthetic", "dl-corpus"), default="synthetic",
                   help="synthetic DL jobs (default), or the recorded corpus of real PyTorch "
                        "training runs")
    p.add_argument("--executions", type=int, default=40,
                   help="synthetic DL jobs to generate (default 40)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.set_defaults(func=cmd_demo)


def _add_synthetic_parser(sub) -> None:
    """``ai4dl synthetic``: the demo's generated jobs as a CSV."""
    p = sub.add_parser("synthetic", help="write synthetic DL training jobs as a long CSV (the "
                       "demo's generator; --executions 40 --seed 0: the demo's training jobs)")
    add_output(p, "-o", "--output", default="synthetic.csv",
               help="long CSV to write (default synthetic.csv)")
    p.add_argument("--executions", type=int, default=40,
                   help="synthetic DL jobs to generate (default 40, as the demo)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--gpu", action=argparse.BooleanOptionalAction, default=True,
                   help="gpu_util and gpu_memory beside cpu and memory, as in the demo "
                        "(default); --no-gpu: cpu and memory only")
    p.add_argument("--runs-per-workload", type=int, default=1, metavar="N",
                   help="re-run each job N times, one after another (one group: same phase "
                        "plan and levels, another seed), as sweeps, retries and nightly "
                        "retrains are (default 1: every job its own)")
    p.set_defaults(func=cmd_synthetic)


def _add_evaluate_parser(sub) -> None:
    """``ai4dl evaluate``: replay traces through provisioning policies."""
    p = sub.add_parser("evaluate", help="replay traces through provisioning policies and score "
                       "them (allocation ÷ oracle at matched fulfilment)")
    add_evaluate_args(p)
    p.set_defaults(func=cmd_evaluate)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        try:
            with claimed_outputs(args):     # every output checked and held before any work
                return args.func(args)
        except ValidationError as err:
            # every document and spec the commands read comes from the user: a pydantic
            # error that a command did not word itself is still one line, exit 2
            raise Ai4dlError(f"invalid {err.title}: {one_line(err)}") from None
    except Ai4dlError as err:
        code = exit_code(err)
        report_error(args, err, code)
        return code
    except KeyboardInterrupt:
        print("ai4dl: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
