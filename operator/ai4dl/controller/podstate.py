"""The operator's state on a pod, sealed with a key only the operator holds.

A pod's owner can write every annotation of their pod. The operator keeps two records there:
``ai4dl.io/state`` (the window handled last, the last increases, the author's original requests,
the running statistics) and ``ai4dl.io/admitted`` (the requests the author wrote, as admission
saw them). Read back unchecked, a forged record could inflate the savings (an "original" of
1000 cores), lift a pod's running statistics, or — one malformed value — stop a whole
PhaseModel. So both are sealed: an HMAC-SHA256 over the record and the scope it belongs to (the
pod's uid for the state: a record copied onto another pod does not verify), with a key that
only the operator holds.

Why a signature rather than moving the state elsewhere: the records must survive an operator
restart (the window id is what keeps a restarted operator from resizing a pod twice in a window),
they are per pod (thousands of them: too big for one PhaseModel's status, 1.5 MiB at most), and
the pod is where a user looks. A signature keeps them where they are and makes them read-only in
effect: a pod's owner may still delete or change them, and then the operator treats the record
as absent, conservatively (see :func:`verify_pod`), and says so.

The key comes from ``--state-key-file`` (the chart generates it once into a Secret that the
kubelet mounts: the operator's ServiceAccount reads no Secret), else a random key per process
(records sealed by an earlier process then read as absent: a restart forgets the cool-downs and
the running statistics, never trusts a forgery).

What a record that does not verify means, by :class:`Opened.problem`:

- ``absent``: none (a new pod);
- ``other-key``: sealed by another key (an earlier operator process without a key file, a
  rotated key): the operator's own, no alarm (a log line, the metric);
- ``unsigned``, ``forged``, ``malformed``: not the operator's (written by hand, copied from
  another pod, changed): a Warning Event on the pod, once, naming the annotation, and the
  metric ``ai4dl_pod_state_rejected_total{reason}``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

KEY_BYTES = 32
#: problems that are not the operator's own doing (a Warning Event; ``other-key`` is its own)
FOREIGN_PROBLEMS = ("unsigned", "forged", "malformed")
#: A sealed record larger than this is not read (an annotation can hold 256 KiB in all).
MAX_RECORD_BYTES = 64 * 1024


class StateKey:
    """An HMAC key: ``seal`` a record for a scope, ``open`` it again. ``previous`` keys (a
    rotation, issue 43) still open what they sealed; every new record is sealed with ``key``."""

    def __init__(self, key: bytes, previous: Sequence[bytes] = ()):
        if len(key) < 16:
            raise ValueError(f"the state key must have at least 16 bytes (got {len(key)})")
        self._key = bytes(key)
        self.kid = _kid(self._key)
        for old in previous:
            if len(old) < 16:
                raise ValueError(f"the previous state key must have at least 16 bytes (got "
                                 f"{len(old)})")
        self._previous = {_kid(bytes(k)): bytes(k) for k in previous if bytes(k) != self._key}

    @property
    def previous_kids(self) -> tuple[str, ...]:
        return tuple(self._previous)

    @classmethod
    def generate(cls) -> "StateKey":
        return cls(secrets.token_bytes(KEY_BYTES))

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "StateKey":
        """The file's bytes (surrounding whitespace stripped: a key written by ``echo``), and,
        when the same folder holds a file named ``previous`` (a Secret's ``previous`` entry,
        mounted beside its ``key``), that key too: a rotation (docs/reference.md, "Rotating
        the state key")."""
        data = _read_key(path)
        old = Path(path).with_name(PREVIOUS_KEY_FILE)
        previous = [_read_key(old)] if old.is_file() and old != Path(path) else []
        try:
            return cls(data, previous)
        except ValueError as err:
            raise ValueError(f"state key file {path}: {err}") from None

    def _mac(self, scope: str, payload: str, key: bytes | None = None) -> str:
        digest = hmac.new(self._key if key is None else key,
                          scope.encode() + b"\0" + payload.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def seal(self, scope: str, data: Any) -> str:
        """The annotation text: ``{"data": ..., "kid": ..., "mac": ...}`` (sorted, compact)."""
        payload = _canonical(data)
        return _canonical({"data": data, "kid": self.kid, "mac": self._mac(scope, payload)})

    def _verifies(self, scope: str, text: str, sealed: dict, kid: str, mac: str,
                  key: bytes) -> bool:
        """The MAC is the key's over the record's data for ``scope``: over the data's bytes
        as the text holds them when the text is the form :meth:`seal` writes (no second
        serialisation: half the cost of opening a record, 10,000 a window), else over the
        data serialised again (a record re-spelt on its way, still the operator's)."""
        payload = _sealed_payload(text, kid, mac)
        if payload is not None and hmac.compare_digest(mac, self._mac(scope, payload, key)):
            return True
        return hmac.compare_digest(mac, self._mac(scope, _canonical(sealed["data"]), key))

    def open(self, scope: str, text: str | None) -> "Opened":
        """The record's data when it verifies for ``scope``, else why not (``Opened.problem``).
        A record sealed by a previous key verifies with it (``detail`` says so)."""
        if text is None:
            return Opened(None, "absent")
        if len(text) > MAX_RECORD_BYTES:
            return Opened(None, "malformed", f"{len(text)} bytes (at most {MAX_RECORD_BYTES})")
        try:
            sealed = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            return Opened(None, "malformed", "not JSON")
        if not isinstance(sealed, dict) or "mac" not in sealed or "data" not in sealed:
            return Opened(None, "unsigned", "no signature")
        kid = sealed.get("kid")
        key = self._key if kid == self.kid else self._previous.get(kid) \
            if isinstance(kid, str) else None
        if key is None:
            return Opened(None, "other-key", f"sealed by key {str(kid)[:20]!r}")
        mac = sealed.get("mac")
        if not isinstance(mac, str) or not self._verifies(scope, text, sealed, kid, mac, key):
            return Opened(None, "forged", "the signature does not match")
        return Opened(sealed["data"], None, "" if kid == self.kid else "sealed by the previous key")


#: The file beside the state key holding the key it replaced (a rotation).
PREVIOUS_KEY_FILE = "previous"


def _kid(key: bytes) -> str:
    return hashlib.sha256(b"ai4dl-state-key-id\0" + key).hexdigest()[:12]


def _read_key(path: str | os.PathLike) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read().strip()
    except OSError as err:
        raise ValueError(f"state key file {path}: {err.strerror or err}") from None


@dataclass(frozen=True)
class Opened:
    data: Any
    problem: str | None         # None: verified; else absent / other-key / unsigned / ...
    detail: str = ""


def _sealed_payload(text: str, kid: str, mac: str) -> str | None:
    """The data's bytes in a record of the form :meth:`StateKey.seal` writes
    (``{"data":...,"kid":...,"mac":...}``, compact), or None. Safe to verify as they stand:
    the MAC covers exactly these bytes, and bytes the operator sealed are the canonical
    serialisation of the data, which the text then parses back to."""
    prefix = '{"data":'
    suffix = f',"kid":{json.dumps(kid)},"mac":{json.dumps(mac)}}}'
    if text.startswith(prefix) and text.endswith(suffix):
        return text[len(prefix):len(text) - len(suffix)]
    return None


def _canonical(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True, allow_nan=False)


def state_scope(namespace: str, name: str, uid: str) -> str:
    """A state record belongs to one pod object (its uid: a pod re-created under its name is
    another pod)."""
    return f"state\0{namespace}\0{name}\0{uid}"


def admitted_scope(namespace: str, phasemodel: str, identity: str) -> str:
    """Admission's record belongs to a namespace, a PhaseModel and the pod as admission sees it
    (:func:`admitted_identity`: a pod has no uid, and a generated name no name, then); once the
    operator first writes the pod it moves the originals into the pod's own state record,
    bound to its uid. Bound to the pod's identity, a record copied onto a pod of another Job
    (or a pod of another name) does not verify (issue 43: copied between pods of one
    PhaseModel, it inflated the savings)."""
    return f"admitted\0{namespace}\0{phasemodel}\0{identity}"


def admitted_identity(metadata: Mapping) -> str:
    """What names a pod both when admission sees it and ever after: its ``generateName`` (or
    its name, when it has no generated one) and the uids of its controllers (the Job, the
    ReplicaSet, ... that made it). Pods of one controller share it, and their template's
    requests, so a record moved among them claims nothing they did not ask for."""
    owners = sorted(str(o.get("uid", "")) for o in metadata.get("ownerReferences") or []
                    if isinstance(o, Mapping) and o.get("controller"))
    base = metadata.get("generateName") or metadata.get("name") or ""
    return f"{base}\0{','.join(owners)}"


def peek(text: str | None) -> dict:
    """A sealed record's data, unverified: for people and tests reading a pod, never for
    deciding anything."""
    try:
        sealed = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    data = sealed.get("data") if isinstance(sealed, dict) else None
    return data if isinstance(data, dict) else {}


# ----------------------------------------------------------------------------- the records
class RefusedHold(BaseModel):
    """A level the kubelet refused for one container's resource (ai4dl.controller.plan): not
    asked for again before ``until`` (unix s); ``n`` refusals in a row (the back-off doubles)."""

    model_config = ConfigDict(extra="forbid")

    value: float = Field(ge=0, allow_inf_nan=False)
    until: float = Field(allow_inf_nan=False)
    n: int = Field(ge=1, le=64)


class PodState(BaseModel):
    """What ``ai4dl.io/state`` holds (checked after it verified: a record of an older operator
    version with other fields reads as malformed, and is then treated as absent)."""

    model_config = ConfigDict(extra="forbid")

    window: float | None = None
    model: str = Field("", max_length=64)
    orig: dict[str, dict[str, float]] = {}
    lastIncrease: dict[str, dict[str, float]] = {}
    own: dict[str, dict[str, Any]] = {}
    untaken: dict[str, Any] | None = None
    refused: dict[str, dict[str, RefusedHold]] = {}

    @field_validator("window")
    @classmethod
    def _window(cls, v):
        if v is not None and not math.isfinite(v):
            raise ValueError("not a finite number")
        return v

    @field_validator("orig", "lastIncrease")
    @classmethod
    def _values(cls, v):
        for c, per in v.items():
            for r, x in per.items():
                if not math.isfinite(x) or x < 0:
                    raise ValueError(f"{c}.{r}: {x!r} is not a finite non-negative number")
        return v


def parse_state(data: Any) -> tuple[dict, str]:
    """A verified state record as the dict the planner reads, or ({}, what is wrong)."""
    try:
        return PodState.model_validate(data).model_dump(exclude_none=True,
                                                        exclude_defaults=True), ""
    except ValidationError as err:
        e = err.errors()[0]
        return {}, f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}"


def parse_admitted(data: Any) -> tuple[dict[str, dict[str, str | None]] | None, str]:
    """Admission's verified record, {container: {resource: quantity text or None}}."""
    if not isinstance(data, Mapping) or not all(
            isinstance(per, Mapping) and all(isinstance(q, (str, type(None)))
                                             for q in per.values())
            for per in data.values()):
        return None, "not {container: {resource: quantity}}"
    return {str(c): dict(per) for c, per in data.items()}, ""
