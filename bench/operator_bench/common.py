"""bench/bench_operator.py's shared pieces: the repository paths it puts on sys.path, the
benchmark's namespace and PhaseModel, /proc and metrics-text readers, and the markdown table.
Separate so that every other part imports them from one place."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: this checkout's package, ahead of an installed one: a virtual environment made for another
#: checkout (its editable install) must not lend that checkout's code to this one's benchmark,
#: here or in the operator it starts (OperatorProcess)
PACKAGE_ROOT = REPO / "operator"
sys.path.insert(0, str(PACKAGE_ROOT))
for _p in (REPO, REPO / "tests"):
    if str(_p) not in sys.path:
        sys.path.append(str(_p))

NAMESPACE = "bench"
PM_NAME = "pm"
MIB = 1024.0 * 1024.0


# ----------------------------------------------------------------------------- small helpers
def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str, names: set[str] | None = None) -> list[tuple[str, dict, float]]:
    """Prometheus text format -> [(name, labels, value)] (only ``names`` when given)."""
    out = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _LINE.match(line)
        if not m or (names is not None and m.group(1) not in names):
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), value))
    return out


def http_text(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS / VmHWM of a process, MiB (empty when it is gone)."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, val = line.split(":", 1)
                out[key] = float(val.split()[0]) / 1024.0
    except OSError:
        pass
    return out


def take_peak_rss(pid: int) -> float | None:
    """A process's peak RSS (VmHWM, MiB) since it started or since the last call, which resets
    it (``5`` written to /proc/PID/clear_refs, Linux 4.0): the exact peak of each interval
    between two calls. None where it cannot be reset (the peak is then not an interval's)."""
    peak = proc_status(pid).get("VmHWM")
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return None
    return peak


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its reaped children: none here), seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return float("nan")


def machine_busy_seconds() -> float:
    """CPU seconds all processes of the machine have used (busy time in /proc/stat)."""
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError):
        return float("nan")
    idle = f[3] + (f[4] if len(f) > 4 else 0)
    return (sum(f[:8]) - idle) / _TICK


def cpu_snapshot(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds of our processes, and of everything else on the machine ("other")."""
    out = {name: cpu_seconds(pid) for name, pid in pids.items()}
    out["other processes"] = machine_busy_seconds() - sum(out.values())
    return out


def fmt(x, digits: int = 2) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        if x != x:
            return "n/a"
        return f"{x:.{digits}f}"
    return str(x)


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


class Timer:
    """Accumulates calls and seconds of wrapped callables, by stage name."""

    def __init__(self):
        self.calls: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self.lock = threading.Lock()

    def wrap(self, stage: str, fn):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t
                with self.lock:
                    self.calls[stage] = self.calls.get(stage, 0) + 1
                    self.seconds[stage] = self.seconds.get(stage, 0.0) + dt
        return timed
