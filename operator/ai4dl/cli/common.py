"""What the ``ai4dl`` commands share: the trace arguments and loading, the model's flags, a fit
with a progress bar, ``ai4dl evaluate``'s flags and the progress line. ai4dl.cli.main, ai4dl.cli.trainer
and ai4dl.cli.replay import it (and not each other)."""

from __future__ import annotations

import argparse
import inspect
import math
import sys
from typing import Sequence

from ai4dl.errors import Ai4dlError
from ai4dl.io.loaders import DEFAULT_MAX_ROWS, FORMATS, load_traces, option_default
from ai4dl.method.document_bounds import MAX_HIDDEN, MAX_HISTORY, MAX_PHASES
from ai4dl.method.model import PhaseModel
from ai4dl.method.plausibility import check_model_fits
from ai4dl.policy import catalog


# ----------------------------------------------------------------------------- trace arguments
def _pairs(items: Sequence[str] | None, flag: str) -> dict[str, str] | None:
    if not items:
        return None
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise Ai4dlError(f"{flag} expects NAME=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _max_rows(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects a whole number of rows, got {text!r}") \
            from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (no bound) or more, got {n}")
    return n


def add_trace_args(p: argparse.ArgumentParser, optional: bool = False) -> None:
    p.add_argument("traces", nargs="?" if optional else None,
                   help="trace file or folder (AI4DL CSV, long CSV, Parquet, GCD_VMs tar, "
                        "Alibaba GenAI folder)")
    g = p.add_argument_group("reading traces")
    g.add_argument("--format", default="auto", choices=FORMATS, help="trace format (default: "
                   "detected from the path)")
    g.add_argument("--step", type=float, help="resampling step in seconds (default 15; the "
                   "Google trace keeps its 300 s, Alibaba 60 s)")
    g.add_argument("--max-gap-steps", type=float, help="a gap longer than this many steps splits "
                   "the execution (default 8)")
    g.add_argument("--on-bad", choices=("error", "drop"), default="error",
                   help="NaN/Inf/negative values: stop with an error (default) or drop the row")
    g.add_argument("--features", help="comma-separated features to use, in order "
                   "(e.g. cpu,memory)")
    g.add_argument("--column", action="append", metavar="NAME=COLUMN",
                   help="long CSV/Parquet: read NAME (execution, timestamp, group or a feature) "
                        "from COLUMN; repeatable")
    g.add_argument("--max-rows", type=_max_rows, default=None, metavar="N",
                   help="refuse an input of more than N rows (or N samples once resampled) "
                        "before reading it into memory (about 0.5 GB per million rows); "
                        f"default {DEFAULT_MAX_ROWS}, 0: no bound")
    g.add_argument("--unit", action="append", metavar="FEATURE=UNIT",
                   help="long CSV/Parquet: the unit FEATURE is given in (cpu: cores, m or "
                        "millicores; memory: bytes, Ki, Mi, Gi, KiB, MiB, MB...; timestamp: s, "
                        "ms, us, ns); repeatable")


def load_from_args(args: argparse.Namespace, model=None):
    """The traces the flags name. With ``model`` (detect, plot, evaluate --model): read at the
    model's step unless --step says otherwise (saying so), then refused unless they have the
    model's features, units and step (ModelError, one line): a model applied to data in
    other units or at another step gives numbers that mean nothing, with exit 0."""
    max_rows = getattr(args, "max_rows", None)
    kwargs: dict = {"on_bad": args.on_bad,
                    "max_rows": DEFAULT_MAX_ROWS if max_rows is None else (max_rows or None)}
    if args.step is not None:
        kwargs["step"] = args.step
    elif model is not None and (default := option_default(args.traces, "step", args.format)) \
            is not inspect.Parameter.empty:
        # The model's history and phases are counted in its own steps: resample the data
        # at that step rather than at the format's default, and say so when they differ.
        kwargs["step"] = float(model.step_seconds_)
        if default != kwargs["step"] and not getattr(args, "quiet", False):
            print(f"ai4dl: resampling at the model's step, {model.step_seconds_:g} s (--step "
                  f"sets another; the model then refuses the data)", file=sys.stderr)
    if args.max_gap_steps is not None:
        kwargs["max_gap_steps"] = args.max_gap_steps
    columns, units = _pairs(args.column, "--column"), _pairs(args.unit, "--unit")
    if columns:
        kwargs["columns"] = columns
    if units:
        kwargs["units"] = units
    try:
        traces = load_traces(args.traces, format=args.format, **kwargs)
    except TypeError as err:  # an option the chosen format does not take
        raise Ai4dlError(f"{args.traces}: option not valid for this format ({err})") from None
    for w in getattr(traces, "warnings", []):
        print(f"ai4dl: warning: {w}", file=sys.stderr)
    if args.features:
        traces = traces.select([f.strip() for f in args.features.split(",") if f.strip()])
    if model is not None:
        check_model_fits(model, traces, what=str(args.traces))
    return traces


