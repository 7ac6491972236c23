"""How soon the doctor shows something: `gpudoctor --help`, and the first frame of the
TUI (`gpudoctor run` and `gpudoctor` alone) in an 80x24 tmux window, from the command's
start to the frame's border on the screen (tmux capture-pane polled every 5 ms).

    python bench/first_frame.py [--runs 5]

Budget (DESIGN.md section 7): the TUI's first frame <= 0.5 s after start;
`gpudoctor --help` <= 0.2 s.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def help_time() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpudoctor", "--help"], cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    return time.perf_counter() - start


# the floor: a minimal Textual app with one bordered widget, same Python, same terminal
MINIMAL_APP = """
from textual.app import App
from textual.widgets import Static
class Minimal(App):
    CSS = "Static { border: round red; }"
    def compose(self):
        yield Static("minimal")
Minimal().run()
"""


def first_frame(args: list[str], needle: str) -> float:
    """Seconds from launching the doctor in tmux to `needle` on its screen."""
    name = f"gpudoctor-frame-{os.getpid()}"
    store = Path(tempfile.mkdtemp()) / "s.db"
    cmd = [sys.executable, "-m", "gpudoctor", "--store", str(store), *args]
    if args == ["minimal"]:
        cmd = [sys.executable, "-c", MINIMAL_APP]
    line = "cd " + shlex.quote(str(ROOT)) + " && exec " + shlex.join(cmd)
    # the window exists first (a shell waiting on a key), so its start is not counted
    for _ in range(20):  # the server of the last window may still be going away
        made = subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "80", "-y", "24"])
        if made.returncode == 0:
            break
        time.sleep(0.1)
    try:
        time.sleep(0.5)
        start = time.perf_counter()
        subprocess.run(["tmux", "send-keys", "-t", name, line, "Enter"], check=True)
        while True:
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", name],
                                    capture_output=True, text=True).stdout  # fmt: skip
            if needle in screen:
                return time.perf_counter() - start
            if time.perf_counter() - start > 20:
                raise RuntimeError(f"no first frame:\n{screen}")
            time.sleep(0.005)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    cases = {
        "gpudoctor --help": help_time,
        "a minimal Textual app (the floor), first frame": lambda: first_frame(["minimal"], "╭"),
        "gpudoctor run -- (a sleeping job), first frame": lambda: first_frame(
            ["run", "--max-seconds", "3", "--", *sleeper], "╭─ GPU"
        ),
        "gpudoctor (the machine dashboard), first frame": lambda: first_frame([], "╭─ "),
    }
    print(f"first frame, {args.runs} runs each, median (min-max), {os.cpu_count()} cores")
    for label, fn in cases.items():
        times = [fn() for _ in range(args.runs)]
        print(f"  {label}: {statistics.median(times):.3f} s ({min(times):.3f}-{max(times):.3f})",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
