"""``ai4dl record -- COMMAND...``: profile a job locally into the generic long trace format.

Runs COMMAND, samples its process tree (:class:`ai4dl.recording.procstat.ProcessTree`) every
``--interval`` seconds and appends one row per sample to a long CSV::

    execution,timestamp,cpu,memory[,gpu_util,gpu_memory]
    python cnn.py@20250101T120000,1735732815.012,0.8312,412385280,87.5,2147483648

``cpu`` is in cores: the growth of the tree's CPU counter over the interval divided by the
interval (what ``rate(container_cpu_usage_seconds_total[...])`` gives in a cluster); ``memory``
is the tree's working set in bytes (PSS sum) at the sample. A row stands for the interval that
ends at its timestamp, so the first row comes one interval after the start. Each row is
flushed as it is written: an interrupted recording keeps every sample taken. The file loads
with ``ai4dl train/detect/evaluate`` (pass ``--step`` equal to the interval to keep every
sample; the default step of 15 s averages them). The default interval is 1 s: at the operator's
15 s a 20 s job left one row.

With NVML (``pip install 'ai4dl-operator[gpu]'``) and a GPU, two more columns
(:mod:`ai4dl.recording.gpustat`): ``gpu_util``, the tree's SM utilisation in percent over the interval
(per-process samples; the device's utilisation where the driver has none, said at the end),
and ``gpu_memory``, the GPU memory of the tree's processes in bytes at the sample. ``--gpu
auto`` (the default) adds them when NVML sees a GPU, ``--gpu on`` also says in one line why
not when it cannot, ``--gpu off`` never adds them. ``--append`` keeps the file's columns.

Exit status: the command's own (128 + N when a signal N killed it), 127 when the command is
not found, 126 when it cannot be run, 2 for our own usage errors. SIGINT and SIGTERM sent to
the recorder are forwarded to the command, which decides when to stop; the file is finished
when it has exited. A Ctrl-C typed at a terminal reaches the command directly (same process
group), so it is not forwarded a second time.
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ai4dl.errors import Ai4dlError
from ai4dl.io.outputs import SELF_LOCKED, add_output
from ai4dl.recording.gpustat import GpuTree, GpuUnavailable
from ai4dl.recording.procstat import ProcessTree

EXIT_NOT_FOUND = 127
EXIT_CANNOT_RUN = 126
HEADER = ["execution", "timestamp", "cpu", "memory"]
GPU_HEADER = HEADER + ["gpu_util", "gpu_memory"]
_FORWARDED = (signal.SIGINT, signal.SIGTERM)
_SI_KERNEL = 0x80  # si_code of signals the kernel sends, e.g. a terminal's Ctrl-C


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "record", help="run a command and record its CPU, memory (and GPU) as a long trace CSV",
        description="Run COMMAND and sample its process tree (CPU cores, memory bytes; GPU "
                    "utilisation and memory with NVML) into "
                    "the generic long trace format that train/detect/evaluate read.")
    p.add_argument("-i", "--interval", type=float, default=1.0,
                   help="seconds between samples (default 1: a short job keeps its phases; "
                        "train/detect/evaluate resample to their --step, 15 s by default)")
    # the recording locks the file itself (it appends to it as it samples): checked only
    add_output(p, "-o", "--output", kind=SELF_LOCKED, default="trace.csv",
               help="trace file (default trace.csv)")
    p.add_argument("--name", help="execution name (default: the command and the start time)")
    p.add_argument("--append", action="store_true",
                   help="add rows to an existing trace file instead of replacing it")
    p.add_argument("--gpu", choices=("auto", "on", "off"), default="auto",
                   help="gpu_util and gpu_memory columns through NVML: auto (default) when "
                        "NVML sees a GPU, on (say why not when it cannot), off")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                   help="the command to run, after --")
    p.set_defaults(func=run)
    return p


def default_name(command: list[str], start: float, pid: int | None = None) -> str:
    """``python cnn.py@20250101T120000.123456-4242``: the program, its script when it has
    one, the start time to the microsecond and the recorder's pid, so several recordings
    appended to one file stay separate executions, even the ranks of one job started in the
    same second (issue 45: names unique only to the second)."""
    parts = [Path(command[0]).name]
    if len(command) > 1 and not command[1].startswith("-"):
        parts.append(Path(command[1]).name)
    micro = int(round((start - int(start)) * 1e6)) % 1_000_000
    return (" ".join(parts) + "@" + time.strftime("%Y%m%dT%H%M%S", time.localtime(start))
            + f".{micro:06d}-{os.getpid() if pid is None else pid}")


def _lock(fh, out: Path) -> None:
    """Hold ``out`` for this recording (an advisory lock, released when the file closes): a
    second ``ai4dl record`` to the same file is refused at once, in one line, instead of
    truncating the first one's rows or interleaving with them (issue 45: two ranks of one DDP
    job recording to one file lost a run)."""
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise Ai4dlError(f"{out} is being written by another 'ai4dl record': give each "
                         f"recording its own -o (e.g. one per rank), then join them") from None


def _say(args: argparse.Namespace, msg: str) -> None:
    if not getattr(args, "quiet", False):
        print(f"ai4dl: {msg}", file=sys.stderr, flush=True)


def _existing_header(path: Path, append: bool) -> list[str] | None:
    """The header of the file --append adds to (None: a new file is written)."""
    if not (append and path.exists() and path.stat().st_size > 0):
        return None
    with open(path, newline="") as fh:
        head = next(csv.reader(fh), None)
    if head not in (HEADER, GPU_HEADER):
        raise Ai4dlError(f"{path}: --append needs a file written by 'ai4dl record' "
                         f"(header {','.join(HEADER)}[,gpu_util,gpu_memory]), found "
                         f"{','.join(head or [])!r}")
    return head


def _open_gpu(args: argparse.Namespace, head: list[str] | None) -> GpuTree | None:
    """NVML for the GPU columns, or None. --append follows the file: GPU columns are written
    to a file that has them (and demanded), never added to one that has not."""
    mode = getattr(args, "gpu", "auto")
    if head is not None:
        if head == HEADER:
            if mode == "on":
                raise Ai4dlError(f"{args.output} has no gpu columns: --gpu on cannot append to "
                                 "it (record to a new file)")
            return None
        mode = "on"
    if mode == "off":
        return None
    try:
        return GpuTree.open()
    except GpuUnavailable as why:
        if head is not None:
            raise Ai4dlError(f"{args.output} has gpu columns but no GPU can be recorded "
                             f"here: {why}") from None
        if mode == "on":
            print(f"ai4dl: warning: --gpu on: {why}; recording cpu and memory only",
                  file=sys.stderr, flush=True)
        return None


def run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise Ai4dlError("record: give the command to run after --, e.g. "
                         "'ai4dl record -i 5 -- python train.py'")
    if not (args.interval > 0 and args.interval < 1e6):
        raise Ai4dlError(f"--interval must be a positive number of seconds, not {args.interval}")
    exe = shutil.which(command[0]) if os.sep not in command[0] else command[0]
    if exe is None or not os.path.exists(exe):
        print(f"ai4dl: error: command not found: {command[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND
    out = Path(args.output)
    head = _existing_header(out, args.append)
    gpu = _open_gpu(args, head)
    new = head is None
    fh = open(out, "a", newline="")         # truncated below, once the lock is held
    _lock(fh, out)
    if new:
        fh.truncate(0)

    # Signals are taken synchronously (sigtimedwait) rather than by handlers: the loop then
    # waits for "next sample, child exited or signal" in one call, and sees who sent a signal.
    waited = {*_FORWARDED, signal.SIGCHLD}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    start = time.time()
    try:
        try:
            # the child must not inherit the blocked mask (exec keeps it)
            proc = subprocess.Popen(command, preexec_fn=lambda: signal.pthread_sigmask(
                signal.SIG_SETMASK, old_mask))
        except PermissionError as err:
            fh.close()
            if gpu:
                gpu.close()
            print(f"ai4dl: error: cannot run {command[0]}: {err.strerror}", file=sys.stderr)
            return EXIT_CANNOT_RUN
        except OSError as err:
            fh.close()
            if gpu:
                gpu.close()
            code = EXIT_NOT_FOUND if isinstance(err, FileNotFoundError) else EXIT_CANNOT_RUN
            print(f"ai4dl: error: cannot run {command[0]}: {err.strerror or err}", file=sys.stderr)
            return code
        name = args.name or default_name(command, start)
        with fh:
            writer = csv.writer(fh, lineterminator="\n")
            if new:
                writer.writerow(GPU_HEADER if gpu else HEADER)
                fh.flush()
            try:
                rows, total_cpu, peak = _loop(proc, args.interval, name, writer, fh, gpu)
            finally:
                if gpu:
                    gpu.close()
        code = proc.wait()
    finally:
        # drop signals still pending (a Ctrl-C that also stopped the command): unblocked,
        # they would interrupt us after the command's own exit status is known
        while signal.sigtimedwait(list(waited), 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    elapsed = time.time() - start
    status = code if code >= 0 else 128 - code  # Popen: -N when killed by signal N
    if rows == 0:
        print(f"ai4dl: warning: the command ended after {elapsed:.1f} s, before the first "
              f"sample (-i {args.interval:g}): no rows written to {out}", file=sys.stderr)
    gpu_note = (f", GPU peak {gpu.peak_memory / 2**20:.0f} MiB (memory {gpu.memory_source}, "
                f"utilisation {gpu.util_source})" if gpu else "")
    _say(args, f"recorded {rows} samples of {name!r} to {out} ({elapsed:.1f} s, "
         f"{total_cpu:.1f} CPU s, peak {peak / 2**20:.0f} MiB{gpu_note}, exit {status})")
    return status


def _exited(pid: int) -> bool:
    """Has the child exited? Peeks without reaping (WNOWAIT), so its /proc entry stays
    readable as a zombie and the last sample can still read its final CPU times."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _loop(proc: subprocess.Popen, interval: float, name: str, writer, fh,
          gpu: GpuTree | None = None) -> tuple[int, float, int]:
    tree = ProcessTree(proc.pid)
    first = tree.sample()
    last_t, last_cpu = time.monotonic(), first.cpu_seconds
    next_t = last_t + interval
    rows, peak = 0, first.memory_bytes
    waited = [*_FORWARDED, signal.SIGCHLD]
    while True:
        exited = _exited(proc.pid)
        if not exited:
            info = signal.sigtimedwait(waited, max(0.0, next_t - time.monotonic()))
            if info is not None and info.si_signo in _FORWARDED:
                if not (info.si_signo == signal.SIGINT and info.si_code == _SI_KERNEL):
                    try:
                        proc.send_signal(info.si_signo)
                    except ProcessLookupError:
                        pass
                continue
            if info is not None:  # SIGCHLD
                continue
        now = time.monotonic()
        s = tree.sample()
        # exited, or exiting while sampled (a busy machine: the tick's wait ran out, then the
        # child ended before the sample read it): the zombie's final times count, but no row
        # is written for the partial interval (its memory is gone; a row of zeros would be a
        # sample that never happened)
        if exited or _exited(proc.pid):
            return rows, s.cpu_seconds, peak
        dt = now - last_t
        cpu = max(0.0, s.cpu_seconds - last_cpu) / dt if dt > 0 else 0.0
        row = [name, f"{time.time():.3f}", f"{cpu:.6g}", str(s.memory_bytes)]
        if gpu is not None:
            g = gpu.sample(s.pids)
            row += [f"{g.util_percent:.4g}", str(g.memory_bytes)]
        writer.writerow(row)
        fh.flush()
        rows += 1
        peak = max(peak, s.memory_bytes)
        last_t, last_cpu = now, s.cpu_seconds
        next_t += interval
        if next_t < now:  # a slow sample (busy machine): skip missed ticks, keep the grid
            next_t = now + interval - (now - next_t) % interval
