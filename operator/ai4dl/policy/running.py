"""The running statistics of one container's samples so far: all that serving a policy's next
window needs from the past beyond the last window (see :mod:`ai4dl.policy.online`).

:class:`OwnHistory` is their one owner: the operator keeps one per container (in memory and in
the pod's state annotation), the head-room table's and peak-risk's serving read it, and
:func:`window_levels` derives the table's window estimators from it. The estimators' constants
live here because the running form defines them; the batch forms
(:func:`ai4dl.policy.headroom_levels.candidate_levels`) import them. Imports nothing from the
package, so every policy may import it.
"""

from __future__ import annotations

import functools

import numpy as np

#: Weight of the newest window maximum in ``ewma-max``: half-life of one window.
EWMA_WEIGHT = 0.5
#: k of the mean + kσ estimators (the same k as adaptive-stat's default).
K_STD = 2.0


#: The arrays of an :class:`OwnHistory`, in the order they are packed in its one buffer, and
#: their shapes ("k": its phases, "R": its resources).
PACKED = (("count", ("k",)), ("s1", ("k", "R")), ("s2", ("k", "R")), ("t1", ("R",)),
          ("t2", ("R",)), ("peak", ("R",)), ("window_max", ("R",)), ("previous_max", ("R",)),
          ("ewma_max", ("R",)), ("since_high", ("R",)), ("low_since_high", ("R",)))


@functools.lru_cache(maxsize=None)
def packed_layout(k: int, R: int) -> dict[str, tuple[int, int, tuple[int, ...]]]:
    """Where each array of an OwnHistory of ``k`` phases and ``R`` resources lies in its
    buffer: name -> (start, end, shape)."""
    out, at = {}, 0
    for name, dims in PACKED:
        shape = tuple(k if d == "k" else R for d in dims)
        size = int(np.prod(shape))
        out[name] = (at, at + size, shape)
        at += size
    return out


def packed_size(k: int, R: int) -> int:
    """The buffer's length: where the last array of :func:`packed_layout` ends."""
    return next(reversed(packed_layout(k, R).values()))[1]


def _packed(name: str, doc: str) -> property:
    """An array of the OwnHistory read as a view of its buffer (writing into the view writes
    the statistics) and set by copying the values in."""
    def get(self) -> np.ndarray:
        lo, hi, shape = packed_layout(self.n_phases, self.n_resources)[name]
        view = self._v[lo:hi]
        return view.reshape(shape) if len(shape) > 1 else view

    def put(self, value) -> None:
        lo, hi, _ = packed_layout(self.n_phases, self.n_resources)[name]
        self._v[lo:hi] = np.asarray(value, np.float64).reshape(-1)
    return property(get, put, doc=doc)


