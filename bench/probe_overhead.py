"""Probe overhead: the job's own step time with and without the probe, side by side.

    python bench/probe_overhead.py [--device cpu|cuda] [--reps 12] [--steps 300]

For each step size:
1. two processes: bench/loop_job.py without the probe and with it (boot folder on
   PYTHONPATH, a live probe server receiving in this process), `--reps` pairs, which of
   the two goes first alternating. Each run reports its mean step (trimmed: loop_job's
   trimmed_mean) and its process CPU per step (every thread's: the probe's flush thread
   is in it). The ratio of each pair, and the mean ratio with a 95% bootstrap interval.
2. one process (bench/probe_inprocess.py): the probe's hooks in place and the originals
   put back, alternating every step and every 100 steps; plus the probe's flush thread's
   own CPU time per step.
3. with --parts, on the larger step, `--parts-steps` steps a side: every step measured
   in detail (what one such step costs), the root modules' call patch alone, and the
   optimizer's step wrapper alone.
Budget (DESIGN.md section 7): <= 1% of a 10 ms step, <= 20 us per step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpudoctor.jobs import probe_env  # noqa: E402
from gpudoctor.sources.probe_server import ProbeServer  # noqa: E402

SIZES = {  # name: loop_job arguments (CPU, one thread: a stable clock)
    "cpu": {
        "~10 ms step": ["--hidden", "512", "--batch-size", "128"],
        "~1 ms step": ["--hidden", "128", "--batch-size", "32"],
    },
    "cuda": {
        "~10 ms step": ["--hidden", "4096", "--batch-size", "2048"],
        "~1 ms step": ["--hidden", "2048", "--batch-size", "1024"],
    },
}
INPROCESS_STEPS = {"~10 ms step": "1500", "~1 ms step": "8000"}


def run(args: list[str], env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "loop_job.py"), *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    time.sleep(0.5)  # let the previous interpreter's exit finish before the next run
    return {"wall": float(result["mean_s"]), "cpu": float(result["process_cpu_s"])}


def interval(ratios: list[float]) -> tuple[float, float, float]:
    """The mean of per-pair ratios (on the log scale) and its 95% bootstrap interval."""
    logs = [math.log(r) for r in ratios]
    rng = random.Random(0)
    means = sorted(statistics.fmean(rng.choice(logs) for _ in logs) for _ in range(4000))
    return (
        math.exp(statistics.fmean(logs)),
        math.exp(means[int(0.025 * len(means))]),
        math.exp(means[int(0.975 * len(means)) - 1]),
    )


def pairs_line(label: str, base: list[float], probe: list[float]) -> str:
    mean, low, high = interval([q / b for b, q in zip(base, probe, strict=True)])
    b = statistics.median(base)
    return (
        f"{label}: without {b * 1e3:.3f} ms, ratio {mean:.4f} ({(mean - 1) * 100:+.2f}%, "
        f"95% interval {(low - 1) * 100:+.2f}% to {(high - 1) * 100:+.2f}%), "
        f"fixed cost {(mean - 1) * b * 1e6:+.1f} us/step"
    )


def line(label: str, base: list[float], probe: list[float]) -> str:
    b, q = statistics.median(base), statistics.median(probe)
    return (
        f"{label}: without {b * 1e3:.3f} ms, with probe {q * 1e3:.3f} ms, "
        f"ratio {q / b:.4f} ({(q / b - 1) * 100:+.2f}%), "
        f"fixed cost {(q - b) * 1e6:+.1f} us/step"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--reps", type=int, default=12)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--parts", action="store_true", help="also the cost of each part")
    p.add_argument("--parts-steps", type=int, default=4000)
    args = p.parse_args()
    folder = tempfile.mkdtemp(prefix="gpudoctor-bench-")
    server = ProbeServer(os.path.join(folder, "probe.sock"))
    received = {"messages": 0, "steps": 0}
    stop = threading.Event()

    def pump() -> None:
        import select

        while not stop.is_set():
            if select.select([server], [], [], 0.1)[0]:
                for m, _raw in server.drain():
                    received["messages"] += 1
                    received["steps"] += len(m.get("steps", []))

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    plain = dict(os.environ)
    probed = probe_env(server.path)
    print(
        f"probe overhead, device={args.device}: {args.reps} pairs of runs, {args.steps} steps "
        "each (the job's own steps, trimmed mean)"
    )
    for name, sizes in SIZES[args.device].items():
        job = [*sizes, "--steps", str(args.steps), "--device", args.device]
        base, probe = [], []
        for rep in range(args.reps):  # who goes first alternates
            if rep % 2 == 0:
                base.append(run(job, plain))
                probe.append(run(job, probed))
            else:
                probe.append(run(job, probed))
                base.append(run(job, plain))
        print(f"  {name}, two processes:")
        print("    " + pairs_line("wall", [b["wall"] for b in base], [q["wall"] for q in probe]))
        print(
            "    " + pairs_line("process CPU", [b["cpu"] for b in base], [q["cpu"] for q in probe])
        )
        print(f"    wall per run without: {[round(b['wall'] * 1e3, 3) for b in base]}")
        print(f"    wall per run with:    {[round(q['wall'] * 1e3, 3) for q in probe]}")
    for block in (1, 100):
        print(
            f"  one process, the probe's hooks in place and out, switching every {block} step(s):"
        )
        for name, sizes in SIZES[args.device].items():
            cmd = [sys.executable, str(ROOT / "bench" / "probe_inprocess.py"), "--socket", server.path,
                   "--device", args.device, "--steps", INPROCESS_STEPS[name], "--block", str(block),
                   *sizes]  # fmt: skip
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(f"  {name}")
            print("    " + line("wall", [r["none"]["wall"]], [r["probe"]["wall"]]))
            print("    " + line("main-thread CPU", [r["none"]["cpu"]], [r["probe"]["cpu"]]))
            print(
                f"    the probe's flush thread: {r['flusher_cpu_per_step_s'] * 1e6:.1f} us CPU per step"
            )
    if args.parts:
        name, sizes = next(iter(SIZES[args.device].items()))
        print(f"  {name}, one process, switching every step, {args.parts_steps} steps a side:")
        for label, extra in (
            ("every step measured in detail", ["--detail-every", "1"]),
            ("the probe as it is", []),
            ("only the root modules' call patch switched", ["--only", "roots"]),
            ("only the optimizer's step wrapper switched", ["--only", "step"]),
        ):
            cmd = [sys.executable, str(ROOT / "bench" / "probe_inprocess.py"), "--socket", server.path,
                   "--device", args.device, "--steps", str(args.parts_steps), *extra, *sizes]  # fmt: skip
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(
                f"    {label}: main thread {(r['probe']['cpu'] - r['none']['cpu']) * 1e6:+.1f} us/step"
            )
    stop.set()
    thread.join()
    server.close()
    print(f"  the probe sent {received['messages']} messages carrying {received['steps']} steps")


if __name__ == "__main__":
    main()
