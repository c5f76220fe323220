"""`ai4dl record` and the /proc process-tree sampler, on real processes."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ai4dl.recording.procstat import ProcessTree, parse_stat

AI4DL = [sys.executable, "-m", "ai4dl"]


def record(*args, timeout=60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*AI4DL, "record", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, **kw)


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_parse_stat_with_odd_command_name():
    # comm may hold spaces and ')': fields are found from the last ')'
    fields = ["S", "41", "0", "0", "0", "-1", "0", "0", "0", "0", "0", "250", "150", "30", "20",
              "20", "0", "1", "0", "777"] + ["0"] * 30
    st = parse_stat("123 (a) b (c)) " + " ".join(fields))
    tick = os.sysconf("SC_CLK_TCK")
    assert (st.pid, st.ppid, st.state, st.start) == (123, 41, "S", 777)
    assert st.own == pytest.approx(400 / tick) and st.reaped == pytest.approx(50 / tick)


BURN_CHILDREN = textwrap.dedent("""
    import os, time
    def burn(s):
        t = time.process_time()
        while time.process_time() - t < s:
            pass
    for _ in range(3):          # short-lived children, each waited for by the parent
        pid = os.fork()
        if pid == 0:
            burn(0.3)
            os._exit(0)
        os.waitpid(pid, 0)
    burn(0.3)
""")


def test_tree_counter_counts_exited_children_once():
    """The counter is monotone and ends at the tree's real total (from the kernel's rusage),
    children that exited between samples included and none counted twice."""
    p = subprocess.Popen([sys.executable, "-c", BURN_CHILDREN])
    tree = ProcessTree(p.pid)
    seen = []
    while True:
        # peek (WNOWAIT) so that the last sample still sees the zombie's final times
        done = os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        seen.append(tree.sample().cpu_seconds)
        if done:
            break
        time.sleep(0.05)
    _, status, ru = os.wait4(p.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    truth = ru.ru_utime + ru.ru_stime
    assert all(b >= a for a, b in zip(seen, seen[1:]))
    assert truth > 1.0  # 4 x 0.3 s of CPU plus the interpreter
    assert seen[-1] == pytest.approx(truth, rel=0.1, abs=0.1)


ALLOC_THEN_BURN = textwrap.dedent("""
    import sys, time
    block = bytearray(160 * 2**20)
    for i in range(0, len(block), 4096):
        block[i] = 1                  # touch every page: resident
    time.sleep(2.0)
    t = time.process_time()
    while time.process_time() - t < 2.0:
        pass
    sys.exit(3)
