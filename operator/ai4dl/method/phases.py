"""Phases from codes: k-means (k fixed or chosen), nearest-centroid assignment with novelty,
per-phase statistics, dwell times, the transition matrix and prototype phase sequences.

Everything here is numpy (the operator uses assignment and statistics; the trainer k-means
and silhouettes).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

QUANTILES = (0.5, 0.9, 0.95, 0.99)


# ----------------------------------------------------------------------------- assignment
def nearest_centroid(codes: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Phase and Euclidean distance to its centroid for each code row."""
    # |a-c|^2 = |a|^2 - 2 a.c + |c|^2, as one matrix product.
    d2 = codes @ (-2.0 * centroids.T)
    d2 += np.einsum("ij,ij->i", centroids, centroids)[None, :]
    labels = np.argmin(d2, axis=1)
    best = d2[np.arange(len(labels)), labels] + np.einsum("ij,ij->i", codes, codes)
    return labels, np.sqrt(np.maximum(best, 0.0))


# ----------------------------------------------------------------------------- k-means
@dataclass
class KSelection:
    ks: list[int]
    wcss: list[float]
    silhouette: list[float]
    elbow_k: int
    silhouette_k: int
    chosen_k: int
    rule: str


def _subsample(codes: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    return codes if len(codes) <= n else codes[rng.choice(len(codes), n, replace=False)]


def kmeans(X: np.ndarray, k: int, seed: int, n_init: int = 4, max_iter: int = 200,
           tol: float = 1e-6) -> tuple[np.ndarray, float]:
    """Lloyd's k-means with k-means++ seeding, in numpy: (centroids, inertia per sample).

    Several seeded starts, the best kept. Distances are one matrix product per iteration, so
    it is much faster than scikit-learn's threaded version on these small, narrow codes.
    """
    X = np.asarray(X, dtype=np.float64)
    n = len(X)
    sq = np.einsum("ij,ij->i", X, X)
    stop = tol * float(X.var(0).sum())
    best_c, best_inertia = None, np.inf
    for run in range(n_init):
        rng = np.random.default_rng([seed, run])
        centres = [X[rng.integers(n)]]
        d2 = np.maximum(sq - 2 * X @ centres[0] + centres[0] @ centres[0], 0)
        for _ in range(1, k):
            total = d2.sum()
            i = rng.choice(n, p=d2 / total) if total > 0 else rng.integers(n)
            centres.append(X[i])
            d2 = np.minimum(d2, np.maximum(sq - 2 * X @ X[i] + X[i] @ X[i], 0))
        C = np.array(centres)
        for _ in range(max_iter):
            labels, _ = nearest_centroid(X, C)
            counts = np.bincount(labels, minlength=k).astype(np.float64)
            onehot = np.zeros((n, k))
            onehot[np.arange(n), labels] = 1.0
            sums = onehot.T @ X
            # An emptied cluster keeps its centre rather than vanishing.
            new = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], C)
            shift = float(((new - C) ** 2).sum())
            C = new
            if shift <= stop:
                break
        _, dist = nearest_centroid(X, C)
        inertia = float(np.mean(dist ** 2))
        if inertia < best_inertia:
            best_c, best_inertia = C, inertia
    return best_c.astype(np.float32), best_inertia


def fit_kmeans(codes: np.ndarray, k: int, seed: int, max_samples: int = 20_000,
               n_init: int = 4) -> np.ndarray:
    """Centroids of k-means fitted on (a seeded subsample of) the codes."""
    sample = _subsample(codes, max_samples, np.random.default_rng(seed))
    distinct = len(np.unique(sample, axis=0))
    if distinct < k:
        raise ValueError(f"only {distinct} distinct codes for k={k}")
    return kmeans(sample, k, seed, n_init)[0]


