"""The CPU's peak: what a dense fp32 matmul reaches on this machine, measured by the
doctor in its own process (never in the job's) before it launches a job that has no
GPU to run on (at most once a day: CACHE_TTL_S), so that a CPU job's speed of light has
a denominator (diagnosis/speed_of_light.py).

A 384x384 matmul (about 0.11 GFLOP: at the BLAS's full rate, and dozens of runs fit in
0.1 s) on one core through numpy's BLAS, the best run, times the cores the doctor may
use: a core's peak times the cores, as a CPU's datasheet peak is reckoned. One core,
not all of them at once: a multithreaded matmul waits for its slowest thread, so on a
busy machine (one other process on one of two cores) it read 7 GFLOP/s where one core's
best run times two read 213; one core's best run is one that a time slice held whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from gpudoctor.model import CpuPeak

SIZE = 384
BUDGET_S = 0.1
# A core's rate is kept (cache_path()) and used again for a day: measuring costs a
# quarter of a second of the doctor's start-up (importing numpy, then the runs) before
# every CPU job; a machine's cores do not change speed from one run to the next. This
# project's choice of a day: a new CPU model or numpy (the key) measures again at once.
CACHE_TTL_S = 24 * 3600.0


def measure(budget_s: float = BUDGET_S) -> CpuPeak | None:
    """One core's best fp32 matmul rate times the cores; None without numpy. The core's
    rate as measured within the last day when there is one for this CPU and numpy."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    key = _key()
    core_tflops = _cached(key)
    if core_tflops is None:
        try:
            import numpy as np
            from threadpoolctl import threadpool_limits
        except ImportError:
            return None
        with threadpool_limits(limits=1):
            best = _best_run(np, budget_s)
        core_tflops = 2 * SIZE**3 / best / 1e12
        _keep(key, core_tflops)
    return CpuPeak(tflops=core_tflops * cores, cores=cores, size=SIZE)


def cache_path() -> Path:
    """Where a core's rate is kept: the user's cache folder ($XDG_CACHE_HOME or ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpudoctor" / "cpu_peak.json"


def _key() -> dict[str, str]:
    """What the rate depends on: the CPU model and the numpy (its BLAS) it was read with."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    try:
        numpy = metadata.version("numpy")
    except metadata.PackageNotFoundError:
        numpy = ""
    return {"cpu": model, "numpy": numpy, "size": str(SIZE)}


def _cached(key: dict[str, str]) -> float | None:
    try:
        kept = json.loads(cache_path().read_text())
        fresh = 0 <= time.time() - float(kept["measured_unix"]) < CACHE_TTL_S
        rate = float(kept["core_tflops"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return rate if fresh and kept.get("key") == key and rate > 0 else None


def _keep(key: dict[str, str], core_tflops: float) -> None:
    """Written whole or not at all (a rename); a folder that cannot be written: kept not."""
    path = cache_path()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}")
        part.write_text(
            json.dumps({"key": key, "measured_unix": time.time(), "core_tflops": core_tflops})
        )
        os.replace(part, path)


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
