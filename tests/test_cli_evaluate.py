"""``ai4dl evaluate``: the printed table, the strict JSON, the figures, the calibration on the
Google trace (../shared/docs/evaluation.md) and one-line errors for bad input."""

from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np
import pytest

from ai4dl.cli import main
from ai4dl.policy import catalog

POLICIES = catalog.names()
#: docs/results/verdict_stats.py, the verdict's statistics (research: outside the package)
RESULTS_SCRIPT = "verdict_stats.py"

PNG = b"\x89PNG\r\n\x1a\n"


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _strict_json(text: str):
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))


def _tables(text: str) -> list[list[dict]]:
    """Every markdown table of the report, as rows of {header: cell}."""
    tables, rows = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            header, _sep, *body = rows
            tables.append([dict(zip(header, r)) for r in body])
            rows = []
    return tables


def _score_rows(text: str) -> list[dict]:
    """Cells of the score table (the first markdown table of the report)."""
    rows = _tables(text)[0]
    assert list(rows[0])[:3] == ["policy", "resource", "alloc ÷ oracle"]
    return rows


@pytest.fixture(scope="module")
def long_csv(tmp_path_factory):
    from ai4dl.method import synthetic

    traces, _ = synthetic.generate(12, seed=21)
    path = tmp_path_factory.mktemp("evaluate") / "jobs.csv"
    with open(path, "w") as fh:
        fh.write("execution,timestamp,cpu,memory\n")
        for e in traces:
            cpu, mem = e.features.index("cpu"), e.features.index("memory")
            for t, row in zip(e.times, e.values):
                fh.write(f"{e.name},{t:.0f},{row[cpu]:.6g},{row[mem]:.6g}\n")
    return path


@pytest.fixture(scope="module")
def full_run(long_csv, tmp_path_factory):
    """Every policy, a small fitted model, all outputs and the sweep: run once."""
    out = tmp_path_factory.mktemp("evaluate-out")
    argv = ["evaluate", str(long_csv), "--epochs", "5", "--phases", "4", "--window", "20",
            "--plots", str(out / "plots"), "--json", str(out / "result.json"),
            "--markdown", str(out / "result.md"), "--sweep"]
    rc, stdout, stderr = _run(argv)
    return rc, stdout, stderr, out


def test_table_has_a_row_per_policy_and_resource(full_run):
    rc, stdout, stderr, out = full_run
    assert rc == 0, stderr
    first = stdout.splitlines()[0]
    assert first.startswith("Data: ") and "window 20 samples = 5 min at 15 s" in first
    assert "cold start" in first and "included" in first and "train executions" in first
    assert "initial request: served, as the operator would" in first
    rows = _score_rows(stdout)
    assert [(r["policy"], r["resource"]) for r in rows] == \
        [(p, res) for p in POLICIES for res in ("cpu", "memory")]  # POLICIES order, oracle last
    for r in rows:
        if r["policy"] == "oracle":
            assert r["alloc ÷ oracle"] == "1.000"
            assert r["fulfilment (0 % / 10 % tol.)"] == "100.0 % / 100.0 %"
        assert r["allocation"].endswith("core-h" if r["resource"] == "cpu" else "GiB-h")
    # then one table per target at the matched margin: windows short, OOM risk, worst
    # shortfall, the wins rule
    for t in ("95 %", "97 %"):
        assert f"At {t} matched fulfilment" in stdout
    matched = _tables(stdout)[1:3]
    for table in matched:
        assert [(r["policy"], r["resource"]) for r in table] == \
            [(r["policy"], r["resource"]) for r in rows]
        for r in table:
            if r["resource"] == "cpu":
                assert r["OOM-risk windows"] == "-"
            else:
                assert r["OOM-risk windows"].replace(",", "").isdigit()
                assert r["windows short"].endswith(f"({r['OOM-risk windows']})")
            unit = "cores" if r["resource"] == "cpu" else "GiB"
            assert f" {unit} / " in r["worst shortfall (abs / ÷ usage)"]
            assert r["wins vs adaptive-max"] in (("—",) if r["policy"] in (
                "adaptive-max", "oracle") else ("yes", "no", "n/a"))
        assert next(r for r in table if r["policy"] == "oracle")["windows short"] == "0.00 % (0)"
    assert "auto (chosen on the train side only" in stdout
    assert "Savings at 95 % matched fulfilment" in stdout and r"policy \ vs" in stdout
    assert (out / "result.md").read_text() == stdout
    # progress on stderr, stage by stage
    assert "fitting the phase model" in stderr and "policy phase-proactive" in stderr
    assert "sweep: 54 replays" in stderr


