"""The operator image's install, without a Docker engine: the Dockerfile's `operator` target runs
docker/install.sh; here the same command installs the project into a fresh virtual environment
(uv, from uv's cache when warm; PyPI otherwise) and the result must serve without torch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
INSTALL = REPO / "docker" / "install.sh"
CONSTRAINTS = REPO / "docker" / "constraints.txt"
UV = Path(sys.executable).parent / "uv"

pytestmark = pytest.mark.skipif(not UV.is_file(), reason=f"{UV} missing (make env installs it)")

PROBE = r"""
import contextlib, importlib.util, io, sys
import ai4dl.controller.handlers, ai4dl.controller.__main__, ai4dl.cli
for main in (ai4dl.controller.__main__.main, ai4dl.cli.main):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(["--help"])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "sklearn", "matplotlib"))
print("installed:", importlib.util.find_spec("torch") is not None)
print("imported:", ",".join(heavy) or "-")
"""


@pytest.fixture(scope="module")
def operator_venv(tmp_path_factory) -> Path:
    """A fresh venv with what the operator image installs (the project copied like the
    Dockerfile's COPY lines, so no build/ or *.egg-info lands in the working tree)."""
    root = tmp_path_factory.mktemp("image")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "operator", src / "operator",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (src / "docker").mkdir()
    shutil.copy2(CONSTRAINTS, src / "docker" / "constraints.txt")
    venv = root / "venv"
    env = dict(os.environ, UV=str(UV))
    env.pop("VIRTUAL_ENV", None)
    run = lambda *cmd: subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)  # noqa: E731
    r = run(str(UV), "venv", "--quiet", "--python", sys.executable, str(venv))
    assert r.returncode == 0, r.stderr
    r = run("sh", str(INSTALL), "operator", str(venv / "bin" / "python"), str(src))
    assert r.returncode == 0, f"docker/install.sh operator failed:\n{r.stdout}\n{r.stderr}"
    return venv


def test_dockerfile_uses_the_tested_install_command():
    text = (REPO / "Dockerfile").read_text()
    assert "COPY docker/install.sh /usr/local/bin/ai4dl-install" in text
    assert "ai4dl-install operator /opt/ai4dl/bin/python /src" in text
    assert "ai4dl-install trainer /opt/ai4dl/bin/python /src" in text
    for target in ("AS operator", "AS trainer"):
        assert target in text
    assert "USER 65532:65532" in text
    # ... with a passwd entry (kopf's getpass.getuser() raises KeyError without one)
    assert "nonroot:x:65532:65532:" in text
    # the default base stays the official image (operator_image.sh passes its own Debian one)
    assert "ARG BASE_IMAGE=python:${PYTHON_VERSION}-slim" in text
    # every COPY --from / FROM names a stage defined above it
    import re

    stages: list[str] = []
    args = set(re.findall(r"^ARG (\w+)=", text, re.M))
    for line in text.splitlines():
        if m := re.match(r"FROM (\S+)(?: AS (\S+))?", line):
            base, name = m.groups()
            if b := re.fullmatch(r"\$\{(\w+)\}", base):   # FROM ${BASE_IMAGE}: a declared ARG
                assert b.group(1) in args, f"FROM an undeclared ARG {base}"
            else:
                assert "/" in base or ":" in base or base in stages, f"unknown stage {base}"
            stages.append(name)
        elif m := re.match(r"COPY --from=(\S+)", line):
            assert m.group(1) in stages, f"COPY from unknown stage {m.group(1)}"
    assert stages[-1] == "operator", "the default target (last stage) must be the operator"
    assert {"operator", "trainer"} <= set(stages)
    ignore = (REPO / ".dockerignore").read_text()
    assert "!docker/install.sh" in ignore and "!operator/" in ignore
    # the pins go in too, where install.sh looks for them (SRC/docker/constraints.txt)
    assert "COPY docker/constraints.txt ./docker/constraints.txt" in text
    assert "!docker/constraints.txt" in ignore


