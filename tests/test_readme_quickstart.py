"""The README's quick start, command by command (issue 45: "from nothing to a resized pod in
fifteen minutes"): each command's values, files, flags and names are what the product takes.

What runs where:

* here, offline: the README is short (≤ 300 lines); its `helm install` renders (helm itself,
  ``$REG`` as a registry) with the image it names; `deploy/examples/job.yaml` is a valid
  PhaseModel and a Job whose pods opt in; `ai4dl train`'s arguments are the CLI's; the
  `kubectl patch` gives a valid PhaseModel in `InPlace`; `pm`, the annotation read and the
  Event reason watched are the CRD's short name and what the operator writes;
* on the real API server: the example applies (``tests/test_helm.py::test_server_side_dry_run``);
* on the real node: ``tests/test_real_node_chart.py`` installs the chart with the quick start's
  own `--set` values (:func:`helm_install_sets`; the image and Prometheus mapped to the ones
  built and started there), then runs steps 3-6 from this README's text (:func:`command`) and
  the example's file: `kubectl apply`, `ai4dl train`, the `kubectl get`s, the `kubectl patch`,
  down to the operator's Resized Event and a pod resized in place.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MARKER = "<!-- quickstart:"
MAX_LINES = 300
#: what ``$REG`` stands for in the README's commands
REGISTRY = "registry.example.com/ml-platform"


def quickstart_commands() -> list[list[str]]:
    """The quick start's shell commands, continuation lines joined, comments dropped, ``$REG``
    expanded, each split as a shell would (one list per command; ``&&`` splits too)."""
    text = README.read_text()
    assert MARKER in text, "the README's quick start lost its marker"
    block = text.split(MARKER, 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    joined = re.sub(r"\\\n\s*", " ", block)
    commands = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not line or line.startswith("REG="):
            continue
        for part in line.replace("$REG", REGISTRY).split("&&"):
            commands.append(shlex.split(part))
    return commands


def command(*head: str) -> list[str]:
    """The quick start's one command that starts with ``head``."""
    found = [c for c in quickstart_commands() if c[:len(head)] == list(head)]
    assert len(found) == 1, (head, found)
    return found[0]


def helm_install_sets() -> dict[str, str]:
    """The quick start's `helm install` values (``--set k=v``), in order."""
    cmd = command("helm", "install")
    sets = {}
    for flag, value in zip(cmd, cmd[1:]):
        if flag == "--set":
            key, _, val = value.partition("=")
            sets[key] = val
    return sets


def test_the_readme_is_an_introduction_of_at_most_300_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, len(lines)
    screen = "\n".join(lines[:45])                       # one screen of a terminal
    assert "make demo" in screen and "make test" in screen
    assert "Where it stands" in screen                   # the honest headline
    for section in ("## Quick start on a cluster", "## Troubleshooting", "## How it compares",
                    "## Security: what a namespace owner can and cannot do"):
        assert section in README.read_text(), section


def test_the_quick_start_builds_and_installs_the_image_it_names(helm, helm_env):
    build = command("docker", "build")
    assert build[build.index("--target") + 1] == "operator"
    tag = build[build.index("-t") + 1]
    assert command("docker", "push")[2] == tag
    install = command("helm", "install")
    assert install[2:4] == ["ai4dl-operator", "charts/ai4dl-operator"]
    sets = helm_install_sets()
    assert f"{sets['image.repository']}:{sets['image.tag']}" == tag
    args = [a for pair in sets.items() for a in ("--set", "=".join(pair))]
    out = subprocess.run([str(helm), "template", "ai4dl-operator", str(REPO / install[3]),
                          "--namespace", install[install.index("-n") + 1], *args],
                         capture_output=True, text=True, env=helm_env, timeout=120)
    assert out.returncode == 0, out.stderr
    (dep,) = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "Deployment"]
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == tag
    # without the image the chart says how to build it, in one line (not a placeholder image)
    bare = [a for k, v in sets.items() if not k.startswith("image.")
            for a in ("--set", f"{k}={v}")]
    out = subprocess.run([str(helm), "template", "x", str(REPO / install[3]), *bare],
                         capture_output=True, text=True, env=helm_env, timeout=120)
    assert out.returncode != 0 and "image.repository is required" in out.stderr


def test_the_quick_start_example_opts_a_job_in():
    from ai4dl.crd import MODEL_ANNOTATION, OPT_IN_LABEL
    from ai4dl.crd_spec import PhaseModelSpec
    from ai4dl.trainer import MIN_TRAIN_EXECUTIONS

    apply = command("kubectl", "apply")
    namespace = command("kubectl", "create", "namespace")[3]
    docs = list(yaml.safe_load_all((REPO / apply[apply.index("-f") + 1]).read_text()))
    (pm,) = [d for d in docs if d["kind"] == "PhaseModel"]
    (job,) = [d for d in docs if d["kind"] == "Job"]
    assert pm["metadata"]["namespace"] == job["metadata"]["namespace"] == namespace
    PhaseModelSpec.model_validate(pm["spec"])
    meta = job["spec"]["template"]["metadata"]
    assert meta["labels"][OPT_IN_LABEL] == "true"
    assert meta["annotations"][MODEL_ANNOTATION] == pm["metadata"]["name"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= meta["labels"].items()
    # step 4 can fit: the trainer needs MIN_TRAIN_EXECUTIONS pods to fit on and one to score on
    assert job["spec"].get("parallelism", 1) >= MIN_TRAIN_EXECUTIONS + 1, job["spec"]
    assert job["spec"].get("completions", 1) >= job["spec"].get("parallelism", 1)
    # step 6: the patch the README gives makes a valid PhaseModel that resizes in place
    patch = command("kubectl", "patch")
    assert patch[2:5] == ["pm", pm["metadata"]["name"], "-n"] and patch[5] == namespace
    body = json.loads(patch[patch.index("-p") + 1])
    merged = json.loads(json.dumps(pm["spec"]))
    merged["policy"].update(body["spec"]["policy"])
    assert PhaseModelSpec.model_validate(merged).policy.mode == "InPlace"


def test_the_quick_start_trains_with_the_clis_own_arguments():
    from ai4dl.cli.main import build_parser

    train = command("ai4dl", "train")
    args = build_parser().parse_args(train[1:])
    assert args.prometheus and args.since == "1h"
    namespace, name = args.phasemodel.split("/")
    docs = list(yaml.safe_load_all((REPO / "deploy" / "examples" / "job.yaml").read_text()))
    (pm,) = [d for d in docs if d["kind"] == "PhaseModel"]
    assert (namespace, name) == (pm["metadata"]["namespace"], pm["metadata"]["name"])
    assert f'namespace="{namespace}"' in args.selector
    assert helm_install_sets()["prometheus.url"] == args.prometheus


def test_the_quick_start_watches_what_the_operator_writes():
    from ai4dl.controller.pods import A_RECOMMENDATION

    crd = yaml.safe_load((REPO / "crds" / "phasemodels.ai4dl.io.yaml").read_text())
    assert "pm" in crd["spec"]["names"]["shortNames"]
    assert command("kubectl", "get", "pm")[:3] == ["kubectl", "get", "pm"]
    jsonpath = [c for c in quickstart_commands() if c[:3] == ["kubectl", "get", "pod"]][0]
    assert A_RECOMMENDATION.replace(".", "\\.") in " ".join(jsonpath)
    events = command("kubectl", "get", "events")
    assert "reason=Resized" in events
    source = (REPO / "operator" / "ai4dl" / "controller" / "plan_pod.py").read_text()
    assert '"Resized"' in source


from test_helm import helm, helm_env  # noqa: E402,F401 (fixtures)
