"""CRBM training in torch (CPU or CUDA): minibatch CD-k with momentum, weight decay and early
stopping on a validation split. Returns numpy :class:`~ai4dl.method.crbm.CRBMParams`, so serving never
needs torch. Training slices come from :func:`ai4dl.method.crbm.design_matrix`, the same history
layout inference uses.
"""

from __future__ import annotations

# torch (the [train] extra) is imported inside the functions that use it: ai4dl.method.model
# imports this module, and serving (the operator's image) has no torch.

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ai4dl.method.crbm import CRBMParams, design_matrix
from ai4dl.errors import Ai4dlError


@dataclass
class TrainReport:
    epochs: int = 0
    best_epoch: int = 0
    train_error: float = math.nan       # mean squared reconstruction error, standardised units
    validation_error: float = math.nan
    seconds: float = 0.0
    device: str = "cpu"
    method: str = "reference"           # the training loop (:data:`METHODS`)
    history: list[tuple[float, float]] = field(default_factory=list)  # (train, validation) per epoch


def hidden_probabilities(v, u, W, B, bh):
    """p(h | v, u): the one torch formula for codes, used in training and by :func:`torch_encode`."""
    import torch

    return torch.sigmoid(v @ W + u @ B + bh)


#: The cost model behind ``--device auto`` (see :class:`FitSize`); bench/gpu_check.py measures
#: its constants. At the default sizes both devices are bound by dispatch, not arithmetic: on
#: the CPU (one thread) a batch of 128 took 4x the epoch time of a batch of 512 (same samples,
#: a quarter of the arithmetic per batch), so the time goes with the number of batches; the
#: arithmetic term (per sample x design column x hidden unit) matters only for wide models.
#: The constants are the graph and fused loops' measured on one H200 machine with 16 cores
#: (``bash bench/gpu_check.sh``, raw in docs/results/gpu/gpu-check-h200.json; 1,000 synthetic
#: executions x 2,400 samples, 60 epochs of 391 batches of 512, 16 design columns, 10 hidden
#: units). CPU, fused loop: 8.0 s and 8.3 s (two runs); from 10- and 200-hidden-unit epochs,
#: 0.334 ms a batch plus 1.4 ns per sample x column x hidden unit. CUDA, graph loop: 2.34 s
#: both runs, the capture included = 0.10 ms a batch, and 0.275 s from a fresh process to a
#: first product (context and cuBLAS). So CUDA is faster from about 1,200 batch-epochs up (a
#: fit of about 10,000 samples an epoch at 60 epochs): the sweep measured CUDA faster at 5
#: executions already (0.46 s against 0.73 s), and the whole default fit 8.8 s against 16.3 s.
#: (Before the graph loop, CUDA lost: 19.6-24.5 s against 13.0 s, issue 29.)
CPU_SECONDS_PER_UNIT = 1.4e-9
CPU_SECONDS_PER_BATCH = 3.34e-4
#: CUDA: a fixed start (context, cuBLAS) and a nearly constant time per batch (a replay of the
#: captured epoch: launch latency gone, the arithmetic of a 512 x 16 x 10 product negligible).
CUDA_START_SECONDS = 0.275
CUDA_SECONDS_PER_BATCH = 1.0e-4


@dataclass(frozen=True)
class FitSize:
    """What one CRBM fit costs, in the units of the device cost model.

    The CPU's time per epoch is a dispatch cost per batch plus arithmetic (samples x design
    columns x hidden units); CUDA's is a start-up plus a nearly constant time per batch,
    whatever the batch's width (launch latency). ``auto`` takes the device
    whose estimate is lower. Both estimates use the epoch budget; early stopping shortens
    both by the same factor, so only the start-up is then amortised over fewer epochs.
    """

    samples_per_epoch: int
    columns: int        # design row width: visible x (n_history + 1)
    n_hidden: int
    batch_size: int
    epochs: int

    @property
    def batches(self) -> int:
        return math.ceil(self.samples_per_epoch / max(self.batch_size, 1))

    def cpu_seconds(self) -> float:
        units = self.samples_per_epoch * self.columns * self.n_hidden
        return self.epochs * (units * CPU_SECONDS_PER_UNIT + self.batches * CPU_SECONDS_PER_BATCH)

    def cuda_seconds(self) -> float:
        return CUDA_START_SECONDS + self.epochs * self.batches * CUDA_SECONDS_PER_BATCH

    def cuda_pays(self) -> bool:
        return self.cuda_seconds() < self.cpu_seconds()


