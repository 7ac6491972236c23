"""The CPU's peak: what a dense fp32 matmul reaches on this machine, measured by the
doctor in its own process (never in the job's) before it launches a job that has no
GPU to run on, so that a CPU job's speed of light has a denominator
(diagnosis/speed_of_light.py).

A 384x384 matmul (about 0.11 GFLOP: at the BLAS's full rate, and dozens of runs fit in
0.1 s) on one core through numpy's BLAS, the best run, times the cores the doctor may
use: a core's peak times the cores, as a CPU's datasheet peak is reckoned. One core,
not all of them at once: a multithreaded matmul waits for its slowest thread, so on a
busy machine (one other process on one of two cores) it read 7 GFLOP/s where one core's
best run times two read 213; one core's best run is one that a time slice held whole.
"""

from __future__ import annotations

import os
import time
from typing import Any

from gpudoctor.model import CpuPeak

SIZE = 384
BUDGET_S = 0.1


def measure(budget_s: float = BUDGET_S) -> CpuPeak | None:
    """One core's best fp32 matmul rate times the cores; None without numpy."""
    try:
        import numpy as np
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    with threadpool_limits(limits=1):
        best = _best_run(np, budget_s)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    return CpuPeak(tflops=2 * SIZE**3 / best / 1e12 * cores, cores=cores, size=SIZE)


def _best_run(np: Any, budget_s: float) -> float:
    """The fastest of the matmuls run within `budget_s` (at least three), in seconds."""
    a = np.random.default_rng(0).standard_normal((SIZE, SIZE), dtype=np.float32)
    b = a.T.copy()
    a @ b  # the BLAS's threads start, its buffers are made
    best = float("inf")
    clock = time.perf_counter
    start = clock()
    runs = 0
    while runs < 3 or clock() - start < budget_s:
        t0 = clock()
        a @ b
        best = min(best, clock() - t0)
        runs += 1
    return best
