"""The Google 2011 cluster trace's ``GCD_VMs`` tar (one job-day per member, no timestamps)."""

from __future__ import annotations

import os
import re

import numpy as np

from ai4dl.errors import TraceError
from ai4dl.io.loaders.common import assemble, check_args, floats, screen, tar_members
from ai4dl.method.traces import DEFAULT_MAX_GAP_STEPS, TraceSet

_GCD_MEMBER = re.compile(r"(?:^|/)vm_([^/_]+)_(\d+)$")
_GCD_STEP = 300.0


def load_gcd_tar(path: str | os.PathLike, *, max_gap_steps: float = DEFAULT_MAX_GAP_STEPS,
                 on_bad: str = "error") -> TraceSet:
    """The ``GCD_VMs`` tar of the Google 2011 trace: one job-day per member, read in memory.

    The files have no timestamps; samples are 5 min apart, so day ``d`` sample ``i`` is put at
    ``(d-1)*86400 + i*300`` s, which keeps the days of one job in order on one axis. Each file is
    an execution ``vm_<job>_<day>`` in group ``<job>``, so a split by group never puts days of
    one job on both sides. CPU and memory stay in ``percent``: the trace is normalised and we
    do not invent machine sizes.
    """
    check_args(_GCD_STEP, max_gap_steps, on_bad)
    label = str(path)
    found = []  # (job, day, member, cpu/mem values (n, 2), line numbers)
    for name, data in tar_members(path):
        m = _GCD_MEMBER.search(name)
        if not m:
            continue
        member = f"{label}/{name}"
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            raise TraceError("not a text file", path=member) from None
        lines = text.splitlines()
        n_fields = np.fromiter(map(len, map(str.split, lines)), dtype=np.int64,
                               count=len(lines))
        rows = np.flatnonzero(n_fields) + 1  # blank lines carry nothing
        if not len(rows):
            raise TraceError("empty file", path=member)
        if (n_fields[rows - 1] != 2).any():
            i = int(rows[np.argmax(n_fields[rows - 1] != 2)])
            raise TraceError(f"{n_fields[i - 1]} fields, expected 2 (cpu %, memory %)",
                             path=member, row=i)
        flat = text.split()
        try:
            vals = np.array(flat, dtype=np.float64).reshape(-1, 2)
        except ValueError:
            vals = np.column_stack([floats(flat[j::2], member, c, rows)
                                    for j, c in enumerate(("cpu", "memory"))])
        found.append((m.group(1), int(m.group(2)), member, vals, rows))
    if not found:
        raise TraceError("no GCD_VMs/vm_<job>_<day> files: not a GCD VM trace archive",
                         path=label)
    found.sort(key=lambda f: (f[0], f[1]))
    lengths = np.array([len(f[3]) for f in found])
    codes = np.repeat(np.arange(len(found)), lengths)
    values = np.concatenate([f[3] for f in found])
    # Synthesised times use the data-line index, so a blank line does not shift the clock.
    times = np.concatenate([(f[1] - 1) * 86400.0 + _GCD_STEP * np.arange(len(f[3]))
                            for f in found])
    rows = np.concatenate([f[4] for f in found])
    ends = np.cumsum(lengths)
    warnings: list[str] = []
    keep = screen([("cpu", values[:, 0], False), ("memory", values[:, 1], False)], on_bad,
                  label, lambda i: (found[int(np.searchsorted(ends, i, "right"))][2],
                                    int(rows[i])), warnings)
    executions = [(f"vm_{job}_{day}", job, {}) for job, day, *_ in found]
    return assemble(label, codes[keep], times[keep], values[keep], executions,
                    ("cpu", "memory"), ("percent", "percent"), step=_GCD_STEP,
                    max_gap_steps=max_gap_steps, warnings=warnings)