def resolve_device(device: str, size: FitSize | None = None) -> str:
    """``cpu``/``cuda`` as asked; ``auto``: CUDA only when torch sees one AND the cost model
    says it is faster for ``size`` (without a size, auto stays on the CPU)."""
    import torch

    if device == "auto":
        if not torch.cuda.is_available():
            return "cpu"
        return "cuda" if size is not None and size.cuda_pays() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise Ai4dlError("--device cuda was asked for but torch sees no CUDA device")
    if device not in ("cpu", "cuda"):
        raise Ai4dlError(f"unknown device {device!r} (use auto, cpu or cuda)")
    return device


#: Training loops. ``reference``: one permutation gather and one Bernoulli draw per batch (the
#: loop every published CPU result was computed with). ``fused``: the epoch's samples gathered
#: and its uniforms drawn in one call each, then the same CD step per batch with h = [u < p];
#: on the CPU it gives the reference loop's numbers bit for bit (same generator calls in the
#: same order), about 5x faster, since per-batch Bernoulli draws dominated the reference loop.
#: ``graph``: ``fused`` with the epoch's batches captured once as a CUDA graph and replayed,
#: so an epoch costs a few launches instead of ~30 per batch. ``auto``: fused on the CPU, graph
#: on CUDA.
METHODS = ("auto", "reference", "fused", "graph")


def train_crbm(xs: Sequence[np.ndarray], *, n_hidden: int, n_history: int, epochs: int = 60,
               batch_size: int = 512, learning_rate: float = 0.01, momentum: float = 0.9,
               weight_decay: float = 1e-4, cd_k: int = 1, patience: int = 5,
               min_improvement: float = 1e-3, validation_fraction: float = 0.1,
               max_samples_per_epoch: int | None = 200_000, seed: int = 0, device: str = "cpu",
               on_epoch: Callable[[int, float, float], None] | None = None,
               method: str = "auto") -> tuple[CRBMParams, TrainReport]:
    """Fit a CRBM to standardised executions ``xs`` (each (n_i, V) float32).

    Validation slices are held out per execution (the last ``validation_fraction`` of the
    executions in a seeded shuffle) so early stopping sees behaviour not trained on. Training
    stops when the validation reconstruction error has not improved by ``min_improvement``
    (relative) for ``patience`` epochs; the best epoch's weights are returned. ``method``: one
    of :data:`METHODS`.
    """
    import torch

    if method not in METHODS:
        raise Ai4dlError(f"unknown training method {method!r} (use {', '.join(METHODS)})")
    start = time.perf_counter()
    threads = torch.get_num_threads()
    try:
        return _train(xs, n_hidden, n_history, epochs, batch_size, learning_rate, momentum,
                      weight_decay, cd_k, patience, min_improvement, validation_fraction,
                      max_samples_per_epoch, seed, device, method, on_epoch, start)
    finally:
        torch.set_num_threads(threads)


def _train(xs, n_hidden, n_history, epochs, batch_size, learning_rate, momentum, weight_decay,
           cd_k, patience, min_improvement, validation_fraction, max_samples_per_epoch, seed,
           device, method, on_epoch, start):
    import torch

    train_X, val_X = _design_split(xs, n_history, validation_fraction, seed)
    V = train_X.shape[1] // (n_history + 1)
    n_train = len(train_X)
    per_epoch = min(n_train, max_samples_per_epoch or n_train)
    # The device is chosen once the fit's size is known (the torch generator below is
    # separate from numpy's, so choosing here leaves every random stream as it was).
    dev, method = _device_and_method(device, method, FitSize(per_epoch, train_X.shape[1],
                                                             n_hidden, batch_size, epochs))
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    train_t = torch.from_numpy(train_X).to(dev)
    val_t = torch.from_numpy(np.ascontiguousarray(val_X[:100_000])).to(dev)
    params = _initial_params(gen, dev, V, n_history, n_hidden)
    velocity = [torch.zeros_like(p) for p in params]
    cd_step = _cd_step_function(V, cd_k, momentum, learning_rate,
                                [weight_decay, weight_decay, 0.0, 0.0])
    if method == "reference":
        run_epoch = _reference_epochs(cd_step, train_t, per_epoch, batch_size, gen, params,
                                      velocity)
    else:
        run_epoch, method = _fused_epochs(cd_step, train_t, per_epoch, batch_size, cd_k, n_hidden,
                                          gen, params, velocity, graph=method == "graph")

    report = TrainReport(device=str(dev), method=method)
    val_err, weights, best_epoch = _early_stopped_epochs(
        run_epoch, lambda X: _recon_error(X, params, V), val_t, params, epochs, patience,
        min_improvement, on_epoch, report)
    out = _numpy_params(weights, V)
    report.best_epoch = best_epoch
    report.validation_error = val_err
    report.train_error = report.history[best_epoch - 1][0]
    report.seconds = time.perf_counter() - start
    return out, report


