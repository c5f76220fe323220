"""bench/bench_operator.py --serving: what serving each spec.policy.kind costs per window,
in-process and without a cluster. Separate because it shares only the traces and the model
with the cluster benchmark."""

from __future__ import annotations

import statistics
import time

import numpy as np

from .cluster import fit_model_doc, load_jobs
from .common import NAMESPACE, PM_NAME


def served_nothing(pods: int, kind: str, planned: int) -> str | None:
    """Why serving ``kind`` measured nothing (None when it planned a container): a plan that
    sized none of the ``pods`` pods (a refused model skips every pod: its timing is of nothing,
    and there is nothing to hand next_allocations)."""
    if planned == 0:
        return (f"spec.policy.kind {kind}: plan_window sized none of the {pods} pods (a "
                "refused model serves nothing)")
    return None


def serving_table(pods: int, window: int, kinds: list[str], repeats: int = 15,
                  traces: str = "ai4dl-samples") -> tuple[str | None, str]:
    """--serving: what choosing a policy costs per window, in-process and without a cluster:
    plan_window (detect + serve + safety + QoS rules) for ``pods`` pods of one PhaseModel, per
    spec.policy.kind, on the same samples and running statistics (median of ``repeats``).
    Returns (why it measured nothing, None when it measured; the markdown table)."""
    if pods < 1:                    # before the traces and the fit: nothing to plan
        return f"--pods {pods}: no pod to plan", ""
    from ai4dl.controller.plan import plan_window
    from ai4dl.controller.pods import pod_info
    from ai4dl.crd import MODEL_ANNOTATION, OPT_IN_LABEL
    from ai4dl.crd_spec import PhaseModelSpec
    from ai4dl.method.model import PhaseModel

    played, fit_on, _ = load_jobs(traces)
    doc, _ = fit_model_doc(fit_on, window)
    model = PhaseModel.from_document(doc)
    n_ctx = model.crbm_.n_history
    rng = np.random.default_rng(0)
    samples, infos = {}, []
    for i in range(pods):
        ex = played[i % len(played)]
        at = int(rng.integers(0, max(1, len(ex) - window - n_ctx)))
        x = ex.select(model.features_).values[at: at + window + n_ctx]
        samples[(NAMESPACE, f"job-{i:05d}", "main")] = x
        infos.append(pod_info({
            "metadata": {"name": f"job-{i:05d}", "namespace": NAMESPACE, "uid": f"u{i}",
                         "labels": {OPT_IN_LABEL: "true", "app": "train"},
                         "annotations": {MODEL_ANNOTATION: PM_NAME}},
            "spec": {"containers": [{"name": "main", "resources": {
                "requests": {"cpu": "4", "memory": "16Gi"}}}]},
            "status": {"phase": "Running"}}))
    from ai4dl.policy.online import next_allocations

    rows = [f"| spec.policy.kind | served | plan_window, {pods:,} pods (median of {repeats}) "
            f"| of it, the served policy (next_allocations) | per pod |", "|---|---|---|---|---|"]
    base = None
    for kind in kinds:
        spec = PhaseModelSpec.model_validate({
            "selector": {"matchLabels": {"app": "train"}}, "stepSeconds": 1,
            "windowSeconds": window, "policy": {"mode": "InPlace", "kind": kind},
            "model": doc})
        histories: dict = {}
        times = []
        for r in range(repeats + 1):
            t = time.perf_counter()
            plan = plan_window(spec, model, infos, samples, n_ctx, 1.8e9 + r * window,
                               "2027-01-01T00:00:00Z", histories=histories, model_key="k")
            times.append(time.perf_counter() - t)
            for p in plan.pods:          # the runtime keeps the running statistics
                for c in p.containers:
                    if c.own is not None:
                        histories[(p.pod.uid, c.name)] = ("k", c.own)
        med = statistics.median(times[1:])
        base = med if base is None else base
        planned = [(p, c) for p in plan.pods for c in p.containers if c.own is not None]
        why = served_nothing(pods, kind, len(planned))
        if why:
            return why, ""
        lasts = np.stack([samples[(NAMESPACE, p.pod.name, c.name)][-window:][
            :, [model.features_.index(r) for r in plan.resources]] for p, c in planned])
        phases = np.stack([model.predict(samples[(NAMESPACE, p.pod.name, c.name)],
                                         n_context=n_ctx) for p, c in planned])
        owns = [c.own for _, c in planned]
        serve = []
        for _ in range(repeats):
            t = time.perf_counter()
            next_allocations(plan.served.policy, lasts, phases, owns)
            serve.append(time.perf_counter() - t)
        sv = statistics.median(serve)
        rows.append(f"| {kind} | {plan.served.summary()} | {med * 1000:.0f} ms "
                    f"({med / base:.2f} ×) | {sv * 1000:.1f} ms | {sv / pods * 1e6:.1f} µs |")
    return None, "\n".join(rows)
