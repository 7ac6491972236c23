"""Probe overhead: the job's own step time with and without the probe, side by side.

    python bench/probe_overhead.py [--device cpu|cuda] [--reps 5]

For each step size, runs bench/loop_job.py alternately without the probe and with it
(boot folder on PYTHONPATH, a live probe server receiving in this process), `--reps`
times each, and reports the mean step of each arm (trimmed: loop_job.trimmed_mean), the ratio and the fixed cost
per step. Budget (DESIGN.md section 7): <= 1% of a 10 ms step, <= 20 us per step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpudoctor.session import probe_env  # noqa: E402
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


def run(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "loop_job.py"), *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    time.sleep(0.5)  # let the previous interpreter's exit finish before the next run
    return float(result["mean_s"]), float(result["mean_cpu_s"])


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
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=300)
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
        f"probe overhead, device={args.device}, {args.reps} alternating runs per arm, "
        f"{args.steps} steps each (job's own steps, trimmed mean; median of the runs)"
    )
    for name, sizes in SIZES[args.device].items():
        job = [*sizes, "--steps", str(args.steps), "--device", args.device]
        base, probe = [], []
        for _ in range(args.reps):
            base.append(run(job, plain))
            probe.append(run(job, probed))
        print(f"  {name}")
        print("    " + line("wall", [b[0] for b in base], [q[0] for q in probe]))
        print("    " + line("main-thread CPU", [b[1] for b in base], [q[1] for q in probe]))
        print(f"    wall per run without: {[round(b[0] * 1e3, 3) for b in base]}")
        print(f"    wall per run with:    {[round(q[0] * 1e3, 3) for q in probe]}")
    for block in (1, 100):
        print(
            f"  in one process, the probe's hooks in place and removed, switching every {block} step(s):"
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
    stop.set()
    thread.join()
    server.close()
    print(f"  the probe sent {received['messages']} messages carrying {received['steps']} steps")


if __name__ == "__main__":
    main()
