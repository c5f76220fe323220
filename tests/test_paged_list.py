"""ai4dl.kube.raw.paged_items: every item of a paged LIST, the next page asked for while one
is decoded; the token read from the answer's head, or from the answer where the head is not
laid out as the API server writes it."""

from __future__ import annotations

import json
import threading

import pytest
from kubernetes.client.exceptions import ApiException

from ai4dl.kube.raw import continue_token, paged_items


class _Raw:
    def __init__(self, data: bytes):
        self.data, self.released = data, False

    def release_conn(self):
        self.released = True


class _Lister:
    """A LIST of ``n`` items in pages, written as the API server writes them (kind,
    apiVersion, metadata, then items) or with the metadata last (``head_last``)."""

    def __init__(self, n: int, head_last: bool = False, fail_at: int | None = None):
        self.n, self.head_last, self.fail_at = n, head_last, fail_at
        self.calls: list[tuple] = []
        self.answers: list[_Raw] = []
        self.lock = threading.Lock()

    def __call__(self, namespace, *, limit, _continue, _preload_content, label_selector):
        assert _preload_content is False and namespace == "ns" and label_selector == "a=b"
        start = int(_continue or 0)
        with self.lock:
            self.calls.append((start, limit))
        if self.fail_at is not None and start >= self.fail_at:
            raise ApiException(status=410, reason="Expired")
        items = [{"metadata": {"name": f"p{i}"}} for i in range(start, min(self.n, start + limit))]
        meta = {"resourceVersion": "7"}
        if start + limit < self.n:
            meta["continue"] = str(start + limit)
        parts = {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items}
        if self.head_last:
            parts = {"kind": "PodList", "items": items, "metadata": meta}
        answer = _Raw(json.dumps(parts, separators=(",", ":")).encode())
        self.answers.append(answer)
        return answer


@pytest.mark.parametrize("head_last", [False, True])
def test_every_item_comes_once_in_order_and_every_answer_is_released(head_last):
    lister = _Lister(1234, head_last=head_last)
    names = [i["metadata"]["name"] for i in paged_items(lister, "ns", page=500,
                                                        label_selector="a=b")]
    assert names == [f"p{i}" for i in range(1234)]
    assert sorted(lister.calls) == [(0, 500), (500, 500), (1000, 500)]
    assert all(a.released for a in lister.answers)


def test_an_empty_list_and_a_single_page():
    assert list(paged_items(_Lister(0), "ns", page=500, label_selector="a=b")) == []
    lister = _Lister(3)
    assert len(list(paged_items(lister, "ns", page=500, label_selector="a=b"))) == 3
    assert lister.calls == [(0, 500)]


def test_a_failing_later_page_raises_to_the_caller_after_the_earlier_items():
    got = []
    with pytest.raises(ApiException) as err:
        for item in paged_items(_Lister(1200, fail_at=500), "ns", page=500,
                                label_selector="a=b"):
            got.append(item)
    assert err.value.status == 410 and len(got) == 500


def test_the_token_is_read_from_the_head_only_where_it_is_the_lists_metadata():
    assert continue_token(b'{"kind":"PodList","apiVersion":"v1","metadata":'
                          b'{"resourceVersion":"9","continue":"abc"},"items":[]}') == "abc"
    assert continue_token(b'{"kind":"PodList","metadata":{"resourceVersion":"9"},'
                          b'"items":[]}') is None
    # items first: a token inside an item is not the list's
    assert continue_token(b'{"items":[{"metadata":{"continue":"x"}}],"metadata":{}}') is None
    assert continue_token(b'not json "items":[') is None
