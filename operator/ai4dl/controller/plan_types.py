"""The records of one window's plan (per container, per pod, per window) and its skip reasons."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ai4dl.controller.pods import PodInfo
from ai4dl.policy.running import OwnHistory
from ai4dl.serving import Served

# Why a container's window could not be used. The first three are gaps or garbage in the
# metrics (counted by the MetricsIncomplete condition); a container that started during the
# window simply has no full window yet. Worst first: a pod's reason is its worst container's.
# duplicate-series: the source gave several series for one container's feature (which is right
# cannot be told: none is used).
DATA_SKIPS = ("duplicate-series", "bad-sample", "partial-data", "no-data")
SKIP_ORDER = (*DATA_SKIPS, "warming-up")


@dataclass
class ContainerPlan:
    name: str
    phase: int | None = None
    novel: bool = False
    proposal: dict[str, float] = field(default_factory=dict)   # the policy's, before safety
    target: dict[str, float] = field(default_factory=dict)     # after safety and QoS rules
    current: dict[str, float] = field(default_factory=dict)
    skipped: str | None = None                                 # why nothing was planned
    detail: str = ""                                           # ... in words (logs, events)
    own: OwnHistory | None = None      # running statistics up to the window's end (to keep)
    cold_start: bool = False           # sized by the served policy's cold-start level
    # the window's samples of the served resources (W, R; NaN where none), when they were
    # read: what the run being tracked for its workload's profile saw (ai4dl.controller.runs)
    usage: np.ndarray | None = field(default=None, repr=False, compare=False)


@dataclass
class PodPlan:
    pod: PodInfo
    containers: list[ContainerPlan]
    resize: dict | None = None                  # body for PATCH pods/<name>/resize
    annotations: dict[str, str] = field(default_factory=dict)
    # annotations this window leaves unwritten (ai4dl.controller.records: kept in memory)
    deferred: dict[str, str] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    # Warnings about the pod's own setup (reason, message): the runtime emits each once per
    # pod, not every window.
    notices: list[tuple[str, str]] = field(default_factory=list)
    skipped: str | None = None                  # why the whole pod was skipped this window
    # The kubelet refused the pod's last resize (PodResizeInProgress Error) and this plan takes
    # it back: the kubelet's message (counted in ai4dl_resizes_refused_total).
    refused: str | None = None
    # The pod's state record while the window is planned; rendered into
    # ``annotations[A_STATE]`` only for the plans that keep it (ai4dl.controller.plan_pod)
    state: dict | None = None

    @property
    def phase(self) -> int | None:
        return next((c.phase for c in self.containers if c.phase is not None), None)

    def largest_change(self) -> float:
        """The largest relative change a target asks of a request in force: which resizes
        go first when not all of a window's can (the rate limit, the write deadline)."""
        return max((abs(t - c.current.get(r, t)) / max(c.current.get(r, t), 1e-9)
                    for c in self.containers for r, t in c.target.items()), default=0.0)


@dataclass
class WindowPlan:
    pods: list[PodPlan]
    resources: tuple[str, ...]
    served: Served | None = None
    # spec-level contradictions (floor > ceiling), one message per resource
    bound_conflicts: list[str] = field(default_factory=list)
    ceiling_below_usage: int = 0        # pods whose memory ceiling is below their working set

    def data_skips(self) -> dict[str, int]:
        """Pods skipped for gaps or garbage in their metrics, by reason."""
        out: dict[str, int] = {}
        for p in self.pods:
            if p.skipped in DATA_SKIPS:
                out[p.skipped] = out.get(p.skipped, 0) + 1
        return out

    def considered(self) -> int:
        """Pods whose metrics were looked at this window (not already handled, not left alone
        for their setup)."""
        return sum(1 for p in self.pods if p.containers and p.skipped != "already-handled")

    def pods_per_phase(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.pods:
            if p.phase is not None:
                out[str(p.phase)] = out.get(str(p.phase), 0) + 1
        return dict(sorted(out.items(), key=lambda kv: int(kv[0])))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.pods:
            reason = p.skipped or ("resized" if p.resize else "planned")
            out[reason] = out.get(reason, 0) + 1
        return out
