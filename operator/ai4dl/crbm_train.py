"""CRBM training in torch (CPU or CUDA): minibatch CD-k with momentum, weight decay and early
stopping on a validation split. Returns numpy :class:`~ai4dl.crbm.CRBMParams`, so serving never
needs torch. Training slices come from :func:`ai4dl.crbm.design_matrix`, the same history
layout inference uses.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ai4dl.crbm import CRBMParams, design_matrix
from ai4dl.errors import Ai4dlError


@dataclass
class TrainReport:
    epochs: int = 0
    best_epoch: int = 0
    train_error: float = math.nan       # mean squared reconstruction error, standardised units
    validation_error: float = math.nan
    seconds: float = 0.0
    device: str = "cpu"
    history: list[tuple[float, float]] = field(default_factory=list)  # (train, validation) per epoch


def hidden_probabilities(v, u, W, B, bh):
    """p(h | v, u): the one torch formula for codes, used in training and by :func:`torch_encode`."""
    import torch

    return torch.sigmoid(v @ W + u @ B + bh)


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise Ai4dlError("--device cuda was asked for but torch sees no CUDA device")
    if device not in ("cpu", "cuda"):
        raise Ai4dlError(f"unknown device {device!r} (use auto, cpu or cuda)")
    return device


def train_crbm(xs: Sequence[np.ndarray], *, n_hidden: int, n_history: int, epochs: int = 60,
               batch_size: int = 512, learning_rate: float = 0.01, momentum: float = 0.9,
               weight_decay: float = 1e-4, cd_k: int = 1, patience: int = 5,
               min_improvement: float = 1e-3, validation_fraction: float = 0.1,
               max_samples_per_epoch: int | None = 200_000, seed: int = 0, device: str = "cpu",
               on_epoch: Callable[[int, float, float], None] | None = None,
               ) -> tuple[CRBMParams, TrainReport]:
    """Fit a CRBM to standardised executions ``xs`` (each (n_i, V) float32).

    Validation slices are held out per execution (the last ``validation_fraction`` of the
    executions in a seeded shuffle) so early stopping sees behaviour not trained on. Training
    stops when the validation reconstruction error has not improved by ``min_improvement``
    (relative) for ``patience`` epochs; the best epoch's weights are returned.
    """
    import torch

    start = time.perf_counter()
    dev = torch.device(resolve_device(device))
    threads = torch.get_num_threads()
    if dev.type == "cpu":
        # These matrices are tiny (batch x ~16 x ~10): thread hand-offs cost more than the
        # arithmetic; one thread measured 3-5x faster than two on 2 cores.
        torch.set_num_threads(1)
    try:
        return _train(xs, n_hidden, n_history, epochs, batch_size, learning_rate, momentum,
                      weight_decay, cd_k, patience, min_improvement, validation_fraction,
                      max_samples_per_epoch, seed, dev, on_epoch, start)
    finally:
        torch.set_num_threads(threads)


def _train(xs, n_hidden, n_history, epochs, batch_size, learning_rate, momentum, weight_decay,
           cd_k, patience, min_improvement, validation_fraction, max_samples_per_epoch, seed,
           dev, on_epoch, start):
    import torch

    rng = np.random.default_rng(seed)
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)

    order = rng.permutation(len(xs))
    n_val = int(round(validation_fraction * len(xs))) if len(xs) > 1 else 0
    val_ids, train_ids = order[:n_val], order[n_val:]
    train_X = np.concatenate([design_matrix(xs[i], n_history) for i in train_ids])
    if len(train_X) < 2:
        raise Ai4dlError(f"too few samples to train a CRBM ({len(train_X)})")
    val_X = (np.concatenate([design_matrix(xs[i], n_history) for i in val_ids])
             if n_val else train_X[rng.choice(len(train_X), min(len(train_X), 20_000), replace=False)])
    V = train_X.shape[1] // (n_history + 1)
    train_t = torch.from_numpy(train_X).to(dev)
    val_t = torch.from_numpy(np.ascontiguousarray(val_X[:100_000])).to(dev)

    # Small Gaussian initialisation scaled by fan-in (the reference code's scheme, fixed order).
    def init(shape):
        return torch.randn(*shape, generator=gen, device=dev) * (0.2 / math.sqrt(shape[0]))

    # M = [W; B] maps a design row [v_t, u_t] to the hidden units in one product.
    M, A = init((V * (n_history + 1), n_hidden)), init((V * n_history, V))
    bv, bh = torch.zeros(V, device=dev), torch.zeros(n_hidden, device=dev)
    params = [M, A, bv, bh]
    velocity = [torch.zeros_like(p) for p in params]
    decays = [weight_decay, weight_decay, 0.0, 0.0]

    def recon_error(X: torch.Tensor) -> float:
        v, u = X[:, :V], X[:, V:]
        h = hidden_probabilities(v, u, M[:V], M[V:], bh)
        r = h @ M[:V].T + u @ A + bv
        return float(((r - v) ** 2).mean())

    report = TrainReport(device=str(dev))
    best = (math.inf, [p.clone() for p in params], 0)
    stale = 0
    n_train = len(train_t)
    per_epoch = min(n_train, max_samples_per_epoch or n_train)
    for epoch in range(1, epochs + 1):
        perm = torch.randperm(n_train, generator=gen, device=dev)[:per_epoch]
        for s in range(0, per_epoch, batch_size):
            X0 = train_t[perm[s:s + batch_size]]
            v0, u = X0[:, :V], X0[:, V:]
            dyn_v = torch.addmm(bv, u, A)
            h0 = torch.sigmoid(torch.addmm(bh, X0, M))
            hk, Xk = h0, X0.clone()
            for _ in range(cd_k):
                h_sample = torch.bernoulli(hk, generator=gen)
                # Gaussian visible units: the mean (unit variance, not sampled)
                Xk[:, :V] = torch.addmm(dyn_v, h_sample, M[:V].T)
                hk = torch.sigmoid(torch.addmm(bh, Xk, M))
            scale = 1.0 / len(X0)
            grads = [
                (X0.T @ h0 - Xk.T @ hk) * scale,
                u.T @ (v0 - Xk[:, :V]) * scale,
                (v0 - Xk[:, :V]).mean(0),
                (h0 - hk).mean(0),
            ]
            for p, vel, g, wd in zip(params, velocity, grads, decays):
                if wd:
                    g = g - wd * p
                vel.mul_(momentum).add_(g, alpha=learning_rate)
                p.add_(vel)
        train_err = recon_error(train_t[perm[:100_000]])
        val_err = recon_error(val_t)
        if not math.isfinite(train_err):
            raise Ai4dlError("CRBM training diverged (non-finite error): lower the learning rate")
        report.history.append((train_err, val_err))
        if on_epoch:
            on_epoch(epoch, train_err, val_err)
        report.epochs = epoch
        if val_err < best[0] * (1 - min_improvement):
            best, stale = (val_err, [p.clone() for p in params], epoch), 0
        else:
            stale += 1
            if stale >= patience:
                break
    val_err, weights, best_epoch = best
    M, A, bv, bh = (w.detach().cpu().numpy().astype(np.float32) for w in weights)
    out = CRBMParams(W=np.ascontiguousarray(M[:V]), B=np.ascontiguousarray(M[V:]), A=A,
                     b_visible=bv, b_hidden=bh)
    report.best_epoch = best_epoch
    report.validation_error = val_err
    report.train_error = report.history[best_epoch - 1][0]
    report.seconds = time.perf_counter() - start
    return out, report


def torch_encode(params: CRBMParams, x: np.ndarray) -> np.ndarray:
    """Codes computed by torch (float64), only to check the numpy serving path against it."""
    import torch

    X = torch.from_numpy(design_matrix(x, params.n_history).astype(np.float64))
    V = params.n_visible
    W = torch.from_numpy(params.W.astype(np.float64))
    B = torch.from_numpy(params.B.astype(np.float64))
    bh = torch.from_numpy(params.b_hidden.astype(np.float64))
    return hidden_probabilities(X[:, :V], X[:, V:], W, B, bh).numpy()
