"""What `gpudoctor watch --pid` costs: the watched job's throughput side by side with
the same job unwatched (alternating rounds in one run), and the doctor's own CPU and
peak memory while it watches, py-spy's processes included.

    python bench/watch_cost.py [--rounds 2] [--seconds 20]

Each job is started plainly (no probe) and trains for --seconds; in a watched round the
doctor attaches after the job's start-up and watches until it ends. Steps per second
come from the job's own last line ("N steps in S s"). The doctor's CPU comes from
wait4(), which counts the doctor and every py-spy process it started and reaped.
Budget (DESIGN.md section 7): py-spy non-blocking at 20 Hz or less; the doctor
<= 1% of a core headless at 1 Hz (py-spy is extra), peak RSS <= 100 MB.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_jobs"
STARTUP_S = 4.0  # the job imports torch before the doctor attaches
JOBS = ("dataloader_bound.py", "healthy.py")


def job_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("GPUDOCTOR_SOCKET", None)
    return env


def steps_per_s(output: str) -> float:
    m = re.search(r"(\d+) steps in ([\d.]+) s", output)
    assert m, f"no step count in the job's output: {output[-300:]}"
    return int(m[1]) / float(m[2])


def run(script: str, seconds: float, watched: bool) -> dict[str, float]:
    job = subprocess.Popen(
        [sys.executable, str(SAMPLES / script), "--seconds", str(seconds)],
        cwd=SAMPLES, env=job_env(), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    out: dict[str, float] = {}
    if watched:
        time.sleep(STARTUP_S)
        store = Path(tempfile.mkdtemp()) / "s.db"
        cmd = [sys.executable, "-m", "gpudoctor", "--store", str(store), "watch",
               "--pid", str(job.pid), "--headless"]  # fmt: skip
        start = time.monotonic()
        doctor = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.DEVNULL)
        peak = 0
        own = 0.0
        while doctor.poll() is None:
            try:
                proc = psutil.Process(doctor.pid)
                peak = max(peak, proc.memory_info().rss)
                times = proc.cpu_times()
                own = times.user + times.system  # the doctor's process alone
            except psutil.Error:
                break
            time.sleep(0.5)
            if job.poll() is not None:
                break
        _, status, usage = os.wait4(doctor.pid, 0)
        wall = time.monotonic() - start
        out["doctor_cpu_pct"] = 100 * (usage.ru_utime + usage.ru_stime) / wall
        out["doctor_alone_cpu_pct"] = 100 * own / wall
        out["doctor_peak_mb"] = peak / 1e6
    stdout, _ = job.communicate()
    out["steps_per_s"] = steps_per_s(stdout)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    for script in JOBS:
        plain: list[float] = []
        watched: list[dict[str, float]] = []
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            for is_watched in order:
                result = run(script, args.seconds, is_watched)
                (watched.append(result) if is_watched else plain.append(result["steps_per_s"]))
                print(f"{script} round {r} {'watched' if is_watched else 'plain  '}: {result}")
        w_rates = [x["steps_per_s"] for x in watched]
        w_rate, p_rate = statistics.fmean(w_rates), statistics.fmean(plain)
        print(
            f"== {script}: plain {p_rate:.1f} steps/s (runs {_list(plain)}), "
            f"watched {w_rate:.1f} steps/s (runs {_list(w_rates)}): "
            f"ratio {w_rate / p_rate:.3f}; doctor + py-spy CPU "
            f"{statistics.fmean(x['doctor_cpu_pct'] for x in watched):.2f}% of a core (the doctor "
            f"alone {statistics.fmean(x['doctor_alone_cpu_pct'] for x in watched):.2f}%), peak RSS "
            f"{max(x['doctor_peak_mb'] for x in watched):.1f} MB"
        )


def _list(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


if __name__ == "__main__":
    main()
