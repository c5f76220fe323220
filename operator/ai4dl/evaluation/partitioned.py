"""A replay cut into pieces by workload, each piece summed, the sums merged: what lets
``ai4dl evaluate --prometheus --engine`` replay a cluster's history with memory bounded by a
piece, not by the cluster (issue 44).

A piece is the executions of a few whole workloads, replayed as served
(:func:`ai4dl.evaluation.evaluate.replay_served`): a workload's executions never span two
pieces, so what one execution starts from (its workload's earlier runs), VPA's per-workload
state and the per-workload table come out as in a replay of everything at once. What a piece
keeps is small and adds up (:class:`PieceSummary`):

- its workloads' rows (:mod:`ai4dl.evaluation.workload_report`) and their total;
- per policy and resource, on one grid of factors shared by every piece (:func:`factor_grid`:
  ``auto``'s, 64 a factor of two from ¼ to 4, then coarser up to 2^20), the windows at risk
  and the allocation when the factor goes on the policy's own rows and the safety layer
  serves the result — the served order of :func:`ai4dl.judge.served_risk_match` — and the
  worst window's shortfall there.

Merged, the matched share of windows at risk is the first grid factor from which on the summed
windows at risk are within the share (:func:`matched`): between ¼ and 4, the judge's factor
(its bisection to 2^-16 on the same executions) rounded up to the grid, at most one step
(2^(1/64), 1.1 %) above it. The allocation there is at least the judge's and, since the layer
serves in steps (its floors, the smallest change it makes), up to a few per cent above it:
0.1-4 % on the synthetic jobs of tests/test_partitioned.py and the real trace of
tests/test_replay_prometheus.py. A share that no factor reaches is reported with its floor (the
least share at risk a factor of the grid leaves: windows no factor moves, as a start served
before anything was seen) and the cost at the factor reaching it, as the judge does. Pure: no
I/O.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ai4dl.evaluation.evaluate import EvaluationResult
from ai4dl.evaluation.starts import StartCounts
from ai4dl.evaluation.workload_report import (Owner, PolicyFigures, WorkloadRow, sorted_rows,
                                              workload_rows)
from ai4dl.judge import (ORACLE, ReplayInput, held_windows, resource_unit_scale,
                         working_set_inputs)
from ai4dl.policy.auto import GRID_OCTAVES, GRID_PER_OCTAVE
from ai4dl.rules.safety import SafetyConfig, apply_safety_sequence


#: Above the fine grid, 8 factors to a factor of two up to 2^8, then one per factor of two up
#: to 2^20 (as far as the judge's search widens): where only a large factor reaches a floor.
WIDE_PER_OCTAVE, WIDE_OCTAVES, WIDEST = 8, 8, 20


def factor_grid(per_octave: int = GRID_PER_OCTAVE, octaves: int = GRID_OCTAVES) -> np.ndarray:
    """The factors every piece is summed at: ``per_octave`` a factor of two from 2^-octaves
    to 2^octaves, then coarser up to 2^20 (:data:`WIDE_PER_OCTAVE`)."""
    fine = np.arange(-octaves * per_octave, octaves * per_octave + 1) / per_octave
    wide = octaves + np.arange(1, WIDE_PER_OCTAVE * (WIDE_OCTAVES - octaves) + 1) \
        / WIDE_PER_OCTAVE
    return 2.0 ** np.concatenate([fine, wide, np.arange(WIDE_OCTAVES + 1, WIDEST + 1)])


@dataclass
class RiskSums:
    """One policy and resource over a piece, at each factor of the grid: the scored windows at
    risk, the allocation (unit-hours: GiB-hours for bytes) and the worst window's shortfall
    relative to its peak usage (0: none short)."""
    at_risk: np.ndarray
    allocation: np.ndarray
    worst: np.ndarray

    def __add__(self, other: "RiskSums") -> "RiskSums":
        return RiskSums(self.at_risk + other.at_risk, self.allocation + other.allocation,
                        np.maximum(self.worst, other.worst))


@dataclass
class PieceSummary:
    """What a piece of the replay keeps (module doc); ``+`` merges two pieces."""
    resources: tuple[str, ...]
    units: tuple[str, ...]
    grid: np.ndarray
    executions: int
    samples: int
    windows: int                          # scored windows (each resource has as many)
    oracle: np.ndarray                    # (R,) the oracle's unit-hours: each window's peak
    sums: dict[str, list[RiskSums]]       # policy -> per resource
    rows: list[WorkloadRow]
    total: WorkloadRow
    starts: StartCounts | None = None
    pieces: int = 1

    def __add__(self, other: "PieceSummary") -> "PieceSummary":
        if not np.array_equal(self.grid, other.grid) or self.resources != other.resources:
            raise ValueError("pieces summed on different grids or resources cannot be merged")
        return PieceSummary(
            self.resources, self.units, self.grid, self.executions + other.executions,
            self.samples + other.samples, self.windows + other.windows,
            self.oracle + other.oracle,
            {p: [a + b for a, b in zip(s, other.sums[p])] for p, s in self.sums.items()},
            self.rows + other.rows, merge_totals(self.total, other.total),
            _summed_starts(self.starts, other.starts), self.pieces + other.pieces)


def _summed_starts(a: StartCounts | None, b: StartCounts | None) -> StartCounts | None:
    if a is None or b is None:
        return a or b
    return StartCounts(tuple((s, a.get(s) + b.get(s)) for s, _ in a.counts))


def summarise(result: EvaluationResult, owners: Sequence[Owner],
              requests: Sequence[np.ndarray], grid: np.ndarray) -> PieceSummary:
    """A replayed piece (:func:`~ai4dl.evaluation.evaluate.replay_served`; ``owners[i]`` and
    ``requests[i]`` belong to its execution ``i``) as its summary."""
    data, cfg = result.data, result.config
    rows, total = workload_rows(result, owners, requests)
    hours = data.step / 3600.0
    scales = np.array([resource_unit_scale(u)[0] for u in data.units])
    first = 0 if cfg.include_cold_start else 1
    wmax, size = _scored_windows(data, cfg.window, first)
    # the oracle allocates each window its own peak (ai4dl.policy.policies.Oracle)
    oracle = np.zeros(len(data.resources))
    for w, z in zip(wmax, size):
        oracle += (w * z[:, None]).sum(0)
    oracle *= hours / scales
    sums = {}
    for name, own in result.own.items():
        if name == ORACLE:
            continue
        sums[name] = [risk_sums(data, own.allocations, cfg.window, j, cfg.safety, grid,
                                first, wmax, size, hours / scales[j])
                      for j in range(len(data.resources))]
    return PieceSummary(tuple(data.resources), tuple(data.units), grid, len(data.usage),
                        int(sum(len(u) for u in data.usage)),
                        int(sum(len(w) for w in wmax)), oracle, sums, rows, total,
                        result.starts)


def _scored_windows(data: ReplayInput, window: int, first: int):
    """Per execution, its scored windows' peak usage (n_w, R) and how many samples each has."""
    wmax, size = [], []
    for u in data.usage:
        starts = np.arange(0, len(u), window)
        peaks = (np.maximum.reduceat(u, starts, axis=0) if len(u)
                 else np.empty((0, len(data.resources))))
        wmax.append(peaks[first:])
        size.append(np.minimum(window, len(u) - starts)[first:].astype(np.float64))
    return wmax, size


