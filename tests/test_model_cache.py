"""The operator's model cache (ai4dl.controller.runtime_window.ModelCache, issue 43 item 3): a
window that names the PhaseModel's version reads nothing of its document again; a new version
or a document that changed is read, validated and fitted again; a malformed one is refused in
one line. Unit tests of one class (documents from tests/bounds_docs.py)."""

from __future__ import annotations

import pytest
from bounds_docs import doc

from ai4dl.controller import runtime_window
from ai4dl.controller.runtime_window import ModelCache
from ai4dl.crd_spec import PhaseModelSpec


def _spec(model: dict) -> PhaseModelSpec:
    return PhaseModelSpec.model_validate({"stepSeconds": 15, "windowSeconds": 600,
                                          "model": model})


def test_a_known_version_is_served_without_reading_the_document(monkeypatch):
    cache = ModelCache()
    spec = _spec(doc(seed=1))
    first = cache.get(spec, ("uid-1", 3))
    key = cache.model_key
    assert key == ModelCache.key(spec)

    def never(*_):
        raise AssertionError("the document was read again")
    monkeypatch.setattr(PhaseModelSpec, "validated_model", never)
    monkeypatch.setattr(runtime_window.ModelCache, "key", staticmethod(never))
    assert cache.get(spec, ("uid-1", 3)) is first and cache.model_key == key


def test_a_new_version_or_document_is_read_again():
    cache = ModelCache()
    one, two = _spec(doc(seed=1)), _spec(doc(seed=2))
    first = cache.get(one, ("uid-1", 3))
    # a new generation with the same document: checked again, the fitted model kept
    assert cache.get(one, ("uid-1", 4)) is first
    # another document: a new model, a new key
    second = cache.get(two, ("uid-1", 5))
    assert second is not first and cache.model_key == ModelCache.key(two)
    # no version (tests, benchmarks): by the document's hash
    assert cache.get(two) is second and cache.get(one) is not second


def test_a_malformed_document_is_refused_and_not_cached():
    cache = ModelCache()
    bad = doc(seed=1)
    bad["centroids"] = bad["centroids"][:1]
    with pytest.raises(ValueError, match="spec.model"):
        cache.get(_spec(bad), ("uid-1", 1))
    good = _spec(doc(seed=1))
    assert cache.get(good, ("uid-1", 1)) is not None
