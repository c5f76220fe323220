"""PhaseModel end to end on synthetic DL jobs with known phases; the document round trip."""

import json

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from ai4dl.errors import ModelError, TraceError
from ai4dl.method.model import PhaseModel


def ari(truth, pred):
    return adjusted_rand_score(np.concatenate(truth), np.concatenate(pred))


def test_recovers_known_phases_with_auto_k(fitted_model, synthetic_test):
    traces, truth = synthetic_test
    assert ari(truth, fitted_model.predict(traces)) >= 0.9
    ks = fitted_model.fit_report_.k_selection
    assert ks is not None and len(ks.wcss) == len(ks.silhouette) == len(ks.ks)


def test_recovers_known_phases_with_fixed_k(synthetic_train, synthetic_test):
    traces, _ = synthetic_train
    model = PhaseModel(n_phases=5, random_state=1, epochs=40).fit(traces)
    test, truth = synthetic_test
    assert model.n_phases_ == 5
    assert ari(truth, model.predict(test)) >= 0.9


def test_no_warm_up_phase_and_every_sample_labelled(fitted_model, synthetic_test):
    traces, truth = synthetic_test
    for ex, t, p in zip(traces, truth, fitted_model.predict(traces)):
        assert len(p) == len(ex)
        # The first samples belong to the download phase like the rest of it, not to a
        # padding phase of their own.
        assert np.all(p[:3] == p[5])


def test_same_seed_same_document_and_round_trip(synthetic_train, synthetic_test):
    traces, _ = synthetic_train
    small = traces[:10]
    a = PhaseModel(n_phases=4, random_state=7, epochs=10).fit(small).to_document()
    b = PhaseModel(n_phases=4, random_state=7, epochs=10).fit(small).to_document()
    c = PhaseModel(n_phases=4, random_state=8, epochs=10).fit(small).to_document()
    ja, jb = a.model_dump_json(by_alias=True), b.model_dump_json(by_alias=True)
    assert ja == jb
    assert ja != c.model_dump_json(by_alias=True)
    # round trip through JSON: same weights, same predictions
    loaded = PhaseModel.from_document(json.loads(ja))
    assert loaded.to_document().model_dump_json(by_alias=True) == ja
    original = PhaseModel.from_document(a)
    test, _ = synthetic_test
    for x, y in zip(original.detect(test), loaded.detect(test)):
        assert np.array_equal(x.phase, y.phase) and np.allclose(x.distance, y.distance)


def test_document_is_small_and_versioned(fitted_model):
    doc = fitted_model.to_document()
    text = doc.model_dump_json(by_alias=True, exclude_none=True)
    assert len(text) < 30_000
    data = json.loads(text)
    assert data["schemaVersion"] == "ai4dl.io/phase-model/v2"
    assert set(data) >= {"stepSeconds", "features", "scaler", "crbm", "centroids", "phases",
                         "transitions", "prototypes", "noveltyThreshold", "fit"}


def _doc(fitted_model) -> dict:
    return json.loads(fitted_model.to_document().model_dump_json(by_alias=True))


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["crbm"]["W"].pop(), "crbm.W has shape"),
    (lambda d: d["crbm"]["B"][0].append(0.5), "crbm.B has shape"),
    (lambda d: d["centroids"].pop(), "centroids has shape|noveltyThreshold"),
    (lambda d: d["scaler"]["scale"].__setitem__(0, 0.0), "scale must be > 0"),
    (lambda d: d.__setitem__("schemaVersion", "v0"), "schemaVersion"),
    (lambda d: d.__setitem__("surprise", 1), "surprise"),
    (lambda d: d["transitions"].pop(), "transitions has shape"),
    (lambda d: d["phases"][0]["mean"].pop(), "phases\\[0\\].mean"),
])
def test_malformed_documents_give_one_line_errors(fitted_model, mutate, message):
    d = _doc(fitted_model)
    mutate(d)
    with pytest.raises(ModelError, match=message) as err:
        PhaseModel.from_document(d)
    assert "\n" not in str(err.value)


def _set(path, value):
    """A mutation setting d[path...] = value (value may be a function of the old value)."""
    def mutate(d):
        *head, last = path
        target = d
        for key in head:
            target = target[key]
        target[last] = value(target[last]) if callable(value) else value
    return mutate


