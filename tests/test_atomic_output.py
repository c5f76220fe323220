"""Every file the CLIs write (PNG, markdown, JSON, CSV, model) is written whole or not at all:
an interrupted run (Ctrl-C while a figure is being drawn, say) leaves the previous file or
none, never a truncated one beside complete reports (issue 28, item 5)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from ai4dl.io import writers  # noqa: E402
from ai4dl.io.writers import atomic_output, save_figure, write_text_atomic  # noqa: E402


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_an_interrupted_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "report.md"
    path.write_text("old report\n")
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(path) as fh:
            fh.write("half a new rep")
            raise KeyboardInterrupt
    assert path.read_text() == "old report\n"
    assert _leftovers(tmp_path) == []


def test_an_interrupted_figure_leaves_no_png(tmp_path, monkeypatch):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    real = fig.savefig

    def savefig_then_ctrl_c(fh, **kw):  # the first bytes reach the file, then Ctrl-C
        real(fh, **kw)
        fh.truncate(124)
        raise KeyboardInterrupt

    monkeypatch.setattr(fig, "savefig", savefig_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        save_figure(fig, tmp_path / "allocation.png")
    plt.close(fig)
    assert list(tmp_path.iterdir()) == []


def test_a_whole_figure_is_a_readable_png_of_the_suffix_format(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png = save_figure(fig, tmp_path / "a.png")
    svg = save_figure(fig, tmp_path / "a.svg")
    plt.close(fig)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in svg.read_bytes()[:400]
    assert _leftovers(tmp_path) == []


def test_outputs_get_the_mode_a_plain_open_would_give(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "model.json", json.dumps({"a": 1}))
        # mkstemp's 0600 would hide a model or report from the rest of a team
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        os.umask(0o077)
        path = write_text_atomic(tmp_path / "private.json", "{}")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_the_umask_is_read_without_changing_it(monkeypatch):
    old = os.umask(0o027)
    try:
        assert writers._umask() == 0o027
        assert os.umask(0o027) == 0o027  # unchanged by the read
    finally:
        os.umask(old)


def test_evaluation_plots_interrupted_leave_only_whole_files(tmp_path, monkeypatch):
    """The evaluate --plots writer: a Ctrl-C during the second figure leaves the first whole
    and no partial second one."""
    from ai4dl.evaluation import plots as evaluation_plots

    calls = {"n": 0}
    real = writers.save_figure

    def second_interrupted(fig, path, dpi=110):
        calls["n"] += 1
        if calls["n"] == 2:
            with atomic_output(path, "wb") as fh:
                fh.write(b"\x89PNG\r\n")
                raise KeyboardInterrupt
        return real(fig, path, dpi=dpi)

    monkeypatch.setattr(evaluation_plots, "save_figure", second_interrupted)
    result = _small_evaluation()
    with pytest.raises(KeyboardInterrupt):
        evaluation_plots.write_evaluation_plots(result, tmp_path / "plots", 1)
    files = sorted((tmp_path / "plots").iterdir())
    assert len(files) == 1 and files[0].read_bytes()[:4] == b"\x89PNG"


def _small_evaluation():
    from ai4dl.method import synthetic
    from ai4dl.evaluation.evaluate import EvaluationConfig, run_evaluation

    traces, _ = synthetic.generate(8, seed=3)
    cfg = EvaluationConfig(window=8, policies=("static", "adaptive-max"), seed=0)
    return run_evaluation(traces, cfg)


def test_one_plot_writer_per_folder_and_its_stale_figures_go(fitted_model, synthetic_test,
                                                              tmp_path, capsys):
    """Issue 45: two `plot -o DIR` at once mixed their figures, and a figure of an execution
    no longer drawn stayed. A second writer is refused in one line while the first holds the
    folder (as a second process would be: the lock is the kernel's); a later plot removes
    the figures of the previous set it did not redraw, and nothing it never wrote."""
    import fcntl

    from ai4dl.cli import main
    from ai4dl.io.modelfile import save_model
    from ai4dl.io.writers import write_long_csv

    traces, _ = synthetic_test
    model = str(save_model(fitted_model, tmp_path / "m.json"))
    data = str(write_long_csv(traces, tmp_path / "t.csv"))
    out = tmp_path / "plots"
    out.mkdir()
    (out / "notes.png").write_bytes(b"mine")          # the user's, never ours to remove
    first, second = traces[0].name, traces[1].name

    def plot(name):
        capsys.readouterr()
        code = main(["-q", "plot", model, data, "-o", str(out), "--execution", name])
        return code, capsys.readouterr().err

    def safe(name):
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)

    assert plot(first)[0] == 0
    assert (out / f"trace-{safe(first)}.png").is_file()
    with open(tmp_path / ".plots.ai4dl.lock", "a") as held:      # another writer holds it
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, err = plot(second)
    assert code == 2 and err.strip() == (f"ai4dl: error: {out} is being written by another ai4dl "
                                         f"command: give each its own -o folder"), err
    assert not (out / f"trace-{safe(second)}.png").exists()
    assert plot(second)[0] == 0
    assert (out / f"trace-{safe(second)}.png").is_file()
    assert not (out / f"trace-{safe(first)}.png").exists()      # stale: removed
    assert (out / "notes.png").read_bytes() == b"mine"
    assert json.loads((out / ".ai4dl-figures.json").read_text())["figures"] == sorted(
        ["distributions.png", "phase-graph.png", "report.png", f"trace-{safe(second)}.png"])
