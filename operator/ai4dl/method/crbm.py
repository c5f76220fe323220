"""Conditional RBM: parameters and numpy inference (the serving path: no torch here).

Model (Taylor & Hinton's CRBM, Gaussian visible units with unit variance, sigmoid hidden units).
For the visible frame ``v_t`` (one sample, standardised features) and its history
``u_t = [v_{t-1}, v_{t-2}, ..., v_{t-n}]`` (most recent first, flattened frame by frame):

    p(h = 1 | v_t, u_t) = sigmoid(v_t W + u_t B + b_hidden)      # the *code* of sample t
    E[v_t | h, u_t]      = h W^T + u_t A + b_visible              # the reconstruction

History order is defined once, in :func:`history_matrix`, and used by both training and
inference (the reference AI4DL code flattened it one way when training and another when
predicting). The first samples of an execution use the history they have: frames before the
start are taken equal to the first observed frame (edge padding), never zeros, so no fake
"warm-up" phase appears, and every sample gets a code (no off-by-one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True, eq=False)
class CRBMParams:
    """Weights of a fitted CRBM, float32. Shapes use V visible, H hidden, n history frames."""

    W: np.ndarray          # (V, H)   visible -> hidden
    B: np.ndarray          # (n*V, H) history -> hidden
    A: np.ndarray          # (n*V, V) history -> visible
    b_visible: np.ndarray  # (V,)
    b_hidden: np.ndarray   # (H,)

    @property
    def n_visible(self) -> int:
        return int(self.W.shape[0])

    @property
    def n_hidden(self) -> int:
        return int(self.W.shape[1])

    @property
    def n_history(self) -> int:
        return int(self.B.shape[0] // self.W.shape[0])

    def check(self) -> None:
        """Raise ValueError naming the first array whose shape does not fit the others."""
        V, H = self.W.shape
        if self.B.ndim != 2 or self.B.shape[1] != H or self.B.shape[0] % V or self.B.shape[0] == 0:
            raise ValueError(f"B has shape {self.B.shape}, expected (n_history*{V}, {H})")
        if self.A.shape != (self.B.shape[0], V):
            raise ValueError(f"A has shape {self.A.shape}, expected ({self.B.shape[0]}, {V})")
        if self.b_visible.shape != (V,):
            raise ValueError(f"b_visible has shape {self.b_visible.shape}, expected ({V},)")
        if self.b_hidden.shape != (H,):
            raise ValueError(f"b_hidden has shape {self.b_hidden.shape}, expected ({H},)")
        for name in ("W", "B", "A", "b_visible", "b_hidden"):
            if not np.all(np.isfinite(getattr(self, name))):
                raise ValueError(f"{name} has non-finite values")

    def stacked_hidden_weights(self) -> np.ndarray:
        """[W; B]: one matrix so that a whole design matrix is encoded with one product."""
        return np.ascontiguousarray(np.vstack([self.W, self.B]), dtype=np.float32)


def history_index(n: int, n_history: int, n_context: int = 0) -> np.ndarray:
    """Row indices of the history frames for each of the last ``n - n_context`` rows.

    Row ``t`` gets ``[t-1, t-2, ..., t-n_history]``, clamped at 0 (edge padding).
    ``n_context`` leading rows serve only as history for the rows after them.
    """
    t = np.arange(n_context, n)[:, None]
    lags = np.arange(1, n_history + 1)[None, :]
    return np.maximum(t - lags, 0)


def design_matrix(x: np.ndarray, n_history: int, n_context: int = 0) -> np.ndarray:
    """``[v_t, v_{t-1}, ..., v_{t-n}]`` per row (float32), for rows ``n_context..len(x)-1``."""
    x = np.asarray(x, dtype=np.float32)
    n, V = x.shape
    if n <= n_context:
        return np.empty((0, V * (n_history + 1)), dtype=np.float32)
    idx = np.concatenate([np.arange(n_context, n)[:, None], history_index(n, n_history, n_context)],
                         axis=1)
    return x[idx].reshape(n - n_context, V * (n_history + 1))


def history_matrix(x: np.ndarray, n_history: int, n_context: int = 0) -> np.ndarray:
    """The history part of :func:`design_matrix` alone, shape (rows, n_history*V)."""
    V = np.asarray(x).shape[1]
    return design_matrix(x, n_history, n_context)[:, V:]


def sigmoid(z: np.ndarray) -> np.ndarray:
    # In place, float32: this is the serving hot path. exp overflows to inf for very negative
    # inputs, whose sigmoid is then exactly 0: the right answer, so the warning is noise.
    np.negative(z, out=z)
    with np.errstate(over="ignore"):
        np.exp(z, out=z)
    z += 1.0
    np.reciprocal(z, out=z)
    return z


def encode(params: CRBMParams, x: np.ndarray, n_context: int = 0) -> np.ndarray:
    """Hidden-unit probabilities (the codes) for each standardised sample of one execution."""
    X = design_matrix(x, params.n_history, n_context)
    return sigmoid(X @ params.stacked_hidden_weights() + params.b_hidden)


def stacked_design_matrix(xs: Sequence[np.ndarray], n_history: int,
                          n_context: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Design rows of many executions at once, without a Python loop per execution.

    Returns the stacked rows and, per execution, how many rows it contributed. The history of a
    row is clamped at its own execution's first row, never reaching into the previous one.
    """
    lengths = np.array([len(x) for x in xs], dtype=np.int64)
    ctx = np.zeros(len(xs), np.int64) if n_context is None else np.asarray(n_context, np.int64)
    keep = np.maximum(lengths - ctx, 0)
    allx = np.concatenate([np.asarray(x, np.float32) for x in xs]) if len(xs) > 1 \
        else np.asarray(xs[0], np.float32)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    first = np.repeat(offsets, keep)
    rank = np.arange(int(keep.sum())) - np.repeat(np.cumsum(keep) - keep, keep)
    rows = np.repeat(offsets + ctx, keep) + rank
    idx = np.maximum(rows[:, None] - np.arange(n_history + 1)[None, :], first[:, None])
    return allx[idx].reshape(len(rows), -1), keep


def encode_stacked(params: CRBMParams, xs: Sequence[np.ndarray],
                   n_context: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Codes of many executions, stacked, with ONE matrix product; and rows per execution."""
    X, keep = stacked_design_matrix(xs, params.n_history, n_context)
    return sigmoid(X @ params.stacked_hidden_weights() + params.b_hidden), keep


def encode_many(params: CRBMParams, xs: Sequence[np.ndarray],
                n_context: Sequence[int] | None = None) -> list[np.ndarray]:
    """Codes for many executions (the operator's batch path), split per execution."""
    if not len(xs):
        return []
    codes, keep = encode_stacked(params, xs, n_context)
    return np.split(codes, np.cumsum(keep)[:-1])


def reconstruct(params: CRBMParams, x: np.ndarray) -> np.ndarray:
    """Mean-field one-step reconstruction of each sample (for reconstruction error)."""
    X = design_matrix(x, params.n_history)
    V = params.n_visible
    h = sigmoid(X @ params.stacked_hidden_weights() + params.b_hidden)
    return h @ params.W.T + X[:, V:] @ params.A + params.b_visible


def reconstruction_error(params: CRBMParams, xs: Sequence[np.ndarray]) -> float:
    """Mean squared reconstruction error per feature, in standardised units."""
    total, count = 0.0, 0
    for x in xs:
        if len(x):
            r = reconstruct(params, x)
            total += float(np.sum((r - x) ** 2, dtype=np.float64))
            count += x.size
    return total / max(count, 1)
