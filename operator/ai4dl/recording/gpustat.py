"""GPU memory and utilisation of a process tree, read through NVML (``pip install
'ai4dl-operator[gpu]'``, the ``nvidia-ml-py`` package, module ``pynvml``).

:class:`GpuTree` takes the pids of a tree (from :class:`ai4dl.recording.procstat.ProcessTree`) and
reports, per sample:

* ``memory_bytes``: the sum of ``usedGpuMemory`` over the tree's processes in NVML's compute
  and graphics process lists of every GPU (a process in both lists counts once). Where NVML
  lists a tree process but cannot tell its memory (``None``: some drivers and sandboxes), the
  whole device's used memory stands in for that GPU, and :attr:`GpuTree.memory_source` says so.
* ``util_percent``: SM utilisation, 0-100, over the interval since the previous sample: the
  mean of ``nvmlDeviceGetProcessUtilization``'s samples per process, summed over the tree's
  processes on a GPU (at most 100), averaged over the GPUs the tree uses (what
  ``avg(DCGM_FI_DEV_GPU_UTIL)`` gives for a pod). Where the driver has no per-process samples
  (``NOT_SUPPORTED``), the device's own utilisation is used for the GPUs the tree uses, which
  counts other processes on a shared GPU too; :attr:`GpuTree.util_source` says which.

A process that has exited is no longer among the tree's pids, so NVML's entries for it (it
may still list it for a moment) count for nothing. NVML reports host pids: inside a container
with its own pid namespace they may not match ``/proc``'s, and the tree then shows 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

INSTALL_HINT = "pip install 'ai4dl-operator[gpu]' (nvidia-ml-py)"
PER_PROCESS = "per-process"
DEVICE = "whole device"
_NOT_SUPPORTED, _NOT_FOUND = 3, 6   # NVML_ERROR_* (pynvml has them too; a fake may not)


@dataclass(frozen=True)
class GpuSample:
    memory_bytes: int
    util_percent: float


class GpuUnavailable(Exception):
    """No GPU can be recorded here; the message is one line saying why."""


def _nvml():
    try:
        import pynvml  # the optional [gpu] extra: only `record` with a GPU needs it
    except ImportError:
        raise GpuUnavailable(f"NVML is not installed: {INSTALL_HINT}") from None
    return pynvml


class GpuTree:
    """NVML readings for the pids of one process tree. Open with :meth:`open`; close after."""

    def __init__(self, nvml, handles: list):
        self.nvml = nvml
        self.handles = handles
        self.util_source = PER_PROCESS
        self.memory_source = PER_PROCESS
        self._per_process_util = [True] * len(handles)
        self._last_seen = [0] * len(handles)   # NVML sample timestamps (us) already used
        self.peak_memory = 0

    @classmethod
    def open(cls) -> "GpuTree":
        """NVML started and every GPU's handle; :class:`GpuUnavailable` with the reason when
        there is no NVML, no driver or no GPU."""
        nvml = _nvml()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            raise GpuUnavailable(f"NVML could not start ({err}): no GPU driver here?") from None
        try:
            n = nvml.nvmlDeviceGetCount()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        except nvml.NVMLError as err:
            nvml.nvmlShutdown()
            raise GpuUnavailable(f"NVML could not list the GPUs ({err})") from None
        if not handles:
            nvml.nvmlShutdown()
            raise GpuUnavailable("NVML sees no GPU")
        tree = cls(nvml, handles)
        tree.prime()
        return tree

    def prime(self) -> None:
        """Mark the utilisation samples taken so far as seen: the first row covers only its
        own interval."""
        for i in range(len(self.handles)):
            self._util(i, set())

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

    def _processes(self, handle) -> dict[int, int | None]:
        """pid -> used GPU memory (None: NVML cannot tell) on one GPU, compute and graphics."""
        out: dict[int, int | None] = {}
        for get in (self.nvml.nvmlDeviceGetComputeRunningProcesses,
                    self.nvml.nvmlDeviceGetGraphicsRunningProcesses):
            try:
                procs = get(handle)
            except self.nvml.NVMLError:
                continue   # this list unsupported here (e.g. graphics on a compute GPU)
            for p in procs:
                # a process in both lists is one allocation: the larger known reading
                prev = out.get(p.pid)
                if prev is None:
                    out[p.pid] = p.usedGpuMemory
                elif p.usedGpuMemory is not None:
                    out[p.pid] = max(prev, p.usedGpuMemory)
        return out

    def _util(self, i: int, pids: set[int]) -> float:
        """SM utilisation of ``pids`` on GPU i since the last call (0-100)."""
        handle = self.handles[i]
        if self._per_process_util[i]:
            try:
                samples = self.nvml.nvmlDeviceGetProcessUtilization(handle, self._last_seen[i])
            except self.nvml.NVMLError as err:
                code = getattr(err, "value", None)
                if code != _NOT_SUPPORTED:
                    return 0.0   # NOT_FOUND: no sample in the interval (idle), or transient
                self._per_process_util[i] = False
                self.util_source = DEVICE
            else:
                per_pid: dict[int, list[int]] = {}
                for s in samples:
                    self._last_seen[i] = max(self._last_seen[i], int(s.timeStamp))
                    if s.pid in pids:
                        per_pid.setdefault(s.pid, []).append(int(s.smUtil))
                return min(100.0, sum(sum(v) / len(v) for v in per_pid.values()))
        try:
            return float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except self.nvml.NVMLError:
            return 0.0

    def sample(self, pids: Iterable[int]) -> GpuSample:
        pids = set(pids)
        memory, utils = 0, []
        for i, handle in enumerate(self.handles):
            procs = self._processes(handle)
            mine = {pid: used for pid, used in procs.items() if pid in pids}
            if not mine:
                self._util(i, set())   # keep the utilisation window moving
                continue
            if any(used is None for used in mine.values()):
                self.memory_source = DEVICE
                try:
                    memory += int(self.nvml.nvmlDeviceGetMemoryInfo(handle).used)
                except self.nvml.NVMLError:
                    memory += sum(used or 0 for used in mine.values())
            else:
                memory += sum(mine.values())
            utils.append(self._util(i, pids))
        self.peak_memory = max(self.peak_memory, memory)
        return GpuSample(memory, sum(utils) / len(utils) if utils else 0.0)
