"""Admission's index of workload profiles: (namespace, PhaseModel, workload) -> each container's
:class:`~ai4dl.rules.workload_profile.CompactProfile`, read by one paged LIST and kept by a
WATCH, in a thread of its own.

Not a kopf index. kopf holds every handler (admission, the window loop) until each object of
every indexed kind has been handled once after a start, and the way it waits costs time in the
square of the objects: each object's worker, once indexed, waits on one condition that every
later object's arrival wakes. At 10,000 WorkloadProfiles a restarted operator served its first
admission about five minutes after it started, and ran no window until then (docs/reference.md,
bench/bench_profiles.py). Here the windows start at once, and admission waits for the first
LIST at most ``wait`` seconds; a pod admitted before it is read as one of an unknown workload
(the pooled level), and the log says so once.

What is indexed is what the kopf index held: an object whose sealed record verifies for its own
namespace, PhaseModel and workload (ai4dl.controller.profiles.open_record); a forged, copied or
malformed one is not indexed, and its workload is admitted as an unknown one.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable, Mapping

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from ai4dl.controller import metrics as m
from ai4dl.controller.podstate import StateKey
from ai4dl.controller.profiles import open_record
from ai4dl.crd import GROUP, VERSION
from ai4dl.crd_profile import PROFILE_PLURAL
from ai4dl.kube.raw import paged_items

log = logging.getLogger("ai4dl.operator")

#: How long one WATCH request stays open before it is renewed from its last resourceVersion.
WATCH_SECONDS = 300
#: After a failed LIST or WATCH (an API server away): wait this long, then LIST again.
RETRY_SECONDS = 5.0

Key = tuple[str, str, str]          # namespace, PhaseModel, workload


def profile_entry(body: Mapping, key: StateKey) -> tuple[Key, dict] | None:
    """A WorkloadProfile object as the index holds it (what admission's first request reads),
    or None when its record does not verify or holds no container."""
    stored = open_record(body, key)
    if stored.problem is not None or not stored.containers:
        return None
    ns = (body.get("metadata") or {}).get("namespace", "")
    pm = (body.get("spec") or {}).get("phaseModel", "")
    return (ns, pm, stored.workload), {c: p.compact() for c, p in stored.containers.items()}


def _object_ref(body: Mapping) -> tuple[str, str]:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


class ProfileIndex:
    """The verified profiles by (namespace, PhaseModel, workload), per scope (a namespace, or
    None: the cluster) that was listed; ``ready`` once every scope has been listed once."""

    def __init__(self, key: Callable[[], StateKey], scopes: Iterable[str | None] = (None,)):
        self._key = key
        self._scopes = tuple(scopes) or (None,)
        self._lock = threading.Lock()
        self._entries: dict[Key, dict] = {}
        self._keys: dict[tuple[str, str], Key] = {}      # (namespace, object name) -> its key
        self._listed: set[str | None] = set()
        self._tried: set[str | None] = set()
        self.ready = threading.Event()          # every scope listed
        self.settled = threading.Event()        # every scope listed or its LIST failed once
        self._warned = False

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def scopes(self) -> tuple[str | None, ...]:
        return self._scopes

    def replace(self, scope: str | None, bodies: Iterable[Mapping]) -> None:
        """A LIST of ``scope``: its objects replace what the index held of it."""
        key = self._key()
        fresh = []
        for body in bodies:
            entry = profile_entry(body, key)
            if entry is not None:
                fresh.append((_object_ref(body), entry))
        with self._lock:
            for ref in [r for r in self._keys if scope is None or r[0] == scope]:
                self._entries.pop(self._keys.pop(ref), None)
            for ref, (k, profiles) in fresh:
                self._keys[ref] = k
                self._entries[k] = profiles
            self._listed.add(scope)
            if self._listed >= set(self._scopes):
                self.ready.set()
        self.tried(scope)
        m.PROFILES_INDEXED.set(len(self._entries))

    def tried(self, scope: str | None) -> None:
        """``scope``'s LIST came back, or failed: reviews need not wait for it any longer."""
        with self._lock:
            self._tried.add(scope)
            if self._tried >= set(self._scopes):
                self.settled.set()

    def apply(self, kind: str, body: Mapping) -> None:
        """A WATCH event (ADDED, MODIFIED, DELETED) of one object."""
        ref = _object_ref(body)
        entry = None if kind == "DELETED" else profile_entry(body, self._key())
        with self._lock:
            old = self._keys.pop(ref, None)
            if old is not None:
                self._entries.pop(old, None)
            if entry is not None:
                self._keys[ref] = entry[0]
                self._entries[entry[0]] = entry[1]
        m.PROFILES_INDEXED.set(len(self._entries))

    def get(self, key: Key, wait: float = 0.0) -> dict | None:
        """The workload's profiles (container -> CompactProfile), or None: unknown, or not
        listed yet after ``wait`` seconds or a failed LIST (said once in the log)."""
        if not self.ready.is_set():
            self.settled.wait(wait)     # not once a LIST has failed: no review waits then
        if not self.ready.is_set() and not self._warned:
            self._warned = True
            log.warning("workload profiles not read yet: pods admitted now are sized as "
                        "unknown workloads' (the pooled level)")
        return self._entries.get(key)


def _list_call(custom, scope: str | None):
    if scope is None:
        return custom.list_cluster_custom_object, (GROUP, VERSION, PROFILE_PLURAL)
    return custom.list_namespaced_custom_object, (GROUP, VERSION, scope, PROFILE_PLURAL)


def list_once(index: ProfileIndex, custom, scope: str | None) -> str:
    """One paged LIST of ``scope`` into the index; the list's resourceVersion."""
    call, args = _list_call(custom, scope)
    head: dict = {}
    t = time.perf_counter()
    index.replace(scope, paged_items(call, *args, head=head))
    log.info("workload profiles of %s: %d indexed in %.1f s", scope or "the cluster",
             len(index), time.perf_counter() - t)
    return str(head.get("resourceVersion") or "")


def watch_from(index: ProfileIndex, custom, scope: str | None, version: str,
               stop: threading.Event) -> str:
    """One WATCH of ``scope`` from ``version`` into the index, until it ends (WATCH_SECONDS)
    or ``stop``; the last resourceVersion seen. An expired version raises ApiException 410."""
    call, args = _list_call(custom, scope)
    w = watch.Watch()
    for event in w.stream(call, *args, resource_version=version, deserialize=False,
                          timeout_seconds=WATCH_SECONDS, allow_watch_bookmarks=True):
        body = event.get("object") or {}
        version = str((body.get("metadata") or {}).get("resourceVersion") or version)
        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
            index.apply(event["type"], body)
        if stop.is_set():
            w.stop()
            break
    return version


def keep(index: ProfileIndex, custom, scope: str | None, stop: threading.Event) -> None:
    """LIST, then WATCH from the list's version, renewed as it ends; LIST again when the
    version has expired (410) or a request failed (after RETRY_SECONDS)."""
    version = ""
    while not stop.is_set():
        try:
            if not version:
                version = list_once(index, custom, scope)
            version = watch_from(index, custom, scope, version, stop)
        except Exception as err:    # an expired version, an API server away, a broken stream
            if not version:
                index.tried(scope)
            version = ""
            if isinstance(err, ApiException) and err.status == 410:
                continue            # expired: list again at once
            what = (f"{err.status} {err.reason}" if isinstance(err, ApiException)
                    else f"{type(err).__name__}: {str(err)[:200]}")
            log.warning("workload profiles of %s: %s; listed again in %.0f s",
                        scope or "the cluster", what, RETRY_SECONDS)
            stop.wait(RETRY_SECONDS)


def start(index: ProfileIndex, custom, stop: threading.Event) -> list[threading.Thread]:
    """One daemon thread per scope keeping the index (:func:`keep`)."""
    threads = [threading.Thread(target=keep, args=(index, custom, scope, stop), daemon=True,
                                name=f"profiles-{scope or 'cluster'}")
               for scope in index.scopes]
    for t in threads:
        t.start()
    return threads
