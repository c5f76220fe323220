"""The operator's client-side limit on its API writes: one token bucket for every window.

A window's pod writes go out in parallel (``WRITERS`` per window, ``--window-workers`` windows at
once). Unlimited, one large PhaseModel's burst of resizes (with their records and Events) goes
as fast as this process can send it, and the API server's other clients (the scheduler, the kubelets,
other controllers) wait behind it. client-go limits each of its clients the same way
(``--kube-api-qps``, ``--kube-api-burst``): tokens refill at ``qps`` a second up to ``burst``.

A pod's writes (its record, its resize, its Events) take their tokens together, before the first
of them, so the limit never leaves a pod half-written (a record without its resize). And a window
keeps its deadline: tokens that would come only after the PhaseModel's next window is due (its
next boundary + the settle) are not waited for; the pod is left for the next window, which plans
it again from what is there (skip reason ``window-deadline``).
"""

from __future__ import annotations

import threading
import time


class WriteBudget:
    """A token bucket (thread-safe). ``qps`` 0: no limit."""

    def __init__(self, qps: float = 0.0, burst: int = 1, clock=time.monotonic,
                 sleep=time.sleep, wall=time.time):
        if qps < 0 or burst < 1:
            raise ValueError(f"qps {qps} must be >= 0 and burst {burst} >= 1")
        self.qps, self.burst = float(qps), int(burst)
        self._clock, self._sleep, self._wall = clock, sleep, wall
        self._lock = threading.Lock()
        self._tokens = float(self.burst)
        self._last = clock()
        self.waited = 0.0           # seconds writers slept for tokens, in all

    def take(self, n: int, deadline: float | None = None) -> bool:
        """Wait for ``n`` tokens and take them; False (none taken, no wait) when the wait would
        end at or after ``deadline`` (wall-clock seconds, ``time.time()``'s scale). More than
        ``burst`` tokens at once take a full bucket (a pod with many Events is not refused for
        ever)."""
        if deadline is not None and self._wall() >= deadline:
            return False
        if self.qps <= 0:
            return True
        n = min(max(int(n), 0), self.burst)
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            wait = max(0.0, (n - self._tokens) / self.qps)
            if deadline is not None and self._wall() + wait >= deadline:
                return False
            # reserved now (the bucket may go below zero): later callers wait behind this one
            self._tokens -= n
            self.waited += wait
        if wait > 0:
            self._sleep(wait)
        return True
