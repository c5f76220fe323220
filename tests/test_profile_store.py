"""Workload profiles in the operator (issue 42), one function at a time: the sealed record of a
WorkloadProfile object, the runs the window loop summarises and hands on when they end, and
admission from a known workload's profile. On the real API server: tests/test_profiles_k8s.py."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from ai4dl.controller import admission
from ai4dl.controller.admission import AdmissionTarget
from ai4dl.controller.pods import A_ADMISSION
from ai4dl.controller.plan_types import ContainerPlan, PodPlan, WindowPlan
from ai4dl.controller.podstate import StateKey
from ai4dl.controller.pods import A_ADMITTED, A_WORKLOAD, Container, PodInfo
from ai4dl.controller.profiles import (fold_runs, open_record, profile_name, profile_object)
from ai4dl.controller.runs import RunTracker, oom_floors
from ai4dl.crd import MODEL_ANNOTATION, OPT_IN_LABEL
from ai4dl.crd_spec import LabelSelector
from ai4dl.crd_profile import WorkloadProfileResource
from ai4dl.quantity import parse_quantity
from ai4dl.rules.workload_profile import (OOM_MIN_BUMP_BYTES, RunSummary, WorkloadProfile,
                                           profile_from_runs)

GiB = 2.0 ** 30
KEY = StateKey(b"k" * 32)
RES = ("cpu", "memory")


def run(end, first_mem, peak_mem, run_id="", cpu=1.0):
    return RunSummary(end, 600.0, (cpu, first_mem), (2.0, peak_mem), (60.0, 300.0),
                      early=((cpu, first_mem),), run_id=run_id)


def stored_object(profiles, workload="Job/train", pm="pm", ns="ml", key=KEY):
    body = profile_object(ns, pm, "pm-uid", workload, profiles, key, 1000.0, 1.0)
    body["metadata"]["resourceVersion"] = "7"
    return body


def test_round_trip_and_the_schema_accepts_it():
    profiles = {"main": profile_from_runs(RES, [run(10.0, 2 * GiB, 6 * GiB)])}
    body = stored_object(profiles)
    WorkloadProfileResource.model_validate(body)          # what the CRD's schema says
    got = open_record(body, KEY)
    assert got.problem is None and got.workload == "Job/train"
    assert got.containers["main"].to_dict() == profiles["main"].to_dict()
    assert body["status"]["containers"][0]["firstRequest"]["memory"].endswith("Mi")
    assert body["metadata"]["ownerReferences"][0]["kind"] == "PhaseModel"


def test_an_edited_copied_or_foreign_record_reads_as_absent():
    profiles = {"main": profile_from_runs(RES, [run(10.0, 2 * GiB, 6 * GiB)])}
    body = stored_object(profiles)
    edited = copy.deepcopy(body)
    sealed = json.loads(edited["status"]["record"])
    sealed["data"]["containers"]["main"]["runs"][0]["first"][1] = 1.0    # starve it
    edited["status"]["record"] = json.dumps(sealed)
    assert open_record(edited, KEY).problem == "forged"
    # another workload's object, its record copied: the scope names the workload
    other = stored_object({}, workload="Job/big")
    other["status"]["record"] = body["status"]["record"]
    assert open_record(other, KEY).problem == "forged"
    # renamed onto another workload's name
    moved = copy.deepcopy(body)
    moved["spec"]["workload"] = "Job/big"
    assert open_record(moved, KEY).problem == "its name is not its workload's"
    assert open_record(body, StateKey(b"o" * 32)).problem == "other-key"
    assert not open_record(edited, KEY).containers


def test_names_are_valid_and_distinct():
    a, b = profile_name("pm", "Job/train"), profile_name("pm", "Job/train2")
    long = profile_name("P" * 200, "Label/" + "x" * 63)
    assert a != b and len(long) <= 63 and long.startswith("p")


def test_fold_is_idempotent_by_run_id_and_start():
    r = run(10.0, 2 * GiB, 6 * GiB, run_id="abc")
    once, changed = fold_runs({}, [("main", r)], RES)
    assert changed and once["main"].executions == 1
    again, changed = fold_runs(once, [("main", r)], RES)
    assert not changed and again["main"].executions == 1
    # the trainer's report of the same run: its first sample a minute after the kubelet's
    # start, its end at the last sample
    seen = RunSummary(70.0, 540.0, (1.0, 2 * GiB), (2.0, 6 * GiB), (0.0, 0.0), run_id="abc")
    assert not fold_runs(once, [("main", seen)], RES)[1]


def pod_info(uid="u1", phase="Running", restarts=0, oom=False, workload="Job/train",
             started=0.0, finished=None):
    return PodInfo("ml", f"p-{uid}", uid, "pm", [Container("main", {}, {})], running=phase ==
                   "Running", phase=phase, workload=workload, started={"main": started},
                   restarts={"main": restarts}, oom_killed={"main": oom},
                   finished={} if finished is None else {"main": finished})


def window_plan(pod, usage):
    cp = ContainerPlan("main")
    cp.usage = np.asarray(usage, float)
    return WindowPlan([PodPlan(pod, [cp])], RES)


class TestRunTracker:
    W, STEP = 4, 15.0

    def feed(self, tracker, pod, windows, first_end=45.0):
        for k, w in enumerate(windows):
            tracker.observe(window_plan(pod, w), first_end + k * self.W * self.STEP, self.W,
                            self.STEP)

    def test_a_run_watched_from_its_start_is_summarised_when_its_pod_ends(self):
        t = RunTracker()
        p = pod_info()
        self.feed(t, p, [[[1, 1e9], [1, 2e9], [1, 2e9], [1, 2e9]],
                         [[2, 3e9], [1, 5e9], [1, 4e9], [np.nan, np.nan]]])
        assert t.ended([p], 200.0) == []             # still running
        done = pod_info(phase="Succeeded", finished=150.0)
        (e,) = t.ended([done], 200.0)
        assert e.workload == "Job/train" and e.container == "main"
        assert e.run.first == (1.0, 2e9) and e.run.peak == (2.0, 5e9)
        assert e.run.early == ((1.0, 2e9), (2.0, 5e9))
        assert e.run.peak_at == (60.0, 75.0)         # the sample at 60 s, then at 75 s
        assert e.run.end == 150.0 and e.run.duration == 150.0 and not e.run.oom_killed
        assert t.ended([done], 300.0) == []          # handed on once

    def test_early_windows_count_from_the_run_s_start_not_the_grid(self):
        t = RunTracker()
        p = pod_info(started=30.0)                    # half-way through the grid's window
        # the sample at 0 s is a predecessor's (before the start by more than a step)
        self.feed(t, p, [[[9, 9e9], [1, 1e9], [1, 1e9], [1, 2e9]],
                         [[1, 3e9], [1, 3e9], [2, 4e9], [1, 5e9]]])
        (e,) = t.ended([], 10_000.0)
        # the run's first 60 s are the samples at 15 (within a step of its start) to 75 s
        assert e.run.early == ((1.0, 3e9), (2.0, 5e9))
        assert e.run.first == (1.0, 3e9) and e.run.peak == (2.0, 5e9)
        assert e.run.peak_at == (60.0, 75.0)

    def test_a_scrape_gap_carries_the_window_before_it(self):
        t = RunTracker()
        p = pod_info()
        nan = [np.nan, np.nan]
        self.feed(t, p, [[[1, 1e9]] * 4, [nan] * 4, [[1, 2e9]] * 4])
        (e,) = t.ended([], 10_000.0)
        assert e.run.early == ((1.0, 1e9), (1.0, 1e9), (1.0, 2e9))

    def test_a_window_fed_twice_counts_once(self):
        t = RunTracker()
        p = pod_info()
        self.feed(t, p, [[[1, 1e9]] * 4])
        t.observe(window_plan(p, [[9, 9e9]] * 4), 45.0, self.W, self.STEP)
        (e,) = t.ended([], 100.0)
        assert e.run.peak == (1.0, 1e9)

    def test_an_oom_kill_ends_the_run_bumped_and_starts_the_next(self):
        t = RunTracker()
        self.feed(t, pod_info(), [[[1, 1e8]] * 4])
        restarted = pod_info(restarts=1, oom=True, started=100.0)
        (e,) = t.ended([restarted], 120.0)
        assert e.run.oom_killed
        assert e.run.peak[1] == pytest.approx(1e8 + OOM_MIN_BUMP_BYTES)   # +100 MiB > ×1.2
        assert e.run.first[1] == pytest.approx(1e8 + OOM_MIN_BUMP_BYTES)
        # the restarted container's memory, raised at once by the window's plan
        assert e.restarted and oom_floors([e], RES) == {("u1", "main"): {"memory": e.run.peak[1]}}
        self.feed(t, restarted, [[[1, 3e9]] * 4], first_end=165.0)
        (e2,) = t.ended([pod_info(restarts=1, phase="Failed", started=100.0)], 200.0)
        assert not e2.restarted and oom_floors([e2], RES) == {}
        assert e2.run.peak == (1.0, 3e9)
        # one container, two executions: one id, two starts, both kept
        assert e2.run.run_id == e.run.run_id and not e2.run.same_execution(e.run)
        prof, _ = fold_runs({}, [("main", e.run), ("main", e2.run)], RES)
        assert prof["main"].executions == 2

    def test_a_run_first_seen_mid_way_is_not_profiled(self):
        t = RunTracker()
        p = pod_info(started=-3600.0)                 # an hour before the first window seen
        self.feed(t, p, [[[1, 1e9]] * 4])
        run = next(iter(t.runs.values()))
        assert not run.complete and run.peak is None  # tracked, not fed: it is never summarised
        assert t.ended([], 100.0) == []               # vanished, but no first window
        assert not t.runs

    def test_a_vanished_pod_ends_its_run_at_the_last_window(self):
        t = RunTracker()
        self.feed(t, pod_info(), [[[1, 1e9]] * 4, [[1, 2e9]] * 4])
        (e,) = t.ended([], 10_000.0)
        assert e.run.end == 105.0


def admission_target(max_increase=1.0):
    return {("ml", "pm"): AdmissionTarget(
        "ml", "pm", "InPlace", LabelSelector(), (), RES, (1.5, 8 * GiB), (0.0, 0.0),
        (np.inf, np.inf), "", max_increase)}


def new_pod():
    return {"metadata": {"namespace": "ml", "generateName": "train-",
                         "labels": {OPT_IN_LABEL: "true"},
                         "annotations": {MODEL_ANNOTATION: "pm"}},
            "spec": {"containers": [
                {"name": n, "image": "x", "resources": {"requests": {"cpu": "4",
                                                                     "memory": "32Gi"}}}
                for n in ("main", "sidecar")]}}


class TestAdmissionFromProfile:
    def test_a_known_container_starts_from_its_profile_the_others_pooled(self):
        prof = profile_from_runs(RES, [run(900.0, 2 * GiB, 6 * GiB)])
        p = new_pod()
        a = admission.admit(p, admission_target(None), namespace="ml", workload="Job/train",
                            profiles={"main": prof}, now=1000.0)
        a.apply(p)
        main, side = (c["resources"]["requests"] for c in p["spec"]["containers"])
        # VPA's 15 % margin on the first-window peak (no growth limit here)
        assert parse_quantity(main["memory"]) == pytest.approx(2 * GiB * 1.15, rel=1e-3)
        assert parse_quantity(main["cpu"]) == pytest.approx(1.15, rel=1e-3)
        assert parse_quantity(side["memory"]) == 8 * GiB   # pooled: no profile for it
        assert parse_quantity(side["cpu"]) == 1.5
        note = p["metadata"]["annotations"][A_ADMISSION]
        assert "workload Job/train's profile for main (1 runs)" in note
        assert p["metadata"]["annotations"][A_WORKLOAD] == "Job/train"

    def test_the_growth_limit_leaves_room_for_the_early_climb(self):
        climb = RunSummary(900.0, 600.0, (1.0, 1 * GiB), (1.0, 8 * GiB), (0.0, 120.0),
                           early=((1.0, 1 * GiB), (1.0, 8 * GiB)))
        prof = profile_from_runs(RES, [climb])
        # ×2 a window at most: the start must be at least 8 GiB / 2
        got = admission.profile_levels(admission_target(1.0)["ml", "pm"], {"main": prof},
                                       1000.0)
        assert got["main"][0][1] == pytest.approx(4 * GiB * 1.15)
        # the same function the evaluator's served start calls
        assert got["main"][0][1] == pytest.approx(prof.first_request(1000.0, 1.0)[1])

    def test_a_profile_of_other_resources_is_not_used(self):
        prof = WorkloadProfile(("memory",)).observe(
            RunSummary(900.0, 1.0, (GiB,), (GiB,), (0.0,)))
        assert admission.profile_levels(admission_target()["ml", "pm"], {"main": prof},
                                        1000.0) == {}

    def test_a_guaranteed_pod_of_a_known_workload_moves_requests_and_limits(self):
        prof = profile_from_runs(RES, [run(900.0, 2 * GiB, 6 * GiB)])
        p = new_pod()
        for c in p["spec"]["containers"]:
            c["resources"]["limits"] = dict(c["resources"]["requests"])
        a = admission.admit(p, admission_target(None), namespace="ml", workload="Job/train",
                            profiles={"main": prof}, now=1000.0, key=KEY)
        a.apply(p)
        main, side = (c["resources"] for c in p["spec"]["containers"])
        assert main["requests"] == main["limits"]            # still Guaranteed
        assert parse_quantity(main["limits"]["memory"]) == pytest.approx(2 * GiB * 1.15,
                                                                       rel=1e-3)
        # no profile: the pooled level is no limit to set on someone's job
        assert side["requests"] == side["limits"] == {"cpu": "4", "memory": "32Gi"}
        from ai4dl.controller.pods import pod_info, qos_class

        assert qos_class(pod_info(p).containers) == "Guaranteed"
        note = p["metadata"]["annotations"][A_ADMISSION]
        assert "(limits with them: the pod is Guaranteed)" in note, note
        # the author's requests are kept, sealed, for the savings and to undo
        from ai4dl.controller.podstate import admitted_identity, admitted_scope

        opened = KEY.open(admitted_scope("ml", "pm", admitted_identity(p["metadata"])),
                          p["metadata"]["annotations"][A_ADMITTED])
        assert opened.data == {"main": {"cpu": "4", "memory": "32Gi"}}

    def test_a_profiles_cpu_start_is_never_above_the_authors_request(self):
        # runs that used 0.96 core at their 1-core limit: the profile says 1.10 (VPA's margin);
        # the pod asks for 1 core of a node's 2 beside another such job (the real node:
        # OutOfcpu). Memory may start above the author's request (an OOM kill ends the run).
        prof = profile_from_runs(RES, [run(900.0, 40 * GiB, 40 * GiB, cpu=0.96)])
        p = new_pod()
        for c in p["spec"]["containers"]:
            c["resources"]["requests"]["cpu"] = "1"
            c["resources"]["limits"] = dict(c["resources"]["requests"])
        assert prof.first_request(1000.0)[0] == pytest.approx(0.96 * 1.15)
        a = admission.admit(p, admission_target(None), namespace="ml", workload="Job/train",
                            profiles={"main": prof}, now=1000.0)
        a.apply(p)
        main = p["spec"]["containers"][0]["resources"]
        assert main["requests"] == main["limits"]
        assert parse_quantity(main["limits"]["cpu"]) == 1.0
        assert parse_quantity(main["limits"]["memory"]) == pytest.approx(40 * GiB * 1.15,
                                                                        rel=1e-3)
        # a container asking for more keeps the profile's level
        levels = admission.profile_levels(admission_target(None)["ml", "pm"],
                                          {"main": prof}, 1000.0, {"main": {"cpu": 4.0}})
        assert levels["main"][0][0] == pytest.approx(0.96 * 1.15)

    def test_a_guaranteed_pod_keeps_a_resource_its_limit_range_or_pod_bounds(self):
        prof = profile_from_runs(RES, [run(900.0, 2 * GiB, 6 * GiB)])
        p = new_pod()
        for c in p["spec"]["containers"]:
            c["resources"]["limits"] = dict(c["resources"]["requests"])
        lr = admission.limit_range_rules({"metadata": {"name": "lr"}, "spec": {"limits": [
            {"type": "Container", "min": {"memory": "3Gi"}}]}})
        a = admission.admit(copy.deepcopy(p), admission_target(None), namespace="ml",
                            workload="Job/train", profiles={"main": prof}, now=1000.0,
                            limit_ranges=[lr])
        # raised to the LimitRange's min, not refused
        assert parse_quantity(dict((r, q) for _, r, q in a.changes)["memory"]) == 3 * GiB
        p["spec"]["resources"] = {"limits": {"memory": "64Gi"}}
        a = admission.admit(p, admission_target(None), namespace="ml", workload="Job/train",
                            profiles={"main": prof}, now=1000.0)
        assert [r for _, r, _ in a.changes] == ["cpu"]
        assert "memory of every container: the pod's spec.resources bounds it" in \
            a.annotations[A_ADMISSION]

    def test_a_guaranteed_start_holds_until_the_first_resize_and_the_hold_after_it(self):
        # the run's first window (its first 60 s, from its start) reached 1 GiB, its second
        # 3 GiB: the start covers the first (the first resize comes at most a window after
        # the start) and leaves room to follow the climb; from the first resize the hold
        # keeps the runs' peak with VPA's margin, so a Guaranteed limit is never cut under it
        climb = RunSummary(900.0, 600.0, (1.0, 1 * GiB), (1.0, 3 * GiB), (0.0, 60.0),
                           early=((1.0, 1 * GiB), (1.0, 3 * GiB)))
        prof = profile_from_runs(RES, [climb])
        target = admission_target(1.0)["ml", "pm"]
        levels = admission.profile_levels(target, {"main": prof}, 1000.0)
        assert levels["main"][0][1] == pytest.approx(1.5 * GiB * 1.15)     # 3 GiB / 2
        # a run summary without a shape (as stored before shapes were kept): its peak is held
        # until the point where it came
        # held as a limit (a Guaranteed pod): VPA's margin on the peak; as a request (risk,
        # what the evaluator replays): the peak; past the point where it came: nothing
        from ai4dl.rules.workload_profile import held_level

        assert held_level(prof.hold(1000.0), 30.0, as_limit=True) == pytest.approx(
            3 * GiB * 1.15)
        assert held_level(prof.hold(1000.0), 30.0) == pytest.approx(3 * GiB)
        assert held_level(prof.hold(1000.0), 60.0) == pytest.approx(3 * GiB)
        assert np.isnan(held_level(prof.hold(1000.0), 61.0, as_limit=True))
        p = new_pod()
        for c in p["spec"]["containers"]:
            c["resources"]["limits"] = dict(c["resources"]["requests"])
        a = admission.admit(p, admission_target(1.0), namespace="ml", workload="Job/train",
                            profiles={"main": prof}, now=1000.0)
        assert parse_quantity(dict((r, q) for _, r, q in a.changes)["memory"]) == \
            pytest.approx(1.5 * GiB * 1.15, rel=1e-3)
