"""A seeded generator of DL-training-like executions with ground-truth phases.

It is the embedded data set of the demo and the known answer of the phase-recovery tests.
Each execution: data download -> preprocessing -> epochs of training, each followed by
validation, with a checkpoint write every few epochs -> a final evaluation tail. Levels,
durations and noise vary per execution, as they would across users' jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ai4dl.method.traces import Execution, TraceSet

GiB = 1024.0 ** 3

FEATURES = ("cpu", "memory", "gpu_util", "gpu_memory")
UNITS = ("cores", "bytes", "percent", "bytes")

# Ground-truth phase id -> (name, typical level per feature, relative noise).
PHASES: dict[int, tuple[str, tuple[float, float, float, float]]] = {
    0: ("download", (0.3, 0.6 * GiB, 0.0, 0.0)),
    1: ("preprocess", (3.5, 3.0 * GiB, 0.0, 0.0)),
    2: ("train", (1.6, 6.0 * GiB, 92.0, 20.0 * GiB)),
    3: ("validate", (0.8, 6.5 * GiB, 40.0, 12.0 * GiB)),
    4: ("checkpoint", (1.0, 10.5 * GiB, 2.0, 20.0 * GiB)),
}
PHASE_NAMES = {k: v[0] for k, v in PHASES.items()}


@dataclass
class SyntheticConfig:
    step: float = 15.0
    epochs: tuple[int, int] = (3, 8)
    download: tuple[int, int] = (10, 40)        # samples
    preprocess: tuple[int, int] = (20, 80)
    epoch: tuple[int, int] = (40, 120)
    validation: tuple[int, int] = (8, 20)
    checkpoint: tuple[int, int] = (5, 10)
    checkpoint_every: tuple[int, int] = (1, 3)  # epochs
    level_jitter: float = 0.10                  # per-execution scale of every level
    noise: float = 0.06                         # per-sample relative noise
    n_features: int = 4
    run_jitter: float = 0.03                    # re-runs of one job: per-run level and length
    run_gap_s: float = 3600.0                   # ... and the pause between two of its runs


def _segment(phase: int, n: int, scale: np.ndarray, rng: np.random.Generator,
             noise: float) -> np.ndarray:
    level = np.array(PHASES[phase][1]) * scale
    x = level * (1.0 + noise * rng.standard_normal((n, 4)))
    # Absolute noise floor so idle features are not exactly constant (real exporters jitter).
    x += np.array([0.02, 0.02 * GiB, 0.5, 0.01 * GiB]) * np.abs(rng.standard_normal((n, 4)))
    if phase == 1:
        # Preprocessing builds its dataset in memory: a ramp, not a plateau.
        x[:, 1] *= np.linspace(0.6, 1.1, n)
    x[:, 2] = np.minimum(x[:, 2], 100.0)  # utilisation is a percentage
    return np.maximum(x, 0.0)


def _draw_plan(rng: np.random.Generator, cfg: SyntheticConfig) -> list[tuple[int, int]]:
    """(phase, samples) segments of one job: its architecture and data size."""
    r = lambda lo_hi: int(rng.integers(lo_hi[0], lo_hi[1] + 1))  # noqa: E731
    plan: list[tuple[int, int]] = [(0, r(cfg.download)), (1, r(cfg.preprocess))]
    every = r(cfg.checkpoint_every)
    n_epochs = r(cfg.epochs)
    for e in range(1, n_epochs + 1):
        plan += [(2, r(cfg.epoch)), (3, r(cfg.validation))]
        if e % every == 0 or e == n_epochs:
            plan.append((4, r(cfg.checkpoint)))
    plan.append((3, r(cfg.validation)))  # the evaluation tail behaves like validation
    return plan


def _render(plan: list[tuple[int, int]], scale: np.ndarray, rng: np.random.Generator,
            cfg: SyntheticConfig, name: str, group: str, start: float,
            meta: dict | None = None) -> tuple[Execution, np.ndarray]:
    values = np.concatenate([_segment(p, n, scale, rng, cfg.noise) for p, n in plan])
    labels = np.concatenate([np.full(n, p) for p, n in plan])
    times = start + cfg.step * np.arange(len(values))
    k = cfg.n_features
    ex = Execution(name, times, values[:, :k].astype(np.float32), FEATURES[:k], UNITS[:k],
                   group=group, step=cfg.step, meta=dict(meta or {}))
    return ex, labels


def generate_execution(rng: np.random.Generator, cfg: SyntheticConfig, name: str,
                       start: float = 1.7e9) -> tuple[Execution, np.ndarray]:
    """One execution and its per-sample ground-truth phase ids."""
    scale = 1.0 + cfg.level_jitter * rng.uniform(-1, 1, size=4)
    return _render(_draw_plan(rng, cfg), scale, rng, cfg, name, name, start)


def generate_workload(rng: np.random.Generator, cfg: SyntheticConfig, name: str, runs: int,
                      start: float = 1.7e9) -> list[tuple[Execution, np.ndarray]]:
    """One job re-run ``runs`` times, one after another (``run_gap_s`` apart), as a sweep's
    seeds or a nightly retrain are: every run shares the job's architecture and data size (its
    phase plan and levels) and differs by seed (the noise, and ``run_jitter`` of each level and
    segment length). The runs are one group, named ``<name>/run<k>``."""
    scale = 1.0 + cfg.level_jitter * rng.uniform(-1, 1, size=4)
    plan = _draw_plan(rng, cfg)
    out, t = [], start
    for k in range(runs):
        run_scale = scale * (1.0 + cfg.run_jitter * rng.uniform(-1, 1, size=4))
        run_plan = [(p, max(1, int(round(n * (1.0 + cfg.run_jitter * rng.uniform(-1, 1))))))
                    for p, n in plan]
        ex, labels = _render(run_plan, run_scale, rng, cfg, f"{name}/run{k}", name, t,
                             {"workload": name, "run": k})
        out.append((ex, labels))
        t = float(ex.times[-1]) + cfg.step + cfg.run_gap_s
    return out


def generate(n_executions: int = 40, seed: int = 0, config: SyntheticConfig | None = None,
             runs_per_workload: int = 1) -> tuple[TraceSet, list[np.ndarray]]:
    """``n_executions`` synthetic executions and their ground-truth phase labels: each its own
    job (``runs_per_workload`` 1, the default), or jobs re-run ``runs_per_workload`` times
    (:func:`generate_workload`; the last job's runs cut at ``n_executions``)."""
    cfg = config or SyntheticConfig()
    if runs_per_workload < 1:
        raise ValueError(f"runs per workload must be at least 1, got {runs_per_workload}")
    rng = np.random.default_rng(seed)
    if runs_per_workload == 1:
        pairs = [generate_execution(rng, cfg, f"job-{i:04d}") for i in range(n_executions)]
    else:
        pairs = []
        for i in range(-(-n_executions // runs_per_workload)):
            pairs += generate_workload(rng, cfg, f"job-{i:04d}", runs_per_workload)
        pairs = pairs[:n_executions]
    return TraceSet([p[0] for p in pairs], source="synthetic"), [p[1] for p in pairs]


def generate_fixed_length(n_executions: int, samples: int, seed: int = 0,
                          n_features: int = 4) -> TraceSet:
    """``n_executions`` jobs of exactly ``samples`` samples each (for benchmarks): long jobs
    (many epochs), cut to length."""
    cfg = SyntheticConfig(epochs=(30, 40), n_features=n_features)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_executions):
        ex, _ = generate_execution(rng, cfg, f"job-{i:05d}")
        if len(ex) < samples:
            raise ValueError(f"a synthetic job has {len(ex)} samples, fewer than {samples}")
        out.append(ex.slice(0, samples))
    return TraceSet(out, source="synthetic")