def test_json_is_strict_and_complete(full_run):
    rc, _, _, out = full_run
    assert rc == 0
    doc = _strict_json((out / "result.json").read_text())
    assert doc["config"]["window"] == 20 and doc["config"]["safety"] is None
    assert doc["config"]["policies"] == list(POLICIES)
    assert doc["model"]["n_phases"] == 4 and doc["model"]["params"] == {"n_phases": 4,
                                                                        "epochs": 5}
    c = doc["counts"]
    assert c["train_executions"] + c["test_executions"] == 12 and c["split"] is True
    assert doc["policies"] == list(POLICIES)
    for res in ("cpu", "memory"):
        oracle = doc["scores"]["oracle"][res]
        assert oracle["vs_oracle"] == pytest.approx(1.0) and oracle["fulfilment"] == 1.0
        for p in POLICIES:
            s = doc["scores"][p][res]
            assert set(s["margin_at"]) == set(s["vs_oracle_at"]) == {"0.95", "0.97"}
            assert set(s["short_windows_at"]) == set(s["worst_shortfall_rel_at"]) == \
                {"0.95", "0.97"}
            assert {"allocation", "fulfilment_10", "under_samples", "worst_shortfall",
                    "oom_windows", "resizes", "vs_static_peak", "scored_windows",
                    "short_window_share_at", "worst_shortfall_at"} <= set(s)
        m = doc["savings"]["matrix"][res]
        assert set(m) == set(POLICIES) and "static" not in m["static"]
        a, b = (doc["scores"][p][res]["vs_oracle_at"]["0.95"] for p in ("phase", "static"))
        if isinstance(a, float) and isinstance(b, float):
            assert m["phase"]["static"] == pytest.approx(1 - a / b)
    assert set(doc["auto"]) == {"0.95", "0.97"}
    for choice in doc["auto"].values():
        assert set(choice["winners"]) <= set(POLICIES) and len(choice["winners"]) == 2
    assert doc["wins"]["phase-headroom"]["cpu"]["0.95"] in (True, False, None)
    assert len(doc["per_execution"]) == c["test_executions"]
    ex = doc["per_execution"][0]
    assert ex["name"].startswith("job-") and set(ex["scores"]) == set(POLICIES)
    # phase policies k x margin, adaptive-stat k, the head-room table's fit targets
    assert len(doc["sweep"]) == 2 * 7 * 3 + 7 + 5
    assert {p["policy"] for p in doc["sweep"]} == {"phase", "phase-proactive", "adaptive-stat",
                                                   "phase-headroom"}
    assert sorted(p["target"] for p in doc["sweep"] if "target" in p) == \
        [0.9, 0.93, 0.95, 0.97, 0.99]


def test_plots_are_written(full_run):
    rc, _, _, out = full_run
    assert rc == 0
    plots = out / "plots"
    names = sorted(p.name for p in plots.glob("*.png"))
    assert "tradeoff.png" in names and "matched-fulfilment.png" in names
    assert len([n for n in names if n.startswith("allocation-")]) == 2   # --plot-executions 2
    for p in plots.glob("*.png"):
        data = p.read_bytes()
        assert data[:8] == PNG and len(data) > 20_000, p.name


def test_quiet_and_no_model_needed(long_csv):
    rc, stdout, stderr = _run(["-q", "evaluate", str(long_csv), "--policies",
                               "oracle,adaptive-max", "--window", "20", "--test-fraction", "0"])
    assert rc == 0 and stderr == ""
    rows = _score_rows(stdout)
    assert [r["policy"] for r in rows] == ["adaptive-max"] * 2 + ["oracle"] * 2
    assert "no train/test split: all 12 executions" in stdout.splitlines()[0]
    assert "phase model" not in stdout.splitlines()[0]


def test_unreachable_targets_are_words_not_numbers(long_csv):
    """A target no margin reaches prints 'unreachable' and stays valid JSON."""
    from ai4dl.evaluation import report, report_json
    from ai4dl.evaluation.evaluate import EvaluationConfig, run_evaluation
    from ai4dl.io.loaders import load_traces

    traces = load_traces(long_csv)
    result = run_evaluation(traces, EvaluationConfig(window=20, test_fraction=0,
                                                     policies=("adaptive-max", "oracle")))
    s = result.scores["adaptive-max"][0]
    s.vs_oracle_at[0.95] = math.inf
    s.margin_at[0.95] = math.inf
    s.vs_static_peak = math.nan
    ctx = report.make_context(traces, result, str(long_csv))
    text = report.render_markdown(result, ctx)
    row = _score_rows(text)[0]
    assert row["alloc ÷ oracle at 95 %"] == "unreachable"
    assert row["margin for 95 %"] == "unreachable"
    assert row["alloc ÷ static peak"] == "n/a"
    doc = _strict_json(json.dumps(report_json.to_json(result, ctx), allow_nan=False))
    cpu = doc["scores"]["adaptive-max"]["cpu"]
    assert cpu["vs_oracle_at"]["0.95"] == "unreachable" and cpu["vs_static_peak"] is None
    assert doc["savings"]["matrix"]["cpu"]["adaptive-max"]["oracle"] == "unreachable"


