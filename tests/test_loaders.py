"""Loaders (ai4dl.io.loaders) and resampling (ai4dl.method.traces.resample)."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

from ai4dl.errors import TraceError
from ai4dl.io import (FORMATS, load_ai4dl_csv, load_alibaba, load_gcd_tar, load_long_csv,
                      load_parquet, load_traces)
from ai4dl.method.traces import regularise, resample


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def one_line_error(excinfo, *parts: str) -> str:
    """The error's message, checked to be one line holding every part."""
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    for part in parts:
        assert part in msg, f"{part!r} not in {msg!r}"
    return msg


def tar_gz(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


# ----------------------------------------------------------------------------- real data

@pytest.fixture(scope="module")
def gcd(shared_data):
    return load_gcd_tar(shared_data / "gcd_vms" / "GCD_VMs.tar.gz")


@pytest.fixture(scope="module")
def alibaba(shared_data):
    return load_alibaba(shared_data / "alibaba_genai2026_pods")


def test_ai4dl_dlaas(shared_data):
    ts = load_ai4dl_csv(shared_data / "ai4dl_samples" / "sample-dlaas.csv")
    assert [e.name for e in ts] == [f"service1/exec{i}" for i in range(1, 5)]
    assert [e.group for e in ts] == [e.name for e in ts]
    assert ts.features == ("cpu", "memory") and ts.units == ("cores", "bytes")
    assert ts.step == 15.0 and ts.warnings == []
    for e in ts:
        assert np.all(np.diff(e.times) == 15.0)
        assert e.meta == {"cpu_limit_cores": 4.0, "memory_limit_bytes": 5242880000.0}
    cpu = np.concatenate([e.column("cpu") for e in ts])
    assert 0 < cpu.max() < 4.5  # cores, not percent
    assert ts[0].times[0] == 1565962220.0


def test_ai4dl_vr_has_row_index_column(shared_data):
    ts = load_ai4dl_csv(shared_data / "ai4dl_samples" / "sample-vr.csv")
    assert [e.name for e in ts] == ["service2/exec2"]
    (e,) = ts
    assert e.column("memory").max() > 1e9 and e.column("cpu").max() < 16
    assert e.times[0] == 1566384070.0 and np.all(np.diff(e.times) == 15.0)
    assert e.meta["cpu_limit_cores"] == 16.0


def test_gcd(gcd):
    assert len(gcd) == 1600 and len(gcd.groups()) == 251
    assert {len(e) for e in gcd} == {288}
    assert gcd.step == 300.0 and gcd.units == ("percent", "percent")
    e = next(e for e in gcd if e.name.endswith("_2"))
    assert e.name == f"vm_{e.group}_2" and e.times[0] == 86400.0
    assert np.all(np.diff(e.times) == 300.0)
    assert gcd.warnings == []


def test_alibaba(alibaba):
    assert len(alibaba.groups()) == 143 and len(alibaba) >= 143  # gaps split some pods
    assert alibaba.features == ("memory", "gpu_util", "gpu_memory")
    assert alibaba.units == ("fraction", "percent", "bytes")
    assert alibaba.step == 60.0 and alibaba.skipped_pods == 64
    mem = np.concatenate([e.column("memory") for e in alibaba])
    assert 0 <= mem.min() and mem.max() <= 1
    assert any("skipped 64 of 207 pods" in w for w in alibaba.warnings)
    assert any("49 rows without a container_ip" in w for w in alibaba.warnings)


def test_alibaba_memory_only_has_one_negative_value(shared_data):
    folder = shared_data / "alibaba_genai2026_pods"
    with pytest.raises(TraceError) as ei:
        load_alibaba(folder, features=("memory",))
    one_line_error(ei, "pod_memory_util_anon.csv:154229", "column 'value'", "negative")
    ts = load_alibaba(folder, features=("memory",), on_bad="drop")
    assert len(ts.groups()) == 207 and ts.skipped_pods == 0
    assert any("dropped 1 rows" in w and "154229" in w for w in ts.warnings)


@pytest.mark.parametrize("rel", ["ai4dl_samples/sample-dlaas.csv", "ai4dl_samples/sample-vr.csv"])
def test_auto_detect_ai4dl(shared_data, rel):
    ts = load_traces(shared_data / rel)
    assert ts.units == ("cores", "bytes") and ts[0].meta["cpu_limit_cores"] > 0


def test_auto_detect_gcd_and_alibaba(shared_data, gcd, alibaba):
    for path, ref in [(shared_data / "gcd_vms" / "GCD_VMs.tar.gz", gcd),
                      (shared_data / "alibaba_genai2026_pods", alibaba)]:
        ts = load_traces(path)
        assert [e.name for e in ts] == [e.name for e in ref] and ts.units == ref.units


# ----------------------------------------------------------------------------- long CSV / Parquet

MB = 1_000_000  # memory in bytes: a few MB, as a container's working set is
LONG = """execution,timestamp,cpu,memory
x,100,1,10000000
y,0,0.5,5000000
x,109,3,30000000
x,111,5,50000000
y,20,1.5,15000000
x,130,8,80000000
x,300,2,20000000
x,310,4,40000000
"""


def test_long_csv_resamples_and_splits(tmp_path):
    ts = load_long_csv(write(tmp_path / "t.csv", LONG), step=10, max_gap_steps=8)
    assert [e.name for e in ts] == ["x", "x#2", "y"]
    assert [e.group for e in ts] == ["x", "x", "y"]
    x, x2, y = ts
    assert x.times.tolist() == [100, 110, 120, 130]
    assert x.column("cpu").tolist() == [1, 4, 6, 8]  # 109 and 111 averaged, 120 interpolated
    assert x.column("memory").tolist() == [10 * MB, 40 * MB, 60 * MB, 80 * MB]
    assert x2.times.tolist() == [300, 310] and x2.column("cpu").tolist() == [2, 4]
    assert y.times.tolist() == [0, 10, 20] and y.column("cpu").tolist() == [0.5, 1.0, 1.5]
    assert ts.units == ("cores", "bytes") and ts.warnings == [] and ts.step == 10


def test_long_csv_mapping_units_features_group(tmp_path):
    path = write(tmp_path / "m.csv", "pod,ts,job,cpu_m,mem_mib,gpu,temp\n"
                                     "a,1000,j1,500,2,0.25,40\n"
                                     "a,11000,j1,1500,4,0.5,41\n"
                                     "b,1000,j1,250,1,0,39\n")
    ts = load_long_csv(path, step=10,
                       columns={"execution": "pod", "timestamp": "ts", "group": "job",
                                "cpu": "cpu_m", "memory": "mem_mib", "gpu_util": "gpu"},
                       units={"cpu": "millicores", "memory": "MiB", "timestamp": "ms",
                              "gpu_util": "fraction", "temp": "celsius"})
    assert ts.features == ("cpu", "memory", "gpu_util", "temp")
    assert ts.units == ("cores", "bytes", "percent", "celsius")
    a, b = ts
    assert a.times.tolist() == [1.0, 11.0] and a.group == b.group == "j1"
    assert a.column("cpu").tolist() == [0.5, 1.5]
    assert a.column("memory").tolist() == [2 * 2**20, 4 * 2**20]
    assert a.column("gpu_util").tolist() == [25, 50]
    only = load_long_csv(path, step=10, features=["temp", "cpu_m"],
                         columns={"execution": "pod", "timestamp": "ts"}, units={"timestamp": "ms"})
    assert only.features == ("temp", "cpu_m") and only.units == ("unknown", "unknown")


def test_long_csv_percent_of_core_and_auto(tmp_path):
    path = write(tmp_path / "p.csv", "execution,timestamp,cpu\nx,0,150\nx,15,50\n")
    ts = load_long_csv(path, units={"cpu": "percent-of-core"})
    assert ts[0].column("cpu").tolist() == [1.5, 0.5]
    # auto -> long; 150 "cores" per container, more than 16: refused unless the unit is
    # stated, percent named (ai4dl.method.plausibility)
    with pytest.raises(TraceError) as ei:
        load_traces(path)
    one_line_error(ei, "p.csv: column 'cpu'", "99th percentile of 149 cores",
                   "--unit cpu=percent-of-core if it is percent of a core, or --unit cpu=cores")
    assert load_traces(path, units={"cpu": "cores"})[0].column("cpu").tolist() == [150, 50]


def test_parquet_equals_csv(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [line.split(",") for line in LONG.strip().splitlines()[1:]]
    table = pa.table({"execution": [r[0] for r in rows],
                      "timestamp": [int(r[1]) for r in rows],
                      "cpu": [float(r[2]) for r in rows],
                      "memory": [int(r[3]) for r in rows]})
    pq.write_table(table, tmp_path / "t.parquet")
    from_pq = load_traces(tmp_path / "t.parquet", step=10)
    from_csv = load_long_csv(write(tmp_path / "t.csv", LONG), step=10)
    assert [e.name for e in from_pq] == [e.name for e in from_csv]
    assert from_pq.units == from_csv.units
    for p, c in zip(from_pq, from_csv):
        assert np.array_equal(p.times, c.times) and np.array_equal(p.values, c.values)
        assert p.group == c.group


def test_parquet_timestamp_type_and_bad_value(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    ts_col = pa.array(np.array([0, 15_000], dtype="datetime64[ms]"), type=pa.timestamp("ms"))
    pq.write_table(pa.table({"execution": ["a", "a"], "timestamp": ts_col,
                             "cpu": [1.0, None]}), tmp_path / "n.parquet")
    with pytest.raises(TraceError) as ei:
        load_parquet(tmp_path / "n.parquet")
    one_line_error(ei, "n.parquet:2", "column 'cpu'", "NaN")
    pq.write_table(pa.table({"execution": ["a", "a"], "timestamp": ts_col, "cpu": [1.0, 2.0]}),
                   tmp_path / "t.parquet")
    assert load_parquet(tmp_path / "t.parquet")[0].times.tolist() == [0.0, 15.0]
    write(tmp_path / "bad.parquet", "not parquet")
    with pytest.raises(TraceError) as ei:
        load_parquet(tmp_path / "bad.parquet")
    one_line_error(ei, "bad.parquet")


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("loader", [load_long_csv, load_ai4dl_csv, load_parquet, load_gcd_tar,
                                    load_alibaba, load_traces])
def test_missing_path(tmp_path, loader):
    with pytest.raises(TraceError) as ei:
        loader(tmp_path / "nope.csv")
    one_line_error(ei, "nope.csv")


@pytest.mark.parametrize("text, parts", [
    ("", ["empty"]),
    ("\n\n", ["empty"]),
    ("execution,timestamp,cpu\n", ["no data rows"]),
    ("execution,timestamp,cpu\n\n", ["no data rows"]),
    ("execution,cpu\nx,1\n", [":1: column 'timestamp'", "missing"]),
    ("timestamp,cpu\n1,1\n", [":1: column 'execution'", "missing"]),
    ("execution,timestamp\nx,1\n", ["no feature columns"]),
    ("execution,timestamp,cpu\nx,0,1\nx,15,abc\n", [":3: column 'cpu'", "'abc'"]),
    ("execution,timestamp,cpu\nx,0,1\nx,15," + "9" * 40 + "z\n",
     [":3: column 'cpu'", "'99999999999999999999...'"]),
    ("execution,timestamp,cpu\nx,0,1\nx,yesterday,1\n", [":3: column 'timestamp'", "yesterday"]),
    ("execution,timestamp,cpu\nx,0,1\nx,15,1,7\n", [":3:", "4 fields"]),
    ("execution,timestamp,cpu\nx,0,1\n\nx,15\n", [":4:", "2 fields"]),
    ("execution,timestamp,cpu\nx,0,1\n,15,1\n", [":3: column 'execution'", "empty"]),
    ("execution,timestamp,cpu\nx,0,1\nx,15,nan\n", [":3: column 'cpu'", "NaN"]),
    ("execution,timestamp,cpu\nx,0,1\nx,15,\n", [":3: column 'cpu'", "NaN"]),
    ("execution,timestamp,cpu\nx,0,1\nx,15,inf\n", [":3: column 'cpu'", "infinite"]),
    ("execution,timestamp,cpu\nx,0,1\nx,15,-2.5\n", [":3: column 'cpu'", "negative", "-2.5"]),
    ("execution,timestamp,cpu\nx,0,1\nx,nan,1\n", [":3: column 'timestamp'", "NaN"]),
    ("execution,timestamp,cpu,cpu\nx,0,1,1\n", [":1: column 'cpu'", "duplicate"]),
    ('execution,timestamp,cpu\nx,0,1\n"x\n', [":3:", "malformed"]),
])
def test_long_csv_bad_input(tmp_path, text, parts):
    path = write(tmp_path / "bad.csv", text)
    with pytest.raises(TraceError) as ei:
        load_long_csv(path)
    one_line_error(ei, "bad.csv", *parts)


def test_bad_options(tmp_path):
    path = write(tmp_path / "t.csv", LONG)
    for kwargs, part in [({"on_bad": "skip"}, "on_bad"), ({"step": 0}, "step"),
                         ({"units": {"cpu": "GHz"}}, "unknown unit 'GHz'"),
                         ({"units": {"gpu": "percent"}}, "'gpu'"),
                         ({"features": ["cpu", "gpu_util"]}, "column 'gpu_util'"),
                         ({"columns": {"execution": "pod"}}, "column 'pod'")]:
        with pytest.raises(TraceError) as ei:
            load_long_csv(path, **kwargs)
        one_line_error(ei, part)
    with pytest.raises(TraceError) as ei:
        load_traces(path, format="xml")
    one_line_error(ei, "unknown format")
    with pytest.raises(TraceError) as ei:
        load_traces(write(tmp_path / "t.txt", LONG))
    one_line_error(ei, "t.txt", "format=")
    with pytest.raises(TraceError) as ei:
        load_traces(path, format="gcd")
    one_line_error(ei, "t.csv", "tar")
    with pytest.raises(TraceError) as ei:
        load_traces(tar_gz(tmp_path / "g.tar.gz", {"GCD_VMs/vm_1_1": b"1 2\n"}), step=60)
    one_line_error(ei, "does not take step")
    assert FORMATS[0] == "auto" and "alibaba" in FORMATS


def test_not_utf8_and_gzipped_csv(tmp_path):
    path = tmp_path / "b.csv"
    path.write_bytes(b"execution,timestamp,cpu\nx,0,1\nx\xff,15,1\n")
    with pytest.raises(TraceError) as ei:
        load_long_csv(path)
    one_line_error(ei, "b.csv:3", "UTF-8")
    gz = tmp_path / "t.csv.gz"
    gz.write_bytes(gzip.compress(LONG.encode()))
    assert len(load_traces(gz, step=10)) == 3
    gz.write_bytes(gzip.compress(LONG.encode())[:40])
    with pytest.raises(TraceError) as ei:
        load_long_csv(gz)
    one_line_error(ei, "t.csv.gz", "gzip")


def test_on_bad_drop(tmp_path):
    rows = ["execution,timestamp,cpu,memory"]
    rows += [f"x,{15 * i},{-1 if 3 <= i < 5 else 1},{'nan' if 10 <= i < 22 else 700 * MB}"
             for i in range(30)]
    path = write(tmp_path / "d.csv", "\n".join(rows) + "\n")
    with pytest.raises(TraceError) as ei:
        load_long_csv(path)
    one_line_error(ei, "d.csv:5: column 'cpu'", "negative value -1.0")
    ts = load_long_csv(path, on_bad="drop", max_gap_steps=8)
    # rows 3-4 dropped: a 3-step hole, interpolated; rows 10-21 dropped: a 13-step gap, split.
    assert [e.name for e in ts] == ["x", "x#2"] and [len(e) for e in ts] == [10, 8]
    assert ts[0].column("cpu").tolist() == [1] * 10
    assert ts.warnings == ["%s: dropped 14 rows with NaN/Inf/negative values (first at row 5, "
                           "column 'cpu')" % path]
    all_bad = write(tmp_path / "a.csv", "execution,timestamp,cpu\nx,0,-1\n")
    with pytest.raises(TraceError) as ei:
        load_long_csv(all_bad, on_bad="drop")
    one_line_error(ei, "a.csv", "no usable samples", "dropped 1 rows")


def test_ai4dl_bad_input(tmp_path):
    head = "timestamp,service,pod.id,cpu.num.cores,cpu.usage.cores,mem.limit,mem.working.set\n"
    with pytest.raises(TraceError) as ei:
        load_ai4dl_csv(write(tmp_path / "a.csv", head.replace(",cpu.usage.cores", "")
                             + "0,s,p,4,100,5\n"))
    one_line_error(ei, "a.csv:1: column 'cpu.usage.cores'", "missing")
    with pytest.raises(TraceError) as ei:
        load_ai4dl_csv(write(tmp_path / "b.csv", head + "0,s,p,4,0.5,100,5\n15,s,p,4,0.5,1e3\n"))
    one_line_error(ei, "b.csv:3:", "6 fields")
    with pytest.raises(TraceError) as ei:
        load_ai4dl_csv(write(tmp_path / "c.csv", head + "0,s,p,4,0.5,100,5\n15,s,p,4,-0.5,100,5\n"))
    one_line_error(ei, "c.csv:3: column 'cpu.usage.cores'", "negative")
    with pytest.raises(TraceError) as ei:
        load_ai4dl_csv(write(tmp_path / "d.csv", head))
    one_line_error(ei, "d.csv", "no data rows")
    ts = load_ai4dl_csv(write(tmp_path / "e.csv", head + "0,s,p,4,0.5,100,5\n15,s,p,4,nan,100,5\n"),
                        on_bad="drop")
    assert len(ts[0]) == 1 and ts[0].meta == {"cpu_limit_cores": 4.0, "memory_limit_bytes": 100.0}
    assert len(ts.warnings) == 1


# ----------------------------------------------------------------------------- GCD tar

def test_gcd_synthetic(tmp_path):
    day = b"".join(b"%d 2.5\n" % i for i in range(4))
    path = tar_gz(tmp_path / "g.tar.gz", {"GCD_VMs/vm_7_2": day, "GCD_VMs/vm_7_1": day,
                                         "GCD_VMs/vm_8_1": day, "GCD_VMs/README": b"x"})
    ts = load_traces(path)
    assert [e.name for e in ts] == ["vm_7_1", "vm_7_2", "vm_8_1"]
    assert ts.groups() == ["7", "8"] and ts.units == ("percent", "percent")
    assert ts[1].times.tolist() == [86400.0 + 300 * i for i in range(4)]
    assert ts[0].column("cpu").tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("members, parts", [
    ({"GCD_VMs/vm_1_1": b"1 2\n1 2 3\n"}, ["g.tar.gz/GCD_VMs/vm_1_1:2", "3 fields"]),
    ({"GCD_VMs/vm_1_1": b"1 2\n1 abc\n"}, ["g.tar.gz/GCD_VMs/vm_1_1:2: column 'memory'", "abc"]),
    ({"GCD_VMs/vm_1_1": b"1 2\n-1 2\n"}, ["vm_1_1:2: column 'cpu'", "negative"]),
    ({"GCD_VMs/vm_1_1": b""}, ["vm_1_1", "empty"]),
    ({"other/file.txt": b"1 2\n"}, ["g.tar.gz", "not a GCD"]),
])
def test_gcd_bad_input(tmp_path, members, parts):
    with pytest.raises(TraceError) as ei:
        load_gcd_tar(tar_gz(tmp_path / "g.tar.gz", members))
    one_line_error(ei, *parts)


def test_gcd_corrupt_archive(tmp_path):
    path = tar_gz(tmp_path / "g.tar.gz", {f"GCD_VMs/vm_1_{d}": bytes(np.random.default_rng(d)
                                          .integers(48, 58, 50_000, dtype=np.uint8))
                                          for d in range(1, 4)})
    path.write_bytes(path.read_bytes()[:20_000])
    with pytest.raises(TraceError) as ei:
        load_gcd_tar(path)
    one_line_error(ei, "g.tar.gz")
    write(tmp_path / "n.tar.gz", "plain text")
    with pytest.raises(TraceError) as ei:
        load_traces(tmp_path / "n.tar.gz")
    one_line_error(ei, "n.tar.gz", "tar")


# ----------------------------------------------------------------------------- Alibaba (synthetic)

def alibaba_folder(tmp_path: Path, memory: str, duty: str, gmem: str) -> Path:
    folder = tmp_path / "ali"
    folder.mkdir()
    for stem, text in [("pod_memory_util_anon", memory), ("pod_gpu_duty_cycle_anon", duty),
                       ("pod_gpu_memory_used_bytes_anon", gmem)]:
        tar_gz(folder / f"{stem}.tar.gz", {f"{stem}.csv": text.encode()})
    return folder


def test_alibaba_inner_join(tmp_path):
    folder = alibaba_folder(
        tmp_path,
        "value,timestamp_anon,container_ip\n0.5,0,p\n0.7,60,p\n0.1,60,p\n0.9,120,p\n"
        "0.2,0,q\n0.3,0,\n",
        "value,timestamp_anon,container_ip\n10,0,p\n20,60,p\n30,120,p\n",
        "timestamp_anon,value,container_ip\n0,100,p\n60,200,p\n")
    ts = load_traces(folder)
    assert [e.name for e in ts] == ["p"] and ts.skipped_pods == 1
    (p,) = ts
    assert p.times.tolist() == [0, 60]  # 120 lacks gpu_memory: dropped for this pod
    assert np.allclose(p.values, [[0.5, 10, 100], [0.4, 20, 200]])  # duplicate at 60 averaged
    assert any("without a container_ip" in w for w in ts.warnings)
    assert any("skipped 1 of 2 pods" in w for w in ts.warnings)
    with pytest.raises(TraceError) as ei:
        load_alibaba(folder, require_all=False)
    one_line_error(ei, "1 pods lack")
    mem = load_alibaba(folder, features=("memory",))
    assert [e.name for e in mem] == ["p", "q"] and mem.units == ("fraction",)
    with pytest.raises(TraceError) as ei:
        load_alibaba(folder, features=("cpu",))
    one_line_error(ei, "features must be among")


def test_alibaba_bad_input(tmp_path):
    folder = alibaba_folder(tmp_path, "value,timestamp_anon,container_ip\n0.5,0,p\n0.5,x,p\n",
                            "value,timestamp_anon\n1,0\n", "value,timestamp_anon,container_ip\n")
    with pytest.raises(TraceError) as ei:
        load_alibaba(folder, features=("memory",))
    one_line_error(ei, "pod_memory_util_anon.csv:3: column 'timestamp_anon'", "'x'")
    with pytest.raises(TraceError) as ei:
        load_alibaba(folder, features=("gpu_util",))
    one_line_error(ei, "pod_gpu_duty_cycle_anon.csv:1: column 'container_ip'", "missing")
    with pytest.raises(TraceError) as ei:
        load_alibaba(folder, features=("gpu_memory",))
    one_line_error(ei, "pod_gpu_memory_used_bytes_anon.csv", "no data rows")
    (folder / "pod_gpu_duty_cycle_anon.tar.gz").unlink()
    with pytest.raises(TraceError) as ei:
        load_alibaba(folder)
    one_line_error(ei, "pod_gpu_duty_cycle_anon.tar.gz", "missing")


# ----------------------------------------------------------------------------- resample

def test_resample_averages_when_denser_than_step():
    t = np.array([0, 5, 55, 65, 115, 125], dtype=float)
    v = np.array([1, 3, 5, 7, 9, 11], dtype=float)
    ((times, values),) = resample(t, v, 60)
    assert times.tolist() == [0, 60, 120] and values[:, 0].tolist() == [2, 6, 10]


def test_resample_interpolates_when_sparser_than_step():
    ((times, values),) = resample([0, 40], [[0, 10], [8, 50]], 10)
    assert times.tolist() == [0, 10, 20, 30, 40]
    assert values.tolist() == [[0, 10], [2, 20], [4, 30], [6, 40], [8, 50]]
    ((times, values),) = resample([31, 0, 11, 19], [4, 1, 2, 3], 10)  # jitter, unsorted
    assert times.tolist() == [0, 10, 20, 30] and values[:, 0].tolist() == [1, 2, 3, 4]


def test_resample_splits_long_gaps_only():
    segs = resample([0, 10, 20, 60, 70], [1, 2, 3, 4, 5], 10, max_gap_steps=3)
    assert [s[0].tolist() for s in segs] == [[0, 10, 20], [60, 70]]
    ((times, _),) = resample([0, 30], [1, 4], 10, max_gap_steps=3)  # exactly 3 steps: kept
    assert times.tolist() == [0, 10, 20, 30]
    assert resample([], [], 10) == []


def test_resample_half_step_sampling_uses_equal_windows():
    t = np.arange(0, 300, 30.0)  # samples at exactly half the step
    ((times, values),) = resample(t, t, 60)
    assert times.tolist() == [0, 60, 120, 180, 240, 300]
    assert values[:, 0].tolist() == [0, 45, 105, 165, 225, 270]  # pairs, not 2-1-3-1-3


def test_regularise_names_segments():
    execs = regularise("job", [0, 10, 100], [1, 2, 3], ["cpu"], ["cores"], step=10,
                       max_gap_steps=2, group="g", meta={"k": 1})
    assert [(e.name, e.group, e.step, e.meta) for e in execs] == [
        ("job", "g", 10, {"k": 1}), ("job#2", "g", 10, {"k": 1})]


def test_two_containers_under_one_execution_name_are_refused_naming_the_rows(tmp_path):
    """Issue 45: duplicated timestamps with conflicting values were averaged, which is
    nonsense when the duplicates are two containers (or ranks) under one execution name: a
    series of neither. Refused in one line naming the execution and two rows; one repeated
    instant (a scrape at a boundary), or repeats of the same values, still load."""
    rows = ["execution,timestamp,cpu,memory"]
    for i in range(20):
        rows.append(f"job,{15 * i},1.0,{(1 + i) * 100 * MB}")      # the trainer
        rows.append(f"job,{15 * i},0.2,{300 * MB}")                # its sidecar
    path = write(tmp_path / "two.csv", "\n".join(rows) + "\n")
    with pytest.raises(TraceError) as ei:
        load_long_csv(path)
    one_line_error(ei, "two.csv", "execution 'job' gives 20 of its 20 timestamps twice with "
                   "different values (rows 2 and 3)", "two containers or ranks under one "
                   "execution name?", "--column execution=")
    few = ["execution,timestamp,cpu,memory"] + [
        f"job,{15 * i},1.0,{500 * MB}" for i in range(20)] + ["job,150,3.0,500000000"]
    ts = load_long_csv(write(tmp_path / "few.csv", "\n".join(few) + "\n"))
    assert len(ts) == 1 and ts[0].column("cpu").max() == 2.0        # averaged, as documented
    again = ["execution,timestamp,cpu,memory"] + 2 * [
        f"job,{15 * i},1.0,{500 * MB}" for i in range(20)]
    assert len(load_long_csv(write(tmp_path / "same.csv", "\n".join(again) + "\n"))[0]) == 20
