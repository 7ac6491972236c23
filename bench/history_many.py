"""`gpudoctor history` over a store of many sessions (issue 41: 1,000 in <= 0.5 s).

    python bench/history_many.py [--sessions 1000] [--repeat 5]

The sessions are written through Store.create_session/add/finish as the doctor writes
them: runs, watches and trials (a trial's runs grouped as one entry by `history`), each
with a few records and the summary the doctor leaves; then `gpudoctor history` runs as a
command (its imports included), at 80 columns off a terminal, REPEAT times, and the
`--store`'s own `sessions()` read is timed in process beside it.
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

from gpudoctor.model import JobExit
from gpudoctor.store import Store
from gpudoctor.timeline import Timeline

S = 10**9


def fill(path: Path, n: int) -> None:
    store = Store(path, explicit=True)
    start = time.time() - n * 600
    for i in range(n):
        kind = ("run", "watch", "trial")[i % 3]
        command = ["python", "train.py", "--num-workers", str(i % 8), "--lr", "3e-4"]
        if kind == "trial":
            command = ["gpudoctor-trial", *command]
        timeline = Timeline(command, start + i * 600, i * 600 * S)
        sid = store.create_session(timeline, "/home/user/project", job_pid=10_000 + i)
        store.add(sid, "host", i * 600 * S, {"t_mono_ns": i * 600 * S})
        summary = {
            "steps": None if kind == "watch" else 1000 + i,
            "median_ms": 12.5 + i % 7,
            "mode": "watch" if kind == "watch" else "run",
            "top_finding": ("input-bound (high)", "noisy-neighbour (medium)", None)[i % 3],
        }
        store.finish(sid, (i * 600 + 300) * S, JobExit(0, "exit"), summary)
    store.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.db"
        t = time.perf_counter()
        fill(path, args.sessions)
        made = time.perf_counter() - t
        env = {**os.environ, "COLUMNS": "80"}
        times, lines = [], 0
        for _ in range(args.repeat):
            t = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-m", "gpudoctor", "--store", str(path), "history"],
                check=True, capture_output=True, text=True, env=env,
            )  # fmt: skip
            times.append(time.perf_counter() - t)
            lines = len(out.stdout.splitlines())
        store = Store(path, explicit=True)
        t = time.perf_counter()
        rows = store.sessions()
        read = time.perf_counter() - t
        print(
            f"history of {args.sessions:,} sessions ({len(rows):,} rows, made in {made:.1f} s): "
            f"`gpudoctor history` {statistics.median(times):.2f} s median of {args.repeat} "
            f"({min(times):.2f}-{max(times):.2f} s), {lines} lines; the store's read "
            f"{read * 1e3:.0f} ms"
        )


if __name__ == "__main__":
    main()
