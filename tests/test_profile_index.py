"""Admission's index of workload profiles (ai4dl.controller.profile_index): what a LIST and a
WATCH's events put in it and take out, per scope, and how a review waits for the first LIST.
With a stand-in client for the LIST/WATCH loop (:func:`keep`). On a real API server:
tests/test_admission_webhook.py::test_a_known_workload_starts_from_its_profile (a profile
written after the start reaches admission through the WATCH; a forged one is not used) and
tests/test_bench_profiles.py (a SIGKILLed operator admits from its profiles again)."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
from kubernetes.client.exceptions import ApiException

from ai4dl.controller import profile_index
from ai4dl.controller.podstate import StateKey
from ai4dl.controller.profile_index import ProfileIndex, keep
from ai4dl.controller.profiles import profile_object
from ai4dl.rules.workload_profile import RunSummary, profile_from_runs

KEY = StateKey(b"k" * 32)
GiB = 2.0 ** 30


def _profile(ns: str, workload: str, memory: float = 3 * GiB, key: StateKey = KEY,
             version: str = "1") -> dict:
    run = RunSummary(1000.0, 600.0, (0.5, memory), (1.0, memory * 1.5), (30.0, 300.0),
                     early=((0.5, memory),), run_id=f"{workload}-{memory}")
    obj = profile_object(ns, "pm", "uid-pm", workload,
                         {"main": profile_from_runs(("cpu", "memory"), [run])}, key, 2000.0, 1.0)
    obj["metadata"].update(namespace=ns, resourceVersion=version)
    return json.loads(json.dumps(obj))


def _name(obj: dict) -> str:
    return obj["metadata"]["name"]


def _memory(index: ProfileIndex, ns: str, workload: str) -> float | None:
    got = index.get((ns, "pm", workload))
    return None if got is None else got["main"].first_request(2000.0, None)[1]


def test_a_list_indexes_what_verifies_and_replaces_only_its_own_scope():
    index = ProfileIndex(lambda: KEY, ("a", "b"))
    forged = _profile("a", "Label/forged", key=StateKey(b"f" * 32))
    renamed = _profile("a", "Label/renamed")
    renamed["metadata"]["name"] = "another-name"        # a copy under another workload's name
    index.replace("a", [_profile("a", "Label/x"), forged, renamed])
    assert not index.ready.is_set(), "b not listed yet"
    index.replace("b", [_profile("b", "Label/x", memory=5 * GiB)])
    assert index.ready.is_set() and len(index) == 2
    assert _memory(index, "a", "Label/x") == pytest.approx(3 * GiB, rel=0.2)
    assert _memory(index, "b", "Label/x") == pytest.approx(5 * GiB, rel=0.2)
    assert index.get(("a", "pm", "Label/forged")) is None
    assert index.get(("a", "pm", "Label/renamed")) is None
    index.replace("a", [])                              # a's objects gone: b's stay
    assert len(index) == 1 and index.get(("a", "pm", "Label/x")) is None
    assert index.get(("b", "pm", "Label/x")) is not None


def test_watch_events_add_replace_and_remove():
    index = ProfileIndex(lambda: KEY)
    index.replace(None, [])
    obj = _profile("a", "Label/x")
    index.apply("ADDED", obj)
    assert _memory(index, "a", "Label/x") == pytest.approx(3 * GiB, rel=0.2)
    index.apply("MODIFIED", _profile("a", "Label/x", memory=6 * GiB, version="2"))
    assert _memory(index, "a", "Label/x") == pytest.approx(6 * GiB, rel=0.2)
    # a record replaced by one that does not verify: the workload is unknown again
    index.apply("MODIFIED", _profile("a", "Label/x", key=StateKey(b"f" * 32), version="3"))
    assert index.get(("a", "pm", "Label/x")) is None
    index.apply("ADDED", obj)
    index.apply("DELETED", obj)
    assert len(index) == 0


def test_a_review_waits_for_the_first_list_at_most_its_wait_and_says_so_once(caplog):
    index = ProfileIndex(lambda: KEY)
    with caplog.at_level(logging.WARNING, logger="ai4dl.operator"):
        t = time.perf_counter()
        assert index.get(("a", "pm", "Label/x"), wait=0.2) is None
        assert time.perf_counter() - t >= 0.19
        index.get(("a", "pm", "Label/x"), wait=0.0)
    assert sum("not read yet" in r.message for r in caplog.records) == 1
    threading.Timer(0.1, index.replace, (None, [_profile("a", "Label/x")])).start()
    assert index.get(("a", "pm", "Label/x"), wait=5.0) is not None   # the LIST came in time


class _Custom:
    """A stand-in CustomObjectsApi: LISTs answer ``pages`` raw; WATCHes play ``watches`` in
    turn (each a list of events, or an exception to raise)."""

    def __init__(self, items: list[dict], watches: list, stop: threading.Event):
        self.items, self.watches, self.stop = items, list(watches), stop
        self.lists = 0
        self.watched_from: list[str] = []

    def list_cluster_custom_object(self, group, version, plural, watch=False, **kw):
        if not watch:
            self.lists += 1
            body = {"metadata": {"resourceVersion": f"list-{self.lists}"},
                    "items": self.items}
            return _Raw(json.dumps(body).encode())
        self.watched_from.append(kw.get("resource_version"))
        if not self.watches:
            self.stop.set()
            return _Raw(b"")
        step = self.watches.pop(0)
        if isinstance(step, Exception):
            raise step
        return _Raw(b"".join(json.dumps(e).encode() + b"\n" for e in step))


class _Raw:
    def __init__(self, data: bytes):
        self.data, self.status = data, 200

    def stream(self, *_a, **_k):
        yield self.data

    def release_conn(self):
        pass

    def close(self):
        pass


def test_keep_lists_watches_from_the_lists_version_and_lists_again_when_it_expires(
        monkeypatch):
    monkeypatch.setattr(profile_index, "RETRY_SECONDS", 0.01)
    stop = threading.Event()
    a, b = _profile("a", "Label/a"), _profile("a", "Label/b", version="7")
    gone = ApiException(status=410, reason="Expired")
    custom = _Custom([a], [[{"type": "ADDED", "object": b}],
                           [{"type": "BOOKMARK", "object": {"metadata": {
                               "resourceVersion": "9"}}}],
                           gone, [{"type": "DELETED", "object": a}]], stop)
    index = ProfileIndex(lambda: KEY)
    keep(index, custom, None, stop)
    assert custom.lists == 2, "listed again after the 410"
    assert custom.watched_from == ["list-1", "7", "9", "list-2", "1"]  # each event's version
    assert index.get(("a", "pm", "Label/a")) is None            # deleted by the last WATCH
    assert index.get(("a", "pm", "Label/b")) is None            # not in the second LIST


def test_a_failed_first_list_leaves_no_review_waiting_and_a_later_one_fills_the_index(
        monkeypatch):
    monkeypatch.setattr(profile_index, "RETRY_SECONDS", 0.01)
    stop = threading.Event()
    a = _profile("a", "Label/a")

    class _Forbidden(_Custom):
        def list_cluster_custom_object(self, group, version, plural, watch=False, **kw):
            if not watch and self.lists == 0:
                self.lists += 1
                raise ApiException(status=403, reason="Forbidden")
            return super().list_cluster_custom_object(group, version, plural, watch, **kw)

    custom = _Forbidden([a], [], stop)
    index = ProfileIndex(lambda: KEY)
    thread = threading.Thread(target=keep, args=(index, custom, None, stop))
    thread.start()
    thread.join(10)
    assert index.settled.is_set() and index.ready.is_set()
    assert custom.lists == 2 and index.get(("a", "pm", "Label/a")) is not None
    failed = ProfileIndex(lambda: KEY)
    failed.tried(None)                      # the LIST failed, none came back yet
    t = time.perf_counter()
    assert failed.get(("a", "pm", "Label/a"), wait=5.0) is None
    assert time.perf_counter() - t < 1.0, "a review does not wait after a failed LIST"
