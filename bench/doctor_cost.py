"""The doctor's own cost: CPU share and peak memory of `gpudoctor run --headless` at the
default 1 Hz, over a job that sleeps (no probe traffic) and over a job with a fast
training loop (the probe sending thousands of steps a second).

    python bench/doctor_cost.py [--seconds 60]

Budget (DESIGN.md section 7): <= 1% of one core headless at 1 Hz, peak RSS <= 100 MB.
The CPU share is counted after the first 5 s (start-up: imports, NVML init) and also
in total.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
STARTUP_S = 5.0


def measure(job: list[str], seconds: float) -> dict[str, float]:
    store = Path(tempfile.mkdtemp()) / "s.db"
    cmd = [sys.executable, "-m", "gpudoctor", "--store", str(store), "run", "--headless",
           "--max-seconds", str(seconds), "--", *job]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    doctor = psutil.Process(proc.pid)
    peak_rss = 0
    cpu_at_startup = None
    while proc.poll() is None:
        try:
            times = doctor.cpu_times()
            peak_rss = max(peak_rss, doctor.memory_info().rss)
        except psutil.Error:
            break
        if cpu_at_startup is None and time.monotonic() - start >= STARTUP_S:
            cpu_at_startup = (times.user + times.system, time.monotonic())
        last = (times.user + times.system, time.monotonic())
        time.sleep(0.2)
    proc.wait()
    assert cpu_at_startup is not None
    steady_cpu = (last[0] - cpu_at_startup[0]) / (last[1] - cpu_at_startup[1])
    total_cpu = last[0] / (last[1] - start)
    return {
        "steady_pct": steady_cpu * 100,
        "total_pct": total_cpu * 100,
        "peak_rss_mb": peak_rss / 2**20,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    jobs = {
        "sleeping job (no probe traffic)": [sys.executable, "-c", f"import time; time.sleep({args.seconds + 30})"],
        "fast training loop (probe traffic)": [
            sys.executable, str(ROOT / "bench" / "loop_job.py"), "--hidden", "4", "--batch-size", "4",
            "--steps", "100000000", "--device", args.device,
        ],
    }  # fmt: skip
    print(
        f"doctor cost, `gpudoctor run --headless` at 1 Hz for {args.seconds:.0f} s, {os.cpu_count()} cores"
    )
    for name, job in jobs.items():
        r = measure(job, args.seconds)
        print(
            f"  {name}: CPU {r['steady_pct']:.2f}% of one core after start-up "
            f"({r['total_pct']:.2f}% in total), peak RSS {r['peak_rss_mb']:.1f} MB"
        )


if __name__ == "__main__":
    main()
