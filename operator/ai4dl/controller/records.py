"""Which of a window's pod writes are sent, and the pod records kept in memory until they are.

A resize is one write, ``pods/resize``, and the API server keeps nothing else from it (no
annotation rides along). What else a window may write to a pod is its record (the sealed
``ai4dl.io/state``, ``ai4dl.io/last-applied``, the phase and recommendation annotations) and
Events. At 10,000 pods those were most of the window's writes (issue 44: 3,178 writes for 500
resizes). So a record is written before its resize, as always, only where the pod needs it to
stay right after an operator restart (:func:`record_needed`):

- the pod has no record of the operator's yet, or one that is not the operator's: the authors'
  requests (the savings' baseline) must be kept before the requests first change (written: a
  first record left out and kept in memory does not count);
- the resize lowers a memory limit, the one change the kubelet refuses: taking a refusal back
  needs ``last-applied`` to tell that the spec is the operator's;
- it takes back a refused resize: the refused level's back-off.

Every other record, and each pod's ``Resized`` Event, is *optional*: a window sends at most
``⌈share × pods⌉`` writes besides its resizes (``--pod-record-share``, default 5 %; at least
:data:`MIN_EXTRA_WRITES`), the needed records and Warning Events first, its status and a
summary Event included. The records it does not send are kept in memory
(:class:`PendingRecords`): the next window plans from them as if they had been written, and
sends them when there is room, the oldest first. A record someone else changed meanwhile (its
annotations on the pod are no longer what they were) is dropped, and the pod read as it is.

A resize sent without its record leaves the pod's record saying an earlier window: an operator
restarted within the window would plan the pod again from its new requests (two steps of
``maxDecrease`` in one window). So before the first such resize the PhaseModel's status says
so (``status.unrecordedWindow``, one write), and an operator that starts within that window
leaves the window alone (:func:`unrecorded_window`). The marker also bounds what a restart can
have missed: a pod whose record is older than the marked window may have been raised since, so
a new process reads it as raised in that window (:func:`assume_raised`: its decreases wait the
cool-down, as after an increase). What a restart loses are the records not yet sent: the
running statistics and phase annotations of the last record written (a few windows old), never
the authors' requests or a refusal.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ai4dl.controller.plan_types import PodPlan
from ai4dl.controller.pods import A_STATE, OWNED_ANNOTATIONS, PodInfo
from ai4dl.quantity import parse_quantity

#: A PhaseModel's window may always send this many writes besides its resizes (a small
#: PhaseModel's records and Events are then all written every window, as before).
MIN_EXTRA_WRITES = 50
#: ... of which these are kept for the PhaseModel itself: the status marker of a window with
#: unrecorded resizes, the window's status and its summary Event.
RESERVED_WRITES = 3
#: The status field that names the window whose resizes went without their records.
MARKER = "unrecordedWindow"


def extra_writes(pods: int, share: float) -> int:
    """The writes a window may send to its pods besides their resizes: ``share`` of its pods
    (at least MIN_EXTRA_WRITES), less what the PhaseModel's own writes take; 0 when ``share``
    is 0 (only what correctness needs)."""
    if share <= 0:
        return 0
    return max(MIN_EXTRA_WRITES, math.ceil(share * pods)) - RESERVED_WRITES


def unrecorded_window(status: dict | None) -> float | None:
    """The window whose resizes an operator sent without their records (the status marker)."""
    value = (status or {}).get(MARKER)
    return float(value) if isinstance(value, (int, float)) else None


def record_needed(p: PodPlan) -> bool:
    """Whether the pod's record must be written before its resize (see the module)."""
    if p.resize is None or not p.annotations:
        return False
    pod = p.pod
    if pod.state_untrusted or "orig" not in pod.state() or pod.first_record_pending \
            or p.refused:
        return True
    by_name = {c.name: c for c in pod.containers}
    for sent in p.resize["spec"]["containers"]:
        old = by_name.get(sent["name"])
        limit = (sent["resources"].get("limits") or {}).get("memory")
        if old is None or (limit is not None and parse_quantity(limit)
                           < old.limits.get("memory", float("inf"))):
            return True
    return False


def assume_raised(pods: list[PodInfo], marker: float | None, overlaid: set[str]) -> None:
    """Pods read from their records alone (``overlaid``: those read with a pending record)
    whose record is older than the last window with unrecorded resizes (``marker``) may have
    had an increase since that a restart lost: each of their requests is read as raised in
    that window, so decreases wait the cool-down (in memory; kept once the record is written)."""
    if marker is None:
        return
    for pod in pods:
        state = pod._state
        if pod.uid in overlaid or not state or float(state.get("window") or 0.0) >= marker:
            continue
        raised = {c.name: dict(state.get("lastIncrease", {}).get(c.name, {}),
                               **{r: marker for r in c.requests}) for c in pod.containers}
        pod._state = {**state, "lastIncrease": raised}


