"""The doctor's own garbage collections over a fast training loop, with its TUI in tmux.

    python bench/gc_collections.py [--seconds 30] [--view 80x24]

`gpudoctor run --max-seconds SECONDS` over bench/loop_job.py (~1,500 steps a second),
its TUI in a detached tmux window; the doctor's process counts each collection of each
generation and the time it took (gc.callbacks, installed before gpudoctor is imported,
nothing else changed), and writes the totals when it exits. Run it on the code as it is
and on the code as it was to compare (jobs/source.py's GC_EVERY and gc.freeze).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COUNTING = """
import atexit, gc, json, sys, time
totals = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
began = [0.0]
def count(phase, info):
    if phase == "start":
        began[0] = time.perf_counter()
    else:
        totals[info["generation"]][0] += 1
        totals[info["generation"]][1] += time.perf_counter() - began[0]
gc.callbacks.append(count)
path = sys.argv.pop(1)
atexit.register(lambda: open(path, "w").write(json.dumps(totals)))
sys.argv[0] = "gpudoctor"
from gpudoctor.cli import main
raise SystemExit(main())
"""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--view", default="80x24")
    args = p.parse_args()
    if shutil.which("tmux") is None:
        sys.exit("needs tmux")
    width, height = args.view.split("x")
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "gc.json"
        job = [
            sys.executable, str(ROOT / "bench" / "loop_job.py"), "--hidden", "4",
            "--batch-size", "4", "--steps", "100000000",
        ]  # fmt: skip
        doctor = [
            sys.executable, "-c", COUNTING, str(out), "run", "--max-seconds",
            str(args.seconds), "--", *job,
        ]  # fmt: skip
        env = {**os.environ, "GPUDOCTOR_STORE": str(Path(folder) / "gc.db")}
        session = f"gc-bench-{os.getpid()}"
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", session, "-x", width, "-y", height,
             shlex.join(doctor) + "; sleep 600"],
            env=env, check=True, cwd=ROOT,
        )  # fmt: skip
        try:
            time.sleep(args.seconds + 4)  # the run, then its end on the screen
            subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
            deadline = time.monotonic() + 30
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], check=False)
        totals = json.loads(out.read_text())
    spent = sum(s for _n, s in totals.values())
    parts = ", ".join(f"gen{g} {n} in {s * 1e3:.0f} ms" for g, (n, s) in totals.items())
    print(
        f"{args.seconds:.0f} s of a fast loop, TUI {args.view}: collections {parts}; "
        f"{spent * 1e3:.0f} ms in all, {spent / args.seconds * 100:.2f}% of a core"
    )


if __name__ == "__main__":
    main()
