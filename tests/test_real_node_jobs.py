"""The real-node policy table's command (``bench/bench_real_node.py``, ``e2e/node/jobs.py``),
short: real PyTorch jobs as Guaranteed pods on the real node, the operator resizing one of them
from cAdvisor through the real Prometheus, and the report's fields checked against the pods,
the kubelet's cAdvisor and their own definitions, so the command cannot rot.

Runs with ``AI4DL_REAL_NODE=1`` (root; ``bash e2e/node/build.sh`` once), skipped otherwise::

    AI4DL_REAL_NODE=1 PYTHONPATH=$PWD/operator python -m pytest -q tests/test_real_node_jobs.py

No FakeKubelet and no trace exporter here: the pods run the real training programs (the host's
interpreter, chrooted, under the pod's cgroup) and the operator reads cAdvisor's series.
"""

from __future__ import annotations

import math
import uuid
from pathlib import Path

import pytest

from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION
from e2e_fixtures_operator import (Operator, crd, operator_kubeconfig,  # noqa: F401 (fixtures)
                                   write_report)

from e2e.node import jobs as J

pytestmark = [pytest.mark.integration, pytest.mark.real_node]

STEP, WINDOW = 5, 20
#: A cpu-bound job under a 300m limit (its training loop alone wants ~0.7 core: throttled for
#: sure), opted in to the operator; and one under a 160Mi limit, which torch's import and the
#: data set cannot fit: OOM-killed by the kernel, restarted by the kubelet (OnFailure).
#: The busy job's 30 s (throttled at 300m: some 9 cpu-seconds) are what its assertions need:
#: two epochs of real training, more than 5 cpu-seconds, throttling; the run lasts until it
#: ends (the OOM job's 40 s never come: it is killed at its start, every time).
BUSY = J.JobSpec("busy", "cnn", 30, "300m", "2Gi", epochs=2, workers=1)
OOM = J.JobSpec("oom", "cnn", 40, "500m", "160Mi", epochs=2, workers=1)


@pytest.fixture(scope="module")
def cadvisor(kube_cluster, real_node, prometheus_binary, tmp_path_factory):
    prom = J.cadvisor_prometheus(kube_cluster.control_plane, real_node,
                                 tmp_path_factory.mktemp("prometheus"), prometheus_binary,
                                 interval="2s")
    yield prom
    prom.cleanup()


@pytest.fixture(scope="module")
def run(request, kube_cluster, real_node, cadvisor, operator_kubeconfig, crd,  # noqa: F811
        tmp_path_factory):
    """One short run: both jobs at once, the operator serving adaptive-max (no model needed)
    from cAdvisor; measured once the busy job has finished."""
    from kubernetes import client

    from e2e_fixtures_k8s import create_namespace  # removed when the module ends

    ns = create_namespace(kube_cluster, f"jobs-{uuid.uuid4().hex[:8]}")
    op = Operator(operator_kubeconfig, cadvisor.url,
                  tmp_path_factory.mktemp("operator") / "operator.log", window=WINDOW).start()
    try:
        client.CustomObjectsApi(kube_cluster.api_client).create_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL,
            J.phasemodel_body("pm", "adaptive-max", None, step=STEP, window=WINDOW))
        res = J.run_jobs(kube_cluster.core, real_node, cadvisor, ns, [BUSY, OOM],
                         policy="adaptive-max", labels={OPT_IN_LABEL: "true"},
                         annotations={MODEL_ANNOTATION: "pm"}, until=["busy"], timeout=140)
        res["operator_log"] = op.tail(30)
    finally:
        op.stop()
    jobs = {j["job"]: j for j in res["jobs"]}
    write_report(request, "real-node jobs (short)", "| job | measure | value |", [
        (name, k, f"{j[k]:.4g}" if isinstance(j[k], float) else j[k])
        for name, j in jobs.items()
        for k in ("oom_kills", "restarts", "throttled_seconds", "wall_seconds",
                  "requested_core_hours", "requested_gib_hours", "resizes")], append=True)
    return res, jobs


def test_busy_job_finishes_guaranteed_and_throttled(run):
    """The cpu-limited job runs its real training to the end in its pod (Succeeded, no
    restart, Guaranteed), and cAdvisor shows its cpu limit throttling it."""
    res, jobs = run
    busy = jobs["busy"]
    assert busy["finished"] and busy["phase"] == "Succeeded", (busy, res["operator_log"])
    assert busy["qos"] == "Guaranteed"
    assert busy["oom_kills"] == 0 and busy["restarts"] == 0
    assert busy["throttled_seconds"] > 0 and busy["throttled_periods"] > 0, busy
    assert busy["cpu_seconds"] > 5, busy               # it trained (torch, two epochs)
    # from the pod's creation: its sandbox, torch's import under 300m (most of the rest: 80 s
    # in all when alone) and its training; the integration tier's other worker runs beside it
    assert BUSY.duration <= busy["wall_seconds"] < BUSY.duration + 90, busy
    assert res["recorder_errors"] == []


