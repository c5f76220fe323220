"""Workload identity (issue 42): the job a pod belongs to, read from the pod alone, with the
suffixes Kubernetes generates stripped and the ``ai4dl.io/workload`` label as the override."""

import pytest

from ai4dl.kube.workload import Workload, strip_generated, workload_of


def pod(name="p", labels=None, owner=None, generate_name=None):
    meta = {"name": name, "namespace": "ns", "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "x/v1", "kind": owner[0], "name": owner[1],
                                    "uid": "u", "controller": True}]
    if generate_name:
        meta["generateName"] = generate_name
    return {"metadata": meta}


@pytest.mark.parametrize("body,expected", [
    # a Job's pods, its retries' and its ranks' (an indexed Job): the Job
    (pod("train-0-x7k2p", {"batch.kubernetes.io/job-name": "train"}, ("Job", "train")),
     ("Job", "train")),
    # a Job submitted with generateName (train-x7k2p), re-submitted as train-b5c9z
    (pod("train-x7k2p-abcde", owner=("Job", "train-x7k2p")), ("Job", "train")),
    (pod("train-b5c9z-fghjk", owner=("Job", "train-b5c9z")), ("Job", "train")),
    # a name that only looks like a suffix keeps it (vowels are not in the generated alphabet)
    (pod("x", owner=("Job", "train-model")), ("Job", "train-model")),
    # a CronJob's Jobs, <cronjob>-<minutes since the epoch>
    (pod("x", owner=("Job", "nightly-29345760")), ("CronJob", "nightly")),
    # a Deployment through its ReplicaSet (pod-template-hash)
    (pod("web-5d8f7c9b46-x7k2p", {"pod-template-hash": "5d8f7c9b46"},
         ("ReplicaSet", "web-5d8f7c9b46")), ("Deployment", "web")),
    (pod("x", owner=("StatefulSet", "db")), ("StatefulSet", "db")),
    # Kubeflow: the training job owns its pods
    (pod("bert-worker-3", {"training.kubeflow.org/job-name": "bert"}, ("PyTorchJob", "bert")),
     ("PyTorchJob", "bert")),
    (pod("bert-worker-3", {"training.kubeflow.org/job-name": "bert"}), ("TrainingJob", "bert")),
    # a JobSet: each replicated job is a child Job; the JobSet is the workload
    (pod("js-workers-0-1-x7k2p", {"jobset.sigs.k8s.io/jobset-name": "js"},
         ("Job", "js-workers-0")), ("JobSet", "js")),
    # RayJob, by KubeRay's labels, or its cluster's name
    (pod("h", {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "rj",
               "ray.io/cluster": "rj-raycluster-x7k2p"}, ("RayCluster", "rj-raycluster-x7k2p")),
     ("RayJob", "rj")),
    (pod("h", {"ray.io/cluster": "rj-raycluster-x7k2p"}), ("RayJob", "rj")),
    # bare pods
    (pod("solo-x7k2p", generate_name="solo-"), ("Pod", "solo")),
    (pod("solo"), ("Pod", "solo")),
])
def test_the_top_controller_with_generated_suffixes_stripped(body, expected):
    w = workload_of(body)
    assert (w.kind, w.name) == expected
    assert w.key == f"{expected[0]}/{expected[1]}"


def test_the_label_overrides_and_a_bad_one_is_ignored():
    labels = {"ai4dl.io/workload": "resnet-sweep", "batch.kubernetes.io/job-name": "trial-7"}
    assert workload_of(pod(labels=labels, owner=("Job", "trial-7"))) == \
        Workload("Label", "resnet-sweep", "label")
    for bad in ("-x", "a" * 64, "has space", ""):
        got = workload_of(pod(labels={"ai4dl.io/workload": bad}, owner=("Job", "trial-7")))
        assert got.key == "Job/trial-7", bad


def test_all_ranks_of_one_job_are_one_workload():
    ranks = [pod(f"ddp-{i}-x7k2p", {"batch.kubernetes.io/job-name": "ddp"}, ("Job", "ddp"))
             for i in range(8)]
    assert {workload_of(p).key for p in ranks} == {"Job/ddp"}


def test_strip_generated_only_strips_kubernetes_suffixes():
    assert strip_generated("a-b5c9z") == "a"
    assert strip_generated("a-b5c9") == "a-b5c9"        # four characters: not generated
    assert strip_generated("a-hello") == "a-hello"      # vowels: a word, not a suffix