#: Cells (windows × executions × factors) the safety layer serves at once: the grid's factors
#: go through the layer together, window by window (its loop runs once per block, not once per
#: factor), in blocks that hold at most this many (× resources × 8 bytes: 64 MiB for two).
BLOCK_CELLS = 4_000_000


def risk_sums(data: ReplayInput, own: Sequence[np.ndarray], window: int, j: int,
              safety: SafetyConfig | None, grid: np.ndarray, first: int,
              wmax: Sequence[np.ndarray], size: Sequence[np.ndarray],
              to_hours: float = 1.0) -> RiskSums:
    """Resource ``j``'s :class:`RiskSums` over the executions of ``data`` (the scored windows'
    peaks ``wmax`` and sizes ``size``, :func:`_scored_windows`): each factor of ``grid`` goes on
    the policy's ``own`` rows after the cold start, the safety layer (if any) serves them.
    ``to_hours``: a sample's allocation in unit-hours (step ÷ 3600 ÷ the unit's scale)."""
    n = len(own)
    out = RiskSums(np.zeros(len(grid), np.int64), np.zeros(len(grid)), np.zeros(len(grid)))
    if not n:
        return out
    rows, peaks, sizes = _padded(own, wmax, size, j, first, len(data.resources))
    scored = ~np.isnan(peaks)
    block = max(1, min(len(grid), BLOCK_CELLS // (len(rows) * n)))
    serve = _block_server(data, [len(r) for r in own], window, safety)
    for b0 in range(0, len(grid), block):
        factors = grid[b0: b0 + block]
        k = len(factors)
        x = np.tile(rows, (1, k, 1))
        x[first:, :, j] *= np.repeat(factors, n)[None, :]
        al = serve(x, k)[:, :, j].reshape(len(rows), k, n)
        short = (peaks[:, None, :] > al) & scored[:, None, :]
        out.at_risk[b0: b0 + k] = short.sum(axis=(0, 2))
        out.allocation[b0: b0 + k] = np.where(scored[:, None, :], al * sizes[:, None, :],
                                              0.0).sum(axis=(0, 2)) * to_hours
        with np.errstate(divide="ignore", invalid="ignore"):
            gap = np.where(short, (peaks[:, None, :] - al) / peaks[:, None, :], 0.0)
        out.worst[b0: b0 + k] = gap.max(axis=(0, 2))
    return out


def _padded(own: Sequence[np.ndarray], wmax: Sequence[np.ndarray], size: Sequence[np.ndarray],
            j: int, first: int, n_resources: int):
    """(rows (windows, n, R), scored windows' peaks of resource j (windows, n; NaN: not
    scored), their sizes (windows, n)): the executions side by side, padded."""
    n = len(own)
    longest = max(len(r) for r in own)
    rows = np.full((longest, n, n_resources), np.nan)
    peaks = np.full((longest, n), np.nan)
    sizes = np.zeros((longest, n))
    for i, (r, w, z) in enumerate(zip(own, wmax, size)):
        rows[: len(r), i] = r
        peaks[first: first + len(w), i] = w[:, j]
        sizes[first: first + len(w), i] = z
    return rows, peaks, sizes


def _block_server(data: ReplayInput, lengths: Sequence[int], window: int,
                  safety: SafetyConfig | None):
    """serve(rows, k): ``k`` copies of the executions' rows side by side (windows, k × n, R),
    factor by factor, as the safety layer serves them (:func:`ai4dl.judge.through_safety`) in
    one pass; what the layer reads besides the rows depends on the usage and the holds only:
    computed once, tiled."""
    if safety is None:
        return lambda rows, k: rows
    inputs = working_set_inputs(data, lengths, window, safety)
    held = held_windows(data, lengths, window)
    initial = np.array(data.initial, np.float64)

    def serve(rows, k):
        ws, rising = ((None, None) if inputs is None else
                      (np.tile(inputs[0], (1, k)), np.tile(inputs[1], (1, k))))
        return apply_safety_sequence(rows, np.tile(initial, (k, 1)), safety, ws, rising,
                                     None if held is None else np.tile(held, (1, k)))

    return serve


def merge_totals(a: WorkloadRow, b: WorkloadRow) -> WorkloadRow:
    """Two pieces' total rows as one (their workloads are distinct): amounts added, the
    fulfilment weighted by hours, the saving over the known requests recomputed."""
    out = WorkloadRow("total", "", "", "total", "", a.pods + b.pods,
                      a.executions + b.executions, a.hours + b.hours,
                      {r: a.usage[r] + b.usage[r] for r in a.usage},
                      {r: a.requested[r] + b.requested[r] for r in a.requested},
                      {r: a.known_hours[r] + b.known_hours[r] for r in a.known_hours})
    for name, figs in a.policies.items():
        out.policies[name] = {r: _merged_figures(f, b.policies[name][r], a, b, r)
                              for r, f in figs.items()}
    return out


def _merged_figures(fa: PolicyFigures, fb: PolicyFigures, a: WorkloadRow, b: WorkloadRow,
                    r: str) -> PolicyFigures:
    hours = a.hours + b.hours
    fulfilment = ((_zero(fa.fulfilment) * a.hours + _zero(fb.fulfilment) * b.hours) / hours
                  if hours > 0 else math.nan)

    def over_known(f: PolicyFigures, w: WorkloadRow) -> float:
        return (1.0 - f.savings) * w.requested[r] if w.requested[r] > 0 else 0.0

    requested = a.requested[r] + b.requested[r]
    savings = (1.0 - (over_known(fa, a) + over_known(fb, b)) / requested if requested > 0
               else math.nan)
    return PolicyFigures(fa.allocation + fb.allocation, fulfilment,
                         fa.short_windows + fb.short_windows, fa.windows + fb.windows, savings)


def _zero(x: float) -> float:
    return 0.0 if not math.isfinite(x) else x


# ----------------------------------------------------------------------------- merged figures
@dataclass
class Matched:
    """One policy and resource at a share of windows at risk, on the merged sums."""
    policy: str
    resource: str
    share: float
    factor: float              # the first grid factor meeting the share (inf: none does)
    vs_oracle: float           # allocation ÷ oracle there (at the floor where none does)
    windows_at_risk: int
    worst_shortfall_rel: float
    #: where no factor meets the share: the least share of windows at risk a factor of the grid
    #: leaves (``vs_oracle`` and the windows are then at the factor reaching it)
    floor: float = math.nan
    grid_factor: float = math.nan      # the grid's factor the figures are at


def matched(summary: PieceSummary, shares: Sequence[float]) -> list[Matched]:
    """Every policy and resource at each share of windows at risk (module doc)."""
    out = []
    for name, per_resource in summary.sums.items():
        for j, s in enumerate(per_resource):
            oracle = summary.oracle[j]
            for share in shares:
                k, met = matched_index(s.at_risk, math.floor(share * summary.windows + 1e-9))
                floor = math.nan
                if not met:     # the least share any factor leaves, at the factor reaching it
                    k, _ = matched_index(s.at_risk, int(s.at_risk.min()))
                    floor = float(s.at_risk[k] / max(summary.windows, 1))
                cost = s.allocation[k] / oracle if oracle > 0 else math.nan
                out.append(Matched(name, summary.resources[j], share,
                                   float(summary.grid[k]) if met else math.inf, float(cost),
                                   int(s.at_risk[k]), float(s.worst[k]), floor,
                                   float(summary.grid[k])))
    return out


def matched_index(at_risk: np.ndarray, allowed: int) -> tuple[int, bool]:
    """(k, met): the grid's first factor from which on every larger factor leaves at most
    ``allowed`` windows at risk; the grid's top, not met, where the top leaves more. Not the
    first factor that meets it: the layer's floors (the working set covered, memory held)
    can make a far smaller factor meet the share by flooring every window, and the judge's
    search, coming down from the closed form, stops at the first factor that misses."""
    over = np.flatnonzero(at_risk > allowed)
    if not len(over):
        return 0, True
    k = int(over[-1]) + 1
    return (k, True) if k < len(at_risk) else (len(at_risk) - 1, False)


def with_rows_sorted(summary: PieceSummary) -> PieceSummary:
    """The merged workloads largest first, as :func:`workload_rows` sorts one replay's."""
    return dataclasses.replace(summary, rows=sorted_rows(summary.rows, summary.resources[0]))