def test_pareto_front():
    from ai4dl.evaluation.report_sweep import pareto_front

    fulfil = [0.80, 0.90, 0.85, 0.99, 0.95, float("nan")]
    cost = [0.90, 1.00, 1.10, 1.30, 1.40, 0.50]
    # (0.85, 1.10) is beaten by (0.90, 1.00); (0.95, 1.40) by (0.99, 1.30); NaN is left out
    assert pareto_front(fulfil, cost) == [0, 1, 3]


def test_calibration_on_gcd(shared_data):
    """The reactive baseline on the Google trace matches ../shared/docs/evaluation.md."""
    tar = shared_data / "gcd_vms" / "GCD_VMs.tar.gz"
    if not tar.exists():
        pytest.skip(f"{tar} not found")
    rc, stdout, stderr = _run(["-q", "evaluate", str(tar), "--policies",
                               "adaptive-max,adaptive-stat,static,oracle", "--window", "12",
                               "--test-fraction", "0", "--initial", "peak",
                               "--exclude-cold-start"])
    assert rc == 0, stderr
    rows = {(r["policy"], r["resource"]): r for r in _score_rows(stdout)}
    assert [p for p, _ in rows][::2] == ["static", "adaptive-max", "adaptive-stat", "oracle"]
    at95 = "alloc ÷ oracle at 95 %"
    assert (rows["adaptive-max", "cpu"][at95], rows["adaptive-max", "memory"][at95]) == \
        ("1.053", "1.008")
    assert (rows["adaptive-max", "cpu"]["alloc ÷ oracle at 97 %"],
            rows["adaptive-max", "memory"]["alloc ÷ oracle at 97 %"]) == ("1.091", "1.015")
    assert rows["adaptive-max", "cpu"]["margin for 95 %"] == "+5.3 %"
    assert rows["static", "cpu"]["alloc ÷ oracle"] == "1.330"
    assert rows["static", "memory"]["alloc ÷ oracle"] == "1.130"
    assert "window 12 samples = 60 min at 300 s" in stdout.splitlines()[0]


def test_window_in_seconds_is_the_same_window_as_in_samples(long_csv):
    """``--window-seconds`` counts as ``train --window-seconds`` and a PhaseModel's
    windowSeconds do: 300 s over these 15 s samples is ``--window 20``, the same report."""
    base = ["-q", "evaluate", str(long_csv), "--policies", "oracle,adaptive-max",
            "--test-fraction", "0"]
    rc1, by_samples, _ = _run([*base, "--window", "20"])
    rc2, by_seconds, _ = _run([*base, "--window-seconds", "300"])
    assert rc1 == rc2 == 0 and by_seconds == by_samples
    assert "window 20 samples = 5 min at 15 s" in by_seconds


@pytest.mark.parametrize("flags, words", [
    (["--policies", "adaptive-max,nope"], "unknown policy 'nope'"),
    (["--window", "0"], "--window"),
    (["--window-seconds", "310"], "not a whole number of the traces' 15 s steps: pass "
                                  "--window-seconds 315"),
    (["--window", "20", "--window-seconds", "300"], "give the window once"),
    (["--window-seconds", "-5"], "--window-seconds must be a positive number"),
    (["--resources", "cpu,gpu"], "no feature 'gpu'"),
])
def test_bad_input_is_one_line_and_exit_2(long_csv, flags, words):
    _one_line_error(long_csv, flags, words)


def test_vpa_on_a_resource_it_does_not_know_is_one_line(tmp_path):
    path = tmp_path / "gpu.csv"
    rows = ["execution,timestamp,memory,gpu_util"] + [f"e{i % 3},{15 * (i // 3)},{1e9 + i},{i % 7}"
                                                      for i in range(300)]
    path.write_text("\n".join(rows) + "\n")
    _one_line_error(path, ["--resources", "memory,gpu_util", "--policies", "vpa,oracle"],
                    "'vpa' recommends cpu and memory only, not 'gpu_util'")


