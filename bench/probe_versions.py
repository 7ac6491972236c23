"""The probe at an earlier commit against the probe now, and no probe at all, side by side.

    python bench/probe_versions.py COMMIT [--rounds 8] [-- LOOP_JOB_ARGS ...]

Checks COMMIT out into a temporary git worktree and runs bench/loop_job.py (default:
the ~10 ms step of probe_overhead.py) with each probe's boot folder on PYTHONPATH, one
live probe server receiving, and with none; the three in rotation, `--rounds` times.
Prints each arm's median step and every run's figure: whether a change to the probe
cost anything shows beside the machine's own drift between runs.
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

from gpudoctor.sources.probe_server import ProbeServer  # noqa: E402

BOOT = Path("gpudoctor") / "probe" / "boot"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("commit")
    p.add_argument("--rounds", type=int, default=8)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    job = argv[cut + 1 :] or [
        "--hidden", "512", "--batch-size", "128", "--steps", "300"
    ]  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="gpudoctor-versions-"))
    tree = folder / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-f", "-q", str(tree),
                    args.commit], check=True)  # fmt: skip
    server = ProbeServer(str(folder / "probe.sock"))
    done = threading.Event()

    def drain() -> None:
        while not done.is_set():
            server.drain()
            time.sleep(0.05)

    threading.Thread(target=drain, daemon=True).start()
    arms = {"none": None, "then": tree / BOOT, "now": ROOT / BOOT}
    walls: dict[str, list[float]] = {name: [] for name in arms}
    medians: dict[str, list[float]] = {name: [] for name in arms}
    cpus: dict[str, list[float]] = {name: [] for name in arms}
    names = list(arms)
    try:
        for r in range(args.rounds):
            for name in names[r % 3 :] + names[: r % 3]:
                env = dict(os.environ)
                boot = arms[name]
                if boot is not None:
                    env["PYTHONPATH"] = str(boot)
                    env["GPUDOCTOR_SOCKET"] = server.path
                out = subprocess.run(
                    [sys.executable, str(ROOT / "bench" / "loop_job.py"), *job],
                    env=env, capture_output=True, text=True, check=True,
                ).stdout  # fmt: skip
                result = json.loads(out.strip().splitlines()[-1])
                walls[name].append(float(result["mean_s"]))
                medians[name].append(float(result["median_s"]))
                cpus[name].append(float(result["process_cpu_s"]))
                time.sleep(0.5)
    finally:
        done.set()
        server.close()
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)])
    print(f"the probe at {args.commit} ('then') and now, and none: {args.rounds} rounds")
    for name in names:
        runs = [round(w * 1e3, 3) for w in walls[name]]
        print(f"  {name:4} wall median {statistics.median(walls[name]) * 1e3:.3f} ms  {runs}")
    # the job's own median step (a counted one, on a short step) and the whole process's
    # CPU per step (every thread: the probe's flush thread too), each arm against none
    # run beside it in the same round
    for name in names[1:]:
        step = [(a - b) * 1e6 for a, b in zip(medians[name], medians["none"], strict=True)]
        cpu = [(a - b) * 1e6 for a, b in zip(cpus[name], cpus["none"], strict=True)]
        print(
            f"  {name:4} against none, round by round: median step "
            f"{statistics.median(step):+.1f} us (runs {[round(d, 1) for d in step]}); "
            f"process CPU {statistics.median(cpu):+.1f} us/step (runs {[round(d, 1) for d in cpu]})"
        )


if __name__ == "__main__":
    main()