""")


def test_record_shape_and_exit_code(tmp_path):
    out = tmp_path / "trace.csv"
    r = record("-i", 0.5, "-o", out, "--name", "alloc", "--", sys.executable, "-c",
               ALLOC_THEN_BURN)
    assert r.returncode == 3, r.stderr
    assert "recorded" in r.stderr and "exit 3" in r.stderr
    got = rows(out)
    assert len(got) >= 6
    assert {row["execution"] for row in got} == {"alloc"}
    t = [float(row["timestamp"]) for row in got]
    cpu = [float(row["cpu"]) for row in got]
    mem = [int(row["memory"]) for row in got]
    assert all(0.3 < b - a < 1.5 for a, b in zip(t, t[1:]))       # the interval, roughly
    assert max(mem) >= 160 * 2**20                                # the block is resident
    # the sleep shows as idle samples, then the burn as busy ones. On a shared machine the
    # burn may get half a core, so its rate is not asserted, but its 2 CPU s are: the rows
    # integrate to them (less at most one interval lost after the last sample)
    busy_at = max(range(len(cpu)), key=cpu.__getitem__)
    assert min(cpu[:busy_at]) < 0.1 and cpu[busy_at] > 0.3
    integrated = sum(c * (b - a) for c, a, b in zip(cpu[1:], t, t[1:])) + cpu[0] * 0.5
    assert 1.3 < integrated < 3.5

    from ai4dl.io import load_traces

    traces = load_traces(out, step=0.5)
    assert list(traces.features) == ["cpu", "memory"]
    assert len(traces) == 1 and len(traces[0]) >= len(got) - 1


def test_record_exit_statuses_and_errors(tmp_path):
    out = tmp_path / "t.csv"
    r = record("-i", 5, "-o", out, "--", sys.executable, "-c", "import sys; sys.exit(5)")
    assert r.returncode == 5
    assert "before the first sample" in r.stderr  # a run shorter than the interval: told
    assert rows(out) == []                        # header only
    r = record("-o", out, "--", sys.executable, "-c", "import os; os.kill(os.getpid(), 15)")
    assert r.returncode == 128 + signal.SIGTERM
    r = record("-o", out, "--", "no-such-command-ai4dl")
    assert r.returncode == 127
    assert r.stderr.strip().splitlines() == ["ai4dl: error: command not found: no-such-command-ai4dl"]
    r = record("-o", out)
    assert r.returncode == 2 and r.stderr.strip().startswith("ai4dl: error:")
    assert len(r.stderr.strip().splitlines()) == 1
    r = record("-o", out, "--append", "--", "true")
    assert r.returncode == 0
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    r = record("-o", tmp_path / "other.csv", "--append", "--", "true")
    assert r.returncode == 2 and "--append" in r.stderr


def test_record_forwards_sigterm_and_finishes_the_file(tmp_path):
    out = tmp_path / "trace.csv"
    child = textwrap.dedent("""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))   # clean up, exit 7
        while True:
            time.sleep(0.05)
    """)
    p = subprocess.Popen([*AI4DL, "record", "-i", "0.3", "-o", str(out), "--", sys.executable,
                          "-c", child], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not out.exists() or len(rows(out)) < 3):
        time.sleep(0.1)
    assert len(rows(out)) >= 3
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=20)
    assert p.returncode == 7, err   # the command's own exit, after it handled the signal
    assert "recorded" in err
    n = len(rows(out))
    assert n >= 3 and out.read_text().endswith("\n")


def test_record_appends_runs_as_separate_executions(tmp_path):
    out = tmp_path / "trace.csv"
    sleep = [sys.executable, "-c", "import time; time.sleep(1.3)"]
    for _ in range(2):      # back to back: names carry the start to the microsecond and pid
        assert record("-i", 0.4, "-o", out, "--append", "--", *sleep).returncode == 0
    names = [row["execution"] for row in rows(out)]
    assert len(set(names)) == 2 and all(n.startswith("python") for n in names)
    assert out.read_text().count("execution,") == 1


def test_the_default_interval_keeps_a_short_job(tmp_path):
    """At the old default (15 s) a 20 s job left one row; at 1 s a 3 s job leaves several."""
    out = tmp_path / "t.csv"
    r = record("-o", out, "--", sys.executable, "-c", "import time; time.sleep(3.5)")
    assert r.returncode == 0, r.stderr
    assert 2 <= len(rows(out)) <= 5


def test_a_second_recorder_of_one_file_is_refused_and_the_first_keeps_its_rows(tmp_path):
    """Issue 45: two ``record -o same.csv`` at once (ranks of one DDP job) lost one run, or
    corrupted the file with --append. The second is refused at once, in one line."""
    out = tmp_path / "trace.csv"
    sleep = [sys.executable, "-c", "import time; time.sleep(2.5)"]
    # the first recording lasts until the second ones are done, however slow they start
    release = tmp_path / "release"
    held = [sys.executable, "-c", "import os, sys, time; t = time.time()\n"
            "while not os.path.exists(sys.argv[1]) and time.time() < t + 60: time.sleep(0.1)",
            str(release)]
    first = subprocess.Popen([*AI4DL, "record", "-i", "0.3", "-o", str(out), "--", *held],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 20
        while not (out.exists() and out.stat().st_size) and time.time() < deadline:
            time.sleep(0.1)
        for extra in ((), ("--append",)):
            second = record("-i", 0.3, "-o", out, *extra, "--", *sleep)
            assert second.returncode == 2, second.stderr
            assert "is being written by another 'ai4dl record'" in second.stderr
            assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr
    finally:
        release.touch()
        assert first.wait(timeout=30) == 0
    got = rows(out)
    assert len(got) >= 3 and len({r["execution"] for r in got}) == 1
