"""`ai4dl record`'s GPU columns, with a fake NVML module in place of pynvml.

The recorded commands are real processes (a tree with a child, a child that exits); only
NVML is faked. The fake lists, as GPU processes, the live descendants of this test process
(the recorder's tree), pids it saw before that have exited (NVML lags), and a foreign process
with a large allocation: only the tree's live processes may be counted."""

from __future__ import annotations

import csv
import sys
import textwrap
import types
from pathlib import Path

import pytest

from ai4dl.recording import gpustat
from ai4dl.cli import main
from ai4dl.recording.gpustat import DEVICE, PER_PROCESS, GpuTree, GpuUnavailable
from ai4dl.recording.procstat import snapshot

MiB = 2**20
FOREIGN_PID = 1  # init: never in a recorded tree


class FakeNVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


def fake_nvml(*, gpus=1, per_process_util=True, memory_known=True, fail_init=False,
              procs=None):
    """A module with pynvml's calls. ``procs(gpu) -> {pid: MiB}`` (default: every live
    descendant of this process 100 MiB on GPU 0, plus the stale and foreign ones)."""
    import os

    m = types.ModuleType("pynvml")
    m.NVMLError = FakeNVMLError
    m.NVML_ERROR_NOT_SUPPORTED = 3
    m.calls = {"init": 0, "shutdown": 0}
    m.stale: set[int] = set()
    clock = [0]

    def descendants() -> set[int]:
        ps = snapshot()
        kids: dict[int, list[int]] = {}
        for st in ps.values():
            if st.state not in ("Z", "X"):
                kids.setdefault(st.ppid, []).append(st.pid)
        out, todo = set(), [os.getpid()]
        while todo:
            for c in kids.get(todo.pop(), ()):
                out.add(c)
                todo.append(c)
        return out

    def default_procs(gpu):
        if gpu:
            return {}
        live = descendants()
        m.stale |= live
        table = {pid: 100 for pid in m.stale}   # exited pids stay listed: NVML lags
        table[FOREIGN_PID] = 5000
        return table

    table = procs or default_procs

    def init():
        if fail_init:
            raise FakeNVMLError(12)  # NVML_ERROR_LIBRARY_NOT_FOUND
        m.calls["init"] += 1

    def shutdown():
        m.calls["shutdown"] += 1

    def entries(h):
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=mib * MiB if memory_known else None)
                for pid, mib in table(h).items()]

    def graphics(h):
        # the root also draws: listed in both lists, it must count once
        return entries(h)[:1]

    def process_util(h, last_seen):
        if not per_process_util:
            raise FakeNVMLError(3)
        clock[0] += 10
        rows = [types.SimpleNamespace(pid=pid, timeStamp=clock[0], smUtil=30, memUtil=5,
                                      encUtil=0, decUtil=0) for pid in table(h)]
        # an old sample that the window must skip
        rows.append(types.SimpleNamespace(pid=FOREIGN_PID, timeStamp=last_seen, smUtil=99,
                                          memUtil=0, encUtil=0, decUtil=0))
        return [r for r in rows if r.timeStamp > last_seen]

    m.nvmlInit = init
    m.nvmlShutdown = shutdown
    m.nvmlDeviceGetCount = lambda: gpus
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetComputeRunningProcesses = entries
    m.nvmlDeviceGetGraphicsRunningProcesses = graphics
    m.nvmlDeviceGetProcessUtilization = process_util
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=77, memory=10)
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=7000 * MiB, total=80_000 * MiB)
    return m


@pytest.fixture
def nvml(monkeypatch):
    def install(**kw):
        m = fake_nvml(**kw)
        monkeypatch.setitem(sys.modules, "pynvml", m)
        return m
    return install


def rows(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as fh:
        r = csv.DictReader(fh)
        return list(r.fieldnames or []), list(r)


# a parent that starts a child; the child exits after ~1 s, the parent after ~2.2 s
TREE = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)"])
    child.wait()
    time.sleep(1.2)
