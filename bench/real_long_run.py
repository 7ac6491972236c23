"""A real fast-step job under the real doctor for minutes (issue 14): the doctor's RSS
over the run, the store's size, and the report rebuilt from the (compacted) store
against the report the run wrote from memory.

    python bench/real_long_run.py [--steps 1800000] [--every 10] [--tui 160x45 --seconds S]

The job is bench/loop_job.py (hidden 16, batch 4: a few thousand steps a second); the
doctor is `gpudoctor run --headless --report` with its defaults (records older than
10 minutes compacted). With `--tui VIEW` the doctor runs with its TUI in a tmux window
of that size instead (bench/doctor_cost.py's), stopping the job after `--seconds`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1_800_000)
    p.add_argument("--every", type=float, default=10.0, help="seconds between RSS readings")
    p.add_argument("--tui", metavar="VIEW", help="with the TUI in a tmux window: 160x45")
    p.add_argument("--seconds", type=float, default=3600.0, help="the TUI's --max-seconds")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        db, report = Path(folder) / "s.db", Path(folder) / "run.json"
        job = [sys.executable, str(ROOT / "bench" / "loop_job.py"), "--hidden", "16",
               "--batch-size", "4", "--steps", str(args.steps)]  # fmt: skip
        start = time.monotonic()
        said = open(Path(folder) / "doctor.err", "w+")  # noqa: SIM115 (its status lines)
        cmd = [sys.executable, "-m", "gpudoctor", "--store", str(db), "run", "--report",
               str(report)]  # fmt: skip
        window = None
        if args.tui:
            sys.path.insert(0, str(ROOT / "bench"))
            from doctor_cost import start_tui

            me, window = start_tui([*cmd, "--max-seconds", str(args.seconds), "--", *job],
                                   args.tui)  # fmt: skip
            # the window stays once the doctor is gone: its last screen read below
            subprocess.run(["tmux", "set-option", "-t", window, "remain-on-exit", "on"],
                           capture_output=True)  # fmt: skip

            def poll() -> bool:  # the window keeps the doctor's exited process a zombie
                try:
                    return me.status() != psutil.STATUS_ZOMBIE
                except psutil.Error:
                    return False
        else:
            doctor = subprocess.Popen([*cmd, "--headless", "--", *job], stdout=subprocess.DEVNULL,
                                      stderr=said, text=True)  # fmt: skip
            me = psutil.Process(doctor.pid)

            def poll() -> bool:
                return doctor.poll() is None

        readings: list[tuple[float, float]] = []
        while poll():
            if window is not None and time.monotonic() - start > args.seconds + 5:
                # the app stays up after the job so its end can be read: q closes it
                subprocess.run(["tmux", "send-keys", "-t", window, "q"], capture_output=True)
            try:
                readings.append((time.monotonic() - start, me.memory_info().rss / 1e6))
            except psutil.Error:
                break
            time.sleep(args.every if window is None or readings[-1][0] < args.seconds else 1)
        if window is None:
            doctor.wait()
            said.seek(0)
            assert doctor.returncode == 0, said.read()[-2000:]
        else:
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", window],
                                    capture_output=True, text=True).stdout  # fmt: skip
            subprocess.run(["tmux", "kill-session", "-t", window], capture_output=True)
            if not report.exists():  # what the doctor's terminal said last
                sys.exit(f"no report written; the doctor's screen at its end:\n{screen}")
        said.close()
        took = time.monotonic() - start
        live = json.loads(report.read_text())["steps"]
        t = time.monotonic()
        again = subprocess.run(
            [sys.executable, "-m", "gpudoctor", "report", "--store", str(db), "--format",
             "json", "last"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        report_s = time.monotonic() - t
        stored = json.loads(again.stdout)["steps"]
        size = sum(f.stat().st_size for f in Path(folder).glob("s.db*"))
    how = f"the TUI at {args.tui}" if args.tui else "the headless doctor"
    print(f"real long run: {live['count']:,} steps in {took:.0f} s under {how}")
    marks = [r for r in readings if r[0] >= 30][:: max(1, int(60 / args.every))]
    print("  doctor RSS: " + ", ".join(f"{rss:.0f} MB at {s / 60:.0f} min" for s, rss in marks))
    print(f"  store: {size / 1e6:.0f} MB; `gpudoctor report` from it: {report_s:.1f} s")
    for key in ("count", "steady_count", "median_ms", "p90_ms", "data_wait_fraction"):
        print(f"  {key}: from memory {live[key]}, from the store {stored[key]}")


if __name__ == "__main__":
    main()
