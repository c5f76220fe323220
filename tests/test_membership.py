"""Which pods of a history pull a PhaseModel serves (ai4dl.sources.membership), one function at
a time; the trainer's integration tests run it against a real Prometheus with
kube-state-metrics series (tests/test_trainer_integration.py)."""

from __future__ import annotations

import json

import pytest

from ai4dl.crd_spec import LabelSelector
from ai4dl.errors import Ai4dlError
from ai4dl.sources import membership as mb
from ai4dl.sources.prometheus_types import PodRef

SEL = LabelSelector.model_validate({"matchLabels": {"app": "train"},
                                    "matchExpressions": [{"key": "tier", "operator": "NotIn",
                                                          "values": ["debug"]}]})


class FakeSource:
    def __init__(self, rows):
        self.rows, self.asked = rows, []

    def series(self, matchers, start, end):
        self.asked.append(matchers)
        return self.rows


def test_kube_state_metrics_label_names():
    assert mb.ksm_label("ai4dl.io/managed") == "label_ai4dl_io_managed"
    assert mb.ksm_label("app.kubernetes.io/name") == "label_app_kubernetes_io_name"


def test_membership_from_kube_state_metrics():
    on = {"label_ai4dl_io_managed": "true"}
    src = FakeSource([
        {"namespace": "ml", "pod": "a", **on, "label_app": "train"},
        {"namespace": "ml", "pod": "b", **on, "label_app": "infer"},          # another model's
        {"namespace": "ml", "pod": "c", "label_app": "train"},                # not opted in
        {"namespace": "ml", "pod": "d", **on, "label_app": "train", "label_tier": "debug"},
        {"namespace": "ml", "pod": "e", **on, "label_app": "other"},          # relabelled later:
        {"namespace": "ml", "pod": "e", **on, "label_app": "train"},          # served once
    ])
    got = mb.from_kube_state_metrics(src, SEL, ["ml", "ml-b.x"], 0, 1)
    assert got.served == {("ml", "a"): True, ("ml", "b"): False, ("ml", "c"): False,
                          ("ml", "d"): False, ("ml", "e"): True}
    # RE2-escaped for PromQL (a "-" is not escaped: PromQL refuses "\\-")
    assert src.asked == [['kube_pod_labels{namespace=~"ml|ml-b\\\\.x"}']]
    refs = [PodRef("ml", p, "main") for p in "abcdez"]
    kept, no, unknown = got.split(refs)
    assert [r.pod for r in kept] == ["a", "e"] and (no, unknown) == (3, 1)


def test_kube_state_metrics_without_the_opt_in_label_cannot_tell():
    # labels not allow-listed: kube_pod_labels exists but says nothing about opting in
    src = FakeSource([{"namespace": "ml", "pod": "a", "label_app": "train"}])
    assert mb.from_kube_state_metrics(src, SEL, ["ml"], 0, 1) is None
    assert mb.from_kube_state_metrics(FakeSource([]), SEL, ["ml"], 0, 1) is None


class FakeCore:
    def __init__(self, pods, forbidden=False):
        self.pods, self.forbidden, self.selectors = pods, forbidden, []

    def list_namespaced_pod(self, ns, label_selector, limit, _continue, _preload_content):
        from kubernetes.client.exceptions import ApiException

        if self.forbidden:
            err = ApiException(status=403, reason="Forbidden")
            err.body = json.dumps({"message": "pods is forbidden: cannot list"})
            raise err
        self.selectors.append(label_selector)

        class Answer:
            data = json.dumps({"items": [{"metadata": {"name": n, "labels": lab}}
                                         for n, lab in self.pods]}).encode()

            def release_conn(self):
                pass
        return Answer()


def test_membership_from_the_api_server():
    core = FakeCore([("a", {"ai4dl.io/managed": "true", "app": "train"})])
    got = mb.from_api_server(core, SEL, ["ml"])
    assert core.selectors == ["ai4dl.io/managed=true,app=train,tier notin (debug)"]
    kept, no, unknown = got.split([PodRef("ml", "a", "main"), PodRef("ml", "gone", "main")])
    assert [r.pod for r in kept] == ["a"] and (no, unknown) == (0, 1)
    with pytest.raises(Ai4dlError, match="cannot tell which pods of namespace ml .* forbidden"):
        mb.from_api_server(FakeCore([], forbidden=True), SEL, ["ml"])
