"""Phase analytics: known answers for runs, transitions, prototypes, stats, novelty, k choice."""

import numpy as np

from ai4dl.method import phases as ph


def test_runs():
    p, n = ph.runs(np.array([2, 2, 0, 0, 0, 1, 2]))
    assert p.tolist() == [2, 0, 1, 2] and n.tolist() == [2, 3, 1, 1]
    p, n = ph.runs(np.array([], int))
    assert len(p) == 0 and len(n) == 0


def test_transition_matrix_counts_within_executions_only():
    P = ph.transition_matrix([np.array([0, 0, 1, 1]), np.array([1, 0])], k=3)
    # 0->0 once, 0->1 once; 1->1 once, 1->0 once (second execution); never across executions
    assert np.allclose(P, [[0.5, 0.5, 0], [0.5, 0.5, 0], [0, 0, 1]])
    assert np.allclose(P.sum(1), 1)


def test_phase_sequence_collapses_noise_and_cycles():
    lab = np.array([0] * 5 + [1] * 5 + [2, 2, 2, 3, 3] * 4 + [4] + [3] * 3)
    # the single 4 is noise (run of 1); 2,3 repeated 4 times collapses to one cycle
    assert ph.phase_sequence(lab) == (0, 1, 2, 3)
    assert ph.phase_sequence(np.array([1, 1, 2, 2, 1, 1, 2, 2, 5, 5])) == (1, 2, 5)
    assert ph.phase_sequence(np.array([3])) == (3,)


def test_prototypes_share():
    labs = [np.array([0, 0, 1, 1])] * 3 + [np.array([1, 1, 0, 0])]
    protos = ph.prototypes(labs)
    assert protos[0] == {"sequence": [0, 1], "executions": 3, "share": 0.75}
    assert protos[1]["sequence"] == [1, 0] and protos[1]["share"] == 0.25


def test_phase_stats_known_answer():
    values = [np.array([[1.0, 10], [3, 30], [100, 0]]), np.array([[5.0, 50]])]
    labels = [np.array([0, 0, 1]), np.array([0])]
    s = ph.phase_stats(values, labels, k=3)
    assert s[0]["samples"] == 3 and np.allclose(s[0]["mean"], [3, 30])
    assert np.allclose(s[0]["max"], [5, 50]) and np.allclose(s[0]["p50"], [3, 30])
    assert np.allclose(s[0]["std"], np.std([[1, 10], [3, 30], [5, 50]], axis=0))
    assert s[0]["dwell"]["runs"] == 2 and s[0]["dwell"]["max"] == 2
    assert s[1]["samples"] == 1 and s[1]["share"] == 0.25
    assert s[2]["samples"] == 0 and np.all(s[2]["mean"] == 0)  # empty phase: finite zeros


def test_nearest_centroid_matches_brute_force():
    rng = np.random.default_rng(0)
    codes, cents = rng.random((300, 6)).astype(np.float32), rng.random((4, 6)).astype(np.float32)
    lab, dist = ph.nearest_centroid(codes, cents)
    brute = np.linalg.norm(codes[:, None, :] - cents[None], axis=2)
    assert np.array_equal(lab, brute.argmin(1))
    assert np.allclose(dist, brute.min(1), atol=1e-5)


def test_novelty_thresholds_are_per_phase_quantiles():
    labels = np.array([0] * 100 + [1] * 100)
    dist = np.r_[np.linspace(0, 1, 100), np.linspace(0, 10, 100)]
    thr = ph.novelty_thresholds(labels, dist, k=3, quantile=0.9)
    assert np.isclose(thr[0], np.quantile(dist[:100], 0.9))
    assert np.isclose(thr[1], np.quantile(dist[100:], 0.9))
    assert np.isclose(thr[2], np.quantile(dist, 0.9))  # unseen phase: overall quantile


def test_elbow_finds_the_knee():
    ks = list(range(1, 9))
    wcss = [100, 40, 12, 10, 9, 8.5, 8, 7.8]
    assert ph.elbow(ks, wcss) == 3


def test_select_k_on_separated_blobs():
    rng = np.random.default_rng(1)
    centres = np.array([[0.1] * 4, [0.9] * 4, [0.1, 0.9, 0.1, 0.9]])
    codes = np.concatenate([c + 0.02 * rng.standard_normal((400, 4)) for c in centres])
    sel, cents = ph.select_k(codes.astype(np.float32), range(2, 7), seed=0)
    assert sel.silhouette_k == 3 and sel.chosen_k == 3
    assert len(sel.wcss) == len(sel.silhouette) == 5
    assert sel.wcss == sorted(sel.wcss, reverse=True)


def test_numpy_silhouette_matches_scikit_learn():
    from sklearn.metrics import silhouette_score

    rng = np.random.default_rng(3)
    X = rng.random((600, 5))
    labels = rng.integers(0, 4, 600)
    labels[:1] = 9  # a singleton cluster scores 0, as in scikit-learn
    assert np.isclose(ph.silhouette(X, labels), silhouette_score(X, labels))


def test_numpy_kmeans_is_as_good_as_scikit_learn_and_seeded():
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(4)
    X = np.concatenate([c + 0.3 * rng.standard_normal((300, 3)) for c in rng.random((5, 3)) * 4])
    C, inertia = ph.kmeans(X, 5, seed=0)
    ref = KMeans(5, n_init=4, random_state=0).fit(X).inertia_ / len(X)
    assert inertia <= ref * 1.01
    C2, _ = ph.kmeans(X, 5, seed=0)
    assert np.array_equal(C, C2)
