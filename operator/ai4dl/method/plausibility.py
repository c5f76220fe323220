"""Checks that data and models are what they claim to be, before anything is fitted or served.

A trace whose numbers are in another unit than their label loads fine and fits fine: a model of
memory "in bytes" that is really MiB has levels of a few KiB, millisecond timestamps make every
sample its own execution. Nothing downstream can tell, so the checks are here, each a physical
fact rather than a threshold tuned to data:

* a unix time in seconds is below 1e11 (the year 5138): epoch times of 1.7e12, 1.7e15, 1.7e18
  are milliseconds, microseconds, nanoseconds;
* samples of one execution are a few steps apart, not 100 steps (relative times in ms at a
  15 s step are 1000 "steps" apart) -- whatever the cause, every sample would be its own
  execution;
* most executions being one sample long means the step or the time unit is wrong;
* memory that is in use at all holds at least one page (4096 bytes): a 99th percentile below
  that is not bytes; below a MiB (less than any program with its libraries mapped) a trace
  whose unit was not stated is refused too, since ``--unit memory=bytes`` says it is right;
* no machine has more than 1024 cores: a 99th percentile above that is not cores (millicores,
  or percent of a core); above 64 cores (a whole large machine for one container) a trace whose
  unit was not stated is refused too, since ``--unit cpu=cores`` says the data is right.

And a model applied to data must have been fitted on the same features, in the same units, at
the same step (:func:`check_model_fits`).

Every failure is a :class:`~ai4dl.errors.TraceError` / :class:`~ai4dl.errors.ModelError`: one
line naming the file and the flag to pass (the CLI prints it and exits 2).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ai4dl.errors import ModelError, TraceError

#: Unix time in seconds beyond which a timestamp is not seconds: 1e11 s is the year 5138.
MAX_EPOCH_SECONDS = 1e11
#: Samples of one execution a median of this many steps apart: the time unit (or step) is wrong.
MAX_SPACING_STEPS = 100
#: The smallest memory anything uses: one page.
PAGE_BYTES = 4096
#: Less than a running program with its libraries mapped: refused unless the unit was stated.
PROGRAM_BYTES = 2 ** 20
#: More cores than any machine has (the largest sold have under 1,000).
MAX_MACHINE_CORES = 1024
#: More cores than one container uses on a large machine: refused unless the unit was stated.
LARGE_MACHINE_CORES = 64

_BYTE_FEATURES = ("memory", "gpu_memory")


def check_timestamps(label: str, times: np.ndarray, codes: np.ndarray, step: float,
                     unit_given: str | None) -> None:
    """Timestamps (seconds, after any --unit) of a long table: epoch magnitude and spacing.

    ``codes`` numbers each row's execution (the spacing is measured within executions)."""
    finite = times[np.isfinite(times)]
    if not len(finite):
        return
    given = f" (after --unit timestamp={unit_given})" if unit_given else ""
    top = float(np.max(np.abs(finite)))
    if top >= MAX_EPOCH_SECONDS:
        unit = next((u for u, f in (("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))
                     if top * f < MAX_EPOCH_SECONDS), None)
        hint = (f"pass --unit timestamp={unit}" if unit and not unit_given else
                "pass the timestamps' unit with --unit timestamp=s|ms|us|ns")
        raise TraceError(f"timestamps up to {top:.3g}{given} are not unix seconds (1e11 s is "
                         f"the year 5138): {hint}", path=label, column="timestamp")
    order = np.lexsort((times, codes))
    t, c = times[order], codes[order]
    gaps = np.diff(t)[(c[1:] == c[:-1]) & (np.diff(t) > 0)]
    if len(gaps) < 2:
        return
    spacing = float(np.median(gaps))
    if spacing >= MAX_SPACING_STEPS * step:
        unit = "ms" if spacing / 1e3 < MAX_SPACING_STEPS * step else \
            "us" if spacing / 1e6 < MAX_SPACING_STEPS * step else "ns"
        name = {"ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}[unit]
        hint = (f"timestamps in {name}? pass --unit timestamp={unit}; else a --step near "
                f"the sampling interval" if not unit_given else
                "pass a --step near the sampling interval, or the right --unit timestamp=")
        raise TraceError(f"samples of an execution are a median {spacing:g} s apart{given}, "
                         f"{spacing / step:.0f} times the {step:g} s step: {hint}",
                         path=label, column="timestamp")


def check_levels(traces, *, label: str | None = None, units_given: Sequence[str] = (),
                 flags: bool = True) -> None:
    """Memory below a page, cpu above any machine (module docstring). ``units_given``: the
    features whose unit the user stated (--unit), which lifts the large-machine cpu rule."""
    label = label if label is not None else (traces.source or None)
    for j, (feature, unit) in enumerate(zip(traces.features, traces.units)):
        col = np.concatenate([e.values[:, j] for e in traces]).astype(np.float64)
        col = col[np.isfinite(col)]
        if not len(col):
            continue
        p99 = float(np.percentile(col, 99))
        flag = (lambda u: f"; pass --unit {feature}={u}") if flags else (lambda u: "")
        if unit == "bytes" and feature in _BYTE_FEATURES and 0 < p99 < PAGE_BYTES:
            raise TraceError(f"'{feature}' in bytes has a 99th percentile of {p99:.4g}, below "
                             f"one page ({PAGE_BYTES} bytes): not bytes{flag('MiB')} (or the "
                             f"unit it is in: KiB, GiB...)", path=label, column=feature)
        if unit == "bytes" and feature in _BYTE_FEATURES and 0 < p99 < PROGRAM_BYTES and \
                flags and feature not in units_given:
            raise TraceError(f"'{feature}' has a 99th percentile of {p99:.4g} bytes, less than "
                             f"a program with its libraries (1 MiB): pass --unit "
                             f"{feature}=MiB (or the unit it is in: KiB, GiB...), or --unit "
                             f"{feature}=bytes if it really is bytes", path=label,
                             column=feature)
        if unit == "cores" and feature == "cpu":
            if p99 > MAX_MACHINE_CORES:
                raise TraceError(f"'cpu' in cores has a 99th percentile of {p99:.4g}, more than "
                                 f"any machine has ({MAX_MACHINE_CORES}): not cores"
                                 f"{flag('m')} (millicores)", path=label, column=feature)
            if p99 > LARGE_MACHINE_CORES and flags and feature not in units_given:
                raise TraceError(f"'cpu' has a 99th percentile of {p99:.4g} cores, a whole "
                                 f"large machine ({LARGE_MACHINE_CORES}) per container: pass "
                                 f"--unit cpu=m if it is millicores, or --unit cpu=cores if "
                                 f"it really is cores", path=label, column=feature)


def check_runs(traces, *, label: str | None = None, max_gap_steps: float | None = None) -> None:
    """Refuse a trace set most of whose executions are one sample long."""
    label = label if label is not None else (traces.source or None)
    lengths = np.array([len(e) for e in traces])
    ones = int((lengths == 1).sum())
    if ones * 2 > len(lengths):
        gap = f" ({max_gap_steps:g} x {traces.step:g} s)" if max_gap_steps and traces.step \
            else ""
        raise TraceError(f"{ones} of {len(lengths)} executions are one sample long: samples "
                         f"further apart than --max-gap-steps x --step{gap} split every "
                         f"execution; timestamps in milliseconds (--unit timestamp=ms), or a "
                         f"--step shorter than the sampling interval?", path=label)


def check_before_fit(traces) -> None:
    """What any fit needs of its data: a TraceError (one line) when it is implausible."""
    check_runs(traces)
    check_levels(traces, flags=False)


def check_model_fits(model, traces, *, what: str = "the data") -> None:
    """The model's features, units and step against the data's: ModelError naming the
    difference and what to pass."""
    source = getattr(traces, "source", "") or what
    missing = [f for f in model.features_ if f not in traces.features]
    if missing:
        raise ModelError(f"{source}: the model was fitted on {', '.join(model.features_)}; "
                         f"the data has {', '.join(traces.features)} (no "
                         f"{', '.join(missing)}): map columns with --column, or use a model "
                         f"of these features")
    have = dict(zip(traces.features, traces.units))
    for f, unit in zip(model.features_, model.units_):
        if have[f] != unit:
            raise ModelError(f"{source}: the model's '{f}' is in {unit}, the data's in "
                             f"{have[f]}: a model applies only to data in its own units "
                             f"(--unit {f}=... for a long table, or a model of this data)")
    step, mine = traces.step, float(model.step_seconds_)
    if step and mine and abs(step - mine) > 1e-6 * max(step, mine):
        raise ModelError(f"{source}: the model was fitted at a step of {mine:g} s, the data is "
                         f"at {step:g} s: pass --step {mine:g} (its history and phases are "
                         f"counted in its own steps)")
