"""Idle PhaseModels list their pods less often (issue 43 item 10).

Each window a PhaseModel lists its opted-in pods (one LIST, filtered by the API server: the
operator neither watches nor caches pods). A PhaseModel with no pods — created ahead of its jobs,
or between them — paid that LIST every window for nothing: 1,000 of them were 1,000 LISTs a
minute. Once a PhaseModel has found no pod ``IDLE_AFTER`` windows in a row, over at least
``IDLE_AFTER_SECONDS`` (a PhaseModel created just before its job's pods is not idle), it lists
its pods every ``IDLE_EVERY``-th window only, and at its next window whenever admission has seen
a pod created for it (the webhook sees every opted-in pod's creation, so a new job is served as
soon as before). A pod admission did not see (the webhook off or unreachable, the opt-in label
added after creation) waits at most ``IDLE_EVERY`` windows for its first in-place resize.

Admission and the windows run on different threads: the set of woken PhaseModels is guarded by a
lock, and only PhaseModels this process serves can be woken (a forged review naming any
PhaseModel adds nothing).
"""

from __future__ import annotations

import threading
import zlib

#: empty windows in a row, and seconds since the first of them, before a PhaseModel is idle
IDLE_AFTER = 3
IDLE_AFTER_SECONDS = 300.0
#: an idle PhaseModel lists its pods every this many windows
IDLE_EVERY = 10

_LOCK = threading.Lock()
_SERVED: set[tuple[str, str]] = set()
_WOKEN: set[tuple[str, str]] = set()


def serve(namespace: str, name: str) -> None:
    """This process serves the PhaseModel (its window loop started)."""
    with _LOCK:
        _SERVED.add((namespace, name))


def forget(namespace: str, name: str) -> None:
    """The PhaseModel's window loop ended."""
    with _LOCK:
        _SERVED.discard((namespace, name))
        _WOKEN.discard((namespace, name))


def wake(namespace: str, name: str) -> None:
    """Admission saw a pod created for the PhaseModel: its next window lists its pods."""
    with _LOCK:
        if (namespace, name) in _SERVED:
            _WOKEN.add((namespace, name))


def take_woken(namespace: str, name: str) -> bool:
    """Whether the PhaseModel was woken since this was last asked (and no longer is)."""
    with _LOCK:
        if (namespace, name) in _WOKEN:
            _WOKEN.discard((namespace, name))
            return True
        return False


def spread(namespace: str, name: str) -> int:
    """The PhaseModel's place in the IDLE_EVERY windows (stable across restarts). PhaseModels
    created together go idle together: without it they all listed in the same window, 1,000
    LISTs every 10th window and nothing between, and that window's work queued past its
    tolerance (WindowsLate flipping, a status write each)."""
    return zlib.crc32(f"{namespace}/{name}".encode()) % IDLE_EVERY


class IdleLists:
    """One PhaseModel's count of empty windows, and whether this window lists its pods."""

    def __init__(self, after_seconds: float = IDLE_AFTER_SECONDS, offset: int = 0):
        # (--idle-after-seconds; 0 with IDLE_AFTER windows still required; inf: never idle)
        self.after_seconds = float(after_seconds)
        self.offset = int(offset) % IDLE_EVERY  # its first idle LIST comes this much sooner
        self.empty = 0                      # windows in a row whose LIST found no pod
        self.empty_since: float | None = None   # when the first of them was listed
        self.unlisted = 0                   # windows since the last LIST
        self.offset_applied = False        # the offset applied in this stretch of idleness

    def idle(self, now: float) -> bool:
        return (self.empty >= IDLE_AFTER and self.empty_since is not None
                and now - self.empty_since >= self.after_seconds)

    def should_list(self, now: float, woken: bool) -> bool:
        """Whether the window at ``now`` lists the pods; a window that does not is counted."""
        if woken or not self.idle(now):
            return True
        if not self.offset_applied:
            self.offset_applied, self.unlisted = True, self.unlisted + self.offset
        if self.unlisted + 1 >= IDLE_EVERY:
            return True
        self.unlisted += 1
        return False

    def listed(self, now: float, pods: int) -> None:
        """A LIST at ``now`` found ``pods`` pods."""
        self.unlisted = 0
        if pods:
            self.empty, self.empty_since, self.offset_applied = 0, None, False
        else:
            self.empty += 1
            self.empty_since = now if self.empty_since is None else self.empty_since
