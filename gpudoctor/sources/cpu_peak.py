"""The CPU's peak: what a dense fp32 matmul reaches on this machine, measured by the
doctor in its own process (never in the job's) before it launches a job that has no
GPU to run on, so that a CPU job's speed of light has a denominator
(diagnosis/speed_of_light.py).

numpy's BLAS on every core the doctor may use, a 384x384 matmul (about 0.11 GFLOP,
big enough to run at the BLAS's full rate on a laptop's or a server's cores, small
enough that 0.1 s holds dozens of runs), best run of those. It is a peak in the sense
a GPU's datasheet figure is one: the rate of the one operation training spends its
FLOPs in, at its best. On a busy machine the best run is still the one the others
least disturbed; the figure is recorded with the run and said in the report's basis.
"""

from __future__ import annotations

import os
import time

from gpudoctor.model import CpuPeak

SIZE = 384
BUDGET_S = 0.1


def measure(budget_s: float = BUDGET_S) -> CpuPeak | None:
    """The best rate of a fp32 matmul within `budget_s`; None without numpy."""
    try:
        import numpy as np
    except ImportError:
        return None
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
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return CpuPeak(tflops=2 * SIZE**3 / best / 1e12, cores=cores or 1, size=SIZE)
