"""The operator's one window loop: every served PhaseModel's windows, from a kopf index.

Each PhaseModel this instance serves is an entry of a kopf index (``ai4dl.controller.handlers``:
its spec, status and the few metadata fields a window reads). One asyncio task walks the
entries: at each PhaseModel's window boundary (each period's, when its window is below the
operator's minimum) it hands that PhaseModel's window to the window workers
(``ai4dl.controller.fairness``), one window in flight per PhaseModel.

Why not a kopf daemon per PhaseModel, as before (issue 43 item 10): kopf keeps a daemon's
object whole (its managedFields and kopf's own annotations were two thirds of an idle
PhaseModel's JSON) beside the daemon's own machinery (a stopper with two events, a task, its
invocation context: some 8 KB). At 1,000 PhaseModels with no pod that was a third of the
operator's memory per PhaseModel. Here a PhaseModel costs its index entry and a small
:class:`Served`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from ai4dl.controller.fairness import period_seconds
from ai4dl.controller.runtime_window import window_start
from ai4dl.crd_spec import PhaseModelSpec

log = logging.getLogger("ai4dl.operator")

#: Longest sleep of the loop: how soon a new PhaseModel, a deleted one or a changed window
#: length is seen (a window is due at most this late).
TICK_SECONDS = 1.0
#: A spec without windowSeconds: the CRD's default.
DEFAULT_WINDOW_SECONDS = PhaseModelSpec.model_fields["window_seconds"].default


@dataclass(frozen=True)
class Due:
    """When a PhaseModel's next window is handled: at ``at`` (its boundary on ``grid`` +
    ``settle``); served every ``period`` seconds."""
    at: float
    grid: int
    period: int
    settle: float


def next_due(window: int, minimum: float, settle_seconds: float, done: float | None,
             now: float) -> Due:
    """The next window to handle, ``done`` being the boundary handled last (None: none yet)."""
    period = period_seconds(window, minimum)
    settle = min(settle_seconds, window / 2)
    last = window_start(now - settle, window)
    if done is None and now - last - settle < window / 2:
        # (Re)started shortly after a boundary: handle the window that just ended (on the
        # window's own grid) now, rather than wait up to a period. Pods another run already
        # handled carry its id in their state record and are skipped. Later in a window, the
        # next boundary is nearer: handling the old window now would resize pods twice within
        # seconds (now, and again at the boundary).
        return Due(now, window, period, settle)
    boundary = window_start(now - settle, period)
    if not (done is not None and boundary > done and now - boundary - settle < period / 2):
        boundary += period      # wait for the next one, so its samples are in
    # else the last run overran shortly past a boundary: handle that window now
    return Due(boundary + settle, period, period, settle)


def window_seconds(entry: Mapping) -> int:
    return int((entry.get("spec") or {}).get("windowSeconds") or DEFAULT_WINDOW_SECONDS)


@dataclass
class Served:
    """One PhaseModel in the loop: its runner (the state its windows keep), the boundary it
    handled last, when the next is due, the window in flight."""
    uid: str
    runner: Any
    done: float | None = None
    due: Due | None = None
    task: asyncio.Task | None = None


#: ``run_window(served, entry, due)``: the window's work, awaited; returns the boundary handled.
RunWindow = Callable[[Served, Mapping, Due], Awaitable[float]]


class WindowLoop:
    """Serves the entries of ``entries`` (``{(namespace, name): [entry]}``, kopf's index: each
    entry a dict with ``spec``, ``status`` and ``metadata``) until cancelled.

    ``make_runner(namespace, name)`` makes a PhaseModel's runner when it is first seen (and
    again when it was deleted and created anew: another uid); ``forget(namespace, name)`` is
    called once it is gone (deleted, or no longer matching the index's filters)."""

    def __init__(self, entries: Mapping, make_runner: Callable[[str, str], Any],
                 run_window: RunWindow, forget: Callable[[str, str], None],
                 minimum: float = 0.0, settle_seconds: float = 1.0,
                 clock: Callable[[], float] = time.time):
        self.entries = entries
        self.make_runner, self.run_window, self.forget = make_runner, run_window, forget
        self.minimum, self.settle_seconds, self.clock = minimum, settle_seconds, clock
        self.served: dict[tuple[str, str], Served] = {}
        # (namespace, name, uid) whose runner could not be made: said once, not every pass
        self.refused: set[tuple[str, str, str]] = set()

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.step())
        finally:
            for key in list(self.served):
                self._stop(key)

    def step(self) -> float:
        """One pass: PhaseModels gone stopped, new ones started, due windows started; how long
        to sleep before the next pass."""
        now = self.clock()
        current = {key: _latest(store) for key, store in self.entries.items()}
        for key in [k for k in self.served if k not in current]:
            self._stop(key)
        wake = now + TICK_SECONDS
        for key, entry in current.items():
            if entry is None:
                continue
            served = self._served(key, entry, now)
            if served is None:
                continue
            if served.task is None and served.due.at <= now:
                served.task = asyncio.create_task(self._window(key, served, entry))
            elif served.task is None:
                wake = min(wake, served.due.at)
        return max(0.0, wake - self.clock())

    def _served(self, key: tuple[str, str], entry: Mapping, now: float) -> Served | None:
        """The PhaseModel's Served, made (and its first window scheduled) when new."""
        uid = (entry.get("metadata") or {}).get("uid", "")
        served = self.served.get(key)
        if served is not None and served.uid != uid:
            self._stop(key)         # deleted and created anew: its state starts again
            served = None
        if served is None:
            if (*key, uid) in self.refused:
                return None
            try:
                runner = self.make_runner(*key)
            except Exception:   # one PhaseModel's setup must not stop the loop
                log.exception("PhaseModel %s/%s: cannot be served", *key)
                self.refused.add((*key, uid))
                return None
            served = self.served[key] = Served(uid, runner)
            served.due = next_due(window_seconds(entry), self.minimum, self.settle_seconds,
                                  None, now)
        return served

    async def _window(self, key: tuple[str, str], served: Served, entry: Mapping) -> None:
        try:
            served.done = await self.run_window(served, entry, served.due)
        except asyncio.CancelledError:
            raise
        except Exception:   # one bad window must not end the loop of this PhaseModel
            log.exception("PhaseModel %s/%s: window failed", *key)
            # counted as handled: the next is the next boundary's, not this one again at once
            due = served.due
            served.done = window_start(due.at - due.settle, due.grid)
        finally:
            served.task = None
        # the latest window length (a spec changed meanwhile counts from now)
        latest = _latest(self.entries.get(key, ())) or entry
        served.due = next_due(window_seconds(latest), self.minimum, self.settle_seconds,
                              served.done, self.clock())

    def _stop(self, key: tuple[str, str]) -> None:
        served = self.served.pop(key)
        if served.task is not None:
            # queued: withdrawn; running on a worker: its thread finishes, the result dropped
            served.task.cancel()
        self.forget(*key)


def _latest(store) -> Mapping | None:
    """The entry of a key of kopf's index (one object per namespace/name; while one is
    replaced by another of the same name, the last)."""
    entry = None
    for entry in store:
        pass
    return entry