# ----------------------------------------------------------------------------- commands
def model_from_args(args: argparse.Namespace):
    if args.phases == "auto":
        n_phases: int | str = "auto"
    else:
        try:
            n_phases = int(args.phases)
        except ValueError:
            raise Ai4dlError(f"--phases expects 'auto' or an integer, got {args.phases!r}") from None
    try:
        lo, hi = (int(v) for v in args.k_range.split("-"))
    except ValueError:
        raise Ai4dlError(f"--k-range expects LOW-HIGH, got {args.k_range!r}") from None
    # ranges checked before any data is read or any fit starts (issue 45: these were a
    # traceback after the CRBM fit)
    if n_phases != "auto" and n_phases < 1:
        raise Ai4dlError(f"--phases {n_phases}: at least 1 phase (or 'auto')")
    if not 1 <= lo <= hi:
        raise Ai4dlError(f"--k-range {args.k_range}: LOW-HIGH with 1 <= LOW <= HIGH (e.g. 2-10)")
    # a model document holds at most these (ai4dl.method.document): refused before any data is read
    for flag, value, bound in (("--hidden", args.hidden, MAX_HIDDEN),
                               ("--history", args.history, MAX_HISTORY),
                               ("--phases", n_phases if n_phases != "auto" else 1, MAX_PHASES),
                               ("--k-range", hi, MAX_PHASES)):
        if value is not None and value > bound:
            raise Ai4dlError(f"{flag} {value} is above {bound}, the most a model document holds")
    return PhaseModel(n_hidden=args.hidden, n_history=args.history, n_phases=n_phases,
                      k_range=(lo, hi), k_rule=args.k_rule, epochs=args.epochs,
                      device=args.device, random_state=args.seed)


def fit_with_progress(model, traces, quiet: bool = False):
    from tqdm import tqdm  # tqdm is an optional extra ([train]): imported where a fit runs

    bar = tqdm(total=model.epochs, desc="CRBM epochs", unit="epoch", disable=quiet or None,
               file=sys.stderr, leave=False)

    def on_epoch(epoch: int, train_err: float, val_err: float) -> None:
        bar.update(1)
        bar.set_postfix(train=f"{train_err:.4f}", val=f"{val_err:.4f}")

    try:
        model.fit(traces, on_epoch=on_epoch)
    finally:
        bar.close()
    return model


# ----------------------------------------------------------------------------- evaluate flags
# ai4dl evaluate's flags, read by both its file path (ai4dl.cli.main) and its Prometheus path
# (ai4dl.cli.replay).
def policies_arg(text: str | None) -> tuple[str, ...]:
    known = catalog.names()
    if text is None:
        return known
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise Ai4dlError("--policies expects a comma-separated list of policies")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise Ai4dlError(f"unknown policy {unknown[0]!r} (known: {', '.join(known)})")
    return tuple(names)


