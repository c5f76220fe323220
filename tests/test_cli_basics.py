"""A newcomer's small things (issue 28, item 7): ``--version`` on both commands, ``python -m
ai4dl``, the model file functions exported beside the loaders, and the reference's library
snippet's document serialisable as JSON the way its comment says."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import ai4dl

REPO = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "operator")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_version_is_the_packages_and_the_charts():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert ai4dl.__version__ == project["version"]
    chart = (REPO / "charts" / "ai4dl-operator" / "Chart.yaml").read_text()
    assert re.search(rf'^appVersion: "{re.escape(ai4dl.__version__)}"$', chart, re.M)


@pytest.mark.parametrize("module", ["ai4dl", "ai4dl.controller"])
def test_version_flag(module):
    r = _run("-m", module, "--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [module.replace(".controller", "-operator"), ai4dl.__version__]


def test_python_dash_m_ai4dl_is_the_cli():
    r = _run("-m", "ai4dl", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: ai4dl ")
    r = _run("-m", "ai4dl", "no-such-command")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_model_files_are_exported_with_the_loaders(tmp_path):
    from ai4dl.method import synthetic
    from ai4dl.io import load_model, save_model
    from ai4dl.method.model import PhaseModel

    traces, _ = synthetic.generate(6, seed=1)
    model = PhaseModel(n_phases=2, epochs=2, random_state=0).fit(traces)
    path = save_model(model, tmp_path / "m.json")
    assert load_model(path).n_phases_ == 2
    doc = model.to_document()
    # the reference's snippet: the document is pydantic; JSON through model_dump(mode="json")
    text = json.dumps(doc.model_dump(mode="json", by_alias=True, exclude_none=True))
    assert json.loads(text)["schemaVersion"].startswith("ai4dl.io/phase-model/")
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        import ai4dl.io as io

        io.nothing  # noqa: B018


def test_the_reference_library_snippet_runs_as_written(tmp_path, monkeypatch):
    reference = (REPO / "docs" / "reference.md").read_text()
    snippet = reference.split("Library use (scikit-learn style):", 1)[1]
    snippet = snippet.split("```python", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(snippet, "docs/reference.md (library use)", "exec"), scope)
    assert len(scope["phases"]) == len(scope["test"]) > 0
    assert (tmp_path / "model.json").is_file()
    assert json.loads(scope["doc"].model_dump_json(by_alias=True))["schemaVersion"]


def test_split_by_a_key_names_what_it_held_out(tmp_path):
    """``--split-by family`` says which families were held out (text and JSON), so a reader
    knows which kinds of job the scores are about."""
    from ai4dl.io import load_traces

    out = tmp_path / "r.json"
    r = _run("-m", "ai4dl", "-q", "evaluate", "dl-corpus", "--window", "40", "--split-by",
             "family", "--policies", "static", "--json", str(out))
    assert r.returncode == 0, r.stderr
    traces = load_traces("dl-corpus")
    _, test = traces.split_by_group(0.3, 0, "family")
    families = sorted({e.meta["family"] for e in test})
    assert f"family held out: {', '.join(families)};" in r.stdout
    doc = json.loads(out.read_text())
    assert next(v for k, v in _walk(doc) if k == "held_out") == {"family": families}


def _walk(doc):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield k, v
            yield from _walk(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _walk(v)


def test_synthetic_by_default_writes_the_demos_training_jobs(tmp_path):
    import numpy as np

    from ai4dl.method import synthetic
    from ai4dl.io import load_traces

    r = _run("-m", "ai4dl", "-q", "synthetic", "-o", str(tmp_path / "jobs.csv"))
    assert r.returncode == 0, r.stderr
    written = load_traces(tmp_path / "jobs.csv", step=synthetic.SyntheticConfig().step)
    assert written.features == ("cpu", "memory", "gpu_util", "gpu_memory")
    demo, _ = synthetic.generate(40, seed=0)   # what cmd_demo trains on
    assert [e.name for e in written] == [e.name for e in demo]
    for w, d in zip(written, demo):
        np.testing.assert_allclose(w.values, d.values, rtol=1e-6)


def test_range_and_output_slips_are_one_line_before_any_work(tmp_path, capsys):
    """Issue 45: --phases 0, --k-range 5-2, -o naming a folder (train) or a file (plot) were
    tracebacks, the first two after the CRBM fit, the third losing the finished fit."""
    from ai4dl.cli.main import main

    traces = tmp_path / "missing.csv"           # never read: the flags are checked first
    cases = [(["train", str(traces), "--phases", "0"], "--phases 0: at least 1 phase"),
             (["train", str(traces), "--k-range", "5-2"], "--k-range 5-2: LOW-HIGH with 1 <="),
             (["train", str(traces), "-o", str(tmp_path)], "is a folder; give a file name"),
             (["train", str(traces), "-o", str(Path(__file__) / "m.json")],
              "is a file, not a folder"),
             (["plot", str(tmp_path / "model.json"), str(traces), "-o", str(__file__)],
              "is a file; give a folder")]
    for args, words in cases:
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err and err.count("\n") == 1, err


def test_every_commands_output_is_checked_before_any_work(tmp_path, capsys):
    """Issue 45: only train and plot checked their -o; synthetic, record, detect, demo,
    describe --heatmap and evaluate --json/--markdown/--plots ended in a traceback, evaluate's
    after all its work. Every output a command declares is checked before it starts: the
    inputs named here do not exist, so an input error would mean the output came second."""
    from ai4dl.cli.main import main

    missing = str(tmp_path / "missing.csv")
    folder, file = str(tmp_path), __file__
    cases = [(["synthetic", "-o", folder], "-o", "is a folder"),
             (["record", "-o", folder, "--", "true"], "-o", "is a folder"),
             (["detect", missing, missing, "-o", folder], "-o", "is a folder"),
             (["describe", missing, "--heatmap", folder], "--heatmap", "is a folder"),
             (["demo", "-o", file], "-o", "is a file"),
             (["evaluate", missing, "--json", folder], "--json", "is a folder"),
             (["evaluate", missing, "--markdown", str(Path(file) / "r.md")], "--markdown",
              "is a file, not a folder"),
             (["evaluate", missing, "--plots", file], "--plots", "is a file")]
    for args, flag, words in cases:
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith(f"ai4dl: error: {flag} ") and words in err, (args, err)
        assert "Traceback" not in err and err.count("\n") == 1, err


def test_an_output_another_command_is_writing_is_refused_at_once(tmp_path, capsys):
    """Issue 45: two commands writing one file each renamed their result onto it; the last
    won and the other's was lost without a word. The first holds the file while it runs (a
    kernel lock, as a second process would see it); the second is refused before its work;
    the lock goes when its holder ends; a train that stores its model in the cluster claims
    no model file."""
    import fcntl

    from ai4dl.cli.main import build_parser, main
    from ai4dl.errors import Ai4dlError
    from ai4dl.io.outputs import claimed_outputs

    out = tmp_path / "jobs.csv"
    args = build_parser().parse_args(["synthetic", "-o", str(out)])
    with claimed_outputs(args):                     # the first writer, still running
        assert main(["-q", "synthetic", "--executions", "2", "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == (f"ai4dl: error: {out} is being written by another ai4dl command: "
                       f"give each its own -o file\n")
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []        # the lock went with it
    assert main(["-q", "synthetic", "--executions", "2", "-o", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.csv"]

    held = tmp_path / ".model.json.ai4dl.lock"
    with open(held, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with claimed_outputs(build_parser().parse_args(
                ["train", "--phasemodel", "ns/pm", "-o", str(tmp_path / "model.json")])):
            pass                                   # --phasemodel: no model file to claim
        with pytest.raises(Ai4dlError, match="being written by another ai4dl command"):
            with claimed_outputs(build_parser().parse_args(
                    ["train", "x.csv", "-o", str(tmp_path / "model.json")])):
                pass


@pytest.mark.parametrize("after", [1.5, 3.0, 8.0])
def test_a_real_ctrl_c_exits_130_without_a_traceback_or_a_partial_file(tmp_path, after):
    """Issue 45: Ctrl-C at any moment exits 130 in one line. A real SIGINT, sent while the
    command line is imported (1.5 s), while the demo's data is made (3 s) and while it fits
    (8 s); the demo takes about a minute. Nothing half-written or held stays in its folder."""
    import signal
    import time

    out = tmp_path / "demo"
    proc = subprocess.Popen([sys.executable, "-m", "ai4dl", "-q", "demo", "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err == "ai4dl: interrupted\n", (proc.returncode, err)
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert not [n for n in left if n.endswith((".part", ".lock"))], left


def test_a_missing_extra_and_ctrl_c_are_one_line(monkeypatch, capsys):
    """Issue 45: a plain ``pip install .`` (the operator image's) ran ``ai4dl train`` into a
    ModuleNotFoundError traceback; a Ctrl-C during the imports was a traceback too."""
    import importlib

    from ai4dl import command

    cli_main = importlib.import_module("ai4dl.cli.main")    # the module (the package's
    # ``main`` attribute is the function it exports)

    def missing(argv):
        raise ModuleNotFoundError("No module named 'tqdm'", name="tqdm")
    monkeypatch.setattr(cli_main, "main", missing)
    assert command.main(["train", "x.csv"]) == 2
    err = capsys.readouterr().err
    assert err == ("ai4dl: error: this command needs the 'train' extra (module tqdm is not "
                   "installed): pip install 'ai4dl-operator[train]'\n")

    def interrupted(argv):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_main, "main", interrupted)
    assert command.main([]) == 130 and capsys.readouterr().err == "ai4dl: interrupted\n"


def test_evaluate_refuses_a_window_no_execution_outlasts(tmp_path, capsys):
    """Issue 45: --window 2000 on runs of 356-1,014 samples fitted, then printed n/a lines at
    exit 0. Refused before any fit, naming the run lengths."""
    from ai4dl.cli.main import main

    path = tmp_path / "t.csv"
    assert main(["-q", "synthetic", "-o", str(path), "--executions", "3", "--seed", "1",
                 "--no-gpu"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(path), "--window", "100000", "--policies",
                 "adaptive-max"]) == 2
    err = capsys.readouterr().err
    assert "a window of 100000 samples leaves nothing to score: the executions are " in err
    assert "Traceback" not in err and err.count("\n") == 1, err
