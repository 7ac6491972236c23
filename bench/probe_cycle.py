"""What a step measured in detail costs, and the steps around it, in one process.

    python bench/probe_cycle.py [--hidden 16] [--batch-size 4] [--steps 25600]

The probe samples short steps (gpudoctor/probe/clock.py): most are only counted, one in
so many is measured in detail. This runs bench/loop_job.py's training loop under the
probe, the job timing each step's CPU (its own thread), and prints, by position from
each detailed step (-2 .. +5), the median step less the median of the counted steps far
from one (+15 and later): what the detailed step and its switch cost, including what it
leaves the steps after it. Nothing is switched in and out between steps (switching the
probe's hooks at every step, as bench/probe_inprocess.py does, slows both of its arms).
The probe server runs in a process of its own, as the doctor does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SERVER = """
import sys, time
sys.path.insert(0, sys.argv[2])
from gpudoctor.sources.probe_server import ProbeServer
server = ProbeServer(sys.argv[1])
print("ready", flush=True)
while True:
    server.drain()
    time.sleep(0.05)
"""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=25600)
    args = p.parse_args()
    socket_path = os.path.join(tempfile.mkdtemp(prefix="gpudoctor-cycle-"), "probe.sock")
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, socket_path, str(ROOT)], stdout=subprocess.PIPE
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == b"ready"
        sys.path.insert(0, str(BENCH))
        from probe_inprocess import load_probe

        agent = load_probe(socket_path)  # before torch, as the boot folder would
        import torch
        from loop_job import make_job, stepper

        torch.set_num_threads(1)
        step = stepper(
            *make_job(args.hidden, args.batch_size, torch.device("cpu"), epoch_batches=63)
        )

        for _ in range(200):  # past the probe's first steps, all measured in detail
            step()
        rows: list[tuple[bool, int]] = []
        for _ in range(args.steps):
            detail = bool(agent.detail)
            t = time.thread_time_ns()
            step()
            rows.append((detail, time.thread_time_ns() - t))
    finally:
        server.kill()
    detailed = [i for i, (d, _) in enumerate(rows) if d]
    far = [rows[i][1] for i, (d, _) in enumerate(rows) if not d and _distance(i, detailed) >= 15]
    base = statistics.median(far)
    print(
        f"probe cycle, hidden {args.hidden}, batch {args.batch_size}: {len(rows)} steps, "
        f"{len(detailed)} detailed (one in {len(rows) / max(1, len(detailed)):.0f}); "
        f"counted step far from a detailed one: median {base / 1e3:.1f} us"
    )
    total = 0.0
    parts = []
    for offset in range(-2, 6):
        times = [rows[j + offset][1] for j in detailed if 0 <= j + offset < len(rows)]
        extra = (statistics.median(times) - base) / 1e3
        total += extra
        parts.append(f"{offset:+d}: {extra:+.1f}")
        if offset == 5:
            break
    print("  by position from a detailed step, us over that: " + ", ".join(parts))
    print(f"  a detailed step and its neighbours together: {total:+.1f} us")


def _distance(i: int, marks: list[int]) -> int:
    """Steps from i back to the last mark before it, or to the next one after it."""
    import bisect

    k = bisect.bisect_left(marks, i)
    before = i - marks[k - 1] if k else 1 << 30
    after = marks[k] - i if k < len(marks) else 1 << 30
    return min(before, after)


if __name__ == "__main__":
    main()
