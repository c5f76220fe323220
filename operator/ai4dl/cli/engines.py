"""Where the pieces of a cluster's replay run (``ai4dl evaluate --prometheus --engine``):

- ``local``: on this machine — in this process (``--workers 1``), else in that many worker
  processes (:class:`concurrent.futures.ProcessPoolExecutor`, spawned: the parent's threads and
  sockets are not forked into them);
- ``dask``: on Dask (``distributed``, the ``[cluster]`` extra) — an existing cluster's
  scheduler (``--scheduler tcp://host:8786``; its workers need ai4dl installed, as the
  operator's image has it), else a :class:`~distributed.LocalCluster` of ``--workers``
  processes of one thread each.

Why Dask (docs/scaling.md, "A cluster's history"): it is pure Python (no JVM as Spark needs,
no native runtime as Ray's), installs with pip beside ai4dl, speaks the
:mod:`concurrent.futures` interface the local engine uses (one code path for both), and its
LocalCluster is a real multi-process cluster for the tests. Each engine is a context manager
that yields ``run(fn, tasks)``: the results in any order as they finish, each as
``(index, result)``.
"""

from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from ai4dl.errors import Ai4dlError

ENGINES = ("local", "dask")
#: How long a client waits for an existing Dask scheduler (``--scheduler``).
CONNECT_TIMEOUT = "30s"


def _indexed(fn: Callable, index: int, task):
    return index, fn(task)


@contextmanager
def engine(name: str, workers: int = 1, scheduler: str | None = None):
    """``run(fn, tasks)`` on engine ``name`` (module doc); ``fn`` and the tasks must pickle."""
    if workers < 1:
        raise Ai4dlError(f"--workers must be at least 1, got {workers}")
    if name == "local":
        if scheduler:
            raise Ai4dlError("--scheduler is the Dask engine's: give --engine dask")
        with _local(workers) as run:
            yield run
    elif name == "dask":
        with _dask(workers, scheduler) as run:
            yield run
    else:
        raise Ai4dlError(f"--engine must be one of {', '.join(ENGINES)}, not {name!r}")


@contextmanager
def _local(workers: int):
    if workers == 1:
        def in_process(fn: Callable, tasks: Sequence) -> Iterator:
            return ((i, fn(t)) for i, t in enumerate(tasks))
        yield in_process
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        def in_pool(fn: Callable, tasks: Sequence) -> Iterator:
            futures = [pool.submit(_indexed, fn, i, t) for i, t in enumerate(tasks)]
            try:
                for f in as_completed(futures):
                    yield f.result()
            finally:
                for f in futures:
                    f.cancel()
        yield in_pool


@contextmanager
def _dask(workers: int, scheduler: str | None):
    try:
        import dask
        from distributed import Client, LocalCluster
        from distributed import as_completed as dask_completed
    except ImportError:
        raise Ai4dlError("--engine dask needs Dask's distributed: pip install "
                         "'ai4dl-operator[cluster]'") from None
    cluster = None
    try:
        if scheduler:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT)
        else:
            # The scheduler's HTTP server on a free port (two replays at once do not collide),
            # and glibc's own trim threshold in the workers: Dask's MALLOC_TRIM_THRESHOLD_
            # fixes it, which stops glibc from raising its mmap threshold, so every large
            # array of a piece was mapped and zero-filled afresh (a piece took 1.5 × the CPU
            # it takes in a local worker; 1.1 × without it).
            with dask.config.set({"distributed.nanny.pre-spawn-environ."
                                  "MALLOC_TRIM_THRESHOLD_": None}):
                cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=logging.ERROR)
            client = Client(cluster)
    except (OSError, TimeoutError, RuntimeError) as err:     # RuntimeError: a worker that
        #                                                    did not start (LocalCluster)
        where = scheduler or "a LocalCluster"
        raise Ai4dlError(f"Dask at {where}: {' '.join(str(err).split())}") from None

    def on_dask(fn: Callable, tasks: Sequence) -> Iterator:
        futures = [client.submit(_indexed, fn, i, t, pure=False) for i, t in enumerate(tasks)]
        try:
            for f in dask_completed(futures):
                yield f.result()
        finally:
            client.cancel(futures)

    try:
        yield on_dask
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
