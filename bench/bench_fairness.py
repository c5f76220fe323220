"""Benchmark: a flood of tiny-window PhaseModels against another namespace's window and
admission, before and after the fair shares of issue 26 (ai4dl.controller.fairness). Prints a
markdown table; asserts nothing (tests/test_faults_fairness.py is the test).

    PYTHONPATH=operator .venv/bin/python bench/bench_fairness.py [--flood 300] [--seconds 24]

In this process, with the operator's own scheduling code and a stand-in for one window's work
(``--cpu-ms`` of Python work holding the GIL, as planning and JSON do, then ``--io-ms`` of
waiting, as the Prometheus query and the API writes do, then ``--loop-ms`` of work on the event
loop, as kopf's handling of the watch event of the window's status write):

* before: one asyncio task per PhaseModel, every window (4 s) at its boundary, its work through
  ``asyncio.to_thread`` (the loop's default executor: FIFO, min(32, cpus + 4) threads), as
  ai4dl.controller.handlers did before;
* after: the same tasks served at ``period_seconds(4, --min-window)`` (the operator's default
  minimum is 60 s; the benchmark's default 12 s keeps a run short and is the harder case), their
  work through :class:`WindowScheduler` (``--workers``, namespaces in turn).

Measured: how long after it was due the tenant's window work started (a PhaseModel with a 12 s
window in another namespace, due at the same instants as the flood), and the latency of an
admission stand-in (a 1 ms handler run in a 4-thread executor from the event loop, as kopf runs
the sync webhook handler), every 50 ms. Medians and 95th percentiles. A scenario in which the
tenant got no window or admission no call measured nothing: exit 1, the reason, no table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "operator"))

from ai4dl.controller.fairness import WindowScheduler, period_seconds  # noqa: E402
from ai4dl.controller.runtime_window import window_start
from measured import refuse  # noqa: E402

FLOOD_WINDOW = 4        # the smallest window the CRD allows
TENANT_WINDOW = 12


def burn(ms: float) -> None:
    """Python work holding the GIL for about ``ms`` milliseconds."""
    end = time.perf_counter() + ms / 1000
    x = 0
    while time.perf_counter() < end:
        x += sum(range(200))


def window_work(cpu_ms: float, io_ms: float, loop_ms: float, loop) -> None:
    burn(cpu_ms)
    time.sleep(io_ms / 1000)
    loop.call_soon_threadsafe(burn, loop_ms)


async def phasemodel(run, namespace: str, period: int, seconds: float, args,
                     lateness: list | None) -> None:
    loop = asyncio.get_running_loop()
    deadline = time.time() + seconds
    while True:
        now = time.time()
        due = window_start(now, period) + period
        if due > deadline:
            return
        await asyncio.sleep(due - now)

        def job(due=due):
            if lateness is not None:
                lateness.append(time.time() - due)
            window_work(args.cpu_ms, args.io_ms, args.loop_ms, loop)
        await run(namespace, job)


async def admissions(pool: ThreadPoolExecutor, seconds: float, out: list) -> None:
    loop = asyncio.get_running_loop()
    deadline = time.time() + seconds
    while time.time() < deadline:
        t0 = time.perf_counter()
        await loop.run_in_executor(pool, burn, 1.0)
        out.append(time.perf_counter() - t0)
        await asyncio.sleep(0.05)


async def scenario(mode: str, args) -> tuple[list, list]:
    if mode == "before":
        async def run(namespace, fn):
            return await asyncio.to_thread(fn)
        period = FLOOD_WINDOW
    else:
        scheduler = WindowScheduler(args.workers)
        run = scheduler.run
        period = period_seconds(FLOOD_WINDOW, args.min_window)
    tenant: list[float] = []
    admitted: list[float] = []
    kopf_pool = ThreadPoolExecutor(4)      # kopf's settings.execution.max_workers
    tasks = [phasemodel(run, "flood", period, args.seconds, args, None)
             for _ in range(args.flood)]
    tasks.append(phasemodel(run, "tenant", period_seconds(
        TENANT_WINDOW, args.min_window if mode == "after" else 0), args.seconds, args, tenant))
    tasks.append(admissions(kopf_pool, args.seconds, admitted))
    await asyncio.gather(*tasks)
    kopf_pool.shutdown()
    return tenant, admitted


def pct(xs: list, q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flood", type=int, default=300, help="PhaseModels of the flood namespace")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each scenario")
    ap.add_argument("--cpu-ms", type=float, default=5.0, help="GIL-held work per window")
    ap.add_argument("--io-ms", type=float, default=40.0, help="waiting per window")
    ap.add_argument("--loop-ms", type=float, default=2.0,
                    help="event-loop work per window (the status write's watch event)")
    ap.add_argument("--workers", type=int, default=4, help="--window-workers (after)")
    ap.add_argument("--min-window", type=float, default=12.0,
                    help="--min-window-seconds (after; the operator's default is 60)")
    args = ap.parse_args(argv)
    rows = []
    for mode in ("before", "after"):
        tenant, admitted = asyncio.run(scenario(mode, args))
        if not tenant or not admitted:
            return refuse("bench_fairness", f"scenario {mode}: {len(tenant)} tenant windows, "
                                            f"{len(admitted)} admissions in {args.seconds:g} s "
                                            f"(the tenant's window is {TENANT_WINDOW} s)")
        rows.append((mode, len(tenant), statistics.median(tenant), pct(tenant, 0.95),
                     statistics.median(admitted) * 1000, pct(admitted, 0.95) * 1000))
    print(f"\n{args.flood} PhaseModels with {FLOOD_WINDOW} s windows in one namespace, one "
          f"{TENANT_WINDOW} s PhaseModel in another; {args.cpu_ms:g} ms GIL + {args.io_ms:g} ms "
          f"waiting + {args.loop_ms:g} ms on the event loop per window; {os.cpu_count()} CPUs; after: --window-workers {args.workers}, "
          f"--min-window-seconds {args.min_window:g}\n")
    print("| scheduling | tenant windows | tenant lateness p50 (s) | p95 (s) | "
          "admission p50 (ms) | p95 (ms) |")
    print("|---|---|---|---|---|---|")
    for mode, n, l50, l95, a50, a95 in rows:
        print(f"| {mode} | {n} | {l50:.2f} | {l95:.2f} | {a50:.1f} | {a95:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
