"""Raw answers of the Kubernetes client: read them without building client objects (which cost
~15 % of the operator's CPU per write) and always hand the connection back to the pool."""

from __future__ import annotations

import datetime as dt
import json
import logging
from concurrent.futures import ThreadPoolExecutor

from kubernetes.client.exceptions import ApiException


def drain(response) -> None:
    """Read a raw answer and hand its connection back to the pool. The answer (the whole pod)
    is not needed, and building client objects from it cost ~15 % of the operator's CPU per
    write; but an answer left unread keeps its connection out of the pool, so every later
    write opens a new TLS connection (a window measured twice as slow)."""
    response.read()
    response.release_conn()


def read_json(response):
    """A raw answer as JSON, its connection handed back to the pool."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def paged_items(list_call, *args, page: int = 500, head: dict | None = None, **kwargs):
    """Every item of a LIST, one page of ``page`` items at a time (bounding the raw JSON held
    at once), each answer read raw: ``list_call`` is a client method such as
    ``CoreV1Api.list_namespaced_pod``, ``args``/``kwargs`` its own (label_selector...).
    ``head``, when given, is filled with the first page's list metadata (its resourceVersion
    is the whole list's: where a WATCH goes on from).

    The next page is asked for while this one is decoded (its token read from the answer's
    head): the API server encodes a page in about the time the client decodes one (10,000
    pods: ~1 s each), and the two overlap on two cores. At most two pages' bytes are held."""

    def fetch(token):
        response = list_call(*args, limit=page, _continue=token, _preload_content=False,
                             **kwargs)
        try:
            return response.data
        finally:
            response.release_conn()

    with ThreadPoolExecutor(max_workers=1) as ahead:
        data = fetch(None)
        while True:
            token = continue_token(data)
            upcoming = ahead.submit(fetch, token) if token else None
            try:
                answer = json.loads(data)
            except BaseException:
                if upcoming is not None:
                    upcoming.cancel()
                raise
            del data
            if head is not None and not head:
                head.update(answer.get("metadata") or {})
            yield from answer.get("items") or []
            token_read = (answer.get("metadata") or {}).get("continue")
            if upcoming is None:
                if token_read:      # a head we could not read: the token the answer gives
                    data = fetch(token_read)
                    continue
                return
            data = upcoming.result()


def continue_token(data: bytes) -> str | None:
    """The ``continue`` token of a LIST answer, read from its head (the list's metadata, which
    the API server writes before its items), or None where there is none or the head is not
    laid out so (the caller then reads it from the decoded answer)."""
    cut = data.find(b'"items":', 0, 4096)
    if cut <= 0:
        return None
    head = data[:cut].rstrip()
    if not head.endswith(b","):
        return None
    try:
        meta = json.loads(head[:-1] + b"}").get("metadata")
    except (ValueError, AttributeError):
        return None
    token = meta.get("continue") if isinstance(meta, dict) else None
    return token if isinstance(token, str) and token else None


def api_message(err) -> str:
    try:
        return json.loads(err.body).get("message") or f"HTTP {err.status}"
    except (TypeError, ValueError, AttributeError):
        return f"HTTP {err.status}: {err.reason}"


def write_event(core_api, involved: dict, etype: str, reason: str, message: str) -> None:
    """An Event about ``involved`` (kind, namespace, name, uid, apiVersion); best effort: a
    failure is logged, never a reason to stop."""
    ts = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "metadata": {"generateName": f"{involved['name'][:200]}.ai4dl.",
                     "namespace": involved["namespace"]},
        "involvedObject": involved,
        "type": etype, "reason": reason, "message": message[:1000],
        "source": {"component": "ai4dl-operator"}, "firstTimestamp": ts,
        "lastTimestamp": ts, "count": 1, "reportingComponent": "ai4dl-operator",
    }
    try:
        drain(core_api.create_namespaced_event(involved["namespace"], body,
                                               _preload_content=False))
    except ApiException as err:
        logging.getLogger("ai4dl.operator").info(
            "event for %s/%s not recorded: %s", involved["namespace"], involved["name"],
            api_message(err))