@dataclass
class WriteChoice:
    """What :func:`choose_writes` left out."""

    deferred: list[PodPlan]     # plans whose records wait (their ``deferred`` annotations)
    needed: set[str] = field(default_factory=set)  # pod uids whose record goes before a resize
    unevented: int = 0          # Resized Events left out (counted in the summary Event)
    unrecorded: int = 0         # resizes sent without their records (the status marker first)


def choose_writes(work: list[PodPlan], extra: int, since: dict[str, float]) -> WriteChoice:
    """Trim the window's writes (``work``: resizes first, largest change first) in place to
    its resizes, the records they need, the Warning Events, and then, while ``extra`` lasts,
    the optional writes: the other resized pods' records (in ``work``'s order), the records
    alone (oldest first by ``since``: pod uid → window first left unwritten) and the Resized
    Events. A record left out moves to the plan's ``deferred``."""
    left = extra
    choice = WriteChoice([])
    optional_records: list[PodPlan] = []
    resized_events: list[PodPlan] = []
    for p in work:
        left -= sum(1 for e in p.events if e[1] != "Resized")
        if any(e[1] == "Resized" for e in p.events):
            resized_events.append(p)
        if p.annotations:
            if record_needed(p):
                left -= 1
                choice.needed.add(p.pod.uid)
            else:
                optional_records.append(p)
    alone = sorted((p for p in optional_records if p.resize is None),
                   key=lambda p: since.get(p.pod.uid, math.inf))
    for p in [p for p in optional_records if p.resize is not None] + alone:
        if left > 0:
            left -= 1
            continue
        p.deferred, p.annotations = p.annotations, {}
        choice.deferred.append(p)
        choice.unrecorded += p.resize is not None
    for p in resized_events:
        if left > 0:
            left -= 1
            continue
        p.events = [e for e in p.events if e[1] != "Resized"]
        choice.unevented += 1
    return choice


@dataclass
class _Pending:
    annotations: dict[str, str]         # what the pod's record would say (state unsealed)
    seen: dict[str, str | None]         # its owned annotations on the pod when left out
    since: float                        # the window it was first left out


def _owned(pod: PodInfo) -> dict[str, str | None]:
    return {k: pod.annotations.get(k) for k in OWNED_ANNOTATIONS}


class PendingRecords:
    """The pod records a PhaseModel's windows left unwritten, by pod uid (memory only)."""

    def __init__(self):
        self._by_uid: dict[str, _Pending] = {}
        # the last window this process marked (its unrecorded resizes are all pending here)
        self.marked: float | None = None

    def earlier_marker(self, marker: float | None, window: float) -> float | None:
        """The status marker when an earlier process wrote it (what a restart may have lost),
        else None: the windows this process marked itself left every record it did not
        write in memory (reading its own marker would hold every recorded pod's decreases).
        A marker after ``window`` (this window) is no operator's: ignored."""
        if marker is None or marker == self.marked or marker > window:
            return None
        return marker

    def __len__(self) -> int:
        return len(self._by_uid)

    def overlay(self, pods: list[PodInfo]) -> set[str]:
        """Each listed pod (records verified) read as if its pending record were written; a
        pod whose owned annotations changed since is read as it is (its pending record
        dropped), and so are gone pods' records. The uids of the pods read so."""
        overlaid: set[str] = set()
        present = {p.uid for p in pods}
        self._by_uid = {u: v for u, v in self._by_uid.items() if u in present}
        for pod in pods:
            pending = self._by_uid.get(pod.uid)
            if pending is None:
                continue
            if _owned(pod) != pending.seen:
                del self._by_uid[pod.uid]
                continue
            overlaid.add(pod.uid)
            record = pending.annotations.get(A_STATE)
            pod.annotations.update({k: v for k, v in pending.annotations.items()
                                    if k != A_STATE})
            if record is not None:
                # the authors' requests are kept only once written: read from memory, they
                # would let the pod's first resize go without them (lost to a restart)
                pod.first_record_pending = pod.state_untrusted or "orig" not in pod.state()
                # the operator's own record, as its plan wrote it: not checked again (a
                # pydantic pass over 10,000 records a window cost about a second)
                pod._state, pod.state_problem, pod.state_detail = _loads(record), None, ""
        return overlaid

    def since(self) -> dict[str, float]:
        return {u: v.since for u, v in self._by_uid.items()}

    def carry(self, plans: list[PodPlan]) -> None:
        """Each plan's annotations on top of its pod's pending record: what a write of the
        pod sends (a pod with a pending record and nothing new to say still has it to send)."""
        for p in plans:
            pending = self._by_uid.get(p.pod.uid)
            if pending is not None:
                p.annotations = {**pending.annotations, **p.annotations}

    def defer(self, pod: PodInfo, annotations: dict[str, str], window: float) -> None:
        old = self._by_uid.get(pod.uid)
        if old is None:
            self._by_uid[pod.uid] = _Pending(dict(annotations), _owned(pod), window)
        else:
            old.annotations.update(annotations)

    def written(self, uid: str) -> None:
        self._by_uid.pop(uid, None)


def _loads(text: str) -> dict:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
