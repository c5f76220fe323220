"""The ai4dl CLI on every real data set, the demo, and one-line errors for bad input."""

import json
import subprocess
import sys

import numpy as np
import pytest

from ai4dl.cli import main

DATASETS = {
    "ai4dl-vr": ("ai4dl_samples/sample-vr.csv", []),
    "ai4dl-dlaas": ("ai4dl_samples/sample-dlaas.csv", []),
    "gcd": ("gcd_vms/GCD_VMs.tar.gz", []),
    "alibaba": ("alibaba_genai2026_pods", []),
}


@pytest.mark.parametrize("name", list(DATASETS))
def test_train_detect_describe_plot_on_real_data(name, shared_data, tmp_path, capsys):
    rel, extra = DATASETS[name]
    traces = str(shared_data / rel)
    model = tmp_path / "model.json"
    assert main(["-q", "train", traces, "-o", str(model), "--epochs", "4", "--k-range", "2-5",
                 *extra]) == 0
    doc = json.loads(model.read_text())
    assert doc["schemaVersion"] == "ai4dl.io/phase-model/v2" and len(doc["centroids"]) >= 2
    # auto's choice for a 10-minute window where the features are requests' units (cores,
    # bytes); none for percent (GCD) or memory fractions (Alibaba): nothing to size
    assert ("policyChoice" in doc) == name.startswith("ai4dl"), name

    out = tmp_path / "detect.csv"
    assert main(["-q", "detect", str(model), traces, "-o", str(out), *extra]) == 0
    rows = out.read_text().splitlines()
    assert rows[0] == "execution,timestamp,phase,distance,novel"
    assert len(rows) - 1 == doc["fit"]["n_samples"]  # every sample gets a phase
    phases = {int(r.split(",")[2]) for r in rows[1:]}
    assert phases <= set(range(len(doc["centroids"])))

    capsys.readouterr()
    assert main(["describe", str(model)]) == 0
    text = capsys.readouterr().out
    assert "## Phases" in text and "## Transition matrix" in text and "## Prototypes" in text

    plots = tmp_path / "plots"
    assert main(["-q", "plot", str(model), traces, "-o", str(plots), "--max-executions", "1",
                 *extra]) == 0
    for png in ("distributions.png", "phase-graph.png", "report.png"):
        assert (plots / png).stat().st_size > 10_000
    assert len(list(plots.glob("trace-*.png"))) == 1


def test_detect_json_and_describe_json(fitted_model, synthetic_test, tmp_path, capsys):
    from ai4dl.io.modelfile import save_model

    traces, _ = synthetic_test
    model = save_model(fitted_model, tmp_path / "m.json")
    csv = tmp_path / "t.csv"
    with open(csv, "w") as fh:
        fh.write("execution,timestamp," + ",".join(traces.features) + "\n")
        for e in traces[:2]:
            for t, row in zip(e.times, e.values):
                fh.write(f"{e.name},{t:.0f}," + ",".join(f"{v:.6g}" for v in row) + "\n")
    capsys.readouterr()
    assert main(["-q", "detect", str(model), str(csv), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in data["executions"]] == [e.name for e in traces[:2]]
    assert np.array_equal(data["executions"][0]["phase"], fitted_model.predict(traces[0]))
    assert main(["describe", str(model), "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert "phases" in described and "crbm" not in described


def test_demo_writes_its_report(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["-q", "demo", "-o", str(out), "--executions", "16"]) == 0
    for name in ("model.json", "describe.md", "report.png", "phase-graph.png"):
        assert (out / name).exists()
    text = (out / "describe.md").read_text()
    ari = float(text.split("adjusted Rand index against the generator's true phases = ")[1][:5])
    assert ari >= 0.9


def _run(*args):
    """The installed console script, so a traceback would be visible on stderr."""
    return subprocess.run([sys.executable, "-m", "ai4dl", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("setup, args, expect", [
    (None, ["detect", "{tmp}/missing.json", "{tmp}/x.csv"], "cannot read model"),
    ("notjson", ["describe", "{tmp}/bad.json"], "not a JSON model document"),
    ("badshape", ["describe", "{tmp}/bad.json"], "crbm.W has shape"),
    (None, ["train", "{tmp}/nope.csv"], "nope.csv"),
    ("badcsv", ["train", "{tmp}/bad.csv"], "bad.csv:3: column 'cpu'"),
    (None, ["train", "{tmp}/x.csv", "--phases", "many"], "--phases"),
    (None, ["train", "{tmp}/x.csv", "--column", "oops"], "--column expects NAME=VALUE"),
])
def test_bad_input_gives_one_line_and_exit_2(fitted_model, tmp_path, setup, args, expect):
    from ai4dl.io.modelfile import save_model

    (tmp_path / "x.csv").write_text("execution,timestamp,cpu,memory\na,0,1,2\na,15,1,2\n")
    if setup == "notjson":
        (tmp_path / "bad.json").write_text("{not json")
    elif setup == "badshape":
        save_model(fitted_model, tmp_path / "bad.json")
        d = json.loads((tmp_path / "bad.json").read_text())
        d["crbm"]["W"] = d["crbm"]["W"][:-1]
        (tmp_path / "bad.json").write_text(json.dumps(d))
    elif setup == "badcsv":
        (tmp_path / "bad.csv").write_text("execution,timestamp,cpu,memory\na,0,1,2\na,15,abc,2\n")
    proc = _run(*[a.format(tmp=tmp_path) for a in args])
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ai4dl: error: "), proc.stderr
    assert expect in lines[0]
    assert "Traceback" not in proc.stderr


def test_every_flag_has_help_text():
    import argparse

    from ai4dl.cli.main import build_parser
    from ai4dl.controller.__main__ import build_parser as operator_parser

    missing = []

    def walk(parser, prefix):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, f"{prefix} {name}")
            elif a.option_strings and not a.help:
                missing.append(f"{prefix} {a.option_strings[-1]}")
    walk(build_parser(), "ai4dl")
    walk(operator_parser(), "ai4dl-operator")
    assert not missing, missing