class OwnHistory:
    """Running statistics of one execution's samples so far (see the module doc).

    Its arrays live in one float64 buffer (``since_high`` too: small whole numbers, exact),
    each read as a view of it. The operator keeps one per container, two at a window's peak
    (the old and the new): as 11 arrays of a few values (an array object and its data each)
    they took several times the memory of their numbers (issue 44 item 3)."""

    __slots__ = ("n_phases", "n_resources", "n", "run_phase", "run_length", "windows", "_v")

    count = _packed("count", "(k,) samples per phase")
    s1 = _packed("s1", "(k, R) sum of the samples per phase")
    s2 = _packed("s2", "(k, R) sum of their squares per phase")
    t1 = _packed("t1", "(R,) sum of all samples")
    t2 = _packed("t2", "(R,) sum of their squares")
    peak = _packed("peak", "(R,) running maximum")
    window_max = _packed("window_max", "(R,) max of the last window (NaN: none)")
    previous_max = _packed("previous_max", "(R,) max of the window before it")
    ewma_max = _packed("ewma_max", "(R,) EWMA of the window maxima")
    # peak-risk's state; -1 / NaN: unknown (a record written before they were kept, see
    # from_json: served cautiously until known again)
    since_high = _packed("since_high", "(R,) windows since the last new high")
    low_since_high = _packed("low_since_high", "(R,) lowest window max since then")

    def __init__(self, n_phases: int, n_resources: int, count=None, s1=None, s2=None,
                 n: float = 0.0, t1=None, t2=None, peak=None, run_phase: int = -1,
                 run_length: int = 0, window_max=None, previous_max=None, ewma_max=None,
                 windows: int = 0, since_high=None, low_since_high=None):
        k, R = self.n_phases, self.n_resources = int(n_phases), int(n_resources)
        self.n, self.run_phase, self.run_length = n, run_phase, run_length
        self.windows = int(windows)      # windows added (-1: unknown)
        self._v = np.zeros(packed_size(k, R))
        given = {"count": count, "s1": s1, "s2": s2, "t1": t1, "t2": t2, "peak": peak,
                 "window_max": window_max, "previous_max": previous_max,
                 "ewma_max": ewma_max, "since_high": since_high,
                 "low_since_high": low_since_high}
        unset = {"peak": -np.inf, "window_max": np.nan, "previous_max": np.nan,
                 "ewma_max": np.nan, "low_since_high": np.nan}
        for name, value in given.items():
            if value is not None:
                setattr(self, name, value)
            elif name in unset:
                setattr(self, name, unset[name])

    def __repr__(self) -> str:
        return (f"OwnHistory(n_phases={self.n_phases}, n_resources={self.n_resources}, "
                f"n={self.n}, peak={self.peak.tolist()}, windows={self.windows})")

    @classmethod
    def of(cls, usage: np.ndarray, phases: np.ndarray | None, n_phases: int,
           window: int | None = None) -> "OwnHistory":
        out = cls(max(1, n_phases), np.asarray(usage).shape[1])
        out.add(usage, phases, window)
        return out

    def _windows(self) -> dict:
        return {"window_max": self.window_max.copy(), "previous_max": self.previous_max.copy(),
                "ewma_max": self.ewma_max.copy(), "windows": self.windows,
                "since_high": self.since_high.copy(),
                "low_since_high": self.low_since_high.copy()}

    def copy(self) -> "OwnHistory":
        out = OwnHistory.__new__(OwnHistory)
        for name in self.__slots__:
            setattr(out, name, getattr(self, name))
        out._v = self._v.copy()
        return out

    def rebased(self, n_phases: int) -> "OwnHistory":
        """The statistics that do not depend on a phase model (all samples, the peak, the
        window maxima), for a model with ``n_phases`` phases: per-phase sums of another model's
        phases mean nothing under this one."""
        return OwnHistory(n_phases, self.n_resources, n=self.n, t1=self.t1.copy(),
                          t2=self.t2.copy(), peak=self.peak.copy(), **self._windows())

    def add(self, usage: np.ndarray, phases: np.ndarray | None,
            window: int | None = None) -> "OwnHistory":
        """Add samples (n, R) in time order, with their phases (n,) or None (phase-blind).
        ``window``: samples per window, to cut them into windows for the window maxima (the
        last one may be partial); None: they are one window (the operator adds one per call)."""
        u = np.asarray(usage, np.float64)
        if not len(u):
            return self
        step = len(u) if window is None else int(window)
        peak = self.peak.copy()
        for lo in range(0, len(u), step):
            mx = u[lo: lo + step].max(0)
            # peak-risk's state (the running form of ai4dl.policy.peak_states.RunningPeak; an unknown
            # since_high (-1) stays unknown until the next new high)
            new = mx > peak
            known = self.since_high >= 0
            self.low_since_high = np.where(new, mx, np.where(
                known, np.fmin(self.low_since_high, mx), np.nan))
            self.since_high = np.where(new, 0, np.where(known, self.since_high + 1, -1))
            peak = np.maximum(peak, mx)
            if self.windows >= 0:
                self.windows += 1
            self.previous_max = self.window_max
            self.window_max = mx
            self.ewma_max = np.where(np.isfinite(self.ewma_max), EWMA_WEIGHT * mx
                                     + (1.0 - EWMA_WEIGHT) * self.ewma_max, mx)
        self.n += len(u)
        self.t1 += u.sum(0)
        self.t2 += (u * u).sum(0)
        self.peak = np.maximum(self.peak, u.max(0))
        if phases is None:
            return self
        p = np.asarray(phases, np.int64)
        if p.min() < 0 or p.max() >= self.n_phases:
            raise ValueError(f"phase {int(p.max())} outside the model's {self.n_phases} phases")
        self.count += np.bincount(p, minlength=self.n_phases)
        for r in range(self.n_resources):
            self.s1[:, r] += np.bincount(p, weights=u[:, r], minlength=self.n_phases)
            self.s2[:, r] += np.bincount(p, weights=u[:, r] ** 2, minlength=self.n_phases)
        # the current run: the last change inside these samples, or the run goes on
        changes = np.flatnonzero(p[1:] != p[:-1])
        if len(changes):
            self.run_phase, self.run_length = int(p[-1]), int(len(p) - 1 - changes[-1])
        elif int(p[0]) == self.run_phase:
            self.run_length += len(p)
        else:
            self.run_phase, self.run_length = int(p[0]), len(p)
        return self

    def overall_level(self, k: float) -> np.ndarray:
        mu = self.t1 / self.n
        return mu + k * np.sqrt(np.maximum(self.t2 / self.n - mu * mu, 0.0))

    def phase_levels(self, k: float, min_samples: int) -> np.ndarray:
        """(phases, R): mean + kσ of the samples in each phase; the overall level for a phase
        with fewer than ``min_samples`` (never another job's level)."""
        c = np.maximum(self.count, 1.0)[:, None]
        mu = self.s1 / c
        local = mu + k * np.sqrt(np.maximum(self.s2 / c - mu * mu, 0.0))
        return np.where((self.count >= min_samples)[:, None], local,
                        self.overall_level(k)[None, :])

    def own_phase_level(self, phase: int | None) -> np.ndarray:
        """The head-room table's ``phase-level``: mean + 2σ of the samples in ``phase`` (all
        samples when None)."""
        if phase is None:
            return self.overall_level(K_STD)
        c = self.count[phase]
        mu = self.s1[phase] / c
        return mu + K_STD * np.sqrt(np.maximum(self.s2[phase] / c - mu * mu, 0.0))

    # -------------------------------------------------------------- the pod annotation
    def to_json(self) -> dict:
        """Compact (9 significant digits; float32-exact is not needed for sums)."""
        def r(a):
            return [float(f"{v:.9g}") for v in np.asarray(a, np.float64).ravel()]
        return {"k": self.n_phases, "r": self.n_resources, "c": r(self.count), "s1": r(self.s1),
                "s2": r(self.s2), "n": self.n, "t1": r(self.t1), "t2": r(self.t2),
                "max": r(np.where(np.isfinite(self.peak), self.peak, 0.0)),
                "run": [self.run_phase, self.run_length],
                **{key: r(v) for key, v in (("wm", self.window_max), ("wp", self.previous_max),
                                            ("ew", self.ewma_max)) if np.all(np.isfinite(v))},
                # peak-risk's state, only where known (an absent key loads as unknown)
                **({"nw": self.windows} if self.windows >= 0 else {}),
                **({"hs": [int(v) for v in self.since_high],
                    "hl": r(self.low_since_high)}
                   if (self.since_high >= 0).all() and np.isfinite(self.low_since_high).all()
                   else {})}

    @classmethod
    def from_json(cls, d: dict) -> "OwnHistory":
        """ValueError when it is not one (an edited annotation: the operator starts afresh)."""
        try:
            k, R = int(d["k"]), int(d["r"])
            out = cls(k, R, np.asarray(d["c"], float).reshape(k),
                      np.asarray(d["s1"], float).reshape(k, R),
                      np.asarray(d["s2"], float).reshape(k, R), float(d["n"]),
                      np.asarray(d["t1"], float).reshape(R), np.asarray(d["t2"], float).reshape(R),
                      np.asarray(d["max"], float).reshape(R), int(d["run"][0]), int(d["run"][1]),
                      *(np.asarray(d[key], float).reshape(R) if key in d else None
                        for key in ("wm", "wp", "ew")),
                      # written before peak-risk's state was kept: unknown (-1, NaN), unless
                      # nothing was seen yet (then there is nothing to know)
                      windows=int(d["nw"]) if "nw" in d else (0 if float(d["n"]) == 0 else -1),
                      since_high=(np.asarray(d["hs"], np.int64).reshape(R) if "hs" in d else
                                  np.full(R, 0 if float(d["n"]) == 0 else -1, np.int64)),
                      low_since_high=(np.asarray(d["hl"], float).reshape(R) if "hl" in d
                                      else None))
            if ("hs" in d) != ("hl" in d) or out.windows < -1 or \
                    (out.since_high < -1).any() or \
                    ("hl" in d and not np.all(np.isfinite(out.low_since_high))):
                raise ValueError("peak-risk state incomplete or out of range")
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise ValueError(f"not an own-history record: {err}") from None
        arrays = (out.count, out.s1, out.s2, out.t1, out.t2, out.peak,
                  *(v for v in (out.window_max, out.previous_max, out.ewma_max)
                    if not np.all(np.isnan(v))))
        if not all(np.all(np.isfinite(a)) for a in arrays) or out.n < 0 or \
                (out.count < 0).any() or abs(out.count.sum() - out.n) > 0.5 and out.count.sum():
            raise ValueError("not an own-history record: inconsistent numbers")
        return out


