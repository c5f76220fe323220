"""Bounds on every input size (issue 26, item 8), without a cluster: the model document's
dimensions and bytes (pydantic, the same bounds the CRD states as maxItems/maxLength/CEL,
see tests/test_bounds_integration.py), a model file too large to read, and the rows a trace
input may hold in memory (``--max-rows``). Each refusal is one line naming the file or field and
the bound, never a traceback."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import numpy as np
import pytest
from bounds_docs import doc, oversized, too_many_numbers

from ai4dl.method import document as D
from ai4dl.cli.main import build_parser, main
from ai4dl.cli.common import load_from_args
from ai4dl.errors import ModelError, TraceError
from ai4dl.io.loaders import DEFAULT_MAX_ROWS, load_traces
from ai4dl.io.modelfile import MAX_FILE_BYTES, read_document

# (what, document, the one line's words: the field and the bound)
REFUSED = [
    ("n_hidden 101", lambda: doc(hidden=101), "crbm.n_hidden: Input should be less than or "
                                              "equal to 100"),
    ("n_history 61", lambda: doc(history=61), "crbm.n_history: Input should be less than or "
                                              "equal to 60"),
    ("n_history x n_visible 250", lambda: doc(features=("cpu", "memory", "a", "b", "c"),
                                              history=50),
     "crbm.B: List should have at most 240 items after validation, not 250"),
    ("65 phases", lambda: doc(phases=65), "centroids: List should have at most 64 items"),
    ("101 prototypes", lambda: doc(prototypes=101),
     "prototypes: List should have at most 100 items"),
    ("a prototype of 1001 phases", lambda: doc(sequence=1001),
     "prototypes.0.sequence: List should have at most 1000 items"),
    ("a feature name of 254 characters", lambda: doc(features=("x" * 254,)),
     "features.0.name: String should have at most 253 characters"),
    ("203 KiB, every dimension and the count of numbers within its bound", oversized,
     "the document is 203 KiB serialised, more than the 192 KiB a model document may hold"),
    ("16,883 numbers in its matrices, every dimension within its bound", too_many_numbers,
     "the model's matrices and prototype sequences hold 16883 numbers, more than the 16384 a "
     "model document may hold"),
]


def test_the_bounds_are_ten_times_what_the_trainer_produces():
    # the rule stated in ai4dl.method.document: ~10x the largest fit on the shared data (10 hidden
    # units, --history 6 x 4 features, k <= 10 phases, 10 prototypes, 2 tables of a kind)
    assert (D.MAX_HIDDEN, D.MAX_HISTORY, D.MAX_HISTORY_ROWS) == (100, 60, 240)
    assert (D.MAX_PHASES, D.MAX_PROTOTYPES, D.MAX_TABLES) == (64, 100, 8)
    assert D.MAX_DOCUMENT_BYTES == 192 * 1024
    # under what `kubectl apply` can carry in its last-applied annotation (256 KiB), and two
    # documents (model, previousModel) far under etcd's ~1.5 MiB per object
    assert D.MAX_DOCUMENT_BYTES < 256 * 1024 - 32 * 1024
    assert 2 * D.MAX_DOCUMENT_BYTES < 1.5 * 2 ** 20 / 2
    # the largest document the trainer wrote: 10 phases, --history 6, both kinds of tables
    assert len(json.dumps(doc(phases=10, history=6, prototypes=10, sequence=8),
                          separators=(",", ":"))) * 10 < D.MAX_DOCUMENT_BYTES


@pytest.mark.parametrize("dims", [
    {"hidden": 100}, {"history": 60}, {"features": ("cpu", "memory", "a", "b"), "history": 60},
    {"phases": 64}, {"prototypes": 100}, {"sequence": 1000}, {"features": ("x" * 253,)}],
    ids=lambda d: ",".join(f"{k}={v if isinstance(v, int) else len(v)}" for k, v in d.items()))
def test_a_document_at_a_bound_loads(dims):
    """Each bound is inclusive (the refusals above are one past it)."""
    assert D.PhaseModelDocument.model_validate(doc(**dims))


@pytest.mark.parametrize("what,make,message", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_document_beyond_a_bound_is_refused_in_one_line(tmp_path, capsys, what, make,
                                                          message):
    path = tmp_path / "model.json"
    path.write_text(json.dumps(make()))
    with pytest.raises(ModelError) as err:
        read_document(path)
    line = str(err.value)
    assert message in line and "\n" not in line and line.startswith(str(path)), line
    # the commands reading a model file: exit 2, that one line, no traceback
    for argv in (["describe", str(path)], ["detect", str(path), "dl-corpus"]):
        assert main(argv) == 2
        out = capsys.readouterr().err
        assert message in out and "Traceback" not in out and out.count("\n") == 1, out


def test_a_file_larger_than_any_document_is_not_read(tmp_path, capsys):
    """The probe's 66 MiB document: refused from its size alone, before a byte is parsed."""
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)          # sparse: nothing to parse, nothing to read
    with pytest.raises(ModelError, match=r"huge.json: 1.5 MiB, larger than any model document "
                                         r"\(192 KiB serialised; files above 1.5 MiB are not"):
        read_document(path)
    assert main(["describe", str(path)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_fit_flags_beyond_the_bounds_are_refused_before_the_data(tmp_path, capsys):
    for flag, value, bound in (("--hidden", "101", "100"), ("--history", "61", "60"),
                               ("--phases", "65", "64"), ("--k-range", "2-70", "64")):
        assert main(["train", str(tmp_path / "absent.csv"), flag, value,
                     "-o", str(tmp_path / "m.json")]) == 2
        err = capsys.readouterr().err
        assert f"{flag} {value.split('-')[-1]} is above {bound}" in err, err


def test_a_fit_beyond_the_bounds_cannot_be_stored():
    from ai4dl.method.model import PhaseModel

    m = PhaseModel.from_document(D.PhaseModelDocument.model_validate(doc()))
    m.prototypes_ = [{"sequence": [0] * 1001, "executions": 1, "share": 1.0}]
    with pytest.raises(ModelError, match="the fitted model cannot be stored: Prototype "
                                         "sequence: List should have at most 1000 items"):
        m.to_document()


# ----------------------------------------------------------------------------- rows
def _csv(path, rows: int, executions: int = 2) -> None:
    per = rows // executions
    with open(path, "w") as f:
        f.write("execution,timestamp,cpu,memory\n")
        for e in range(executions):
            f.writelines(f"job{e},{15 * i},1.5,2000000000\n" for i in range(per))


def test_the_default_bound_and_the_cli_default(monkeypatch):
    # 2 M rows: `ai4dl detect` peaked at 1.09 GB, `ai4dl train` at 1.18 GB
    # (io/loaders/size_bound.py), a third of the trainer's 4 GiB; the probe's 10 M rows (6.1 GB)
    # are refused
    assert DEFAULT_MAX_ROWS == 2_000_000
    args = build_parser().parse_args(["detect", "m.json", "x.csv"])
    assert args.max_rows is None               # unset: load_from_args applies the default
    seen = {}
    import ai4dl.cli.common as common

    real = common.load_traces                  # the loader as the CLI holds it
    monkeypatch.setattr(common, "load_traces",
                        lambda path, **kw: seen.update(kw) or real(path, **kw))
    with pytest.raises(TraceError):
        load_from_args(args)
    assert seen["max_rows"] == DEFAULT_MAX_ROWS


@pytest.fixture()
def model_file(tmp_path):
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc()))
    return path


