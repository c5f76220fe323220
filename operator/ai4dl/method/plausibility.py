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
  that is not bytes; below 32 MiB (less than a Python process with numpy loaded, let alone a
  DL job: PyTorch alone maps over 100 MiB) a trace whose unit was not stated is refused too,
  since ``--unit memory=bytes`` says it is right: KiB or KB read as bytes look like this;
* no machine has more than 1024 cores: a 99th percentile above that is not cores (millicores,
  or percent of a core); above 16 cores a trace whose unit was not stated is refused too,
  since ``--unit cpu=cores`` says the data is right: percent of a core read as cores looks
  like this (a 0.05-0.6-core job becomes 5-60 "cores");
* a usage rate goes up and down: cpu that rises at nearly every sample of nearly every long
  execution is a cumulative counter (``container_cpu_usage_seconds_total`` exported without
  ``rate()``), whatever its unit.

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
#: Less than a Python process with numpy loaded (about 30 MiB resident), let alone a DL job:
#: refused unless the unit was stated (issue 45: jobs of 0.6-11 GiB in KiB are 0.6-11 "MiB").
PROCESS_BYTES = 32 * 2 ** 20
#: More cores than any machine has (the largest sold have under 1,000).
MAX_MACHINE_CORES = 1024
#: More cores than a DL container's data loaders keep busy on most nodes: refused unless the
#: unit was stated (issue 45: percent of a core read as cores; ``--unit cpu=cores`` says not).
MANY_CORES = 16
#: A counter: in this share of a trace's long executions, cpu rises at this share of samples
#: (and never falls); a rate, even a steady one, falls now and then.
COUNTER_SHARE = 0.9
#: Executions shorter than this (samples) say nothing about a counter.
COUNTER_MIN_SAMPLES = 10

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
    """Memory below a page, cpu above any machine, a counter (module docstring).
    ``units_given``: the features whose unit the user stated (--unit), which lifts the rules
    that real data could break (a small process, a many-core job)."""
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
        if unit == "bytes" and feature in _BYTE_FEATURES and 0 < p99 < PROCESS_BYTES and \
                flags and feature not in units_given:
            likely = "KiB" if p99 >= 2 ** 20 else "MiB"
            raise TraceError(f"'{feature}' has a 99th percentile of {p99:.4g} bytes "
                             f"({p99 / 2 ** 20:.3g} MiB), less than a Python process with "
                             f"numpy (32 MiB), let alone a DL job: pass --unit "
                             f"{feature}={likely} (or the unit it is in: KiB, KB, MiB...), or "
                             f"--unit {feature}=bytes if it really is bytes", path=label,
                             column=feature)
        if unit == "cores" and feature == "cpu":
            check_counter(traces, j, label=label)
            # runs too short for the counter rule: a column that never falls may still be one
            counter = (" (or, as it never falls in any execution, a cumulative counter: give "
                       "its rate)" if never_falls(traces, j) else "")
            if p99 > MAX_MACHINE_CORES:
                raise TraceError(f"'cpu' in cores has a 99th percentile of {p99:.4g}, more than "
                                 f"any machine has ({MAX_MACHINE_CORES}): not cores"
                                 f"{flag('m')} (millicores){counter}", path=label,
                                 column=feature)
            if p99 > MANY_CORES and flags and feature not in units_given:
                likely = "m" if p99 > 100 * MANY_CORES else "percent-of-core"
                raise TraceError(f"'cpu' has a 99th percentile of {p99:.4g} cores, more than "
                                 f"{MANY_CORES} per container: pass --unit cpu={likely} if it "
                                 f"is {'millicores' if likely == 'm' else 'percent of a core'}"
                                 f", or --unit cpu=cores if it really is cores{counter}",
                                 path=label, column=feature)


def check_counter(traces, j: int, *, label: str | None = None) -> None:
    """Refuse a feature that behaves as a cumulative counter (module docstring): in at least
    ``COUNTER_SHARE`` of the executions of ``COUNTER_MIN_SAMPLES`` samples or more, it never
    falls and rises at ``COUNTER_SHARE`` of the samples. The unit does not matter: no --unit
    turns a counter into a rate."""
    feature = traces.features[j]
    long_runs = [e.values[:, j].astype(np.float64) for e in traces
                 if len(e) >= COUNTER_MIN_SAMPLES]
    if not long_runs:
        return
    counting = 0
    for v in long_runs:
        d = np.diff(v[np.isfinite(v)])
        if len(d) and (d >= 0).all() and (d > 0).mean() >= COUNTER_SHARE:
            counting += 1
    if counting >= COUNTER_SHARE * len(long_runs):
        raise TraceError(f"'{feature}' rises at nearly every sample of {counting} of "
                         f"{len(long_runs)} executions and never falls, as a cumulative "
                         f"counter does (container_cpu_usage_seconds_total): give its rate "
                         f"(in PromQL rate(...[1m])), not the counter", path=label,
                         column=feature)


def never_falls(traces, j: int) -> bool:
    """Whether feature ``j`` rises somewhere and falls nowhere in every execution of at least
    two finite samples (a counter's shape, whatever the runs' lengths)."""
    runs = [d for d in (np.diff(v[np.isfinite(v)]) for v in
                        (e.values[:, j].astype(np.float64) for e in traces)) if len(d)]
    return bool(runs) and all((d >= 0).all() for d in runs) and any((d > 0).any() for d in runs)


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


