"""Fair shares of the operator between namespaces (issue 26, item 4).

Every PhaseModel has its own kopf daemon, but their blocking window work (Prometheus query,
planning, pod and status writes) runs here: in a bounded pool of worker threads, taken in turn
by namespace (round-robin between namespaces, FIFO within one). So a namespace that creates 300
PhaseModels gets its share of the workers, not all of them, and another namespace's window
waits for at most one turn per other namespace with windows waiting. One namespace may hold at
most ``workers - 1`` workers at once (when there are two or more), so a window from any other
namespace finds a free worker as soon as it is due, unless other namespaces hold it.

A PhaseModel whose window is shorter than the operator's minimum (``--min-window-seconds``) is
served at the minimum: its windows keep their length (its model and head-room tables are fitted
for that many samples), but only the window that ends on each multiple of the period is
processed (:func:`period_seconds`), and its ``WindowThrottled`` condition says so.

:class:`FairQueue` is pure (no clock, no threads) and deterministic; :class:`WindowScheduler`
drives it from the event loop (no locks: only the loop touches the queue).
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Hashable

THROTTLED = "WindowThrottled"
LATE = "WindowsLate"


def period_seconds(window_seconds: int, min_window_seconds: float) -> int:
    """How often a PhaseModel with windows of ``window_seconds`` is served: its window, or the
    smallest multiple of it not below the minimum (so a period boundary is a window boundary)."""
    window = max(1, int(window_seconds))
    if min_window_seconds <= window:
        return window
    return window * math.ceil(min_window_seconds / window)


def throttled_condition(window_seconds: int, period: int, minimum: float) -> tuple[str, ...]:
    """(type, status, reason, message) of the WindowThrottled condition."""
    if period <= window_seconds:
        return (THROTTLED, "False", "AtLeastMinimum",
                f"every {window_seconds} s window is processed (operator minimum {minimum:g} s)")
    return (THROTTLED, "True", "BelowMinimumWindow",
            f"windowSeconds {window_seconds} is below the operator's minimum window of "
            f"{minimum:g} s (--min-window-seconds): served every {period} s (the {window_seconds}"
            f" s window ending on each multiple of {period} s), the windows between are not "
            f"processed")


def late_condition(lateness: float, tolerance: float, cause: str,
                   window: str | None = None) -> tuple[str, ...]:
    """(type, status, reason, message) of the WindowsLate condition for a window (``window``:
    its start, as written in the status) whose work started ``lateness`` seconds after it was
    due."""
    if lateness <= tolerance:
        # no figure in it: a message that changed every window was a status write every
        # window for every PhaseModel (the window's lateness is a metric)
        return (LATE, "False", "OnTime",
                f"the last window's work started within its tolerance of {tolerance:g} s "
                f"after it was due")
    # The figures are those of one window, named: while windows stay late, the status is not
    # rewritten for new figures alone (VOLATILE_MESSAGES), so the message must not claim to be
    # the last window's. Every window's lateness is the metric.
    of = f"the window of {window}" if window else "a window"
    return (LATE, "True", "WaitedForWorker",
            f"{of} started {lateness:.1f} s after it was due (tolerance {tolerance:g} s): "
            f"{cause}; every window's lateness: ai4dl_window_lateness_seconds")


#: Conditions whose message carries one window's figures: a status whose only change is such
#: a message is not written (1,000 PhaseModels queued behind 4 workers were 1,000 status
#: PATCHes a window, issue 43 item 10). A change of their status or reason is written.
VOLATILE_MESSAGES = frozenset({LATE})


class FairQueue:
    """Round-robin between tenants (namespaces), FIFO within a tenant, with a bound on each
    tenant's items in flight. Pure: the caller says when an item it popped is done."""

    def __init__(self, per_tenant_limit: int | None = None):
        self.limit = per_tenant_limit
        self._queues: OrderedDict[Hashable, deque] = OrderedDict()   # the ring, in turn order
        self._in_flight: dict[Hashable, int] = {}
        # index in the ring of the tenant whose turn it is (len(ring): the next one to arrive,
        # else the first)
        self._next = 0

    def push(self, tenant: Hashable, item: Any) -> None:
        if tenant not in self._queues:
            self._queues[tenant] = deque()
        self._queues[tenant].append(item)

    def pop(self) -> tuple[Hashable, Any] | None:
        """The next item: the first tenant from the one whose turn it is that has an item and
        is under its limit; the turn then passes to the tenant after it. None when none can."""
        tenants = list(self._queues)
        n = len(tenants)
        for k in range(n):
            i = (self._next + k) % n if n else 0
            tenant = tenants[i]
            q = self._queues[tenant]
            if not q or (self.limit is not None and self._in_flight.get(tenant, 0) >= self.limit):
                continue
            item = q.popleft()
            self._in_flight[tenant] = self._in_flight.get(tenant, 0) + 1
            # not wrapped: a tenant that arrives now is appended at index n, whose turn
            # then comes before the first tenant's again
            self._next = i + 1
            self._drop_idle()
            return tenant, item
        return None

    def done(self, tenant: Hashable) -> None:
        """An item of ``tenant`` that :meth:`pop` returned has finished."""
        left = self._in_flight.get(tenant, 0) - 1
        if left > 0:
            self._in_flight[tenant] = left
        else:
            self._in_flight.pop(tenant, None)
        self._drop_idle()

    def remove(self, tenant: Hashable, item: Any) -> bool:
        """Withdraw a queued item (its PhaseModel stopped); False when it is not queued."""
        q = self._queues.get(tenant)
        if q is None or item not in q:
            return False
        q.remove(item)
        self._drop_idle()
        return True

    def _drop_idle(self) -> None:
        """Forget tenants with nothing queued nor in flight (the ring does not grow with every
        namespace ever seen), keeping the turn where it was: a tenant dropped before the one
        whose turn it is moves that index down by one; the tenant whose turn it was, dropped,
        passes the turn to the one after it."""
        for j, t in reversed(list(enumerate(self._queues))):
            if not self._queues[t] and not self._in_flight.get(t):
                del self._queues[t]
                if j < self._next:
                    self._next -= 1
        if not self._queues:
            self._next = 0

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def depth(self, tenant: Hashable) -> int:
        q = self._queues.get(tenant)
        return len(q) if q is not None else 0

    def in_flight(self, tenant: Hashable | None = None) -> int:
        if tenant is None:
            return sum(self._in_flight.values())
        return self._in_flight.get(tenant, 0)

    def tenants_waiting(self) -> int:
        return sum(1 for q in self._queues.values() if q)