def silhouette(X: np.ndarray, labels: np.ndarray) -> float:
    """Mean silhouette coefficient (Euclidean), as scikit-learn defines it, in numpy."""
    X = np.asarray(X, dtype=np.float64)
    sq = np.einsum("ij,ij->i", X, X)
    D = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2 * X @ X.T, 0))
    ks = np.unique(labels)
    if len(ks) < 2:
        raise ValueError("silhouette needs at least two clusters")
    onehot = (labels[:, None] == ks[None, :]).astype(np.float64)
    sums = D @ onehot                         # distance of each point to each cluster, summed
    sizes = onehot.sum(0)
    own = np.searchsorted(ks, labels)
    own_size = sizes[own]
    a = sums[np.arange(len(X)), own] / np.maximum(own_size - 1, 1)
    mean_other = sums / sizes[None, :]
    mean_other[np.arange(len(X)), own] = np.inf
    b = mean_other.min(1)
    s = np.where(own_size > 1, (b - a) / np.maximum(np.maximum(a, b), 1e-300), 0.0)
    return float(s.mean())


def elbow(ks: Sequence[int], wcss: Sequence[float]) -> int:
    """Kneedle-style elbow: the k farthest below the chord from the first to the last point."""
    if len(ks) < 3:
        return int(ks[0])
    x = (np.asarray(ks, float) - ks[0]) / (ks[-1] - ks[0])
    y = np.asarray(wcss, float)
    y = (y - y[-1]) / max(y[0] - y[-1], 1e-12)
    return int(ks[int(np.argmax((1 - x) - y))])


def select_k(codes: np.ndarray, ks: Sequence[int], seed: int, rule: str = "silhouette",
             max_samples: int = 20_000, silhouette_samples: int = 4_000
             ) -> tuple[KSelection, dict]:
    """Fit k-means for each candidate k; report WCSS (inertia per sample) and silhouette.

    ``rule`` picks k: ``silhouette`` (highest score) or ``elbow`` (knee of the WCSS curve).
    Returns the selection and the centroids for every k tried.
    """
    rng = np.random.default_rng(seed)
    sample = _subsample(codes, max_samples, rng)
    sil_sample = _subsample(sample, silhouette_samples, rng)
    wcss, sil, cents = [], [], {}
    ks = [k for k in ks if k <= len(np.unique(sample, axis=0))]
    for k in ks:
        c = fit_kmeans(sample, k, seed, max_samples)
        labels, dist = nearest_centroid(sample, c)
        wcss.append(float(np.mean(dist.astype(np.float64) ** 2)))
        sl, _ = nearest_centroid(sil_sample, c)
        sil.append(silhouette(sil_sample, sl) if len(set(sl.tolist())) > 1 else -1.0)
        cents[k] = c
    if not ks:
        raise ValueError("no candidate k fits the data")
    e_k = elbow(ks, wcss)
    s_k = int(ks[int(np.argmax(sil))])
    chosen = s_k if rule == "silhouette" else e_k
    return KSelection(list(ks), wcss, sil, e_k, s_k, chosen, rule), cents


def order_centroids(centroids: np.ndarray, codes: np.ndarray, scaled: np.ndarray) -> np.ndarray:
    """Permutation that numbers phases by ascending mean standardised usage (a stable,
    interpretable order: phase 0 is the lightest), independent of k-means' random labels."""
    labels, _ = nearest_centroid(codes, centroids)
    load = np.array([scaled[labels == j].mean() if np.any(labels == j) else np.inf
                     for j in range(len(centroids))])
    return np.argsort(load, kind="stable")