def added_windows(owns: list[OwnHistory], usage: np.ndarray,
                  phases: np.ndarray | None) -> list[OwnHistory]:
    """Each container's statistics with one more window: new objects (``owns`` are left as
    they were), the numbers of ``own.copy().add(usage[i], phases[i])`` for each, computed for
    all containers at once (issue 44: per container, ``add`` on arrays of 2 values cost ~120
    µs, 1.2 s of a 10,000-pod window). ``owns`` share their phases' count and resources;
    ``usage`` is (N, W, R), ``phases`` (N, W) or None (phase-blind)."""
    if not owns:
        return []
    u = np.asarray(usage, np.float64)
    N, W, R = u.shape
    k = owns[0].n_phases
    if any(o.n_phases != k or o.n_resources != R for o in owns):
        raise ValueError("added_windows: the statistics differ in phases or resources")

    V = np.stack([o._v for o in owns])          # (N, L): every container's buffer
    layout = packed_layout(k, R)

    def column(name: str) -> np.ndarray:
        lo, hi, shape = layout[name]
        return V[:, lo:hi].reshape((N, *shape))

    peak, since = column("peak"), column("since_high")
    low, ewma = column("low_since_high"), column("ewma_max")
    windows = np.array([o.windows for o in owns], np.int64)
    mx = u.max(1)
    new, known = mx > peak, since >= 0
    low = np.where(new, mx, np.where(known, np.fmin(low, mx), np.nan))
    since = np.where(new, 0, np.where(known, since + 1, -1))
    ewma = np.where(np.isfinite(ewma), EWMA_WEIGHT * mx + (1.0 - EWMA_WEIGHT) * ewma, mx)
    windows = np.where(windows >= 0, windows + 1, windows)
    peak = np.maximum(peak, mx)
    t1 = column("t1") + u.sum(1)
    t2 = column("t2") + (u * u).sum(1)
    count, s1, s2 = column("count"), column("s1"), column("s2")
    run = np.array([(o.run_phase, o.run_length) for o in owns], np.int64).reshape(N, 2)
    if phases is not None:
        count, s1, s2, run = _phase_sums(np.asarray(phases, np.int64), u, k, count, s1, s2, run)
    out_v = np.empty_like(V)
    for name, value in (("count", count), ("s1", s1), ("s2", s2), ("t1", t1), ("t2", t2),
                        ("peak", peak), ("window_max", mx), ("previous_max",
                                                             column("window_max")),
                        ("ewma_max", ewma), ("since_high", since), ("low_since_high", low)):
        lo, hi, _ = layout[name]
        out_v[:, lo:hi] = value.reshape(N, hi - lo)
    out = []
    for i, o in enumerate(owns):
        h = OwnHistory.__new__(OwnHistory)     # the buffer is built: no __init__
        h.n_phases, h.n_resources, h.n = k, R, o.n + W
        h.run_phase, h.run_length = int(run[i, 0]), int(run[i, 1])
        h.windows = int(windows[i])
        # its own buffer, not a row of the batch's: a row would keep the whole batch alive
        # for as long as a container whose statistics stop changing is kept
        h._v = out_v[i].copy()
        out.append(h)
    return out