def test_oom_kills_are_read_from_the_pod(run):
    """The job under a limit it cannot fit is OOM-killed by the kernel: the report counts each
    termination the pod's status showed with reason OOMKilled (exit 137) once, and the
    kubelet restarted it after each (but the newest, which may still wait in back-off)."""
    _, jobs = run
    oom = jobs["oom"]
    terms = oom["record"]["terminations"]
    killed = [t for t in terms.values() if t[0] == "OOMKilled"]
    assert oom["oom_kills"] == len(killed) >= 1, terms
    assert all(t[1] == 137 for t in killed), killed
    assert oom["restarts"] >= oom["oom_kills"] - 1 and not oom["finished"], oom


def test_requested_hours_are_the_integral_of_requests(run):
    """Requested core-hours and GiB-hours are the pod's spec requests integrated over its
    life (created -> final exit): the timeline starts at the author's requests when the pod
    was created, each later value is one the pod's spec held (the operator's resizes), and the
    sum of value x time in force matches, computed here independently."""
    _, jobs = run
    for job, spec in (("busy", BUSY), ("oom", OOM)):
        j = jobs[job]
        tl = j["record"]["requests"]
        created = j["record"]["created"]
        assert tl[0][0] == created
        assert math.isclose(tl[0][1], J._cores(spec.cpu))
        assert math.isclose(tl[0][2], J._cores(spec.memory))
        end = created + j["wall_seconds"]
        # the recorder stamps a change when its poll (every 1 s) sees it, and finishedAt has
        # whole seconds: a resize in the container's last second may be stamped just after
        # its exit, and is then in force for no time (never more than a poll and a second late)
        assert all(t <= end + 2.5 for t, _, _ in tl), (tl, end)
        times = [min(t, end) for t, _, _ in tl] + [end]
        cpu = sum(c * (times[i + 1] - times[i]) for i, (_, c, _) in enumerate(tl))
        mem = sum(m * (times[i + 1] - times[i]) for i, (_, _, m) in enumerate(tl))
        assert math.isclose(j["requested_core_hours"], cpu / 3600, rel_tol=1e-9), j
        assert math.isclose(j["requested_gib_hours"], mem / 2 ** 30 / 3600, rel_tol=1e-9), j
        assert j["resizes"] == len(tl) - 1
        # held: never less than requested; the busy job's container reports what it was given
        assert j["held_core_hours"] >= j["requested_core_hours"] * (1 - 1e-9)
        assert j["held_gib_hours"] >= j["requested_gib_hours"] * (1 - 1e-9)
        if job == "busy":
            assert j["record"]["actual"] and j["record"]["actual"][0][1:] == tl[0][1:]
        if j["resizes"] == 0:   # then it is simply the author's requests times the wall time
            assert math.isclose(j["requested_core_hours"],
                                J._cores(spec.cpu) * j["wall_seconds"] / 3600)


def test_report_table_has_a_row_per_policy_and_job(run):
    """The markdown the command writes: the policy's totals row and one row per job."""
    res, _ = run
    meta = {"jobs": [{"name": j.name, "program": j.program, "duration": j.duration,
                      "cpu": j.cpu, "memory": j.memory} for j in (BUSY, OOM)],
            "scrape": "2s", "step": STEP, "window": WINDOW, "machine": "test",
            "command": "test", "seconds": 60.0, "date": "today"}
    text = J.report_markdown([res], meta)
    assert text.startswith("## On a real node")
    t = res["totals"]
    assert f"| adaptive-max | 1 | {t['oom_kills']} | {t['throttled_seconds']:.1f} |" in text
    assert text.count("| adaptive-max | 1 | busy |") == 1
    assert text.count("| adaptive-max | 1 | oom |") == 1
    assert "All " not in text                       # one run: no all-runs table
    # the start and the first window: the pod's first request, the most it used in its first
    # window (never above its peak)
    busy = next(j for j in res["jobs"] if j["job"] == "busy")
    first = busy["first_window_peak_bytes"]
    assert first and first <= busy["peak_memory_bytes"]
    start = busy["record"]["requests"][0][2] / 2 ** 20
    assert (f"| {start:.0f} | {first / 2 ** 20:.0f} | {start / (first / 2 ** 20):.2f} |"
            in text), text
    # runs of the same jobs: a table over all of them, then one row per run
    again = {**res, "run": 2}
    text = J.report_markdown([{**res, "run": 1}, again], meta)
    every = J.totals_of(res["jobs"] + again["jobs"])
    assert "All 2 runs:" in text and f"| adaptive-max | {every['oom_kills']} |" in text
    assert text.count("| adaptive-max | 2 | busy |") == 1
    # every run of a job is one workload
    assert J.job_manifest(BUSY, "ns", "node", Path("/tmp"))["metadata"]["labels"][
        "ai4dl.io/workload"] == "busy"
