"""Savings so far: the requests the operator's pods held, against those their authors wrote.

Each window the runtime adds, per managed resource, over the containers it planned:

- *original*: the author's request × the window's length. The author's request is what the
  operator recorded when it first wrote the pod (``orig`` in the pod's sealed state record, kept
  from then on: admission's sealed record ``ai4dl.io/admitted`` when there is one, else the
  requests the pod had), else admission's record, else — a pod the operator never changed — its
  current request. Records that are not the operator's (ai4dl.controller.podstate) are never
  read: a forged "original" cannot inflate the savings;
- *allocated*: what the pod held: its current request (modes Initial and InPlace), or, in
  Recommend mode, what the operator recommends (what it *would* have held; the current request
  where it recommends nothing).

``status.savings`` keeps the running sums (so a restarted operator goes on counting), the
window last counted (a window is never counted twice) and a one-line summary for
``kubectl get pm -o wide``; the metrics ``ai4dl_request_seconds_total{kind=original|allocated}``
carry the same sums for dashboards, one series per PhaseModel, resource and kind.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from ai4dl.quantity import parse_quantity


def original_requests(pod) -> dict[str, dict[str, float]]:
    """Per container, the author's requests (see the module doc), from the pod's verified
    records only (``pod.state()``, ``pod.admitted``: ai4dl.controller.pods.verify_pod); a
    resource the author gave no request is absent (nothing to save against). A pod whose
    admission record is not the operator's (forged, or sealed by a key this process does not
    hold) has no known baseline: it is left out of the savings rather than counted at a made-up
    or an already lowered request."""
    stored = pod.state().get("orig")
    if isinstance(stored, dict):
        return {c.name: dict(stored.get(c.name) or {}) for c in pod.containers}
    if pod.admitted is None and pod.admitted_problem is not None:
        return {c.name: {} for c in pod.containers}
    out: dict[str, dict[str, float]] = {}
    for c in pod.containers:
        o = dict(c.requests)
        for r, q in (pod.admitted or {}).get(c.name, {}).items():
            if q is None:
                o.pop(r, None)          # admission set a request where the author had none
            else:
                try:
                    o[r] = parse_quantity(str(q))
                except ValueError:
                    o.pop(r, None)
        out[c.name] = o
    return out


def clamp_originals(originals: Mapping[str, Mapping[str, float]], cap: Mapping[str, float]
                    ) -> tuple[dict[str, dict[str, float]], list[tuple[str, str, float]]]:
    """The originals no larger than ``cap`` (the largest a container can have: the operator's
    ``--max-container-*``, your largest node's allocatable), and the (container, resource,
    value) clamped. An author's ``cpu: 1000`` is sealed honestly, and a pod admitted at its
    workload's level runs; counted at 1000 cores it made the savings about 1,000x the truth
    (issue 43). The record keeps what the author wrote; only the sums are clamped."""
    out, clamped = {}, []
    for name, per in originals.items():
        out[name] = {}
        for r, v in per.items():
            top = cap.get(r)
            if top is not None and v is not None and v > top:
                clamped.append((name, r, float(v)))
                v = float(top)
            out[name][r] = v
    return out, clamped


def window_amounts(plans: Sequence, resources: Sequence[str], mode: str,
                   window_seconds: float,
                   originals: Sequence[Mapping] | None = None) -> dict[str, tuple[float, float]]:
    """resource -> (original, allocated) resource-seconds of this window, over the planned
    containers whose author's request is known. ``originals[i]``: :func:`original_requests`
    of ``plans[i]``'s pod, when the caller has them already."""
    sums = {r: [0.0, 0.0] for r in resources}
    for i, p in enumerate(plans):
        if not p.containers:
            continue
        by_container = originals[i] if originals is not None else original_requests(p.pod)
        for cp in p.containers:
            orig = by_container.get(cp.name, {})
            for r in resources:
                o, cur = orig.get(r), cp.current.get(r)
                held = cp.target.get(r, cur) if mode == "Recommend" else cur
                if o is None or held is None or not (math.isfinite(o) and math.isfinite(held)):
                    continue
                sums[r][0] += o * window_seconds
                sums[r][1] += held * window_seconds
    return {r: (a, b) for r, (a, b) in sums.items()}


def summary(resources: Mapping[str, Mapping[str, float]]) -> str:
    """'cpu 42%, memory 17%': the share of the original requests not allocated."""
    parts = []
    for r, v in resources.items():
        o, a = float(v.get("original", 0.0)), float(v.get("allocated", 0.0))
        if o > 0:
            parts.append(f"{r} {100.0 * (1.0 - a / o):.0f}%")
    return ", ".join(parts)


def add_window(previous: Mapping | None, amounts: Mapping[str, tuple[float, float]],
               window_start: float, since_iso: str) -> dict | None:
    """The new ``status.savings`` from the stored one and this window's amounts; None when the
    window was counted already (a restart, or a second operator replica's late write)."""
    prev = dict(previous or {})
    last = prev.get("lastWindow")
    if last is not None and window_start <= float(last):
        return None
    res = {r: dict(v) for r, v in (prev.get("resources") or {}).items()}
    for r, (o, a) in amounts.items():
        cur = res.setdefault(r, {"original": 0.0, "allocated": 0.0})
        cur["original"] = float(cur.get("original", 0.0)) + o
        cur["allocated"] = float(cur.get("allocated", 0.0)) + a
    return {"since": prev.get("since") or since_iso, "lastWindow": window_start,
            "windows": int(prev.get("windows", 0)) + 1, "resources": res,
            "summary": summary(res)}
