"""The real app in a real terminal (tmux, 80x24): the panels appear, `q` asks, `s` stops
the job, the doctor prints its findings and the terminal is the shell's again."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from conftest import PY, ROOT, SAMPLES, env_without_probe

# scripts/test.sh installs tmux; without it this fails rather than skips
assert shutil.which("tmux"), "tmux is needed: apt-get install tmux"


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def screen(name: str) -> str:
    return tmux("capture-pane", "-p", "-t", name)


def wait_screen(name: str, *needles: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = screen(name)
        if all(n in text for n in needles):
            return text
        assert time.monotonic() < deadline, f"never showed {needles}:\n{text}"
        time.sleep(0.2)


def test_the_app_in_tmux_runs_stops_the_job_and_restores_the_terminal(tmp_path: Path) -> None:
    name = f"gpudoctor-test-{tmp_path.name}"
    done = tmp_path / "done"
    command = (
        f"cd {ROOT} && GPUDOCTOR_STORE={tmp_path / 's.db'} {PY} -m gpudoctor run -- "
        f"{PY} {SAMPLES / 'healthy.py'} --steps 100000; echo EXIT=$? > {done}; "
        "echo SHELL-IS-BACK; sleep 60"
    )
    tmux("new-session", "-d", "-s", name, "-x", "80", "-y", "24", command)
    try:
        text = wait_screen(name, "GPU", "Host", "Job", "Findings", "steps")
        assert "CPU-only" in text  # no driver here: said in one line, the rest works
        wait_screen(name, "step p50")
        tmux("send-keys", "-t", name, "q")
        wait_screen(name, "still running")
        tmux("send-keys", "-t", name, "s")
        text = wait_screen(name, "SHELL-IS-BACK", timeout=60)
        assert "gpudoctor: session" in text  # the findings summary, printed after the app
        assert done.read_text().strip() == "EXIT=130"  # the job's own code: stopped by SIGINT
        assert "╭" not in text  # the app's frame is gone: the terminal is restored
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


def test_watch_mode_in_tmux_shows_the_job_and_q_leaves_it_running(tmp_path: Path) -> None:
    name = f"gpudoctor-watch-{tmp_path.name}"
    done = tmp_path / "done"
    job = subprocess.Popen(
        [PY, str(SAMPLES / "dataloader_bound.py"), "--seconds", "120"],
        stdout=subprocess.DEVNULL,
        env=env_without_probe(),
        cwd=SAMPLES,
    )
    command = (
        f"cd {ROOT} && GPUDOCTOR_STORE={tmp_path / 's.db'} {PY} -m gpudoctor watch "
        f"--pid {job.pid}; echo EXIT=$? > {done}; echo SHELL-IS-BACK; sleep 60"
    )
    try:
        time.sleep(4)  # the job imports torch and starts training
        tmux("new-session", "-d", "-s", name, "-x", "80", "-y", "24", command)
        text = wait_screen(name, "GPU", "Host", "Job", "Findings", f"watching pid {job.pid}")
        assert "CPU-only" in text
        wait_screen(name, "input-bound", timeout=40)  # from py-spy's first chunks
        tmux("send-keys", "-t", name, "q")  # no question: a watched job is never stopped
        text = wait_screen(name, "SHELL-IS-BACK", timeout=30)
        assert "left running" in text and "╭" not in text
        assert done.read_text().strip() == "EXIT=0"
        assert job.poll() is None  # untouched
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
        job.kill()
        job.wait()


def test_gpudoctor_alone_then_r_runs_a_typed_command_under_the_doctor(tmp_path: Path) -> None:
    name = f"gpudoctor-home-{tmp_path.name}"
    done = tmp_path / "done"
    command = (
        f"cd {ROOT} && GPUDOCTOR_STORE={tmp_path / 's.db'} {PY} -m gpudoctor; "
        f"echo EXIT=$? > {done}; echo SHELL-IS-BACK; sleep 60"
    )
    tmux("new-session", "-d", "-s", name, "-x", "80", "-y", "24", command)
    try:
        wait_screen(name, "this machine", "Processes", "Host", "Run a command")
        tmux("send-keys", "-t", name, "r")
        wait_screen(name, "Run a command under the doctor")
        typed = f"{PY} {SAMPLES / 'healthy.py'} --steps 100000"
        tmux("send-keys", "-t", name, typed, "Enter")
        wait_screen(name, "Job", "step p50", timeout=60)  # the run's dashboard
        tmux("send-keys", "-t", name, "q")
        wait_screen(name, "still running")
        tmux("send-keys", "-t", name, "s")
        text = wait_screen(name, "SHELL-IS-BACK", timeout=60)
        assert done.read_text().strip() == "EXIT=130"  # the job's own code, as with run
        assert "╭" not in text
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
