"""A window's clock (its id, timestamps), the pod selector, one window's report, the model cache."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from dataclasses import dataclass, field

from ai4dl.controller.plan_types import WindowPlan
from ai4dl.crd import OPT_IN_LABEL
from ai4dl.crd_spec import PhaseModelSpec
from ai4dl.crd_spec import LabelSelector
from ai4dl.method.model import PhaseModel


def now_iso(t: float | None = None) -> str:
    return dt.datetime.fromtimestamp(time.time() if t is None else t, dt.timezone.utc) \
        .strftime("%Y-%m-%dT%H:%M:%SZ")


def window_start(now: float, window_seconds: int) -> float:
    """Windows are aligned to multiples of their length (so a restarted operator computes the
    same window id and does not handle a window twice)."""
    return float(int(now // window_seconds) * window_seconds)


def label_selector(selector: LabelSelector) -> str:
    """The opt-in label and a PhaseModel's selector as one server-side label selector."""
    return selector.server_side(OPT_IN_LABEL)


@dataclass
class WindowReport:
    window_start: float
    pods: int = 0
    resized: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    degraded_reason: str | None = None
    seconds: float = 0.0
    plan: WindowPlan | None = None
    novel: int = 0              # containers whose window was novel
    classified: int = 0         # containers given a phase
    noticed: int = 0            # Warning Events about pods' own setup sent this window
    unevented: int = 0          # Resized Events left out (the write budget: one summary Event)
    unrecorded: int = 0         # resizes sent without their records (ai4dl.controller.records)


class ModelCache:
    """The fitted model of one PhaseModel, rebuilt only when its document changes.

    A window that names the PhaseModel's version (``(uid, generation)``: the API server moves
    the generation on every change to the spec, the model's place) is served from the cache
    without reading the document again; one that does not (tests, benchmarks) is checked by
    the document's hash. Either way nothing here is kept per window: before, every window
    validated and hashed the whole document (about 7 ms and 12 ms for a 180 KiB one), a cost
    that grew with the document (issue 43 item 3)."""

    def __init__(self):
        self._version: tuple | None = None
        self._key = ""
        self._model: PhaseModel | None = None

    @staticmethod
    def key(spec: PhaseModelSpec) -> str:
        return hashlib.sha256(json.dumps(spec.model, sort_keys=True).encode()).hexdigest()

    def get(self, spec: PhaseModelSpec, version: tuple | None = None) -> PhaseModel:
        """The model of ``spec`` (ValueError with one line when its document is malformed)."""
        if version is not None and version == self._version and self._model is not None:
            return self._model
        doc = spec.validated_model()
        key = self.key(spec)
        if key != self._key or self._model is None:
            self._model, self._key = PhaseModel.from_document(doc), key
        self._version = version
        return self._model

    @property
    def model_key(self) -> str:
        """The document hash of the model :meth:`get` returned last."""
        return self._key
