"""A folder of CSV files is one trace set (issue 28, item 7: "a folder of AI4DL CSVs is
refused, and the message names the library keyword"): every file read with the format its
header says, all of one format, names kept apart, the row bound over the folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ai4dl.errors import TraceError
from ai4dl.io import load_traces

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def ai4dl_folder(shared_data, tmp_path) -> Path:
    folder = tmp_path / "samples"
    folder.mkdir()
    for f in sorted((shared_data / "ai4dl_samples").glob("*.csv")):
        shutil.copy(f, folder / f.name)
    return folder


def test_a_folder_of_ai4dl_csvs_is_the_files_together(ai4dl_folder):
    together = load_traces(ai4dl_folder)
    apart = [load_traces(f) for f in sorted(ai4dl_folder.glob("*.csv"))]
    assert len(apart) == 2
    assert [e.name for e in together] == [e.name for t in apart for e in t]
    assert together.n_samples == sum(t.n_samples for t in apart)
    assert together.features == apart[0].features and together.units == apart[0].units


def _long(path: Path, pod: str, t0: int) -> Path:
    rows = [f"{pod},{t0 + 15 * i},{0.5 + i % 3},{1e9 + i}" for i in range(8)]
    path.write_text("execution,timestamp,cpu,memory\n" + "\n".join(rows) + "\n")
    return path


def test_names_repeated_across_files_stay_apart(tmp_path):
    _long(tmp_path / "day1.csv", "pod-0", 0)
    _long(tmp_path / "day2.csv", "pod-0", 10_000)
    traces = load_traces(tmp_path)
    assert sorted(e.name for e in traces) == ["day1.csv:pod-0", "day2.csv:pod-0"]
    assert len({e.group for e in traces}) == 2


def test_a_folder_mixing_formats_is_refused_naming_them(ai4dl_folder):
    _long(ai4dl_folder / "long.csv", "pod-0", 0)
    with pytest.raises(TraceError, match="mixes CSV formats.*long.csv: long"):
        load_traces(ai4dl_folder)


def test_the_row_bound_holds_over_the_folder(ai4dl_folder):
    rows = sum(len(f.read_text().splitlines()) - 1 for f in ai4dl_folder.glob("*.csv"))
    load_traces(ai4dl_folder, max_rows=rows)
    with pytest.raises(TraceError, match=f"above --max-rows {rows - 1}"):
        load_traces(ai4dl_folder, max_rows=rows - 1)


def test_an_empty_folder_says_what_to_pass_in_the_clis_words(tmp_path):
    r = subprocess.run([sys.executable, "-m", "ai4dl", "train", str(tmp_path), "-o",
                        str(tmp_path / "m.json")], capture_output=True, text=True,
                       env={"PYTHONPATH": str(REPO / "operator"), "PATH": "/usr/bin:/bin"},
                       timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--format" in lines[0] and "no CSV file" in lines[0]
