"""Freed memory given back to the system after a round of windows (issue 43 item 10).

A burst — 1,000 PhaseModels created at once, whose bodies kopf decodes and patches, or one
boundary's windows queued for the workers — allocates and frees tens of MiB. CPython hands
objects over 512 bytes to the C allocator, and glibc keeps what they freed inside its heap
(fragmented, below live objects) instead of returning it: the operator's RSS, which the kubelet
holds against its memory limit, stayed at the burst's high-water mark. ``malloc_trim(0)`` returns
the free pages of the whole heap. It is called when the window queue has drained (every window of
a boundary done), at most once per ``TRIM_EVERY_SECONDS``: about 14 ms for a heap of 160 MiB.
Every window's round is trimmed down to windows of 5 s: trimmed only every third 10-s window, the
operator's RSS at 10,000 pods was a saw, 273-294 MiB (issue 44 item 3 asks for it flat).

glibc only (the image is Debian): elsewhere there is no ``malloc_trim`` and nothing is done.

:func:`configure`, at start-up, fixes glibc's mmap threshold (issue 44 item 3). By default glibc
raises it to the size of the largest mapped block freed, up to 32 MiB: after one window at
10,000 pods (a 25-MB answer from Prometheus, 2-MB pages of pods), every later block under
that size came from the heap and stayed there, and the operator's RSS rose window after window
(207 to 358 MiB over 8 10-s windows). With the threshold fixed at 1 MiB, such blocks are mapped
on their own and given back when freed: 253-301 MiB over 10 windows, not rising.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time

TRIM_EVERY_SECONDS = 5.0
#: glibc's mallopt parameter (malloc.h) and the value set: blocks of 1 MiB and more are mapped
#: on their own, and unmapped when freed
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1 << 20

_LOCK = threading.Lock()
_last = -float("inf")


def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim     # the process' own C library
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def _mallopt():
    try:
        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None


_MALLOPT = _mallopt()


def configure(environ=os.environ) -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD_BYTES` (see the module doc), unless
    the environment sets one (``MALLOC_MMAP_THRESHOLD_``, glibc's own variable, wins); whether
    it was set now."""
    if _MALLOPT is None or "MALLOC_MMAP_THRESHOLD_" in environ:
        return False
    return bool(_MALLOPT(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def available() -> bool:
    """Whether this process' C library can give memory back (glibc)."""
    return _TRIM is not None


def give_back(now: float | None = None) -> bool:
    """Return the C heap's free pages to the system, unless done in the last
    TRIM_EVERY_SECONDS; whether it was done now."""
    global _last
    now = time.monotonic() if now is None else now
    with _LOCK:
        if _TRIM is None or now - _last < TRIM_EVERY_SECONDS:
            return False
        _last = now
    _TRIM(0)
    return True
