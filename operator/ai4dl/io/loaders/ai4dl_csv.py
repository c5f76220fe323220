"""The AI4DL paper's tabular CSV (one row per sample, all containers in one file)."""

from __future__ import annotations

import os

import numpy as np

from ai4dl.errors import TraceError
from ai4dl.io.loaders.common import (assemble, check_args, first_seen_codes, floats,
                                     identifiers, locator, parse_csv, read_bytes, screen)
from ai4dl.method.traces import DEFAULT_MAX_GAP_STEPS, DEFAULT_STEP_SECONDS, TraceSet


def load_ai4dl_csv(path: str | os.PathLike, *, step: float = DEFAULT_STEP_SECONDS,
                   max_gap_steps: float = DEFAULT_MAX_GAP_STEPS, on_bad: str = "error"
                   ) -> TraceSet:
    """The AI4DL paper's CSV (one row per sample, all containers in one file).

    Execution = ``service/pod.id``. Features are ``cpu`` from ``cpu.usage.cores`` (a rate, so
    no differencing of the cumulative counter is needed) and ``memory`` from
    ``mem.working.set`` (what the kernel will not reclaim, i.e. what a limit must cover). The
    pod's original request, ``cpu.num.cores`` and ``mem.limit`` (first valid value), goes in
    ``meta`` as ``cpu_limit_cores`` / ``memory_limit_bytes`` so a policy can compare against it.
    """
    check_args(step, max_gap_steps, on_bad)
    label = str(path)
    header, data, lines = parse_csv(read_bytes(path), label, index_column=True)
    cols = {h: i for i, h in enumerate(header)}
    for need in ("timestamp", "service", "pod.id", "cpu.usage.cores", "mem.working.set"):
        if need not in cols:
            raise TraceError("missing required column", path=label, row=1, column=need)
    get = lambda c: data[cols[c]]  # noqa: E731
    service = identifiers(get("service"), label, "service", lines)
    pod = identifiers(get("pod.id"), label, "pod.id", lines)
    times = floats(get("timestamp"), label, "timestamp", lines)
    values = np.column_stack([floats(get(c), label, c, lines)
                              for c in ("cpu.usage.cores", "mem.working.set")])
    limits = {key: floats(get(c), label, c, lines)
              for key, c in (("cpu_limit_cores", "cpu.num.cores"),
                             ("memory_limit_bytes", "mem.limit")) if c in cols}
    warnings: list[str] = []
    keep = screen([("timestamp", times, True), ("cpu.usage.cores", values[:, 0], False),
                   ("mem.working.set", values[:, 1], False)],
                  on_bad, label, locator(label, lines), warnings)
    codes, names, _ = first_seen_codes(np.char.add(np.char.add(service, "/"), pod)[keep])
    executions = []
    for k, name in enumerate(names):
        meta = {}
        for key, lim in limits.items():
            v = lim[keep][codes == k]
            v = v[np.isfinite(v) & (v > 0)]
            if len(v):
                meta[key] = float(v[0])
        executions.append((name, name, meta))
    return assemble(label, codes, times[keep], values[keep], executions, ("cpu", "memory"),
                    ("cores", "bytes"), step=step, max_gap_steps=max_gap_steps,
                    warnings=warnings)