def _design_split(xs, n_history, validation_fraction, seed):
    """The training and validation design matrices: whole executions held out in a seeded
    shuffle, or (with one execution) a seeded sample of the training rows."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(xs))
    n_val = int(round(validation_fraction * len(xs))) if len(xs) > 1 else 0
    val_ids, train_ids = order[:n_val], order[n_val:]
    train_X = np.concatenate([design_matrix(xs[i], n_history) for i in train_ids])
    if len(train_X) < 2:
        raise Ai4dlError(f"too few samples to train a CRBM ({len(train_X)})")
    val_X = (np.concatenate([design_matrix(xs[i], n_history) for i in val_ids])
             if n_val else train_X[rng.choice(len(train_X), min(len(train_X), 20_000), replace=False)])
    return train_X, val_X


def _device_and_method(device, method, size: FitSize):
    """The torch device for a fit of ``size`` and the training loop to run there (``auto``
    resolved); on the CPU, torch is set to one thread."""
    import torch

    dev = torch.device(resolve_device(device, size))
    if method == "auto":
        method = "graph" if dev.type == "cuda" else "fused"
    if method == "graph" and dev.type != "cuda":
        raise Ai4dlError("training method 'graph' needs CUDA (CUDA graphs)")
    if dev.type == "cpu":
        # These matrices are tiny (batch x ~16 x ~10): thread hand-offs cost more than the
        # arithmetic; one thread measured 3-5x faster than two on 2 cores.
        torch.set_num_threads(1)
    return dev, method


def _initial_params(gen, dev, V, n_history, n_hidden):
    """[M, A, bv, bh], the weights drawn from ``gen`` (M first, then A) and zero biases."""
    import torch

    # Small Gaussian initialisation scaled by fan-in (the reference code's scheme, fixed order).
    def init(shape):
        return torch.randn(*shape, generator=gen, device=dev) * (0.2 / math.sqrt(shape[0]))

    # M = [W; B] maps a design row [v_t, u_t] to the hidden units in one product.
    M, A = init((V * (n_history + 1), n_hidden)), init((V * n_history, V))
    bv, bh = torch.zeros(V, device=dev), torch.zeros(n_hidden, device=dev)
    return [M, A, bv, bh]


def _cd_step_function(V, cd_k, momentum, learning_rate, decays):
    """The CD-k update for ``V`` visible units, with momentum and weight decay per parameter
    (``decays``, in the order of the parameters)."""
    import torch

    def cd_step(X0, draw, params, velocity):
        """One CD-k update of ``params`` in place from the batch ``X0``; ``draw(k, p)`` samples
        the hidden units of Gibbs step k from their probabilities p."""
        M, A, bv, bh = params
        v0, u = X0[:, :V], X0[:, V:]
        dyn_v = torch.addmm(bv, u, A)
        h0 = torch.sigmoid(torch.addmm(bh, X0, M))
        hk, Xk = h0, X0.clone()
        for k in range(cd_k):
            h_sample = draw(k, hk)
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
    return cd_step


def _recon_error(X, params, V) -> float:
    """Mean squared reconstruction error of the design rows ``X`` (standardised units)."""
    M, A, bv, bh = params
    v, u = X[:, :V], X[:, V:]
    h = hidden_probabilities(v, u, M[:V], M[V:], bh)
    r = h @ M[:V].T + u @ A + bv
    return float(((r - v) ** 2).mean())


def _reference_epochs(cd_step, train_t, per_epoch, batch_size, gen, params, velocity):
    """An epoch function for the ``reference`` method: one permutation gather and one
    Bernoulli draw per batch."""
    import torch

    dev = train_t.device
    n_train = len(train_t)

    def reference_draw(k, p):
        return torch.bernoulli(p, generator=gen)

    def run_epoch():
        perm = torch.randperm(n_train, generator=gen, device=dev)[:per_epoch]
        for s in range(0, per_epoch, batch_size):
            cd_step(train_t[perm[s:s + batch_size]], reference_draw, params, velocity)
        return train_t[perm[:100_000]]
    return run_epoch


def _early_stopped_epochs(run_epoch, recon_error, val_t, params, epochs, patience,
                          min_improvement, on_epoch, report):
    """Run epochs until the validation error stalls for ``patience`` epochs, recording each in
    ``report``; returns (validation error, weights, epoch) of the best epoch."""
    best = (math.inf, [p.clone() for p in params], 0)
    stale = 0
    for epoch in range(1, epochs + 1):
        seen = run_epoch()
        train_err = recon_error(seen)
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
    return best


def _numpy_params(weights, V) -> CRBMParams:
    """The trained tensors [M, A, bv, bh] as float32 numpy :class:`CRBMParams`."""
    M, A, bv, bh = (w.detach().cpu().numpy().astype(np.float32) for w in weights)
    return CRBMParams(W=np.ascontiguousarray(M[:V]), B=np.ascontiguousarray(M[V:]), A=A,
                      b_visible=bv, b_hidden=bh)


def _fused_epochs(cd_step, train_t, per_epoch, batch_size, cd_k, n_hidden, gen, params,
                  velocity, graph: bool):
    """An epoch function for the ``fused``/``graph`` methods. The epoch's rows and uniforms
    live in fixed buffers, refilled in place by one gather and one draw, so the batches read
    the same memory every epoch: what lets one CUDA graph, captured once, replay them all."""
    import torch

    dev = train_t.device
    n_train = len(train_t)
    X_epoch = torch.empty((per_epoch, train_t.shape[1]), device=dev, dtype=train_t.dtype)
    # Uniforms in the order the reference loop draws them: batch by batch, and within a batch
    # Gibbs step by step, row-major. On the CPU torch's bernoulli(p) takes one uniform per
    # element from the generator and returns u < p, so this loop gives the reference loop's
    # numbers exactly (a test checks it), from one draw an epoch instead of one a batch.
    U_epoch = torch.empty(per_epoch * cd_k * n_hidden, device=dev, dtype=train_t.dtype)
    spans = [(s, min(s + batch_size, per_epoch)) for s in range(0, per_epoch, batch_size)]

    def all_batches(params, velocity, spans=spans):
        for a, b in spans:
            U = U_epoch[a * cd_k * n_hidden:b * cd_k * n_hidden].view(cd_k, b - a, n_hidden)
            cd_step(X_epoch[a:b], lambda k, p: (U[k] < p).to(p.dtype), params, velocity)

    def refill():
        perm = torch.randperm(n_train, generator=gen, device=dev)[:per_epoch]
        torch.index_select(train_t, 0, perm, out=X_epoch)
        U_epoch.uniform_(generator=gen)

    def run_epoch():
        refill()
        all_batches(params, velocity)
        return X_epoch[:100_000]

    if not graph:
        return run_epoch, "fused"
    try:
        # Warm-up on a side stream before capture (cuBLAS handles and workspaces are created
        # lazily, which a capture forbids), on copies: the real weights must not move.
        side = torch.cuda.Stream(device=dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            scratch = [p.clone() for p in params], [v.clone() for v in velocity]
            all_batches(*scratch, spans=spans[:1] + spans[-1:])
        torch.cuda.current_stream(dev).wait_stream(side)
        torch.cuda.synchronize(dev)
        # Capture records the kernels without running them: the weights stay as they are.
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            all_batches(params, velocity)
    except RuntimeError as err:
        # Same numbers without the graph, only slower: say so and go on.
        torch.cuda.synchronize(dev)
        warnings.warn(f"CUDA graph capture failed ({err}); training without it", stacklevel=2)
        return run_epoch, "fused"

    def run_graph_epoch():
        refill()
        g.replay()
        return X_epoch[:100_000]
    return run_graph_epoch, "graph"


def torch_encode(params: CRBMParams, x: np.ndarray) -> np.ndarray:
    """Codes computed by torch (float64), only to check the numpy serving path against it."""
    import torch

    X = torch.from_numpy(design_matrix(x, params.n_history).astype(np.float64))
    V = params.n_visible
    W = torch.from_numpy(params.W.astype(np.float64))
    B = torch.from_numpy(params.B.astype(np.float64))
    bh = torch.from_numpy(params.b_hidden.astype(np.float64))
    return hidden_probabilities(X[:, :V], X[:, V:], W, B, bh).numpy()