def model_level_problem(doc) -> str | None:
    """What makes a model document's levels implausible, or None: a byte feature whose phases'
    99th percentiles all stay below ``PROCESS_BYTES`` (a model fitted on KiB read as bytes
    would have admission ask for a few MB per DL pod). One line. (Cpu beyond any machine is
    the document's own bound, ``document_bounds.PLAUSIBLE_MAX``; a model of 16+ cores is
    refused at its fit unless its unit was stated, so one that reaches the operator was.)"""
    for j, f in enumerate(doc.features):
        top = max((p.p99[j] for p in doc.phases), default=0.0)
        if f.unit == "bytes" and f.name in _BYTE_FEATURES and 0 < top < PROCESS_BYTES:
            return (f"the model's '{f.name}' reaches only {top / 2 ** 20:.3g} MiB (the phases' "
                    f"99th percentile), less than a Python process with numpy (32 MiB): fitted "
                    f"on KiB read as bytes? refit it with the data's unit")
    return None


#: Samples a phase needs at the least: its p90/p95/p99 of fewer than ten samples are its
#: maximum, and k-means with fewer than ten points per cluster splits noise (the usual rule of
#: thumb, ten observations per cluster). Issue 45: 8 phases were fitted from 39 samples.
SAMPLES_PER_PHASE = 10


def phases_supported(n_phases: int | str, k_range: tuple[int, int], values: np.ndarray,
                     label: str | None = None) -> tuple[int, int]:
    """The phase counts a fit may try on ``values`` (samples × features, all executions): a
    fixed ``n_phases`` as (k, k), ``"auto"`` as ``k_range`` with its top lowered to what the
    data supports (``SAMPLES_PER_PHASE`` samples and one distinct sample per phase). A
    :class:`~ai4dl.errors.TraceError` in one line, before the CRBM's fit, when not even the
    fewest phases asked for fit."""
    n = int(len(values))
    distinct = int(len(np.unique(values, axis=0))) if n else 0
    room = min(n // SAMPLES_PER_PHASE, distinct)
    lo, hi = (int(n_phases), int(n_phases)) if n_phases != "auto" else tuple(map(int, k_range))
    if lo <= 1 or room >= lo:
        return lo, max(lo, min(hi, room))
    asked = f"{lo} phases" if n_phases != "auto" else f"at least {lo} phases (--k-range)"
    most = (f"at most {room} (--phases {room})" if room >= 1 else "--phases 1")
    raise TraceError(f"{n} samples ({distinct} distinct) cannot support {asked}: a phase needs "
                     f"{SAMPLES_PER_PHASE} samples and a distinct one; ask for {most}, or "
                     f"record for longer", path=label)


def check_duplicates(label: str, times: np.ndarray, values: np.ndarray, codes: np.ndarray,
                     names, rows: np.ndarray | None = None) -> None:
    """Refuse an execution most of whose timestamps are given more than once with different
    values: one container reports one value per instant, so that is two containers (or ranks)
    under one execution name, which resampling would average into a series of neither (issue
    45). Repeats with equal values, or a few conflicting ones (a scrape at a boundary), pass
    and are averaged as documented. ``rows``: each row's line in the file, to name two."""
    if not len(times):
        return
    order = np.lexsort((times, codes))
    t, c, v = times[order], codes[order], values[order]
    same = (np.diff(t) == 0) & (c[1:] == c[:-1])
    conflict = same & np.any(v[1:] != v[:-1], axis=1)
    if not conflict.any():
        return
    per_exec_conflicts = np.bincount(c[1:][conflict], minlength=len(names))
    per_exec_instants = np.bincount(c, minlength=len(names)) - np.bincount(
        c[1:][same], minlength=len(names))
    bad = np.flatnonzero(2 * per_exec_conflicts >= per_exec_instants)
    if not len(bad):
        return
    j = int(bad[0])
    i = int(np.flatnonzero(conflict & (c[1:] == j))[0])
    where = (f" (rows {int(rows[order[i]])} and {int(rows[order[i + 1]])})"
             if rows is not None else "")
    raise TraceError(f"execution {names[j]!r} gives {per_exec_conflicts[j]} of its "
                     f"{per_exec_instants[j]} timestamps twice with different values{where}: "
                     f"two containers or ranks under one execution name? give each its own "
                     f"(--column execution=COLUMN that tells them apart)", path=label)


def check_queried_levels(traces, where: str) -> None:
    """What a Prometheus query returned, before a fit: memory below ``PROCESS_BYTES`` (a query
    that divides by 1024, or another exporter's KiB) and a cpu counter without ``rate()``,
    named by ``where`` (the PhaseModel whose queries ran). The trainer's own queries are in
    bytes and cores; a spec's template may not be."""
    check_levels(traces, label=where, flags=False)      # counters, pages, beyond any machine
    for j, (feature, unit) in enumerate(zip(traces.features, traces.units)):
        if unit != "bytes" or feature not in _BYTE_FEATURES:
            continue
        col = np.concatenate([e.values[:, j] for e in traces]).astype(np.float64)
        col = col[np.isfinite(col)]
        p99 = float(np.percentile(col, 99)) if len(col) else 0.0
        if 0 < p99 < PROCESS_BYTES:
            raise TraceError(f"'{feature}' as queried has a 99th percentile of {p99 / 2 ** 20:.3g} "
                             f"MiB, less than a Python process with numpy (32 MiB): does "
                             f"spec.features[{feature}].query return KiB or another unit than "
                             f"bytes?", path=where, column=feature)