def risks_arg(text: str) -> tuple[float, ...]:
    """--risks: comma-separated shares in (0, 1), ascending; 'none': no risk view."""
    if text.strip().lower() == "none":
        return ()
    try:
        out = tuple(sorted({float(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise Ai4dlError(f"--risks expects shares like 0.01,0.02,0.05, got {text!r}") from None
    bad = [x for x in out if not 0.0 < x < 1.0]
    if bad or not out:
        raise Ai4dlError(f"--risks: each share must be in (0, 1), got {text!r}")
    return out


#: ``evaluate``'s window when neither --window nor --window-seconds is given: 40 samples
#: (10 min at 15 s).
DEFAULT_WINDOW = 40


def window_in_samples(args: argparse.Namespace, step: float | None) -> int:
    """``evaluate``'s window in samples: ``--window``, or ``--window-seconds`` over the data's
    step (as ``train --window-seconds`` and a PhaseModel's ``windowSeconds`` count it), which
    must be a whole number of steps."""
    seconds = getattr(args, "window_seconds", None)
    if seconds is None:
        return int(args.window)
    if not step:
        raise Ai4dlError("--window-seconds: these traces have no regular step; give --window "
                         "in samples")
    n = seconds / step
    if abs(n - round(n)) > 1e-6 or round(n) < 1:
        fits = max(1, round(n)) * step
        raise Ai4dlError(f"--window-seconds {seconds:g} is not a whole number of the traces' "
                         f"{step:g} s steps: pass --window-seconds {fits:g}")
    return int(round(n))


def evaluation_flags(args: argparse.Namespace) -> tuple[dict, dict]:
    """EvaluationConfig keywords (all but resources and safety) and the model's fit options,
    checked before any data is read."""
    seconds = getattr(args, "window_seconds", None)
    if seconds is not None and args.window is not None:
        raise Ai4dlError("give the window once: --window (samples) or --window-seconds")
    if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
        raise Ai4dlError(f"--window-seconds must be a positive number, got {seconds:g}")
    if args.window is None:
        args.window = DEFAULT_WINDOW
    if args.window < 1:
        raise Ai4dlError(f"--window must be at least 1 sample, got {args.window}")
    if not 0.0 <= args.test_fraction < 1.0:
        raise Ai4dlError(f"--test-fraction must be in [0, 1), got {args.test_fraction:g}")
    if not math.isfinite(args.k):
        raise Ai4dlError(f"--k must be a finite number, got {args.k}")
    if not (math.isfinite(args.margin) and args.margin > -1.0):
        raise Ai4dlError(f"--margin must be a number above -1, got {args.margin}")
    if not 0.0 < args.proactive_threshold <= 1.0:
        raise Ai4dlError(f"--proactive-threshold must be in (0, 1], got "
                         f"{args.proactive_threshold:g}")
    if args.plot_executions < 0:
        raise Ai4dlError(f"--plot-executions must be 0 or more, got {args.plot_executions}")
    kw = dict(window=args.window, test_fraction=args.test_fraction, seed=args.seed,
              risks=risks_arg(getattr(args, "risks", "0.01,0.02,0.05")),
              split_by=args.split_by, policies=policies_arg(args.policies),
              statistic=args.statistic, k=args.k, margin=args.margin, reader=args.reader,
              proactive_mode=args.proactive_mode,
              proactive_threshold=args.proactive_threshold, vpa_prewarm=not args.no_vpa_prewarm,
              include_cold_start=args.include_cold_start, initial=args.initial,
              workload_by=getattr(args, "workload_by", None) or "group")
    if getattr(args, "phase_scope", None) is not None:
        kw["phase_scope"] = args.phase_scope
    params: dict = {}
    if args.phases is not None:
        if args.phases == "auto":
            params["n_phases"] = "auto"
        else:
            try:
                params["n_phases"] = int(args.phases)
            except ValueError:
                raise Ai4dlError(f"--phases expects 'auto' or an integer, got "
                                 f"{args.phases!r}") from None
            if params["n_phases"] < 1:
                raise Ai4dlError(f"--phases must be at least 1, got {args.phases}")
    for flag, key in (("epochs", "epochs"), ("hidden", "n_hidden"), ("history", "n_history")):
        value = getattr(args, flag)
        if value is not None:
            if value < 1:
                raise Ai4dlError(f"--{flag} must be at least 1, got {value}")
            params[key] = value
    return kw, params


def say(args: argparse.Namespace, msg: str) -> None:
    """A progress line on stderr, unless ``--quiet``."""
    if not getattr(args, "quiet", False):
        print(f"ai4dl: {msg}", file=sys.stderr)