@pytest.mark.parametrize("kind", ["csv", "csv.gz", "long-csv-sparse", "gcd-tar", "parquet"])
def test_an_input_beyond_max_rows_is_refused_in_one_line(tmp_path, capsys, model_file, kind):
    big = tmp_path / "big.csv"
    _csv(big, 5000)
    bound, words = 1000, "more than 1,000 data rows"
    if kind == "csv.gz":
        big = tmp_path / "big.csv.gz"
        big.write_bytes(gzip.compress((tmp_path / "big.csv").read_bytes()))
    elif kind == "long-csv-sparse":
        # few rows, far apart (7 steps, under --max-gap-steps 8): resampling fills 7x as many
        with open(big, "w") as f:
            f.write("execution,timestamp,cpu,memory\n")
            f.writelines(f"job,{105 * i},1.5,2000000000\n" for i in range(500))
        words = "samples after resampling at the step: above --max-rows 1000"
    elif kind == "gcd-tar":
        big = tmp_path / "GCD_VMs.tar.gz"
        with tarfile.open(big, "w:gz") as tf:
            for day in (1, 2):
                data = "".join("12.5 30.0\n" for _ in range(800)).encode()
                info = tarfile.TarInfo(f"GCD_VMs/vm_1_{day}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
        words = "more than 1,000 data rows"
        # a model of this trace (percent, 300 s): a model refuses data of other units or step
        model_file.write_text(json.dumps({**doc(), "stepSeconds": 300.0, "features": [
            {"name": "cpu", "unit": "percent"}, {"name": "memory", "unit": "percent"}]}))
    elif kind == "parquet":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        big = tmp_path / "big.parquet"
        pq.write_table(pa.table({"execution": ["a"] * 5000, "timestamp": np.arange(5000.0) * 15,
                                 "cpu": np.ones(5000), "memory": np.full(5000, 2e9)}), big)
        words = "5,000 data rows: above --max-rows 1000"
    assert main(["detect", str(model_file), str(big), "--max-rows", str(bound)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ai4dl: error: {big}: ") and words in err, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    # the same input under the bound (or with none) is read
    assert main(["-q", "detect", str(model_file), str(big), "--max-rows", "0",
                 "-o", str(tmp_path / "out.csv")]) == 0


@pytest.mark.parametrize("end", ["\r", "\r\n"])
def test_max_rows_counts_line_ends_as_the_parser_does(tmp_path, end):
    """Issue 43: bare-CR line ends were one "row" to the bound and every row to the parser."""
    path = tmp_path / "cr.csv"
    _csv(path, 1000)
    path.write_bytes(path.read_bytes().replace(b"\n", end.encode()))
    assert load_traces(path, max_rows=1000).n_samples == 1000
    with pytest.raises(TraceError, match=r"cr.csv: more than 999 data rows"):
        load_traces(path, max_rows=999)


def test_a_crlf_split_between_chunks_counts_once():
    from ai4dl.io.loaders.size_bound import line_ends

    assert line_ends(b"a\rb\nc\r\n") == 3
    assert line_ends(b"a\r") + line_ends(b"\nb\n", after_cr=True) == 2
    assert line_ends(b"a\r") + line_ends(b"b\n", after_cr=True) == 2


def test_max_rows_counts_data_rows_not_the_header(tmp_path):
    path = tmp_path / "t.csv"
    _csv(path, 1000)
    assert load_traces(path, max_rows=1000).n_samples == 1000
    with pytest.raises(TraceError, match=r"t.csv: more than 999 data rows"):
        load_traces(path, max_rows=999)
    with pytest.raises(TraceError, match="max_rows must be a positive integer"):
        load_traces(path, max_rows=0)


def test_every_command_reading_traces_takes_the_bound(tmp_path, capsys, model_file):
    big = tmp_path / "big.csv"
    _csv(big, 3000)
    for argv in (["train", str(big), "-o", str(tmp_path / "m.json")],
                 ["evaluate", str(big)],
                 ["plot", str(model_file), str(big), "-o", str(tmp_path / "plots")],
                 ["detect", str(model_file), str(big)]):
        assert main([*argv, "--max-rows", "2000"]) == 2, argv
        err = capsys.readouterr().err
        assert err == (f"ai4dl: error: {big}: more than 2,000 data rows (read 3,000 so far): "
                       f"above --max-rows 2000; raise it (about 0.5 GB of memory per million "
                       f"rows) or split the input\n"), (argv, err)
    assert not (tmp_path / "m.json").exists() and not (tmp_path / "plots").exists()