class _Job:
    __slots__ = ("fn", "future", "tenant")

    def __init__(self, tenant, fn, future):
        self.tenant, self.fn, self.future = tenant, fn, future


class WindowScheduler:
    """Runs blocking window work on ``workers`` threads, fairly between namespaces. Used from
    one event loop only (the operator's)."""

    def __init__(self, workers: int, on_change: Callable[["WindowScheduler"], None] | None = None):
        self.workers = max(1, int(workers))
        self.queue = FairQueue(self.workers - 1 if self.workers > 1 else None)
        self._pool = ThreadPoolExecutor(max_workers=self.workers,
                                        thread_name_prefix="ai4dl-window")
        self._on_change = on_change

    async def run(self, tenant: Hashable, fn: Callable[[], Any]) -> Any:
        """Queue ``fn`` for ``tenant``; its result once a worker ran it. Cancelled while
        queued, it is withdrawn; cancelled while running, its thread finishes and the result
        is dropped."""
        loop = asyncio.get_running_loop()
        job = _Job(tenant, fn, loop.create_future())
        self.queue.push(tenant, job)
        self._dispatch()
        try:
            return await job.future
        except asyncio.CancelledError:
            self.queue.remove(tenant, job)
            self._changed()
            raise

    def _dispatch(self) -> None:
        while self.queue.in_flight() < self.workers:
            got = self.queue.pop()
            if got is None:
                break
            tenant, job = got
            if job.future.cancelled():
                self.queue.done(tenant)
                continue
            running = asyncio.get_running_loop().run_in_executor(self._pool, job.fn)
            running.add_done_callback(lambda f, job=job: self._finished(job, f))
        self._changed()

    def _finished(self, job: _Job, running: asyncio.Future) -> None:
        self.queue.done(job.tenant)
        if not job.future.done():
            if running.cancelled():
                job.future.cancel()
            elif running.exception() is not None:
                job.future.set_exception(running.exception())
            else:
                job.future.set_result(running.result())
        self._dispatch()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self)