def _pins(text: str) -> dict[str, str]:
    import re

    return {re.sub(r"[-_.]+", "-", m.group(1)).lower(): m.group(2)
            for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", text, re.M)}


def test_every_dependency_is_pinned_and_the_dev_env_uses_the_pins():
    """docker/constraints.txt pins every requirement of pyproject.toml, extras included (a
    dependency added without `make lock` would install at whatever version is newest), and
    `make env` installs through it: the committed figures come from these versions."""
    import re
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        wanted += extra
    pins = _pins(CONSTRAINTS.read_text())
    names = {re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", w).group(0)).lower()
             for w in wanted}
    assert names - set(pins) == set(), "run `make lock`: pyproject.toml has unpinned requirements"
    make = (REPO / "Makefile").read_text()
    assert "--constraint docker/constraints.txt" in make
    assert re.search(r"^\$\(STAMP\): pyproject.toml docker/constraints.txt$", make, re.M)


def test_the_image_install_gets_the_pinned_versions(operator_venv):
    """What the operator image installs is what the pins say (numpy, pydantic, kopf, ...)."""
    r = subprocess.run([str(UV), "pip", "freeze", "--python", str(operator_venv / "bin" / "python")],
                       capture_output=True, text=True, timeout=120, env=_clean_env())
    assert r.returncode == 0, r.stderr
    installed = _pins(r.stdout)
    pins = _pins(CONSTRAINTS.read_text())
    for name in ("numpy", "pydantic", "kopf", "kubernetes", "cryptography"):
        assert installed[name] == pins[name], (name, installed[name], pins[name])
    assert {n: v for n, v in installed.items() if n in pins and pins[n] != v} == {}


def _clean_env() -> dict:
    """The environment without PYTHONPATH: a developer's PYTHONPATH=$PWD/operator would make the
    fresh venv import the working tree instead of what it installed."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_operator_install_has_no_torch(operator_venv):
    py = operator_venv / "bin" / "python"
    r = subprocess.run([str(py), "-c", PROBE], capture_output=True, text=True, timeout=120,
                       cwd=operator_venv, env=_clean_env())
    assert r.returncode == 0, r.stderr
    assert "installed: False" in r.stdout, "the operator install pulled in torch"
    assert "imported: -" in r.stdout, r.stdout
    # and the package comes from the venv, not from the working tree
    r = subprocess.run([str(py), "-c", "import ai4dl; print(ai4dl.__file__)"],
                       capture_output=True, text=True, timeout=60, cwd=operator_venv,
                       env=_clean_env())
    assert str(operator_venv) in r.stdout, r.stdout


@pytest.mark.parametrize("script, words", [("ai4dl-operator", "--prometheus-url"),
                                           ("ai4dl", "train")])
def test_entrypoints_start(operator_venv, script, words):
    exe = operator_venv / "bin" / script
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120,
                       cwd=operator_venv, env={**os.environ, "PYTHONPATH": ""})
    assert r.returncode == 0, r.stderr
    assert words in r.stdout


def test_operator_entrypoint_refuses_a_missing_prometheus_url(operator_venv):
    env = {k: v for k, v in os.environ.items() if k != "AI4DL_PROMETHEUS_URL"}
    r = subprocess.run([str(operator_venv / "bin" / "ai4dl-operator")], capture_output=True,
                       text=True, timeout=120, cwd=operator_venv, env=env)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "ai4dl-operator: error: --prometheus-url (or AI4DL_PROMETHEUS_URL) is required"]


def test_installed_package_carries_the_dl_corpus(operator_venv):
    """`ai4dl evaluate dl-corpus` works from an installed package, not only from a checkout."""
    r = subprocess.run([str(operator_venv / "bin" / "python"), "-c",
                        "from ai4dl.io.loaders import DL_CORPUS as d; "
                        "print(d, sorted(p.name for p in d.iterdir()))"],
                       capture_output=True, text=True, timeout=60, cwd=operator_venv,
                       env=_clean_env())
    assert r.returncode == 0, r.stderr
    assert str(operator_venv) in r.stdout
    assert "['manifest.json', 'phases.csv.gz', 'traces.csv.gz']" in r.stdout, r.stdout