def _one_line_error(long_csv, flags, words):
    rc, stdout, stderr = _run(["evaluate", str(long_csv), *flags])
    assert rc == 2 and stdout == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ai4dl: error: ") and words in lines[0]


def _doc(seed: int, auto: tuple, am: tuple, ast: tuple, vpa: float) -> dict:
    """A minimal evaluate document: (allocation ÷ oracle, windows short) at 97 % per policy."""
    def s(cost, short=0):
        return {"cpu": {"vs_oracle_at": {"0.97": cost}, "short_windows_at": {"0.97": short}}}
    return {"config": {"seed": seed, "targets": [0.97]}, "resources": ["cpu"],
            "scores": {"auto": s(*auto), "adaptive-max": s(*am), "adaptive-stat": s(*ast),
                       "vpa": s(vpa)},
            "auto": {"0.97": {"winners": ["phase-headroom"]}}}


def test_verdict_tally_counts_cells_per_data_set_and_only_the_bar_in_the_total(results_script):
    verdict_rows, verdict_tally = results_script.verdict_rows, results_script.verdict_tally

    met = ((1.04, 10), (1.05, 10), (1.06, 12), 1.2)
    missed = ((1.04, 11), (1.05, 10), (1.06, 12), 1.2)      # one window more
    runs = [("a", _doc(0, *met)), ("a", _doc(1, *missed)), ("a", _doc(2, *met)),
            ("b", _doc(0, *missed)), ("b", _doc(1, *met)),
            ("extra", _doc(0, *met))]
    lines = verdict_tally(verdict_rows(runs), bar=["a", "b"]).splitlines()
    cells = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:4]]
             for ln in lines[2:]}
    assert cells["a"] == ["2 of 3", "1 of 1"]        # seeds 0 and 2 met; the first seed met
    assert cells["b"] == ["1 of 2", "0 of 1"]
    assert cells["extra"] == ["1 of 1", "1 of 1"]    # listed, but outside the bar's total
    assert cells["**the bar's data sets** (2)"] == ["**3 of 5**", "**1 of 2**"]


def test_verdict_applies_the_bar_and_counts_seeds(full_run, results_script):
    verdict_rows, verdict_table = results_script.verdict_rows, results_script.verdict_table

    runs = [("toy", _doc(0, (1.04, 10), (1.05, 10), (1.06, 12), 1.2)),      # met
            ("toy", _doc(1, (1.04, 11), (1.05, 10), (1.06, 12), 1.2)),      # one window more
            ("toy", _doc(2, (1.055, 9), (1.06, 10), (1.05, 12), 1.2)),      # dearer than stat
            ("toy", _doc(3, (1.04, 9), (1.05, 10), (1.06, 12), 1.03))]      # not below VPA
    (row,) = verdict_rows(runs)
    assert (row["met"], row["runs"], row["seeds"]) == (1, 4, [0, 1, 2, 3])
    assert row["first"]["met"] and row["first"]["choice"] == "phase-headroom"
    assert row["cost_gap"] == pytest.approx(np.mean([1.04 / 1.05, 1.04 / 1.05, 1.055 / 1.05,
                                                     1.04 / 1.05]) - 1)
    assert row["short_gap"] == pytest.approx(np.mean([0, 0.1, -0.1, -0.1]))
    table = verdict_table([row])
    assert "1 of 4" in table and "1.040 (phase-headroom)" in table and "10 / 10" in table
    # the real document of an evaluate run goes through it too (every target, every resource)
    doc = _strict_json((full_run[3] / "result.json").read_text())
    rows = verdict_rows([("synthetic", doc)])
    assert {(r["resource"], r["target"]) for r in rows} == {
        (res, t) for res in ("cpu", "memory") for t in (0.95, 0.97)}
    for r in rows:
        c = r["first"]
        assert c["met"] == (c["cost"] <= c["reactive"] and c["short"] <= c["ref_short"]
                            and c["cost"] < c["vpa"])


