"""CRBM: history layout, every sample encoded, numpy serving == torch, seeded training."""

import numpy as np
import pytest

from ai4dl.crbm import (CRBMParams, design_matrix, encode, encode_many, history_index,
                        reconstruction_error)
from ai4dl.crbm_train import resolve_device, torch_encode, train_crbm
from ai4dl.errors import Ai4dlError


def random_params(V=3, H=5, n=2, seed=0) -> CRBMParams:
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.normal(0, 0.5, s).astype(np.float32)  # noqa: E731
    return CRBMParams(W=f(V, H), B=f(n * V, H), A=f(n * V, V), b_visible=f(V), b_hidden=f(H))


def test_history_index_is_most_recent_first_and_edge_padded():
    idx = history_index(5, 3)
    assert idx.tolist() == [[0, 0, 0], [0, 0, 0], [1, 0, 0], [2, 1, 0], [3, 2, 1]]
    assert history_index(5, 2, n_context=3).tolist() == [[2, 1], [3, 2]]


def test_design_matrix_layout_is_frame_by_frame():
    x = np.arange(10, dtype=np.float32).reshape(5, 2)  # rows: [0,1],[2,3],[4,5],[6,7],[8,9]
    X = design_matrix(x, 2)
    assert X.shape == (5, 6)
    # sample 3: itself [6,7], then t-1 [4,5], then t-2 [2,3]
    assert X[3].tolist() == [6, 7, 4, 5, 2, 3]
    # sample 0 has no history: edge-padded with itself, never zeros
    assert X[0].tolist() == [0, 1, 0, 1, 0, 1]


def test_every_sample_gets_a_code_and_none_is_a_zero_vector():
    p = random_params()
    x = np.random.default_rng(1).normal(size=(7, 3)).astype(np.float32)
    codes = encode(p, x)
    assert codes.shape == (7, 5)
    assert np.all(codes > 0) and np.all(codes < 1)
    # The first sample's code equals the code of a steady state at its value.
    steady = np.repeat(x[:1], 3, axis=0)
    assert np.allclose(codes[0], encode(p, steady)[-1])


def test_context_rows_serve_only_as_history():
    p = random_params()
    x = np.random.default_rng(2).normal(size=(9, 3)).astype(np.float32)
    full = encode(p, x)
    assert np.allclose(encode(p, x, n_context=4), full[4:])
    many = encode_many(p, [x, x[:5], x[:1]], [4, 0, 0])
    assert [len(c) for c in many] == [5, 5, 1]
    assert np.allclose(many[0], full[4:]) and np.allclose(many[1], encode(p, x[:5]))


def test_numpy_encoder_matches_torch_to_1e5():
    p = random_params(V=4, H=10, n=3, seed=5)
    x = np.random.default_rng(3).normal(size=(500, 4)).astype(np.float32) * 3
    assert np.max(np.abs(encode(p, x) - torch_encode(p, x))) < 1e-5


def _series(seed=0, n=6):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        levels = rng.choice([-1.0, 0.0, 1.5], size=8)
        out.append(np.repeat(levels, 40)[:, None].repeat(2, 1).astype(np.float32)
                   + 0.1 * rng.standard_normal((320, 2)).astype(np.float32))
    return out


def test_training_is_seeded_and_learns():
    xs = _series()
    p1, r1 = train_crbm(xs, n_hidden=6, n_history=2, epochs=8, seed=4)
    p2, _ = train_crbm(xs, n_hidden=6, n_history=2, epochs=8, seed=4)
    p3, _ = train_crbm(xs, n_hidden=6, n_history=2, epochs=8, seed=5)
    for name in ("W", "B", "A", "b_visible", "b_hidden"):
        assert np.array_equal(getattr(p1, name), getattr(p2, name))
    assert not np.array_equal(p1.W, p3.W)
    # Learning: the reconstruction error falls well below that of the data's variance (~1).
    assert r1.history[-1][0] < r1.history[0][0]
    assert reconstruction_error(p1, xs) < 0.5
    # numpy codes of trained weights still agree with torch's
    assert np.max(np.abs(encode(p1, xs[0]) - torch_encode(p1, xs[0]))) < 1e-5


def test_early_stopping_stops_before_the_epoch_budget():
    _, rep = train_crbm(_series(1), n_hidden=6, n_history=2, epochs=200, patience=2,
                        min_improvement=0.05, seed=0)
    assert rep.epochs < 200
    assert rep.best_epoch <= rep.epochs - 2


def test_params_check_names_the_bad_array():
    p = random_params()
    bad = CRBMParams(W=p.W, B=p.B[:-1], A=p.A, b_visible=p.b_visible, b_hidden=p.b_hidden)
    with pytest.raises(ValueError, match="^B has shape"):
        bad.check()
    nan = CRBMParams(W=p.W * np.nan, B=p.B, A=p.A, b_visible=p.b_visible, b_hidden=p.b_hidden)
    with pytest.raises(ValueError, match="W has non-finite"):
        nan.check()


def test_device_resolution():
    import torch

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(Ai4dlError, match="no CUDA device"):
            resolve_device("cuda")
    with pytest.raises(Ai4dlError):
        resolve_device("tpu")
