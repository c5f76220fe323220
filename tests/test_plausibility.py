"""No silent nonsense (issue 28 items 1-3): implausible units and timestamps, a model applied to
data it was not fitted on, a window longer than the data. Each mistake: one line naming the file
and the flag to pass, exit 2, and no model written; the shipped data sets trip none of it."""

from __future__ import annotations

import importlib
import io
import json
import tarfile

import numpy as np
import pytest
from pydantic import ValidationError

from ai4dl.method import synthetic
from ai4dl.cli import main
from ai4dl.errors import Ai4dlError, TraceError, one_line
from ai4dl.method.model import PhaseModel
from ai4dl.method.plausibility import check_before_fit, check_levels, check_runs
from ai4dl.method.traces import Execution, TraceSet
from fake_api import RawAnswer

GiB = 2.0 ** 30


def jobs(n: int = 4, step: float = 15.0, seed: int = 1) -> TraceSet:
    cfg = synthetic.SyntheticConfig(n_features=2, step=step, epochs=(2, 3))
    return synthetic.generate(n, seed=seed, config=cfg)[0]


def write_long(path, traces, *, t=lambda t: t, cpu=lambda c: c, memory=lambda m: m,
               features=("cpu", "memory")):
    """A long CSV of ``traces``, each column passed through its function (a unit mistake)."""
    cols = {"cpu": cpu, "memory": memory}
    lines = ["execution,timestamp," + ",".join(features)]
    for e in traces:
        for ti, row in zip(e.times, e.values.astype(np.float64)):
            vals = [repr(float(cols[f](row[e.features.index(f)]))) for f in features]
            lines.append(f"{e.name},{float(t(ti))!r},{','.join(vals)}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def run(argv, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().err


def refused(argv, capsys, *parts: str) -> str:
    """The command exits 2 with one error line holding every part (and no traceback)."""
    code, err = run(argv, capsys)
    lines = [line for line in err.splitlines() if line.startswith("ai4dl: error:")]
    assert code == 2 and len(lines) == 1, err
    assert "Traceback" not in err and "validation error" not in err, err
    for part in parts:
        assert part in lines[0], (part, lines[0])
    return lines[0]


# ----------------------------------------------------------------------------- 1. units, times
@pytest.mark.parametrize("scale,unit", [(1e3, "ms"), (1e6, "us"), (1e9, "ns")])
def test_epoch_timestamps_in_ms_us_ns_are_refused_naming_the_unit(tmp_path, capsys, scale,
                                                                   unit):
    path = write_long(tmp_path / "t.csv", jobs(2), t=lambda t: t * scale)
    out = tmp_path / "m.json"
    refused(["train", path, "-o", str(out), "--epochs", "1"], capsys, "t.csv: column "
            "'timestamp'", "are not unix seconds", f"pass --unit timestamp={unit}")
    assert not out.exists()
    code, _ = run(["-q", "train", path, "-o", str(out), "--epochs", "1", "--no-policy",
                   "--unit", f"timestamp={unit}"], capsys)
    assert code == 0 and out.exists()


def test_relative_timestamps_in_ms_are_refused(tmp_path, capsys):
    """Relative times (0, 15000, ...) look like seconds by magnitude; their spacing, 1000
    steps, gives them away."""
    path = write_long(tmp_path / "r.csv", jobs(2), t=lambda t: (t - 1.7e9) * 1e3)
    refused(["train", path, "-o", str(tmp_path / "m.json")], capsys,
            "r.csv: column 'timestamp'",
            "a median 15000 s apart", "1000 times the 15 s step",
            "pass --unit timestamp=ms")


def test_one_sample_executions_are_refused_with_the_likely_cause(tmp_path, capsys):
    """Samples 15 s apart read at --step 1 (a gap > 8 steps splits): every sample would be
    its own execution (the 37,636 one-sample executions of the issue)."""
    path = write_long(tmp_path / "o.csv", jobs(2))
    out = tmp_path / "m.json"
    refused(["train", path, "--step", "1", "-o", str(out)], capsys, "o.csv",
            "executions are one sample long", "--max-gap-steps x --step (8 x 1 s)",
            "--unit timestamp=ms")
    assert not out.exists()


def test_memory_below_a_page_is_refused_naming_the_unit(tmp_path, capsys):
    """Jobs of 3-10 GiB: in GiB below a page (refused outright), in MiB below a program
    (refused unless the unit is stated)."""
    out = tmp_path / "m.json"
    gib = write_long(tmp_path / "gib.csv", jobs(2), memory=lambda m: m / 2 ** 30)
    refused(["train", gib, "-o", str(out), "--unit", "memory=bytes"], capsys,
            "gib.csv: column 'memory'", "below one page (4096 bytes)",
            "pass --unit memory=MiB")
    path = write_long(tmp_path / "mib.csv", jobs(2), memory=lambda m: m / 2 ** 20)
    refused(["train", path, "-o", str(out)], capsys, "mib.csv: column 'memory'",
            "less than a Python process with numpy (32 MiB)", "pass --unit memory=MiB",
            "or --unit memory=bytes if it really is bytes")
    assert not out.exists()
    from ai4dl.io.loaders import load_traces

    assert len(load_traces(path, units={"memory": "bytes"})) == 2   # stated: the data may be
    for unit in ("MiB", "Mi"):           # the Kubernetes suffix a platform engineer types
        code, _ = run(["-q", "train", path, "-o", str(out), "--epochs", "1", "--no-policy",
                       "--unit", f"memory={unit}"], capsys)
        assert code == 0
        assert json.loads(out.read_text())["features"][1] == {"name": "memory", "unit": "bytes"}


def test_memory_in_kib_is_refused_naming_kib(tmp_path, capsys):
    """Issue 45: jobs of 0.6-11 GiB exported in KiB are 0.6-11 "MiB" of bytes, which passed
    the 1 MiB rule and made a 5.8 MiB model. Below a Python process (32 MiB): refused unless
    stated, naming KiB; stated, the data may be right."""
    path = write_long(tmp_path / "kib.csv", jobs(3), memory=lambda m: m / 1024)
    out = tmp_path / "m.json"
    refused(["train", path, "-o", str(out)], capsys, "kib.csv: column 'memory'",
            "less than a Python process with numpy (32 MiB), let alone a DL job",
            "pass --unit memory=KiB", "--unit memory=bytes if it really is bytes")
    assert not out.exists()
    code, _ = run(["-q", "train", path, "-o", str(out), "--epochs", "1", "--no-policy",
                   "--unit", "memory=KiB"], capsys)
    assert code == 0
    levels = [p["p99"][1] for p in json.loads(out.read_text())["phases"]]
    assert max(levels) > 2 ** 30             # GiB again, as the jobs were


def test_cpu_in_percent_is_refused_naming_percent(tmp_path, capsys):
    """Issue 45: a 0.05-0.6-core job in percent of a core is a 5-60 "core" job, which passed
    the 64-core rule. Above 16 cores: refused unless stated, naming percent-of-core."""
    small = jobs(3)
    for e in small:
        e.values[:, 0] = 0.05 + 0.55 * (e.values[:, 0] - e.values[:, 0].min()) / np.ptp(
            e.values[:, 0])
    path = write_long(tmp_path / "pct.csv", small, cpu=lambda c: 100 * c)
    out = tmp_path / "m.json"
    refused(["train", path, "-o", str(out)], capsys, "pct.csv: column 'cpu'",
            "more than 16 per container", "pass --unit cpu=percent-of-core if it is percent "
            "of a core", "or --unit cpu=cores if it really is cores")
    code, _ = run(["-q", "train", path, "-o", str(out), "--epochs", "1", "--no-policy",
                   "--unit", "cpu=percent-of-core"], capsys)
    assert code == 0
    assert max(p["p99"][0] for p in json.loads(out.read_text())["phases"]) <= 0.6 * 1.001


def test_a_cumulative_cpu_counter_is_refused_whatever_its_unit(tmp_path, capsys):
    """Issue 45: container_cpu_usage_seconds_total exported without rate(): the old hint said
    millicores, and following it fitted the counter's ramp at exit 0. The counter is named,
    with or without --unit, and a fit of any TraceSet refuses it too."""
    counters = jobs(3)
    for e in counters:
        e.values[:, 0] = np.cumsum(e.values[:, 0] * e.step)      # core-seconds so far
    path = write_long(tmp_path / "counter.csv", counters)
    out = tmp_path / "m.json"
    for extra in ([], ["--unit", "cpu=m"], ["--unit", "cpu=cores"]):
        refused(["train", path, "-o", str(out), *extra], capsys, "counter.csv: column 'cpu'",
                "never falls, as a cumulative counter does", "give its rate")
    assert not out.exists()
    with pytest.raises(TraceError, match="cumulative counter"):
        PhaseModel(epochs=1).fit(counters)
    check_levels(jobs(3), flags=True)       # a rate that climbs in an epoch is no counter


def test_a_counter_in_runs_too_short_for_the_counter_rule_is_hinted_at(tmp_path, capsys):
    """Runs of fewer than COUNTER_MIN_SAMPLES samples escape the counter rule; the many-cores
    refusal they meet instead names the counter too, not only millicores or percent (a hint
    followed blindly would fit the counter's ramp)."""
    from ai4dl.method.plausibility import COUNTER_MIN_SAMPLES

    import dataclasses

    def cut(cpu):
        out = []
        for e in jobs(3):
            v = e.values[:COUNTER_MIN_SAMPLES - 2].astype(np.float64)
            v[:, 0] = cpu(v[:, 0])
            out.append(dataclasses.replace(e, times=e.times[:len(v)], values=v))
        return out

    # core-seconds so far: a counter of 8 samples
    path = write_long(tmp_path / "short.csv", cut(lambda c: 40.0 + np.cumsum(np.abs(c) + 1)))
    refused(["train", path, "-o", str(tmp_path / "m.json")], capsys, "short.csv: column 'cpu'",
            "more than 16 per container", "a cumulative counter: give its rate")
    # a level that falls: no counter, and no counter in the hint
    path = write_long(tmp_path / "rates.csv",
                      cut(lambda c: 40.0 + 5.0 * np.sin(np.arange(len(c)))))
    line = refused(["train", path, "-o", str(tmp_path / "r.json")], capsys,
                   "more than 16 per container")
    assert "cumulative counter" not in line


def test_the_operator_refuses_a_model_of_kib_read_as_bytes(fitted_model):
    """A model fitted on KiB read as bytes (a 5.8 MiB "DL job") is valid JSON: the operator's
    spec check refuses it (Degraded/InvalidModel, no plan), so admission would not ask for a
    few MB per pod either (it reads the model through the same check)."""
    from ai4dl.controller.runtime import WindowRunner
    from ai4dl.crd_spec import PhaseModelSpec

    doc = json.loads(fitted_model.to_document().model_dump_json(by_alias=True))
    j = [f["name"] for f in doc["features"]].index("memory")
    for p in doc["phases"]:
        for key in ("mean", "std", "min", "max", "p50", "p90", "p95", "p99"):
            p[key][j] /= 1024
    doc["scaler"]["mean"][j] /= 1024
    doc["scaler"]["scale"][j] /= 1024
    features = [{"name": f["name"], "query": f["name"] + "{{{selector}}}"}
                for f in doc["features"]]
    spec = {"stepSeconds": 15, "windowSeconds": 600, "model": doc, "features": features,
            "selector": {"matchLabels": {"app": "x"}}}
    with pytest.raises(ValueError, match=r"spec.model: the model's 'memory' reaches only "
                                         r"[0-9.]+ MiB .* fitted on KiB read as bytes"):
        PhaseModelSpec.model_validate(spec).validated_model()

    class Custom:
        def patch_namespaced_custom_object_status(self, *a, **kw):
            return RawAnswer()

    runner = WindowRunner(core_api=None, custom_api=Custom(), source=None, namespace="ml",
                          name="pm")
    report = runner.run({"metadata": {"namespace": "ml", "name": "pm"}, "spec": spec}, pods=[])
    assert report.degraded_reason == "InvalidModel" and report.plan is None
    assert "fitted on KiB read as bytes" in report.error


def test_millicores_are_refused_before_the_fit(tmp_path, capsys):
    """Millicores read as cores: above any machine (p99 > 1024) refused outright; above 16
    cores refused unless the unit is stated. Both before the fit (the issue: 22 s of
    training, then a 24-line traceback)."""
    traces = jobs(3)
    beyond = write_long(tmp_path / "big.csv", traces, cpu=lambda c: 1000 * c)
    out = tmp_path / "m.json"
    code, err = run(["train", beyond, "-o", str(out)], capsys)
    assert code == 2 and "training on" not in err and not out.exists(), err
    refused(["train", beyond, "-o", str(out)], capsys, "big.csv: column 'cpu'",
            "more than any machine has (1024)", "pass --unit cpu=m")
    large = write_long(tmp_path / "large.csv", traces, cpu=lambda c: 100 * c)
    refused(["train", large, "-o", str(out)], capsys, "large.csv: column 'cpu'",
            "more than 16 per container", "--unit cpu=percent-of-core if it is percent",
            "--unit cpu=cores if it really is cores")
    assert not out.exists()
    code, _ = run(["-q", "train", beyond, "-o", str(out), "--epochs", "1", "--no-policy",
                   "--unit", "cpu=m"], capsys)
    assert code == 0
    code, _ = run(["-q", "detect", str(out), large, "-o", str(tmp_path / "d.csv"),
                   "--unit", "cpu=cores"], capsys)
    assert code == 0                      # stated: the data may be right


def test_a_fit_refuses_implausible_data_itself():
    """Any TraceSet, whatever loaded it: memory below a page, cpu beyond any machine,
    one-sample executions (library users get the same refusal, before the fit)."""
    t = 1.7e9 + 15.0 * np.arange(40)
    rng = np.random.default_rng(0)

    def ts(cpu, mem, n=40):
        return TraceSet([Execution(f"e{i}", t[:n], np.column_stack([cpu(n), mem(n)]),
                                   ("cpu", "memory"), ("cores", "bytes"), step=15.0)
                         for i in range(3)])

    with pytest.raises(TraceError, match="below one page"):
        PhaseModel(epochs=1).fit(ts(lambda n: rng.uniform(0, 1, n),
                                    lambda n: rng.uniform(100, 900, n)))
    with pytest.raises(TraceError, match=r"more than any machine has \(1024\)"):
        PhaseModel(epochs=1).fit(ts(lambda n: rng.uniform(500, 3000, n),
                                    lambda n: rng.uniform(1e8, 1e9, n)))
    with pytest.raises(TraceError, match="3 of 3 executions are one sample long"):
        PhaseModel(epochs=1).fit(ts(lambda n: rng.uniform(0, 1, n),
                                    lambda n: rng.uniform(1e8, 1e9, n), n=1))
    # all-zero memory (a CPU-only job's gpu_memory, say) is no unit mistake
    check_levels(ts(lambda n: rng.uniform(0, 1, n), lambda n: np.zeros(n)))


def test_the_shipped_data_sets_trip_no_check(shared_data):
    from ai4dl.io.loaders import load_traces

    for path in ("ai4dl_samples/sample-vr.csv", "ai4dl_samples/sample-dlaas.csv",
                 "gcd_vms/GCD_VMs.tar.gz", "alibaba_genai2026_pods"):
        ts = load_traces(shared_data / path)
        check_before_fit(ts)
        check_levels(ts, flags=True)          # as strict as a long table with no --unit
    corpus = load_traces("dl-corpus")         # a long CSV: loaded through every check
    check_before_fit(corpus)
    for seed in range(3):
        check_before_fit(synthetic.generate(20, seed=seed)[0])
        check_levels(synthetic.generate(20, seed=seed)[0], flags=True)
        check_runs(synthetic.generate(20, seed=seed)[0])


# ----------------------------------------------------------------------------- 2. model vs data
@pytest.fixture(scope="module")
def model_1s(tmp_path_factory):
    """A model fitted at a 1 s step (cpu cores, memory bytes), as `train dl-corpus` makes."""
    from ai4dl.io.modelfile import save_model

    m = PhaseModel(n_phases=2, epochs=2, random_state=0).fit(jobs(4, step=1.0))
    return str(save_model(m, tmp_path_factory.mktemp("m") / "model.json"))


def gcd_tar(path, days: int = 3, n: int = 40):
    """A small GCD_VMs archive: cpu and memory in percent, 300 s apart."""
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w:gz") as tf:
        for d in range(1, days + 1):
            data = "\n".join(f"{a:.2f} {b:.2f}" for a, b in rng.uniform(5, 60, (n, 2)))
            info = tarfile.TarInfo(f"GCD_VMs/vm_7_{d}")
            info.size = len(data.encode())
            tf.addfile(info, io.BytesIO(data.encode()))
    return str(path)


def test_detect_warns_when_most_samples_are_novel(model_1s, tmp_path, capsys):
    """Issue 45: `detect` on data the model does not describe (here: jobs with 3x the cpu and
    40x the memory of its training jobs, in its own units) said "novel 92-100 %" and nothing
    else: now a warning line with the share and the likely causes, even with -q; on its own
    kind of data, none."""
    out = str(tmp_path / "d.csv")
    big = write_long(tmp_path / "big.csv", jobs(3, step=1.0, seed=5), cpu=lambda c: 3 * c,
                     memory=lambda m: 40 * m)
    code, err = run(["-q", "detect", model_1s, big, "-o", out, "--step", "1"], capsys)
    assert code == 0
    (line,) = [x for x in err.splitlines() if x.startswith("ai4dl: warning:")]
    assert "% of samples are novel for this model" in line
    assert "other units than the model's, or a model of another workload?" in line
    same = write_long(tmp_path / "same.csv", jobs(3, step=1.0, seed=5))
    code, err = run(["-q", "detect", model_1s, same, "-o", out, "--step", "1"], capsys)
    assert code == 0 and "warning" not in err, err


def test_detect_reads_at_the_model_step_and_refuses_another(model_1s, tmp_path, capsys):
    path = write_long(tmp_path / "d.csv", jobs(2, step=1.0, seed=5))
    out = tmp_path / "d-out.csv"
    code, err = run(["detect", model_1s, path, "-o", str(out)], capsys)
    assert code == 0 and "resampling at the model's step, 1 s" in err, err
    refused(["detect", model_1s, path, "--step", "15", "-o", str(out)], capsys,
            "d.csv: the model was fitted at a step of 1 s, the data is at 15 s",
            "pass --step 1")


@pytest.mark.parametrize("command", ["detect", "plot", "evaluate"])
def test_a_model_refuses_data_in_other_units_or_features(model_1s, tmp_path, capsys, command):
    extra = {"detect": ["-o", str(tmp_path / "o.csv")], "plot": ["-o", str(tmp_path / "p")],
             "evaluate": ["--model", model_1s, "--json", str(tmp_path / "e"),
                          "--policies", "phase"]}[command]
    model_arg = [] if command == "evaluate" else [model_1s]
    gcd = gcd_tar(tmp_path / "g.tar.gz")         # percent, 300 s: the GCD case
    refused([command, *model_arg, gcd, *extra], capsys,
            "the model's 'cpu' is in cores, the data's in percent")
    cpu_only = write_long(tmp_path / "c.csv", jobs(2, step=1.0), features=("cpu",))
    refused([command, *model_arg, cpu_only, *extra], capsys,
            "the model was fitted on cpu, memory; the data has cpu (no memory)")
    assert not (tmp_path / "p").exists() and not (tmp_path / "e").exists()


# ----------------------------------------------------------------------------- 3. the window
def test_train_refuses_a_window_longer_than_every_run_before_the_fit(tmp_path, capsys):
    """`ai4dl train dl-corpus` (1 s, runs of 192-424 s) with the default 600 s window stored
    head-room tables fitted on 0 windows."""
    out = tmp_path / "m.json"
    code, err = run(["train", "dl-corpus", "-o", str(out)], capsys)
    line = refused(["train", "dl-corpus", "-o", str(out)], capsys,
                   "dl-corpus: every training execution is at most one window long",
                   "--window-seconds 600 = 600 samples of 1 s",
                   "the longest execution is 424 samples, 424 s",
                   "--window-seconds 423 or less fits", "or --no-policy")
    assert "training on" not in err and not out.exists(), (line, err)


def test_a_window_that_does_not_fit_the_step_is_one_line(tmp_path, capsys):
    """At a 300 s step the default 600 s window is 2 steps (was: "1 validation error for
    PhaseModelSpec")."""
    path = write_long(tmp_path / "s.csv", jobs(3))
    refused(["train", path, "--step", "300", "-o", str(tmp_path / "m.json")], capsys,
            "--window-seconds 600 must be a whole number of steps, at least 4, of the data's "
            "300 s step: pass --window-seconds 1200")


def test_gcd_default_window_says_why_no_policy_in_one_line(tmp_path, capsys):
    out = tmp_path / "g.json"
    code, err = run(["train", gcd_tar(tmp_path / "g.tar.gz"), "-o", str(out), "--epochs", "1",
                     "--k-range", "2-3"], capsys)
    assert code == 0 and "validation error" not in err, err
    assert "no policy choice stored: feature 'cpu' is in 'percent'; requests need 'cores' " \
           "(nothing to size)" in err
    assert "policyChoice" not in json.loads(out.read_text())


def test_window_problem_names_a_window_that_fits():
    from ai4dl.trainer import window_problem

    runs = list(jobs(3, step=1.0))
    longest = max(len(e) for e in runs)
    assert window_problem(runs, longest - 1, 1.0) is None
    text = window_problem(runs, longest, 1.0, "windowSeconds")
    assert f"windowSeconds {longest - 1} or less fits" in text and "\n" not in text


# ----------------------------------------------------------------------------- train --phasemodel
def trainer_args(argv):
    from ai4dl.cli.main import build_parser

    return build_parser().parse_args(["train", *argv, "--phasemodel", "ml/pm"])


def test_train_phasemodel_reads_at_spec_step_and_refuses_another(tmp_path, capsys):
    from ai4dl.cli.trainer import RunLog, _traces
    from ai4dl.crd_spec import PhaseModelSpec

    spec = PhaseModelSpec.model_validate({"stepSeconds": 5, "windowSeconds": 600})
    path = write_long(tmp_path / "t.csv", jobs(2, step=1.0))
    capsys.readouterr()
    executions, _ = _traces(trainer_args([path]), spec, RunLog("text"))
    assert executions[0].step == 5.0            # not the long table's default 15 s
    assert "resampling at the PhaseModel's spec.stepSeconds, 5 s" in capsys.readouterr().err
    with pytest.raises(Ai4dlError) as ei:
        _traces(trainer_args([path, "--step", "1"]), spec, RunLog("text"))
    assert "the traces are at a step of 1 s, PhaseModel ml/pm serves at spec.stepSeconds 5: " \
           "pass --step 5" in str(ei.value)
    gcd = PhaseModelSpec.model_validate({"stepSeconds": 300, "windowSeconds": 3000})
    with pytest.raises(Ai4dlError) as ei:
        _traces(trainer_args([gcd_tar(tmp_path / "g.tar.gz")]), gcd, RunLog("text"))
    assert "'cpu' is in percent, PhaseModel ml/pm's query gives cores" in str(ei.value)


def test_train_phasemodel_refuses_a_model_step_other_than_the_spec(fitted_model):
    """The rule the trainer's candidate and the operator share: spec.model's stepSeconds is
    spec.stepSeconds (the operator: Degraded/InvalidModel, no resize;
    test_faults_bad_input.test_a_model_fitted_at_another_step_resizes_nothing)."""
    from ai4dl.crd_spec import PhaseModelSpec

    doc = json.loads(fitted_model.to_document().model_dump_json(by_alias=True))
    assert doc["stepSeconds"] == 15.0
    features = [{"name": f["name"], "query": f["name"] + "{{{selector}}}"}
                for f in doc["features"]]
    ok = PhaseModelSpec.model_validate({"stepSeconds": 15, "windowSeconds": 600, "model": doc,
                                        "features": features})
    assert ok.validated_model().step_seconds == 15.0
    bad = PhaseModelSpec.model_validate({"stepSeconds": 1, "windowSeconds": 10, "model": doc,
                                         "features": features})
    with pytest.raises(ValueError) as ei:
        bad.validated_model()
    assert str(ei.value) == ("spec.model was fitted at a step of 15 s, spec.stepSeconds is 1: "
                             "refit the model at 1 s (or set spec.stepSeconds to 15)")
    units = PhaseModelSpec.model_validate({
        "stepSeconds": 15, "windowSeconds": 600, "model": doc,
        "features": [{**f, "unit": "percent"} for f in features]})
    with pytest.raises(ValueError, match="spec.model's 'cpu' is in cores, spec.features"):
        units.validated_model()


def test_the_operator_serves_no_window_from_a_model_of_another_step(fitted_model):
    """The window loop: Degraded/InvalidModel naming both steps, no plan, no write."""
    from ai4dl.controller.runtime import WindowRunner

    doc = json.loads(fitted_model.to_document().model_dump_json(by_alias=True))
    features = [{"name": f["name"], "query": f["name"] + "{{{selector}}}"}
                for f in doc["features"]]
    statuses = []

    class Custom:
        def patch_namespaced_custom_object_status(self, *a, **kw):
            statuses.append(a[-1] if a else kw.get("body"))
            return RawAnswer()

    runner = WindowRunner(core_api=None, custom_api=Custom(), source=None, namespace="ml",
                          name="pm")
    body = {"metadata": {"namespace": "ml", "name": "pm"},
            "spec": {"stepSeconds": 1, "windowSeconds": 10, "model": doc, "features": features,
                     "selector": {"matchLabels": {"app": "x"}}}}
    report = runner.run(body, pods=[])
    assert report.degraded_reason == "InvalidModel" and report.plan is None
    assert "fitted at a step of 15 s, spec.stepSeconds is 1" in report.error


# ----------------------------------------------------------------------------- pydantic
def test_a_pydantic_error_from_user_input_is_one_line(monkeypatch, capsys):
    cli = importlib.import_module("ai4dl.cli.main")   # the module, not the function main
    from ai4dl.crd_spec import PhaseModelSpec

    with pytest.raises(ValidationError) as ei:
        PhaseModelSpec.model_validate({"stepSeconds": 300, "windowSeconds": 600})
    assert one_line(ei.value) == ("windowSeconds 600 must hold at least 4 steps of "
                                  "stepSeconds 300")

    def raises(args):
        PhaseModelSpec.model_validate({"stepSeconds": 0})
    monkeypatch.setattr(cli, "cmd_describe", raises)
    refused(["describe", "m.json"], capsys, "invalid PhaseModelSpec: stepSeconds: Input "
            "should be greater than or equal to 1")


# ----------------------------------------------------------------------------- phases vs data
def test_phases_the_data_cannot_support_are_refused_before_the_crbm(tmp_path, capsys):
    """Issue 45: 8 phases were fitted from 39 samples and 3 from 20 (the README's record
    flow). A fixed count needs 10 samples and a distinct sample per phase: refused in one line
    before the CRBM's fit, naming the most it supports; 'auto' lowers the top of its range."""
    from ai4dl.method.plausibility import phases_supported

    rng = np.random.default_rng(0)
    assert phases_supported(3, (2, 10), rng.uniform(size=(30, 2))) == (3, 3)
    with pytest.raises(TraceError, match=r"20 samples \(20 distinct\) cannot support 3 phases: "
                                         r"a phase needs 10 samples and a distinct one; ask "
                                         r"for at most 2 \(--phases 2\), or record for longer"):
        phases_supported(3, (2, 10), rng.uniform(size=(20, 2)))
    assert phases_supported("auto", (2, 10), rng.uniform(size=(39, 2))) == (2, 3)
    assert phases_supported("auto", (2, 10), rng.uniform(size=(500, 2))) == (2, 10)
    flat = np.ones((200, 2))                       # one distinct sample: one phase at most
    with pytest.raises(TraceError, match="200 samples .1 distinct. cannot support at least 2 "
                                         "phases .--k-range."):
        phases_supported("auto", (2, 10), flat)
    assert phases_supported(1, (2, 10), flat) == (1, 1)
    # through the CLI: exit 2, one line, no model, no CRBM epoch run
    t = 1.7e9 + np.arange(20.0)
    short = TraceSet([Execution("job", t, np.column_stack([rng.uniform(0.5, 2, 20),
                                                           rng.uniform(1, 2, 20) * GiB]),
                                ("cpu", "memory"), ("cores", "bytes"), step=1.0)])
    path = write_long(tmp_path / "short.csv", short)
    out = tmp_path / "m.json"
    err = refused(["train", path, "-o", str(out), "--phases", "3", "--step", "1", "--no-policy"],
                  capsys, "cannot support 3 phases", "--phases 2")
    assert "epoch" not in err and not out.exists()


def test_what_prometheus_returned_is_checked_before_the_trainers_fit():
    """Issue 45: the same unit checks when the trainer reads Prometheus. A spec's template is
    its author's word: a memory query returning KiB, or a cpu counter without rate(), is
    refused naming the PhaseModel's queries; cAdvisor's bytes and rates pass."""
    from ai4dl.method.plausibility import check_queried_levels

    where = "PhaseModel ml/resnet's queries"
    check_queried_levels(jobs(3), where)
    kib = jobs(3)
    for e in kib:
        e.values[:, 1] /= 1024
    with pytest.raises(TraceError) as ei:
        check_queried_levels(kib, where)
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith(f"{where}: column 'memory': 'memory' as queried has a 99th "
                          f"percentile of"), msg
    assert "does spec.features[memory].query return KiB or another unit than bytes?" in msg
    counter = jobs(3)
    for e in counter:
        e.values[:, 0] = np.cumsum(e.values[:, 0] * e.step)
    with pytest.raises(TraceError, match="cumulative counter"):
        check_queried_levels(counter, where)
