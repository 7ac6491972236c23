"""Beside a busy process: what the probe costs a job, and what its intra-op threads do.

    python bench/busy_neighbour.py [--reps 4] [--steps 1500] [--pause 0.002]

A process that keeps one core busy (`while True: pass`) runs in a session of its own for
the whole measurement, as a neighbour's job does on a shared server (and as a CI
runner's other work does); each measured job runs in a session of its own too. The job
is bench/probe_inprocess.py at the size of tests/test_probe_promises.py's small MLP
(16 -> 32 -> 3, batch 32, a pause after each step), with the probe's hooks in place and
out, switching every `--block` steps: the probe's cost is read in one process, which
controls for how differently two runs go beside the neighbour (every step controls for
the slow and fast stretches within a run too). Each rep runs the job once with torch's
two intra-op threads and once with one, which goes first alternating.

What it answers: (1) whether the probe costs a job more beside a busy process than its
budget (DESIGN.md section 7: 1% of a 10 ms step); (2) what the job's own threads cost it
there (the fewer-threads remedy of noisy-neighbour). Step times are trimmed means
(loop_job.trimmed_mean), the pause not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpudoctor.sources.probe_server import ProbeServer  # noqa: E402


def job(
    socket: str, threads: int, steps: int, pause: float, block: int
) -> dict[str, dict[str, float]]:
    cmd = [sys.executable, str(ROOT / "bench" / "probe_inprocess.py"), "--socket", socket,
           "--hidden", "32", "--batch-size", "32", "--block", str(block), "--steps", str(steps),
           "--threads", str(threads), "--pause", str(pause)]  # fmt: skip
    out = subprocess.run(
        cmd, check=True, capture_output=True, text=True, start_new_session=True
    ).stdout
    result: dict[str, dict[str, float]] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--steps", type=int, default=1500, help="steps an arm (hooks in, out)")
    p.add_argument("--pause", type=float, default=0.002)
    p.add_argument("--block", type=int, default=100, help="steps between the probe's switches")
    p.add_argument("--threads", default="2,1", help="the intra-op threads to run, in turn")
    args = p.parse_args()
    folder = tempfile.mkdtemp(prefix="gpudoctor-bench-")
    server = ProbeServer(os.path.join(folder, "probe.sock"))
    stop = threading.Event()

    def pump() -> None:
        while not stop.is_set():
            if select.select([server], [], [], 0.1)[0]:
                list(server.drain())

    threading.Thread(target=pump, daemon=True).start()
    burner = subprocess.Popen(
        [sys.executable, "-c", "while True: pass"], start_new_session=True
    )  # fmt: skip
    kinds = [int(t) for t in args.threads.split(",")]
    runs: dict[int, list[dict[str, dict[str, float]]]] = {t: [] for t in kinds}
    print(
        f"beside a busy process (pid {burner.pid}, a session of its own) on {os.cpu_count()} "
        f"cores: {args.reps} reps, {args.steps} steps an arm, {args.pause * 1e3:g} ms pause, "
        f"the probe switched every {args.block} step(s)"
    )
    try:
        for rep in range(args.reps):
            for threads in kinds if rep % 2 == 0 else kinds[::-1]:
                r = job(server.path, threads, args.steps, args.pause, args.block)
                runs[threads].append(r)
                none, probe = r["none"]["wall"], r["probe"]["wall"]
                print(
                    f"  rep {rep + 1}, {threads} thread(s): hooks out {none * 1e3:.3f} ms, "
                    f"in {probe * 1e3:.3f} ms, ratio {probe / none:.3f}",
                    flush=True,
                )
    finally:
        burner.kill()
        burner.wait()
        stop.set()
        server.close()
    for threads in kinds:
        ratios = [r["probe"]["wall"] / r["none"]["wall"] for r in runs[threads]]
        steps = [r["none"]["wall"] * 1e3 for r in runs[threads]]
        print(
            f"== {threads} thread(s): step without the probe {statistics.median(steps):.3f} ms "
            f"median (runs {', '.join(f'{s:.2f}' for s in steps)}); probe's ratio median "
            f"{statistics.median(ratios):.3f} (runs {', '.join(f'{x:.3f}' for x in ratios)})"
        )
    if sorted(kinds) != [1, 2]:
        return
    two = [r["none"]["wall"] for r in runs[2]]
    one = [r["none"]["wall"] for r in runs[1]]
    print(
        f"== two threads against one, rep by rep: "
        f"{', '.join(f'{a / b:.1f}x' for a, b in zip(two, one, strict=True))} slower"
    )


if __name__ == "__main__":
    main()