# ----------------------------------------------------------------------------- statistics
def runs(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run-length encoding: (phase of each run, length of each run in samples)."""
    labels = np.asarray(labels)
    if len(labels) == 0:
        return np.empty(0, int), np.empty(0, int)
    starts = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]])
    lengths = np.diff(np.r_[starts, len(labels)])
    return labels[starts], lengths


def phase_stats(values: Sequence[np.ndarray], labels: Sequence[np.ndarray], k: int) -> list[dict]:
    """Per phase and feature: mean, std, min, max, quantiles and sample count (original units),
    plus the dwell-time distribution of the phase's runs, in samples."""
    X = np.concatenate(values).astype(np.float64)
    L = np.concatenate(labels)
    run_lengths: dict[int, list[int]] = {j: [] for j in range(k)}
    for lab in labels:
        for p, n in zip(*runs(lab)):
            run_lengths[int(p)].append(int(n))
    out = []
    for j in range(k):
        xj = X[L == j]
        dwell = np.array(run_lengths[j], dtype=np.float64)
        entry = {"phase": j, "samples": int(len(xj)), "share": float(len(xj) / max(len(X), 1))}
        if len(xj):
            q = np.quantile(xj, QUANTILES, axis=0)
            entry.update(mean=xj.mean(0), std=xj.std(0), min=xj.min(0), max=xj.max(0),
                         p50=q[0], p90=q[1], p95=q[2], p99=q[3])
        else:
            # An empty phase (possible when k-means was fitted on a subsample) has no usage.
            zero = np.zeros(X.shape[1])
            entry.update(mean=zero, std=zero, min=zero, max=zero, p50=zero, p90=zero, p95=zero,
                         p99=zero)
        entry["dwell"] = {
            "runs": int(len(dwell)),
            "mean": float(dwell.mean()) if len(dwell) else 0.0,
            "p50": float(np.quantile(dwell, 0.5)) if len(dwell) else 0.0,
            "p90": float(np.quantile(dwell, 0.9)) if len(dwell) else 0.0,
            "max": float(dwell.max()) if len(dwell) else 0.0,
        }
        out.append(entry)
    return out


def transition_matrix(labels: Sequence[np.ndarray], k: int) -> np.ndarray:
    """Row-stochastic per-step Markov chain P[i, j] = P(phase j at t+1 | phase i at t),
    counted within executions (never across their boundaries). Rows never seen stay on i."""
    counts = np.zeros((k, k))
    for lab in labels:
        if len(lab) > 1:
            np.add.at(counts, (lab[:-1], lab[1:]), 1.0)
    totals = counts.sum(1, keepdims=True)
    P = np.where(totals > 0, counts / np.maximum(totals, 1), np.eye(k))
    return P


def phase_sequence(labels: np.ndarray, min_run: int = 2, max_cycle: int = 3) -> tuple[int, ...]:
    """The shape of an execution as a phase sequence: runs shorter than ``min_run`` samples
    are absorbed into their neighbours (noise, not phases), and back-to-back repeats of any
    cycle of up to ``max_cycle`` phases collapse to one (ten epochs and three epochs of
    train->validate are the same prototype)."""
    phases, lengths = runs(labels)
    seq = [int(p) for p, n in zip(phases, lengths) if n >= min_run] or [int(p) for p in phases[:1]]
    merged = [p for i, p in enumerate(seq) if i == 0 or p != seq[i - 1]]
    changed = True
    while changed:
        changed = False
        for c in range(1, max_cycle + 1):
            i = 0
            while i + 2 * c <= len(merged):
                if merged[i:i + c] == merged[i + c:i + 2 * c]:
                    del merged[i + c:i + 2 * c]
                    changed = True
                else:
                    i += 1
    return tuple(merged)


def prototypes(labels: Sequence[np.ndarray], top: int = 10, **kw) -> list[dict]:
    """The most common phase sequences and the share of executions each covers."""
    counts = Counter(phase_sequence(lab, **kw) for lab in labels if len(lab))
    total = max(sum(counts.values()), 1)
    return [{"sequence": list(seq), "executions": n, "share": n / total}
            for seq, n in counts.most_common(top)]


def novelty_thresholds(labels: np.ndarray, distances: np.ndarray, k: int,
                       quantile: float = 0.99) -> np.ndarray:
    """Per phase, the ``quantile`` of training distances to the centroid: beyond it a sample
    is flagged novel (behaviour the model has not seen)."""
    overall = float(np.quantile(distances, quantile)) if len(distances) else 0.0
    return np.array([float(np.quantile(distances[labels == j], quantile))
                     if np.any(labels == j) else overall for j in range(k)])


#: Past this share of novel samples (or windows) the model does not describe the data: by
#: construction about 1 % of its own training samples are novel (``novelty_quantile`` 0.99), so
#: a majority means data in other units, another workload, or the wrong model (issue 45:
#: `detect` on data in other units said "novel 92-100 %" and nothing else).
MOSTLY_NOVEL = 0.5


def mostly_novel_warning(share: float, what: str = "samples") -> str | None:
    """One line when ``share`` of ``what`` are novel for the model beyond ``MOSTLY_NOVEL``,
    else None (the CLI's ``detect`` and the operator's novelty condition both say it)."""
    if not share > MOSTLY_NOVEL:
        return None
    return (f"{100 * share:.1f}% of {what} are novel for this model (about 1% of its own "
            f"training data are): data in other units than the model's, or a model of "
            f"another workload?")
