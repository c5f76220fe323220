"""CPU and memory of a process tree, read from ``/proc`` (Linux; no psutil).

:class:`ProcessTree` follows one root process and its descendants and reports, per sample,

* ``cpu_seconds``: a cumulative CPU counter (user + system) of the whole tree, which never
  decreases, like cAdvisor's ``container_cpu_usage_seconds_total`` for a container;
* ``memory_bytes``: the tree's memory, the sum of each live process's PSS (proportional set
  size, ``/proc/<pid>/smaps_rollup``; RSS from ``/proc/<pid>/statm`` where that cannot be
  read). PSS rather than RSS because forked workers (DataLoader) share the parent's pages
  copy-on-write: summing RSS would count a dataset once per worker, while a container's
  working set counts each page once.

**Counting rule for the CPU counter.** Processes are keyed by (pid, start time), so a reused
pid is a new process. A process belongs to the tree once it has been seen as a descendant of
the root, and stays in it until it exits (a double-forked daemon reparented to init is still
followed). Between two samples the counter grows by

1. for each live process: the growth of its own time (``utime + stime``) and of its reaped
   children's time (``cutime + cstime``: what the kernel adds to a parent when it waits for a
   child, including processes that lived and died entirely between two samples);
2. minus, for each process seen at the previous sample that has since gone: its last seen
   total, charged against the reaped-children growth of its nearest surviving ancestor in the
   tree (at most that growth). A reaped child's final total lands in its parent's ``cutime``;
   we counted its last seen part already, so only the remainder (the tail since the last
   sample) is new. A child that disappeared without being waited for (``SIGCHLD`` ignored, or
   reaped by init) leaves no growth to charge against: its tail is lost, never counted twice.

Each step is clamped at zero, so the counter never goes backwards. To count the root's own
tail, sample while it is a zombie (exited, not yet waited for: its ``/proc`` entry still holds
its final times, children included): the recorder does that. After the root is gone the
counter keeps its last value.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
PROC = "/proc"


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` we use (times in seconds)."""

    pid: int
    ppid: int
    state: str
    own: float       # utime + stime
    reaped: float    # cutime + cstime (waited-for children, recursively)
    start: int       # start time in clock ticks since boot: (pid, start) names a process

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start)


def parse_stat(text: str) -> ProcStat:
    """Parse one ``/proc/<pid>/stat`` line. The command name (field 2) may hold spaces and
    parentheses, so the fields after it are found from the *last* ``)``."""
    pid = int(text[:text.index(" ")])
    rest = text[text.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); field n is rest[n - 3]
    return ProcStat(pid=pid, ppid=int(rest[1]), state=rest[0],
                    own=(int(rest[11]) + int(rest[12])) / CLOCK_TICKS,
                    reaped=(int(rest[13]) + int(rest[14])) / CLOCK_TICKS,
                    start=int(rest[19]))


def read_stat(pid: int, proc: str = PROC) -> ProcStat | None:
    try:
        with open(f"{proc}/{pid}/stat") as fh:
            return parse_stat(fh.read())
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return None  # gone meanwhile (or a torn read of a dying process)


def snapshot(proc: str = PROC) -> dict[int, ProcStat]:
    """``/proc/<pid>/stat`` of every process (one pass over ``/proc``)."""
    out = {}
    for name in os.listdir(proc):
        if name.isdigit():
            st = read_stat(int(name), proc)
            if st is not None:
                out[st.pid] = st
    return out


