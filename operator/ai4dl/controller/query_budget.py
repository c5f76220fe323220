"""The query budget: what one PhaseModel's window query may cost Prometheus (issue 43 item 2).

A tenant's query is bounded in shape before it is sent (ai4dl.promql: ranges, subqueries), but
shape is not cost: a confined query over many series, or one Prometheus is slow to evaluate,
still takes a window worker and Prometheus's time that other namespaces' windows need. The
operator measures each window's query (its wall time, retries included) and holds it to a
budget the operator's flag sets (``--query-budget-seconds``, plus ``PER_CONTAINER_SECONDS`` per
container the query asks for), which no PhaseModel can raise.

A window whose query ran past the budget, or that Prometheus gave up on at its own timeout, is a
strike: the PhaseModel's next windows are not queried — 1, then 2, 4, ... up to
``MAX_SKIPPED`` periods and at most an hour, doubling with each strike in a row — and its
status names the query's cost as the cause (``QueryOverBudget``). A window within the budget clears the strikes. A new
set of queries (``spec.features`` changed: the author fixed it) starts clean, so a fix is
tried at the next window rather than after the back-off.

Pure bookkeeping: the runtime measures, this decides.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the longest back-off, in periods (a strike in a row past it does not double it again)
MAX_SKIPPED = 16
#: nor past an hour (a PhaseModel of 10-minute windows rests at most 6): a Prometheus that was
#: slow for everyone for a while must not leave every PhaseModel resting for hours after
MAX_REST_SECONDS = 3600.0
DEFAULT_BUDGET_SECONDS = 5.0
#: what the budget grows by per container the query asks for: a PhaseModel of many pods
#: honestly reads more series (10,000 containers: 5 s + 20 s), its query's shape is bounded
PER_CONTAINER_SECONDS = 0.002
OVER_BUDGET = "QueryOverBudget"


@dataclass
class Strike:
    """The last window that cost too much: when it was, what it cost and why."""
    window_start: float
    seconds: float
    timed_out: bool
    strikes: int
    skip_until: float         # windows starting before this are not queried
    allowed: float = 0.0      # the budget of that window (seconds)


class QueryBudget:
    """One PhaseModel's query budget. ``seconds``: the budget per window (0: none)."""

    def __init__(self, seconds: float = DEFAULT_BUDGET_SECONDS):
        if not seconds >= 0:
            raise ValueError(f"the query budget must be 0 (none) or positive, not {seconds!r}")
        self.seconds = float(seconds)
        self.last: Strike | None = None
        self._queries: object = None

    def resting(self, window_start: float, queries: object) -> Strike | None:
        """The strike that keeps the window starting at ``window_start`` from querying, or None
        when it may query. ``queries``: what the PhaseModel would send (any comparable value):
        new queries start clean."""
        if self._queries is not None and queries != self._queries:
            self.last = None
        self._queries = queries
        if self.last is not None and window_start < self.last.skip_until:
            return self.last
        return None

    def allowed(self, containers: int = 0) -> float:
        """Seconds a window's query for ``containers`` containers may take (0: no bound)."""
        return self.seconds + PER_CONTAINER_SECONDS * containers if self.seconds > 0 else 0.0

    def charge(self, window_start: float, seconds: float, timed_out: bool,
               period_seconds: float, containers: int = 0) -> Strike | None:
        """Record what the window's query for ``containers`` containers cost; returns the new
        strike, or None when it was within the budget (which clears the strikes)."""
        allowed = self.allowed(containers)
        over = timed_out or (allowed > 0 and seconds > allowed)
        if not over:
            self.last = None
            return None
        strikes = (self.last.strikes + 1) if self.last is not None else 1
        skipped = min(MAX_SKIPPED, 2 ** (strikes - 1),
                      max(1, int(MAX_REST_SECONDS // max(period_seconds, 1.0))))
        self.last = Strike(window_start, seconds, timed_out, strikes,
                           window_start + (skipped + 1) * period_seconds, allowed)
        return self.last

    def message(self, strike: Strike, window_start: float, period_seconds: float) -> str:
        """The status message of a window not queried (``window_start``) because of ``strike``."""
        cost = (f"Prometheus gave up on it at its timeout after {strike.seconds:.1f} s"
                if strike.timed_out else
                f"it took {strike.seconds:.1f} s, over its budget of {strike.allowed:.3g} s "
                f"(--query-budget-seconds {self.seconds:g} + {PER_CONTAINER_SECONDS * 1000:g} "
                f"ms per container)")
        left = max(1, round((strike.skip_until - window_start) / period_seconds))
        return (f"the query of window {strike.window_start:.0f}: {cost}; {strike.strikes} such "
                f"window(s) in a row, so {left} window(s) from {window_start:.0f} on are not "
                f"queried and nothing is resized; make spec.features' queries cheaper (new "
                f"queries are tried at the next window)")