""")


def test_tree_with_a_child_that_exits(nvml, tmp_path, capsys):
    m = nvml()
    out = tmp_path / "gpu.csv"
    assert main(["record", "-i", "0.25", "-o", str(out), "--name", "job", "--",
                 sys.executable, "-c", TREE]) == 0
    head, got = rows(out)
    assert head == ["execution", "timestamp", "cpu", "memory", "gpu_util", "gpu_memory"]
    mem = [int(r["gpu_memory"]) for r in got]
    util = [float(r["gpu_util"]) for r in got]
    assert len(got) >= 6
    # parent + child: 2 x 100 MiB (the parent, listed twice, once); the foreign 5,000 MiB never.
    # Under load the first row can come before the child has started: the parent's alone.
    both = [i for i, v in enumerate(mem) if v == 200 * MiB]
    assert both and both == list(range(both[0], both[-1] + 1)), mem
    # after the child exits NVML still lists it: not counted, the parent's alone
    assert mem[-1] == 100 * MiB
    assert set(mem) == {100 * MiB, 200 * MiB}
    # utilisation: 30 % a process in the tree, summed; never the foreign 99 % or old samples
    assert 60 in util and util[-1] == 30 and set(util) <= {30.0, 60.0}
    assert m.calls == {"init": 1, "shutdown": 1}
    err = capsys.readouterr().err
    assert "GPU peak 200 MiB (memory per-process, utilisation per-process)" in err

    from ai4dl.io import load_traces

    # a test process of 11 MiB, not a DL job: its unit is stated (ai4dl.method.plausibility)
    traces = load_traces(out, step=0.25, units={"memory": "bytes"})
    assert list(traces.features) == ["cpu", "memory", "gpu_util", "gpu_memory"]


def test_device_figures_stand_in_where_per_process_ones_are_missing(nvml, tmp_path, capsys):
    nvml(per_process_util=False, memory_known=False)
    out = tmp_path / "gpu.csv"
    assert main(["record", "-i", "0.25", "-o", str(out), "--", sys.executable, "-c",
                 "import time; time.sleep(0.8)"]) == 0
    _, got = rows(out)
    assert got and all(r["gpu_util"] == "77" and int(r["gpu_memory"]) == 7000 * MiB
                       for r in got)
    assert f"(memory {DEVICE}, utilisation {DEVICE})" in capsys.readouterr().err


@pytest.mark.parametrize("gpu_flag, warned", [("auto", False), ("on", True)])
def test_without_nvml_cpu_and_memory_as_before(monkeypatch, tmp_path, capsys, gpu_flag, warned):
    monkeypatch.setitem(sys.modules, "pynvml", None)   # import pynvml -> ImportError
    out = tmp_path / "cpu.csv"
    assert main(["record", "--gpu", gpu_flag, "-i", "0.25", "-o", str(out), "--", sys.executable,
                 "-c", "import time; time.sleep(0.6)"]) == 0
    head, got = rows(out)
    assert head == ["execution", "timestamp", "cpu", "memory"] and got
    notes = [line for line in capsys.readouterr().err.splitlines() if "NVML" in line]
    if warned:
        assert notes == ["ai4dl: warning: --gpu on: NVML is not installed: pip install "
                         "'ai4dl-operator[gpu]' (nvidia-ml-py); recording cpu and memory only"]
    else:
        assert notes == []


def test_no_gpu_or_no_driver_records_cpu_and_memory(nvml, tmp_path, capsys):
    for kw, why in [({"gpus": 0}, "NVML sees no GPU"),
                    ({"fail_init": True}, "NVML could not start")]:
        m = nvml(**kw)
        with pytest.raises(GpuUnavailable, match=why):
            GpuTree.open()
        out = tmp_path / "t.csv"
        assert main(["record", "--gpu", "on", "-i", "0.25", "-o", str(out), "--",
                     sys.executable, "-c", "import time; time.sleep(0.4)"]) == 0
        assert rows(out)[0] == ["execution", "timestamp", "cpu", "memory"]
        assert why in capsys.readouterr().err
        assert m.calls["init"] == m.calls["shutdown"]   # started, then shut down (or neither)


def test_gpu_off_never_opens_nvml(nvml, tmp_path):
    m = nvml()
    out = tmp_path / "t.csv"
    assert main(["record", "--gpu", "off", "-i", "0.25", "-o", str(out), "--", "true"]) == 0
    assert rows(out)[0] == ["execution", "timestamp", "cpu", "memory"]
    assert m.calls["init"] == 0


def test_append_keeps_the_files_columns(nvml, monkeypatch, tmp_path, capsys):
    cpu_only = tmp_path / "cpu.csv"
    cpu_only.write_text("execution,timestamp,cpu,memory\n")
    with_gpu = tmp_path / "gpu.csv"
    with_gpu.write_text("execution,timestamp,cpu,memory,gpu_util,gpu_memory\n")
    sleep = [sys.executable, "-c", "import time; time.sleep(0.6)"]
    m = nvml()
    # a GPU here, a file without GPU columns: auto appends cpu/memory rows; on refuses
    assert main(["record", "--append", "-i", "0.25", "-o", str(cpu_only), "--", *sleep]) == 0
    head, got = rows(cpu_only)
    assert head == ["execution", "timestamp", "cpu", "memory"] and got
    assert all(None not in r for r in got)   # no extra fields
    assert m.calls["init"] == 0
    capsys.readouterr()
    assert main(["record", "--append", "--gpu", "on", "-o", str(cpu_only), "--", *sleep]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"ai4dl: error: {cpu_only} has no gpu columns: --gpu on cannot append to it "
        "(record to a new file)"]
    # a file with GPU columns gets GPU rows, even with --gpu auto
    assert main(["record", "--append", "-i", "0.25", "-o", str(with_gpu), "--", *sleep]) == 0
    assert all(int(r["gpu_memory"]) == 100 * MiB for r in rows(with_gpu)[1])
    # ... and without NVML it is refused in one line, the file untouched
    monkeypatch.setitem(sys.modules, "pynvml", None)
    before = with_gpu.read_text()
    capsys.readouterr()
    assert main(["record", "--append", "-o", str(with_gpu), "--", *sleep]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has gpu columns but no GPU can be recorded here" in err[0]
    assert with_gpu.read_text() == before


def test_utilisation_averages_the_gpus_the_tree_uses():
    # GPU 0: pids 10 and 11 (30 % each), GPU 1: pid 10 (30 %), GPU 2: only a stranger
    on = {0: {10: 100, 11: 50}, 1: {10: 300}, 2: {99: 1000}}
    tree = GpuTree(fake_nvml(gpus=3, procs=lambda h: on[h]), [0, 1, 2])
    tree.prime()
    s = tree.sample({10, 11})
    assert s.memory_bytes == 450 * MiB
    assert s.util_percent == pytest.approx((60 + 30) / 2)   # GPU 2 is not the tree's
    assert tree.util_source == PER_PROCESS and tree.peak_memory == 450 * MiB
    # the processes end: nothing of theirs is counted, the peak stays
    s = tree.sample(set())
    assert (s.memory_bytes, s.util_percent) == (0, 0.0) and tree.peak_memory == 450 * MiB


def test_per_process_utilisation_is_capped_per_gpu():
    many = {0: {pid: 1 for pid in range(10, 15)}}   # 5 processes x 30 % = 150 %
    tree = GpuTree(fake_nvml(procs=lambda h: many[h]), [0])
    tree.prime()
    assert tree.sample(set(range(10, 15))).util_percent == 100.0


def test_install_hint_names_the_extra():
    import tomllib

    extras = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml")
                           .read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("nvidia-ml-py") for d in extras["gpu"])
    assert "ai4dl-operator[gpu]" in gpustat.INSTALL_HINT
