"""``PhaseModel``: scaler + CRBM + k-means + phase statistics, with scikit-learn's estimator API.

Parameters go in the constructor, ``fit`` learns (torch + scikit-learn, imported lazily), and
``transform`` / ``predict`` serve with numpy alone. Randomness is seeded by ``random_state``.
No I/O happens here: :meth:`to_document` / :meth:`from_document` convert to and from the
pydantic document that files and the ``PhaseModel`` custom resource carry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from pydantic import ValidationError

from ai4dl.method import phases as ph
from ai4dl.method.crbm import CRBMParams, encode_many, encode_stacked, reconstruction_error
from ai4dl.method.crbm_train import train_crbm
from ai4dl.method.document import (CRBMWeights, Feature, FitReport, KSelectionReport,
                                   PhaseModelDocument, PhaseStats, Prototype, Scaler, to_list)
from ai4dl.method.document_bounds import SCHEMA_VERSION
from ai4dl.errors import Ai4dlError, ModelError
from ai4dl.method.plausibility import check_before_fit, phases_supported
from ai4dl.method.traces import Execution, TraceSet

Inputs = TraceSet | Sequence[Execution] | Execution | np.ndarray | Sequence[np.ndarray]


@dataclass
class Detection:
    """Per-sample output of :meth:`PhaseModel.detect` for one execution."""
    phase: np.ndarray      # int, phase id per sample
    distance: np.ndarray   # distance of the code to its phase's centroid
    novel: np.ndarray      # bool, distance beyond the phase's novelty threshold


class PhaseModel:
    """Phase discovery for resource-usage traces (the AI4DL method, without its defects)."""

    def __init__(self, *, n_hidden: int = 10, n_history: int = 3, n_phases: int | str = "auto",
                 k_range: tuple[int, int] = (2, 10), k_rule: str = "silhouette",
                 epochs: int = 60, batch_size: int = 512, learning_rate: float = 0.01,
                 momentum: float = 0.9, weight_decay: float = 1e-4, cd_k: int = 1,
                 patience: int = 5, validation_fraction: float = 0.1,
                 max_samples_per_epoch: int | None = 200_000, kmeans_samples: int = 20_000,
                 novelty_quantile: float = 0.99, device: str = "cpu", random_state: int = 0):
        self.n_hidden = n_hidden
        self.n_history = n_history
        self.n_phases = n_phases
        self.k_range = k_range
        self.k_rule = k_rule
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.cd_k = cd_k
        self.patience = patience
        self.validation_fraction = validation_fraction
        self.max_samples_per_epoch = max_samples_per_epoch
        self.kmeans_samples = kmeans_samples
        self.novelty_quantile = novelty_quantile
        self.device = device
        self.random_state = random_state

    # ------------------------------------------------------------------ fitting
    def fit(self, traces: TraceSet | Sequence[Execution],
            on_epoch: Callable[[int, float, float], None] | None = None) -> "PhaseModel":
        """Learn phases from executions (all with the same features, at one step)."""
        traces = traces if isinstance(traces, TraceSet) else TraceSet(list(traces))
        if self.k_rule not in ("silhouette", "elbow"):
            raise Ai4dlError(f"k_rule must be 'silhouette' or 'elbow', not {self.k_rule!r}")
        start = time.perf_counter()
        self.features_ = tuple(traces.features)
        self.units_ = tuple(traces.units)
        self.step_seconds_ = float(traces.step or 0.0)
        if self.step_seconds_ <= 0:
            raise Ai4dlError("traces must be resampled to a fixed step before fitting")
        # implausible data (one-sample executions, memory below a page, cpu beyond any
        # machine) is refused before the minutes of a fit, not stored as a model
        check_before_fit(traces)
        raw = [e.values for e in traces]
        allx = np.concatenate(raw).astype(np.float64)
        if not np.all(np.isfinite(allx)):
            raise Ai4dlError("traces contain NaN or Inf values; load them with a NaN rule")
        # phases the data cannot support are refused before the CRBM's minutes (issue 45)
        k_lo, k_hi = phases_supported(self.n_phases, self.k_range, allx,
                                      traces.source or None)
        self.mean_ = allx.mean(0)
        std = allx.std(0)
        # A constant feature carries no phase information: scale 1 keeps it at 0, finite.
        self.scale_ = np.where(std > 1e-12 * np.maximum(np.abs(self.mean_), 1.0), std, 1.0)
        Z = self._standardise(raw)
        timings = {"prepare": time.perf_counter() - start}

        mark = time.perf_counter()
        self.crbm_, rep = _train(self, Z, on_epoch)
        timings["crbm"] = time.perf_counter() - mark
        mark = time.perf_counter()
        all_codes = np.concatenate(encode_many(self.crbm_, Z))
        timings["encode"] = time.perf_counter() - mark
        mark = time.perf_counter()
        seed = self.random_state
        self.k_selection_ = None
        if self.n_phases == "auto":
            self.k_selection_, cents = ph.select_k(all_codes, range(k_lo, k_hi + 1), seed,
                                                   self.k_rule, self.kmeans_samples)
            centroids = cents[self.k_selection_.chosen_k]
        else:
            centroids = ph.fit_kmeans(all_codes, int(self.n_phases), seed, self.kmeans_samples)
        order = ph.order_centroids(centroids, all_codes, np.concatenate(Z).mean(1))
        self.centroids_ = centroids[order]
        k = len(self.centroids_)

        labels, dist = ph.nearest_centroid(all_codes, self.centroids_)
        timings["kmeans"] = time.perf_counter() - mark
        mark = time.perf_counter()
        bounds = np.cumsum([len(x) for x in raw])[:-1]
        per_exec = np.split(labels, bounds)
        self.novelty_threshold_ = ph.novelty_thresholds(labels, dist, k, self.novelty_quantile)
        self.phase_stats_ = ph.phase_stats(raw, per_exec, k)
        self.transitions_ = ph.transition_matrix(per_exec, k)
        self.prototypes_ = ph.prototypes(per_exec)
        novelty_rate = float(np.mean(dist > self.novelty_threshold_[labels]))
        self.fit_report_ = FitReport(
            seed=seed, n_executions=len(traces), n_samples=int(len(labels)),
            crbm_epochs=rep.epochs,
            crbm_best_epoch=rep.best_epoch,
            reconstruction_error=reconstruction_error(self.crbm_, Z[:2000]),
            validation_error=rep.validation_error,
            silhouette=_silhouette(all_codes, labels, seed) if k > 1 else None,
            novelty_rate=novelty_rate,
            k_selection=KSelectionReport(**vars(self.k_selection_)) if self.k_selection_ else None,
            device=rep.device)
        # Wall time stays out of the document so that one seed gives one document.
        timings["stats"] = time.perf_counter() - mark
        self.fit_timings_ = timings
        self.fit_seconds_ = time.perf_counter() - start
        return self

    # ------------------------------------------------------------------ serving (numpy only)
    @property
    def n_phases_(self) -> int:
        return len(self.centroids_)

    def _standardise(self, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
        mean = self.mean_.astype(np.float32)
        inv = (1.0 / self.scale_).astype(np.float32)
        return [(np.asarray(x, np.float32) - mean) * inv for x in xs]


    def _arrays(self, X: Inputs) -> tuple[list[np.ndarray], bool]:
        """Model-ordered feature matrices, and whether a single execution was given."""
        self._check_fitted()
        if isinstance(X, Execution):
            return [X.select(self.features_).values], True
        if isinstance(X, np.ndarray):
            if X.ndim != 2 or X.shape[1] != len(self.features_):
                raise ModelError(f"expected an array of shape (n, {len(self.features_)}) with "
                                 f"features {', '.join(self.features_)}, got {X.shape}")
            return [X], True
        items = list(X)
        return [e.select(self.features_).values if isinstance(e, Execution) else np.asarray(e)
                for e in items], False

    def transform(self, X: Inputs, n_context: int | Sequence[int] = 0):
        """CRBM codes (hidden-unit probabilities) per sample.

        ``n_context`` leading samples of each execution are used only as history (the operator
        passes the samples before its window), so they get no code.
        """
        codes, keep, single = self._codes(X, n_context)
        return codes if single else np.split(codes, np.cumsum(keep)[:-1])

    def _codes(self, X: Inputs, n_context: int | Sequence[int]):
        xs, single = self._arrays(X)
        ctx = [n_context] * len(xs) if isinstance(n_context, int) else list(n_context)
        if not xs:
            return np.empty((0, self.crbm_.n_hidden), np.float32), np.empty(0, int), single
        codes, keep = encode_stacked(self.crbm_, self._standardise(xs), ctx)
        return codes, keep, single

    def detect(self, X: Inputs, n_context: int | Sequence[int] = 0):
        """Phase, centroid distance and novelty flag per sample (:class:`Detection`).

        All executions are encoded and assigned together (one product for the codes, one for
        the distances): the operator calls this once per window for all of a model's pods.
        """
        codes, keep, single = self._codes(X, n_context)
        lab, dist = ph.nearest_centroid(codes, self.centroids_)
        novel = dist > self.novelty_threshold_[lab]
        if single:
            return Detection(lab, dist, novel)
        cuts = np.cumsum(keep)[:-1]
        return [Detection(*parts) for parts in zip(np.split(lab, cuts), np.split(dist, cuts),
                                                     np.split(novel, cuts))]

    def predict(self, X: Inputs, n_context: int | Sequence[int] = 0):
        """Phase id per sample."""
        det = self.detect(X, n_context)
        return det.phase if isinstance(det, Detection) else [d.phase for d in det]

    def fit_predict(self, traces: TraceSet, **kw):
        return self.fit(traces, **kw).predict(traces)

    def _check_fitted(self) -> None:
        if not hasattr(self, "centroids_"):
            raise ModelError("this PhaseModel is not fitted yet: call fit() or from_document()")

    # ------------------------------------------------------------------ document
    def to_document(self) -> PhaseModelDocument:
        """The fitted model as its document; ModelError (one line) when the fit is beyond what
        a document may hold (ai4dl.method.document's bounds: e.g. --hidden above MAX_HIDDEN)."""
        self._check_fitted()
        try:
            return self._document()
        except ValidationError as err:
            # the parts are built one by one: the part's name stands for the document's path
            part = "" if err.title == "PhaseModelDocument" else f"{err.title} "
            raise ModelError("the fitted model cannot be stored: " + part
                             + validation_message(err).removeprefix("invalid phase model: ")) \
                from None

    def _document(self) -> PhaseModelDocument:
        c = self.crbm_
        return PhaseModelDocument(
            schemaVersion=SCHEMA_VERSION, stepSeconds=self.step_seconds_,
            features=[Feature(name=f, unit=u) for f, u in zip(self.features_, self.units_)],
            scaler=Scaler(mean=to_list(self.mean_), scale=to_list(self.scale_)),
            crbm=CRBMWeights(n_visible=c.n_visible, n_hidden=c.n_hidden, n_history=c.n_history,
                             W=to_list(c.W), B=to_list(c.B), A=to_list(c.A),
                             b_visible=to_list(c.b_visible), b_hidden=to_list(c.b_hidden)),
            centroids=to_list(self.centroids_),
            noveltyThreshold=to_list(self.novelty_threshold_),
            phases=[PhaseStats(**{k: (to_list(v) if isinstance(v, np.ndarray) else v)
                                  for k, v in s.items()}) for s in self.phase_stats_],
            transitions=to_list(self.transitions_),
            prototypes=[Prototype(**p) for p in self.prototypes_],
            fit=self.fit_report_,
            # fitted policies and auto's choice (schema v2), kept as the document's own
            # objects: the core does not import the policies (ai4dl.serving reads them)
            policyTables=list(getattr(self, "policy_tables_", None) or []) or None,
            riskTables=list(getattr(self, "risk_tables_", None) or []) or None,
            policyChoice=getattr(self, "policy_choice_", None),
        )

    @classmethod
    def from_document(cls, doc: PhaseModelDocument | dict) -> "PhaseModel":
        """A fitted model from its document (validated: shapes are checked)."""
        try:
            d = doc if isinstance(doc, PhaseModelDocument) else PhaseModelDocument.model_validate(doc)
        except ValidationError as err:
            raise ModelError(validation_message(err)) from None
        m = cls(n_hidden=d.crbm.n_hidden, n_history=d.crbm.n_history,
                n_phases=len(d.centroids), random_state=d.fit.seed if d.fit else 0)
        m.features_ = tuple(f.name for f in d.features)
        m.units_ = tuple(f.unit for f in d.features)
        m.step_seconds_ = d.step_seconds
        m.mean_ = np.array(d.scaler.mean, np.float64)
        m.scale_ = np.array(d.scaler.scale, np.float64)
        f32 = lambda a: np.array(a, dtype=np.float32)  # noqa: E731
        m.crbm_ = CRBMParams(W=f32(d.crbm.W), B=f32(d.crbm.B), A=f32(d.crbm.A),
                             b_visible=f32(d.crbm.b_visible), b_hidden=f32(d.crbm.b_hidden))
        try:
            m.crbm_.check()
        except ValueError as err:
            raise ModelError(f"crbm: {err}") from None
        m.centroids_ = f32(d.centroids)
        m.novelty_threshold_ = np.array(d.novelty_threshold, np.float64)
        m.phase_stats_ = [{k: (np.array(v) if isinstance(v, list) else v)
                           for k, v in p.model_dump().items()} for p in d.phases]
        m.transitions_ = np.array(d.transitions, np.float64)
        m.prototypes_ = [p.model_dump() for p in d.prototypes]
        m.fit_report_ = d.fit
        m.k_selection_ = d.fit.k_selection if d.fit else None
        m.policy_tables_ = list(d.policy_tables or [])
        m.risk_tables_ = list(d.risk_tables or [])
        m.policy_choice_ = d.policy_choice
        return m


def validation_message(err: ValidationError) -> str:
    """One line naming the first invalid field of a model document."""
    e = err.errors()[0]
    msg = e["msg"].removeprefix("Value error, ")
    loc = ".".join(str(p) for p in e["loc"])
    more = f" (and {len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    return f"invalid phase model: {loc + ': ' if loc else ''}{msg}{more}"


def _train(m: PhaseModel, Z: list[np.ndarray], on_epoch):
    return train_crbm(Z, n_hidden=m.n_hidden, n_history=m.n_history, epochs=m.epochs,
                      batch_size=m.batch_size, learning_rate=m.learning_rate,
                      momentum=m.momentum, weight_decay=m.weight_decay, cd_k=m.cd_k,
                      patience=m.patience, validation_fraction=m.validation_fraction,
                      max_samples_per_epoch=m.max_samples_per_epoch, seed=m.random_state,
                      device=m.device, on_epoch=on_epoch)


def _silhouette(codes: np.ndarray, labels: np.ndarray, seed: int, n: int = 4_000) -> float | None:
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(codes), min(n, len(codes)), replace=False)
    if len(set(labels[idx].tolist())) < 2:
        return None
    return ph.silhouette(codes[idx], labels[idx])
