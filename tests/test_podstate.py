"""The operator's records on pods are sealed (ai4dl.controller.podstate): what a pod's owner
writes there is never read as the operator's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ai4dl.controller.podstate import (StateKey, admitted_identity, admitted_scope,
                                       parse_state, peek, state_scope)
from ai4dl.controller.pods import A_ADMITTED, A_STATE, pod_info, verify_pod
from ai4dl.crd import MODEL_ANNOTATION

KEY = StateKey(b"s" * 32)
#: admission's record of pod "p" of PhaseModel ml/pm (no generated name, no owner)
ADMITTED_SCOPE = admitted_scope("ml", "pm", admitted_identity({"name": "p"}))
SCOPE = state_scope("ml", "p", "uid-1")


def pod(annotations, uid="uid-1", name="p"):
    return verify_pod(pod_info({
        "metadata": {"name": name, "namespace": "ml", "uid": uid,
                     "annotations": {MODEL_ANNOTATION: "pm", **annotations}},
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running"}}), KEY)


def test_seal_and_open_round_trip_bound_to_its_scope():
    data = {"window": 1800.0, "orig": {"main": {"cpu": 2.0}}}
    text = KEY.seal(SCOPE, data)
    assert KEY.open(SCOPE, text).data == data and KEY.open(SCOPE, text).problem is None
    assert peek(text) == data                        # readable by anyone
    # another pod (uid), another namespace, another key: not the operator's record for it
    assert KEY.open(state_scope("ml", "p", "uid-2"), text).problem == "forged"
    assert KEY.open(state_scope("other", "p", "uid-1"), text).problem == "forged"
    assert StateKey(b"t" * 32).open(SCOPE, text).problem == "other-key"


@pytest.mark.parametrize("text, problem", [
    (None, "absent"),
    ('{"window": "soon"}', "unsigned"),              # the probe's malformed value, unsealed
    ("soon", "malformed"),
    ("[1, 2]", "unsigned"),
    ("x" * 70000, "malformed"),
])
def test_what_is_not_sealed_is_not_read(text, problem):
    assert KEY.open(SCOPE, text).problem == problem and KEY.open(SCOPE, text).data is None


def test_a_changed_value_breaks_the_seal():
    sealed = json.loads(KEY.seal(SCOPE, {"orig": {"main": {"cpu": 1.0}}}))
    sealed["data"]["orig"]["main"]["cpu"] = 1000.0   # the owner inflates the "original"
    assert KEY.open(SCOPE, json.dumps(sealed)).problem == "forged"
    sealed["mac"] = 5                                 # not even a string
    assert KEY.open(SCOPE, json.dumps(sealed)).problem == "forged"


def test_a_record_as_sealed_is_verified_on_its_own_bytes_and_a_crafted_one_is_not(
        monkeypatch):
    """A record in the form seal writes is verified on the data's bytes as they stand (not
    serialised again: half the cost of opening one); re-spelt (spaces, another key order) it
    is still the operator's; whatever is spliced around the genuine bytes, what opens is
    the data sealed or nothing."""
    import ai4dl.controller.podstate as podstate

    data = {"window": 1800.0, "orig": {"main": {"cpu": 2.0, "memory": 2.0 ** 34}},
            "note": 'a "quoted" \u00e9 ,"kid":"x"'}
    text = KEY.seal(SCOPE, data)
    sealed = json.loads(text)
    respelt = [json.dumps(sealed, indent=1),
               json.dumps({"mac": sealed["mac"], "kid": sealed["kid"], "data": data})]
    for other in respelt:
        assert KEY.open(SCOPE, other).data == data and KEY.open(SCOPE, other).problem is None
    payload = text[len('{"data":'):text.index(',"kid":', len(text) - 80)]
    assert json.loads(payload) == data
    tail = f',"kid":{json.dumps(sealed["kid"])},"mac":{json.dumps(sealed["mac"])}}}'
    inflated = '{"orig":{"main":{"cpu":1000.0}}}'
    # the genuine bytes first, then other data: the parser keeps the last "data"
    assert KEY.open(SCOPE, '{"data":' + payload + ',"data":' + inflated + tail
                    ).problem == "forged"
    # ... or other data first: what opens is what was sealed, never the other
    crafted = '{"data":' + inflated + ',"data":' + payload + tail.replace('"mac":',
                                                                        '"mac":"x","mac":')
    assert KEY.open(SCOPE, crafted).data == data
    assert KEY.open(SCOPE, text.replace(sealed["kid"], "k" * len(sealed["kid"]))
                    ).problem == "other-key"

    def serialised_again(*args, **kwargs):
        raise AssertionError("a record as sealed was serialised again")

    monkeypatch.setattr(podstate, "_canonical", serialised_again)
    assert KEY.open(SCOPE, text).data == data


def test_keys_are_checked_and_read_from_files(tmp_path):
    with pytest.raises(ValueError, match="at least 16 bytes"):
        StateKey(b"short")
    (tmp_path / "key").write_bytes(b"  " + b"k" * 32 + b"\n")
    assert StateKey.from_file(tmp_path / "key").kid == StateKey(b"k" * 32).kid
    with pytest.raises(ValueError, match="state key file .*missing"):
        StateKey.from_file(tmp_path / "missing")
    assert StateKey.generate().kid != StateKey.generate().kid


def test_a_rotated_key_still_opens_what_the_previous_one_sealed(tmp_path):
    """Issue 43: rotating the key dropped every pod sealed before it from the savings, for
    good. With the old key beside the new one (the Secret's ``previous`` entry), what it sealed
    still verifies; new records are sealed with the new key; without it they read as another
    key's, never as data."""
    old, new = b"o" * 32, b"n" * 32
    text = StateKey(old).seal("scope", {"cpu": "4"})
    (tmp_path / "key").write_bytes(new)
    assert StateKey.from_file(tmp_path / "key").open("scope", text).problem == "other-key"
    (tmp_path / "previous").write_bytes(old + b"\n")
    rotated = StateKey.from_file(tmp_path / "key")
    got = rotated.open("scope", text)
    assert got.problem is None and got.data == {"cpu": "4"} and "previous" in got.detail
    assert rotated.open("other-scope", text).problem == "forged"     # still bound to its scope
    resealed = rotated.seal("scope", {"cpu": "4"})
    assert json.loads(resealed)["kid"] == StateKey(new).kid
    assert StateKey(new).open("scope", resealed).data == {"cpu": "4"}
    (tmp_path / "previous").write_bytes(b"short")
    with pytest.raises(ValueError, match="previous state key must have at least 16 bytes"):
        StateKey.from_file(tmp_path / "key")


def test_a_sealed_state_is_still_checked_field_by_field():
    assert parse_state({"window": 1.0, "lastIncrease": {"main": {"cpu": 3.0}}})[1] == ""
    for bad in ({"window": "soon"}, {"window": float("inf")}, {"orig": {"main": {"cpu": -1}}},
                {"surprise": 1}, [1]):
        data, why = parse_state(bad)
        assert data == {} and why


def test_verify_pod_reads_only_the_operators_records():
    good = pod({A_STATE: KEY.seal(SCOPE, {"window": 1800.0}),
                A_ADMITTED: KEY.seal(ADMITTED_SCOPE, {"main": {"cpu": "4"}})})
    assert good.state() == {"window": 1800.0} and good.state_problem is None
    assert good.admitted == {"main": {"cpu": "4"}} and good.admitted_problem is None
    # the probe: "soon" in one pod's state; forged admitted of 1000 cores
    bad = pod({A_STATE: json.dumps({"window": "soon"}),
               A_ADMITTED: json.dumps({"main": {"cpu": "1000"}})})
    assert bad.state() == {} and bad.state_problem == "unsigned" and bad.state_untrusted
    assert bad.admitted is None and bad.admitted_problem == "unsigned"
    # a record sealed for another pod, copied onto this one
    copied = pod({A_STATE: KEY.seal(state_scope("ml", "q", "uid-9"), {"window": 1800.0})})
    assert copied.state() == {} and copied.state_problem == "forged"
    # sealed but not a state (an operator bug or an older version): malformed, not an error
    odd = pod({A_STATE: KEY.seal(SCOPE, {"window": "soon"})})
    assert odd.state() == {} and odd.state_problem == "malformed" and "window" in odd.state_detail
    # none at all: a new pod, nothing untrusted
    new = pod({})
    assert new.state() == {} and new.state_problem is None and not new.state_untrusted


def test_a_pod_with_a_rejected_record_is_planned_as_new_and_holds_its_decreases(fitted_model):
    """Its window is planned (it is not skipped, nor is the PhaseModel stopped), without the
    window id or last increases it claims, and decreases wait for the cool-down; the pods
    beside it are planned as usual."""
    from ai4dl.controller.plan import plan_window
    from test_plan import WINDOW_START, spec_for

    spec = spec_for(fitted_model, cooldownWindows=1)
    rng = np.random.default_rng(0)
    x = np.abs(rng.normal(1.0, 0.1, (43, len(fitted_model.features_))))
    idx = {f: i for i, f in enumerate(fitted_model.features_)}
    x[:, idx["memory"]] = 2 ** 30                    # 1 GiB used, 32 GiB requested: decrease
    x[:, idx["cpu"]] = 0.5
    samples = {("ml", n, "main"): x for n in ("forged", "honest")}

    def make(name, annotations):
        return verify_pod(pod_info({
            "metadata": {"name": name, "namespace": "ml", "uid": name,
                         "annotations": {MODEL_ANNOTATION: "pm", **annotations}},
            "spec": {"containers": [{"name": "main", "resources": {
                "requests": {"cpu": "8", "memory": "32Gi"}}}]},
            "status": {"phase": "Running"}}), KEY)
    forged = make("forged", {A_STATE: json.dumps({"window": WINDOW_START})})   # "handled"
    honest = make("honest", {})
    plan = plan_window(spec, fitted_model, [forged, honest], samples, 3, WINDOW_START,
                       "2027-01-01T00:00:00Z")
    by = {p.pod.name: p for p in plan.pods}
    assert by["forged"].skipped != "already-handled"          # the forged window id is not read
    assert by["honest"].resize is not None                    # decreased
    held = by["forged"].containers[0]
    assert held.target == held.current or by["forged"].resize is None   # decreases held
    # the forged record is replaced at once by the operator's own (sealed by the runtime)
    assert A_STATE in by["forged"].annotations
    assert json.loads(by["forged"].annotations[A_STATE])["window"] == WINDOW_START


def test_an_admitted_record_verifies_only_on_pods_of_the_identity_it_was_sealed_for():
    """Issue 43: a sealed admission record copied between pods of one PhaseModel verified (it
    was bound to the namespace and PhaseModel only) and inflated the savings. Now it is bound
    to the pod as admission saw it: its generateName (or name) and its controllers' uids.
    Pods of one Job share it (and their template's requests); another Job's pod does not."""
    def job_pod(generate, owner, record, name):
        return verify_pod(pod_info({
            "metadata": {"name": name, "generateName": generate, "namespace": "ml",
                         "uid": f"uid-{name}",
                         "ownerReferences": [{"kind": "Job", "name": generate.rstrip("-"),
                                              "uid": owner, "controller": True}],
                         "annotations": {MODEL_ANNOTATION: "pm", A_ADMITTED: record}},
            "spec": {"containers": [{"name": "main",
                                     "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"}}), KEY)

    # what admission saw: no name yet, the generateName and the Job as owner
    seen = {"generateName": "train-", "ownerReferences": [
        {"kind": "Job", "name": "train", "uid": "job-1", "controller": True}]}
    record = KEY.seal(admitted_scope("ml", "pm", admitted_identity(seen)),
                      {"main": {"cpu": "4"}})
    assert job_pod("train-", "job-1", record, "train-abcde").admitted == {"main": {"cpu": "4"}}
    assert job_pod("train-", "job-1", record, "train-fghij").admitted_problem is None  # same Job
    other_job = job_pod("train-", "job-2", record, "train-zzzzz")
    assert other_job.admitted is None and other_job.admitted_problem == "forged"
    other_name = job_pod("eval-", "job-1", record, "eval-aaaaa")
    assert other_name.admitted is None and other_name.admitted_problem == "forged"
    # a non-controller owner reference (a garbage-collection link) does not change it
    assert admitted_identity({**seen, "ownerReferences": [
        *seen["ownerReferences"], {"kind": "ConfigMap", "uid": "cm", "controller": False}]}) \
        == admitted_identity(seen)