def memory_bytes(pid: int, proc: str = PROC) -> int:
    """PSS of one process in bytes (RSS when smaps_rollup is unavailable); 0 when gone."""
    try:
        with open(f"{proc}/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    try:
        with open(f"{proc}/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * PAGE_SIZE
    except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError, IndexError):
        return 0


@dataclass(frozen=True)
class TreeSample:
    cpu_seconds: float   # cumulative, never decreasing
    memory_bytes: int    # PSS (or RSS) sum of the live processes
    pids: tuple[int, ...]
    alive: bool          # the root is still running (not a zombie)


class ProcessTree:
    """Follow ``root`` and its descendants; :meth:`sample` gives a :class:`TreeSample`.

    Thread-safe (a scrape thread and a test may sample at once). The counter starts at the
    tree's CPU time when first sampled (a process started just before counts from ~0).
    """

    def __init__(self, root: int, proc: str = PROC):
        self.root = int(root)
        self.proc = proc
        self._lock = threading.Lock()
        self._last: dict[tuple[int, int], ProcStat] = {}   # key -> stat at the previous sample
        self._members: set[tuple[int, int]] = set()          # keys ever seen in the tree
        self._root_key: tuple[int, int] | None = None
        self.cpu_seconds = 0.0
        self.memory = 0
        self._finished = False

    def _tree(self, procs: dict[int, ProcStat]) -> dict[tuple[int, int], ProcStat]:
        root = procs.get(self.root)
        if root is not None and self._root_key is None:
            self._root_key = root.key
        if root is not None and root.key != self._root_key:
            root = None  # the pid was reused by another process
        found = {}
        children: dict[int, list[ProcStat]] = {}
        for st in procs.values():
            children.setdefault(st.ppid, []).append(st)
        todo = [root] if root is not None else []
        # members that left the root's subtree (reparented) are still followed, with theirs
        todo += [st for st in procs.values() if st.key in self._members and st.pid != self.root]
        while todo:
            st = todo.pop()
            if st.key in found:
                continue
            found[st.key] = st
            todo.extend(children.get(st.pid, ()))
        return found

    def sample(self, procs: dict[int, ProcStat] | None = None) -> TreeSample:
        """Read the tree now (``procs``: a :func:`snapshot` to share between trees)."""
        with self._lock:
            if procs is None:
                procs = snapshot(self.proc)
            now = {} if self._finished else self._tree(procs)
            step = 0.0
            for key, st in now.items():
                prev = self._last.get(key)
                # a process new to us: all its time is new (at the first sample this sets the
                # counter to the tree's CPU time so far, as cAdvisor's starts at container start)
                step += st.own + st.reaped if prev is None else max(0.0, st.own - prev.own)
            # reaped growth per surviving process, minus the last seen totals of gone children
            budget = {key: max(0.0, st.reaped - self._last[key].reaped)
                      for key, st in now.items() if key in self._last}
            by_pid = {k[0]: k for k in now}
            for key, prev in self._last.items():
                if key in now:
                    continue
                seen = prev.own + prev.reaped
                anc = self._ancestor(prev, now, by_pid)
                if anc is not None:
                    take = min(seen, budget[anc])
                    budget[anc] -= take
            step += sum(budget.values())
            self.cpu_seconds += max(0.0, step)
            self._last = now
            self._members |= set(now)
            live = [st.pid for st in now.values() if st.state not in ("Z", "X")]
            self.memory = sum(memory_bytes(pid, self.proc) for pid in live)
            root = now.get(self._root_key) if self._root_key else None
            alive = root is not None and root.state not in ("Z", "X")
            return TreeSample(self.cpu_seconds, self.memory, tuple(sorted(live)), alive)

    def _ancestor(self, gone: ProcStat, now: dict, by_pid: dict) -> tuple[int, int] | None:
        """Nearest surviving ancestor in the tree of a process seen at the last sample."""
        ppid, hops = gone.ppid, 0
        while hops < 64:
            key = by_pid.get(ppid)
            if key is not None and key in self._last:
                return key
            prev = next((st for k, st in self._last.items() if k[0] == ppid), None)
            if prev is None:
                return None
            ppid, hops = prev.ppid, hops + 1
        return None

    def close(self) -> None:
        """Stop following the tree: later samples add nothing (the counter is kept)."""
        with self._lock:
            self._finished = True
            self._last = {}