def test_restated_cpu_bar_is_the_mean_gap_within_one_standard_error(results_script):
    restated_cpu_rows, restated_cpu_table = (results_script.restated_cpu_rows,
                                             results_script.restated_cpu_table)

    def with_krr(doc, krr):
        doc["scores"]["krr"] = {"cpu": {"vs_oracle_at": {"0.97": krr}}}
        return doc

    # gaps to the better reactive policy: -1 %, +0.5 %, -0.5 %: mean -0.33 % <= 0
    tie = [("t", with_krr(_doc(s, (c, 0), (1.0, 0), (1.01, 0), 1.2), 1.3))
           for s, c in enumerate((0.99, 1.005, 0.995))]
    (row,) = restated_cpu_rows(tie)
    assert row["gap"] == pytest.approx(np.mean([-0.01, 0.005, -0.005]))
    assert row["se"] == pytest.approx(np.std([-0.01, 0.005, -0.005], ddof=1) / np.sqrt(3))
    assert row["met"] and row["vs_vpa"] < 0 and row["vs_krr"] < 0
    # dearer by more than one standard error: missed
    dear = [("d", _doc(s, (c, 0), (1.0, 0), (1.01, 0), 1.2))
            for s, c in enumerate((1.02, 1.021, 1.019))]
    assert not restated_cpu_rows(dear)[0]["met"]
    # within the noise but above KRR on average: missed
    above_krr = [("k", with_krr(d, 0.9)) for _, d in tie]
    assert not restated_cpu_rows(above_krr)[0]["met"]
    assert "**missed**" in restated_cpu_table(restated_cpu_rows(dear))


@pytest.mark.parametrize("d", [0.0077, -0.3, 1e-6, 12.5])
def test_one_differing_seed_is_within_one_standard_error_whatever_its_size(d, results_script):
    """Four seeds agree exactly (two policies served the same allocation), one differs by d:
    the mean is d ÷ 5 and so is its standard error. Rounding must not call that resolved."""
    mean_se, side_of_one_se = results_script.mean_se, results_script.side_of_one_se

    mean, se = mean_se([d, 0.0, 0.0, 0.0, 0.0])
    assert mean == pytest.approx(d / 5) and se == pytest.approx(abs(d) / 5)
    assert side_of_one_se(mean, se) == 0
    # two seeds that agree on the side are beyond it
    mean, se = mean_se([d, d, 0.0, 0.0, 0.0])
    assert side_of_one_se(mean, se) == (1 if d > 0 else -1)
    assert side_of_one_se(d, math.nan) == 0
    assert all(math.isnan(v) for v in mean_se([None, math.nan]))
    assert mean_se([2.0])[0] == 2.0 and math.isnan(mean_se([2.0])[1])


def test_the_restated_table_gives_vpa_and_krr_gaps_their_noise(results_script):
    """The bar asks auto to be below VPA on average: the table says when the seeds cannot tell
    which side the mean is on."""
    restated_cpu_rows, restated_cpu_table = (results_script.restated_cpu_rows,
                                             results_script.restated_cpu_table)

    # auto = the better reactive policy at every seed; VPA 0.5 % below it at one seed of five
    runs = [("v", _doc(s, (1.0, 0), (1.0, 0), (1.01, 0), 0.995 if s == 0 else 1.0))
            for s in range(5)]
    (row,) = restated_cpu_rows(runs)
    assert row["vs_vpa"] > 0 and row["vs_vpa_se"] == pytest.approx(row["vs_vpa"])
    assert not row["met"]                      # the bar asks for a mean below VPA's
    line = restated_cpu_table([row]).splitlines()[-1]
    assert "(not resolved)" in line and "**missed**" in line
    # clearly above VPA at every seed: resolved, no such words
    runs = [("w", _doc(s, (1.0, 0), (1.0, 0), (1.01, 0), 0.95 + 0.001 * s)) for s in range(5)]
    line = restated_cpu_table(restated_cpu_rows(runs)).splitlines()[-1]
    assert "(not resolved)" not in line.split("|")[5] and "**missed**" in line


def test_the_verdict_script_says_which_file_it_cannot_read(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "docs" / "results" / "verdict.py"
    bad = tmp_path / "gcd-1h-s0.json"
    bad.write_text("{")
    for args, words in (([str(bad)], f"cannot read {bad}"),
                        ([str(tmp_path / "none-s0.json")], "No such file"),
                        ([], "no `ai4dl evaluate --json` documents")):
        r = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_phasemodel_replay_takes_its_window_from_the_phasemodel():
    """With --phasemodel the window is the PhaseModel's windowSeconds: a --window beside it
    would be silently ignored, so it is refused before anything is read."""
    for flag in (["--window", "20"], ["--window-seconds", "600"]):
        rc, stdout, stderr = _run(["evaluate", "--prometheus", "http://127.0.0.1:1",
                                   "--selector", 'namespace="a"', "--phasemodel", "ns/pm", *flag])
        assert rc == 2 and stdout == ""
        assert stderr.strip() == ("ai4dl: error: --phasemodel: the window is the PhaseModel's "
                                  "spec.windowSeconds; drop --window/--window-seconds")
