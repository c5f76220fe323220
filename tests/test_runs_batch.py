"""ai4dl.controller.runs.add_windows: one window fed to many runs at once gives each run what
feeding it alone (the per-run arithmetic RunInProgress.add had before the batch) gives."""

from __future__ import annotations

import numpy as np

from ai4dl.controller.runs import RunInProgress, add_windows
from ai4dl.rules.workload_profile import EARLY_WINDOWS


def _add_alone(run: RunInProgress, early: dict, usage, window_end, step,
               window_seconds) -> None:
    """The per-run update as it was written before the batch (the reference); its early peaks
    in ``early`` ({run-relative window: peaks}, as a run kept them then)."""
    u = np.asarray(usage, np.float64)
    if run.last_window == window_end or u.ndim != 2 or not len(u):
        return
    run.last_window = window_end
    times = window_end - step * np.arange(len(u) - 1, -1, -1, dtype=np.float64)
    mine = times >= run.started - step
    seen = np.isfinite(u) & mine[:, None]
    if not seen.any():
        return
    masked = np.where(seen, u, -np.inf)
    top = np.where(np.isfinite(masked.max(0)), masked.max(0), 0.0)
    index = (np.maximum(times - run.started, 0.0) // float(window_seconds)).astype(int)
    for k in np.unique(index[mine & (index < EARLY_WINDOWS) & seen.any(1)]):
        part = masked[index == k].max(0)
        part = np.where(np.isfinite(part), part, 0.0)
        have = early.get(int(k))
        early[int(k)] = part if have is None else np.maximum(have, part)
    at = times[np.argmax(masked, axis=0)] - run.started
    if run.peak is None:
        run.peak, run.peak_at = top.copy(), np.maximum(at, 0.0)
    else:
        higher = top > run.peak
        run.peak = np.where(higher, top, run.peak)
        run.peak_at = np.where(higher, np.maximum(at, 0.0), run.peak_at)


def _packed_early(run: RunInProgress) -> dict:
    """A run's early peaks (one array, NaN rows not seen) as {window: peaks}."""
    if run.early is None:
        return {}
    assert run.early.shape[0] == EARLY_WINDOWS
    return {k: row for k, row in enumerate(run.early) if not np.isnan(row).all()}


def _state(run: RunInProgress, early: dict):
    return (run.last_window, None if run.peak is None else run.peak.tolist(),
            None if run.peak_at is None else run.peak_at.tolist(),
            {k: v.tolist() for k, v in sorted(early.items())})


def test_a_batch_of_runs_gets_what_each_run_fed_alone_gets():
    rng = np.random.default_rng(7)
    step, W, R = 15.0, 8, 2
    starts = [0.0, 50.0, 95.0, 119.0, -3000.0, 200.0, 100.0]   # young, mid-window, old, late
    batch = [RunInProgress("w", f"r{i}", s, 0, True) for i, s in enumerate(starts)]
    alone = [RunInProgress("w", f"r{i}", s, 0, True) for i, s in enumerate(starts)]
    alone_early: list[dict] = [{} for _ in starts]
    for end in (105.0 + step * W * k for k in range(12)):
        usages = []
        for i in range(len(starts)):
            u = rng.gamma(2.0, 1.0, (W, R)) * (1 + i)
            u[rng.random((W, R)) < 0.15] = np.nan      # scrape gaps
            if i == 6 and end < 300:
                u[:] = np.nan                          # nothing seen yet
            usages.append(u)
        usages[3] = usages[3][:5]                      # another shape in the same window
        add_windows(batch, usages, end, step, W * step)
        add_windows(batch, usages, end, step, W * step)     # the same window again: no-op
        for run, early, u in zip(alone, alone_early, usages):
            _add_alone(run, early, u, end, step, W * step)
        assert [_state(r, _packed_early(r)) for r in batch] == \
            [_state(r, e) for r, e in zip(alone, alone_early)]
        # the windows seen, in order, a gap carrying the one before it
        for r, e in zip(batch, alone_early):
            want = [e.get(k) for k in range(max(e) + 1)] if 0 in e else []
            for k in range(1, len(want)):
                want[k] = want[k - 1] if want[k] is None else want[k]
            assert [w.tolist() for w in r.early_windows()] == [w.tolist() for w in want]
    assert all(r.peak is not None for r in batch)
    assert any(len(_packed_early(r)) > 1 for r in batch) and not _packed_early(batch[4])


def test_a_runs_arrays_are_its_own():
    runs = [RunInProgress("w", f"r{i}", 0.0, 0, True) for i in range(3)]
    add_windows(runs, [np.full((4, 2), float(i + 1)) for i in range(3)], 45.0, 15.0, 60.0)
    for r in runs:
        assert r.peak.base is None and r.peak_at.base is None
        assert r.early.base is None


def test_a_runs_memory_shape_fed_window_by_window_is_the_one_summarise_computes():
    """The window loop's shape of a run (stretches doubled as it grows) equals the trainer's
    and the evaluator's (``summarise`` over the whole run), so the operator holds what the
    evaluator priced; two runs of different ages fed in one batch each get their own."""
    from ai4dl.rules.workload_profile import summarise

    rng = np.random.default_rng(3)
    step, W, GiB = 15.0, 4, 1024.0 ** 3
    lengths = {"long": 150, "short": 40}      # windows: past 32, 64 and 128; past 32 only
    usage = {k: np.column_stack([rng.random(n * W), rng.random(n * W) * GiB])
             for k, n in lengths.items()}
    started = {"long": 1000.0, "short": 1000.0 + 110 * W * step}
    runs = {k: RunInProgress("w", k, s, 0, True) for k, s in started.items()}
    for w in range(150):
        end = 1000.0 + step * (W * (w + 1) - 1)
        fed = [k for k in runs if 0 <= (end - started[k]) / step < lengths[k] * W]
        rows = [int(round((end - started[k]) / step)) + 1 for k in fed]
        add_windows([runs[k] for k in fed], [usage[k][r - W: r] for k, r in zip(fed, rows)],
                    end, step, W * step, memory_index=1)
    for k, n in lengths.items():
        online = runs[k].summary(k, started[k] + n * W * step, False, 1)
        offline = summarise(usage[k], step, W, started[k], memory_index=1)
        assert online.shape_seconds == offline.shape_seconds
        assert online.shape == offline.shape and len(online.shape) <= 32
    assert runs["long"].shape_seconds == 8 * W * step           # 150 windows: 8 a stretch
    assert runs["short"].shape_seconds == 2 * W * step          # 40 windows: 2 a stretch
    # an OOM-killed run's stretches are bumped as its peak is, both ways
    killed = runs["short"].summary("short", started["short"] + 40 * W * step, True, 1)
    assert killed.shape == summarise(usage["short"], step, W, started["short"], True, 1).shape