def _phase_sums(p: np.ndarray, u: np.ndarray, k: int, count: np.ndarray, s1: np.ndarray,
                s2: np.ndarray, run: np.ndarray) -> tuple:
    """:func:`added_windows`' per-phase sums and current runs, with the window's phases."""
    N, W, R = u.shape
    if p.size and (p.min() < 0 or p.max() >= k):
        raise ValueError(f"phase {int(p.max())} outside the model's {k} phases")
    cell = (np.arange(N)[:, None] * k + p).ravel()
    count = count + np.bincount(cell, minlength=N * k).reshape(N, k)
    s1, s2 = s1.copy(), s2.copy()
    for r in range(R):
        x = u[:, :, r].ravel()
        s1[:, :, r] += np.bincount(cell, weights=x, minlength=N * k).reshape(N, k)
        s2[:, :, r] += np.bincount(cell, weights=x ** 2, minlength=N * k).reshape(N, k)
    # the current run: the last change inside the window, or the run goes on
    run = run.copy()
    change = p[:, 1:] != p[:, :-1]
    changed = change.any(1)
    last = W - 2 - np.argmax(change[:, ::-1], axis=1)
    goes_on = ~changed & (p[:, 0] == run[:, 0])
    run[:, 1] = np.where(changed, W - 1 - last, np.where(goes_on, run[:, 1] + W, W))
    run[:, 0] = np.where(changed | ~goes_on, p[:, -1], run[:, 0])
    return count, s1, s2, run


def window_levels(last_max: np.ndarray, previous_max: np.ndarray, ewma_max: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The head-room table's ``max-2w`` and ``ewma-max`` once the window whose max is
    ``last_max`` has been added to the running statistics (any shape, elementwise). A record
    without window maxima (a pod annotation written before they were kept) starts them from
    that window."""
    prev = np.where(np.isfinite(previous_max), previous_max, last_max)
    ewma = np.where(np.isfinite(ewma_max), ewma_max, last_max)
    return np.maximum(last_max, prev), ewma
