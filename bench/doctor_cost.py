"""The doctor's own cost: CPU share and peak memory of `gpudoctor run` at the default
1 Hz, headless and with the TUI (in an 80x24 tmux window) side by side, over a job that
sleeps (no probe traffic), over a training loop paced to a 10 ms step (--pace-ms: the
step the probe's budget is stated for, 100 steps a second) and over a fast training loop
(the probe sending thousands of steps a second).

    python bench/doctor_cost.py [--seconds 60] [--no-tui] [--views 80x24,160x45,160x45+h]
        [--jobs sleeping,paced,fast] [--pace-ms 10] [--doctor-arg=--status-every --doctor-arg=1]

Budget (DESIGN.md section 7): <= 1% of one core headless at 1 Hz, <= 2% with the TUI at
1 Hz, peak RSS <= 100 MB.
The CPU share is counted from 5 s after start (start-up: imports, NVML init, the first
frames) until the doctor stops the job (its running cost), and also in total (with the
start-up, and the report and summary it builds after the job). With the TUI, the share
of its main thread (Textual's app: the screen's refresh) is given apart from the rest
(the doctor's loop thread, which takes in the probe's steps headless too, the writers).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
STARTUP_S = 5.0
DOCTOR_ARGS: list[str] = []  # more of `run`'s options, headless (--doctor-arg)


def start_tui(cmd: list[str], view: str = "80x24") -> tuple[psutil.Process, str]:
    """The doctor with its TUI in a detached tmux window of the view's size: its
    process, the window."""
    name = f"gpudoctor-bench-{os.getpid()}"
    width, height = view.split("+")[0].split("x")
    # the pane is the default size for a moment, and its command finds COLUMNS and
    # LINES of that size (which Textual takes): waited for, then unset
    line = (
        f"while [ \"$(stty size)\" != '{height} {width}' ]; do sleep 0.05; done; "
        "unset COLUMNS LINES; cd " + shlex.quote(str(ROOT)) + " && exec " + shlex.join(cmd)
    )
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", width, "-y", height, line],
                   check=True)  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for p in psutil.process_iter(["cmdline"]):
            if p.info["cmdline"] == cmd:  # its own store named: not a doctor run beside
                return p, name
        time.sleep(0.05)
    raise RuntimeError("the TUI doctor did not start")


def measure(
    job: list[str], seconds: float, tui: bool = False, view: str = "80x24"
) -> dict[str, float]:
    store = Path(tempfile.mkdtemp()) / "s.db"
    cmd = [sys.executable, "-m", "gpudoctor", "--store", str(store), "run",
           *([] if tui else ["--headless", *DOCTOR_ARGS]), "--max-seconds", str(seconds),
           "--", *job]  # fmt: skip
    start = time.monotonic()
    window = None
    if tui:
        doctor, window = start_tui(cmd, view)
        poll = doctor.is_running
        for key in view.split("+")[1:]:  # keys pressed once it shows (h: the plots)
            time.sleep(3)
            subprocess.run(["tmux", "send-keys", "-t", window, key], check=True)
    else:
        said = (store.parent / "doctor.err").open("w")  # kept: why it ended, if early
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=said)
        doctor = psutil.Process(proc.pid)

        def poll() -> bool:
            return proc.poll() is None

    peak_rss = 0
    cpu_at_startup = cpu_at_stop = None
    main_at_startup = main_at_stop = 0.0
    while poll():
        if window is not None and time.monotonic() - start > seconds + 3:
            # the app stays up after the job so its end can be read: q closes it
            subprocess.run(["tmux", "send-keys", "-t", window, "q"], capture_output=True)
        try:
            times = doctor.cpu_times()
            peak_rss = max(peak_rss, doctor.memory_info().rss)
        except psutil.Error:
            break
        if cpu_at_startup is None and time.monotonic() - start >= STARTUP_S:
            cpu_at_startup = (times.user + times.system, time.monotonic())
            main_at_startup = main_thread_cpu(doctor)
        if cpu_at_stop is None and time.monotonic() - start >= seconds - 0.5:
            # before the doctor stops the job: its report and summary are not running cost
            cpu_at_stop = (times.user + times.system, time.monotonic())
            main_at_stop = main_thread_cpu(doctor)
        last = (times.user + times.system, time.monotonic())
        time.sleep(0.2)
    if window is not None:
        subprocess.run(["tmux", "kill-session", "-t", window], capture_output=True)
    else:
        proc.wait()
    if cpu_at_startup is None or cpu_at_stop is None:
        sys.exit(
            f"the doctor ended after {time.monotonic() - start:.0f} s, before its "
            f"--max-seconds {seconds:.0f}: its stderr (headless) is in {store.parent}"
        )
    steady_s = cpu_at_stop[1] - cpu_at_startup[1]
    steady_cpu = (cpu_at_stop[0] - cpu_at_startup[0]) / steady_s
    total_cpu = last[0] / (last[1] - start)
    return {
        "steady_pct": steady_cpu * 100,
        "main_thread_pct": (main_at_stop - main_at_startup) / steady_s * 100,
        "total_pct": total_cpu * 100,
        "peak_rss_mb": peak_rss / 2**20,
    }


def main_thread_cpu(doctor: psutil.Process) -> float:
    """The CPU seconds of the doctor's main thread (its thread id is the process's)."""
    try:
        return next(t.user_time + t.system_time for t in doctor.threads() if t.id == doctor.pid)
    except (psutil.Error, StopIteration):
        return 0.0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-tui", action="store_true", help="headless only")
    p.add_argument("--tui-only", action="store_true", help="with the TUI only")
    p.add_argument("--jobs", default="sleeping,fast", help="sleeping, paced, fast: one or more")
    p.add_argument("--pace-ms", type=float, default=10.0, help="the paced loop's step")
    p.add_argument(
        "--views",
        default="80x24",
        help="the TUI's windows, comma-separated: WxH, +KEY for a key pressed once it "
        "shows (160x45: the main screen's strip of plots; 160x45+h: the plots screen)",
    )
    p.add_argument(
        "--doctor-arg", action="append", default=[], metavar="ARG",
        help="one more of `run`'s options, headless (repeat it: --doctor-arg=--status-every "
        "--doctor-arg=1)",
    )  # fmt: skip
    args = p.parse_args()
    DOCTOR_ARGS.extend(args.doctor_arg)
    jobs = {
        "sleeping job (no probe traffic)": [sys.executable, "-c", f"import time; time.sleep({args.seconds + 30})"],
        f"training loop paced to a {args.pace_ms:g} ms step": [
            sys.executable, str(ROOT / "bench" / "loop_job.py"), "--hidden", "4", "--batch-size", "4",
            "--steps", "100000000", "--device", args.device, "--pace-ms", str(args.pace_ms),
        ],
        "fast training loop (probe traffic)": [
            sys.executable, str(ROOT / "bench" / "loop_job.py"), "--hidden", "4", "--batch-size", "4",
            "--steps", "100000000", "--device", args.device,
        ],
    }  # fmt: skip
    print(f"doctor cost, `gpudoctor run` at 1 Hz for {args.seconds:.0f} s, {os.cpu_count()} cores")
    chosen = args.jobs.split(",")
    for (name, job), key in zip(jobs.items(), ("sleeping", "paced", "fast"), strict=True):
        if key not in chosen:
            continue
        runs = [] if args.tui_only else [(False, "")]
        runs += [] if args.no_tui else [(True, view) for view in args.views.split(",")]
        for tui, view in runs:
            r = measure(job, args.seconds, tui, view)
            print(
                f"  {name}, {f'TUI (tmux {view})' if tui else 'headless'}: CPU "
                f"{r['steady_pct']:.2f}% of one core while it runs ({r['total_pct']:.2f}% in "
                f"total), peak RSS {r['peak_rss_mb']:.1f} MB"
                + (f"; its main thread (the TUI's) {r['main_thread_pct']:.2f}%" if tui else ""),
                flush=True,
            )


if __name__ == "__main__":
    main()