@pytest.mark.parametrize("mutate, message", [
    # the forged document: a mean of 1e6 cores and a negative std
    (_set(("phases", 0, "mean", 0), 1e6), r"mean 1e\+06 outside"),
    (_set(("phases", 0, "std", 0), -3.0), "greater than or equal to 0"),
    (_set(("phases", 1, "p90", 1), lambda v: v * 1e3), "p90 .* > p95"),
    (_set(("phases", 1, "std", 0), 1e9), "exceeds half the range"),
    # consistent statistics that no machine could produce
    (lambda d: [p.__setitem__(f, [v * 1e5 for v in p[f]]) for p in d["phases"]
                for f in ("mean", "std", "min", "max", "p50", "p90", "p95", "p99")],
     "beyond any machine"),
    (lambda d: [p["min"].__setitem__(0, -1.0) for p in d["phases"]], "negative usage"),
    (_set(("scaler", "mean", 0), 1e300), "outside the training data's range"),
    (_set(("scaler", "scale", 1), 1e300), "exceeds the training data's range"),
    (_set(("centroids", 0, 0), 7.0), "less than or equal to 1"),
    (_set(("transitions", 0), lambda row: [v * 0.5 for v in row]), "summing to 1"),
    (_set(("noveltyThreshold", 0), -1.0), "greater than or equal to 0"),
    (_set(("phases", 0, "share"), 2.0), "less than or equal to 1"),
    (_set(("phases", 0, "phase"), 1), "phase ids"),
    (_set(("phases", 0, "dwell", "p50"), 1e9), "dwell"),
    (_set(("prototypes", 0, "sequence", 0), 99), "prototypes: phase ids"),
])
def test_documents_with_absurd_numbers_are_refused(fitted_model, mutate, message):
    d = _doc(fitted_model)
    mutate(d)
    with pytest.raises(ModelError, match=message) as err:
        PhaseModel.from_document(d)
    assert "\n" not in str(err.value)


def test_a_fitted_document_passes_its_own_checks(fitted_model, synthetic_train):
    # every real fit must pass: the checks hold for any statistics of real samples
    PhaseModel.from_document(_doc(fitted_model))
    traces, _ = synthetic_train
    for k in (2, 7):
        m = PhaseModel(n_phases=k, epochs=3, random_state=k).fit(traces)
        PhaseModel.from_document(_doc(m))


def test_document_with_nan_weights_is_refused(fitted_model):
    doc = fitted_model.to_document()
    doc.crbm.W[0][0] = float("nan")
    with pytest.raises(ModelError, match="W has non-finite"):
        PhaseModel.from_document(doc)


def test_novelty_flags_unseen_behaviour(fitted_model, synthetic_test):
    traces, _ = synthetic_test
    seen = np.concatenate([d.novel for d in fitted_model.detect(traces)])
    assert seen.mean() < 0.05
    weird = traces[0].values.copy()
    weird[:, 0] *= 6.0  # six times the CPU of anything in training
    assert fitted_model.detect(weird).novel.mean() > 0.5
    assert 0 < fitted_model.fit_report_.novelty_rate < 0.03


def test_stats_describe_phases_in_original_units(fitted_model, synthetic_train):
    traces, _ = synthetic_train
    stats = fitted_model.phase_stats_
    assert sum(s["samples"] for s in stats) == traces.n_samples
    assert abs(sum(s["share"] for s in stats) - 1) < 1e-9
    for s in stats:
        assert np.all(s["min"] <= s["p50"]) and np.all(s["p50"] <= s["p90"] + 1e-6)
        assert np.all(s["p95"] <= s["p99"] + 1e-6) and np.all(s["p99"] <= s["max"] + 1e-6)
    mem = [s["mean"][1] for s in stats]
    assert max(mem) > 2**30  # bytes, not standardised units
    P = fitted_model.transitions_
    assert np.allclose(P.sum(1), 1)
    assert sum(p["share"] for p in fitted_model.prototypes_) <= 1 + 1e-9


def test_inputs_must_have_the_model_features(fitted_model, synthetic_test):
    traces, _ = synthetic_test
    with pytest.raises(TraceError, match="no feature 'gpu_util'"):
        fitted_model.predict(traces.select(["cpu", "memory"]))
    with pytest.raises(ModelError, match="expected an array of shape"):
        fitted_model.predict(np.zeros((5, 2)))
    with pytest.raises(ModelError, match="not fitted"):
        PhaseModel().predict(np.zeros((5, 4)))


def test_context_samples_give_the_same_phases_as_a_full_pass(fitted_model, synthetic_test):
    traces, _ = synthetic_test
    x = traces[0].values
    full = fitted_model.predict(x)
    assert np.array_equal(fitted_model.predict(x, n_context=100), full[100:])
