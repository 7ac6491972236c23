"""The fault suite (issue 19): what goes wrong around a long run, each case for real.

For each: the job's result is what it is without the doctor, nothing is lost without
being counted and said, and the doctor says in one line what happened. The terminal
cases (SIGHUP, a full store under the TUI) are in tmux, and end with the terminal clean.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import PY, ROOT, SAMPLES, as_from_a_terminal, doctor
from rich.cells import cell_len
from test_probe_promises import job, plain_started, the_job, wait_for_line, wait_gone
from test_tui_terminal import close, run_in_tmux, tmux, wait_screen

from gpudoctor.app.follow import Follower
from gpudoctor.jobs import LaunchedJob
from gpudoctor.output_log import OutputLog
from gpudoctor.store import Store
from gpudoctor.terminal import TerminalView, plain

pytestmark = pytest.mark.timeout(240)


def start(tmp_path: Path, *args: str, doctor_args: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    """`gpudoctor run --headless` on a job; the job's output in out.txt (it inherits the
    doctor's stdout), the doctor's own lines in err.txt, the report in r.json."""
    with open(tmp_path / "out.txt", "wb") as out, open(tmp_path / "err.txt", "wb") as err:
        return subprocess.Popen(
            [PY, "-m", "gpudoctor", "run", "--headless", "--report", str(tmp_path / "r.json"),
             *doctor_args, "--", *args],
            stdout=out, stderr=err,
        )  # fmt: skip


def report_of(tmp_path: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((tmp_path / "r.json").read_text())
    return report


def doctor_lines(tmp_path: Path) -> list[str]:
    """What the doctor said on stderr, its status lines left out."""
    text = (tmp_path / "err.txt").read_text(errors="replace")
    return [line for line in text.splitlines() if not line.startswith("[gpudoctor")]


# -- the doctor stopped, killed ------------------------------------------------------------


def test_a_doctor_stopped_for_10_s_keeps_every_count_and_says_so(tmp_path: Path) -> None:
    script = job(tmp_path)
    expected = plain_started(script, "3000", "0.003")()  # before: it computes more than it sleeps
    doctor_proc = start(tmp_path, PY, str(script), "3000", "0.003")
    the_job(doctor_proc)
    wait_for_line(tmp_path / "out.txt", "step 80 ")
    doctor_proc.send_signal(signal.SIGSTOP)
    time.sleep(10)
    doctor_proc.send_signal(signal.SIGCONT)
    assert doctor_proc.wait(timeout=120) == 0
    assert (tmp_path / "out.txt").read_text() == expected  # the job as it is alone
    report = report_of(tmp_path)
    assert report["steps"]["count"] == 3000
    stalls = report["doctor"]["stalls"]
    # counted from when the doctor meant to wake (up to an interval into the stop); a
    # busy machine may starve the doctor a second or more at other times too
    assert [s for s in stalls if 8.5 <= s["seconds"] <= 10.5] and len(stalls) <= 3, stalls
    lost = report["probe"]["lost_step_timings"]
    if lost:  # a busy machine may leave the probe behind: then it is counted and said
        assert any(f"{lost} step timings" in n for n in report["notes"])
    else:
        assert any("the probe kept the step timings meanwhile" in n for n in report["notes"])


def test_sigkill_of_the_doctor_leaves_the_job_and_history_shows_its_steps(tmp_path: Path) -> None:
    script = job(tmp_path)
    expected = plain_started(script, "160", "0.02")
    doctor_proc = start(tmp_path, PY, str(script), "160", "0.02")
    job_process = the_job(doctor_proc)
    wait_for_line(tmp_path / "out.txt", "step 48 ")
    recorded = 0  # until the record has reached step 48 (a tick or more behind the job)
    deadline = time.monotonic() + 60
    while recorded < 48:
        assert time.monotonic() < deadline, f"the record stayed at {recorded} steps"
        time.sleep(0.2)
        with contextlib.closing(sqlite3.connect(os.environ["GPUDOCTOR_STORE"])) as db:
            (top,) = db.execute(
                "SELECT MAX(json_extract(data, '$.steps')) FROM records WHERE kind='page'"
            ).fetchone()
        recorded = int(top or 0)
    doctor_proc.send_signal(signal.SIGKILL)
    doctor_proc.wait()
    wait_gone(job_process)
    assert (tmp_path / "out.txt").read_text() == expected()
    listed = doctor("history").stdout.splitlines()[1]
    assert "incomplete" in listed
    steps = int(listed.split("incomplete", 1)[1].split()[0])
    assert 48 <= steps <= 160


# -- the terminal goes away; viewers from other terminals ------------------------------------


def test_sighup_in_the_tui_records_on_and_a_second_terminal_attaches(tmp_path: Path) -> None:
    script = job(tmp_path)
    expected = plain_started(script, "800", "0.02")
    store = tmp_path / "s.db"
    report = tmp_path / "r.json"
    first, viewer = f"gd-hup-{tmp_path.name}", f"gd-view-{tmp_path.name}"
    run_in_tmux(
        tmp_path, first,
        f"GPUDOCTOR_STORE={store} {PY} -m gpudoctor run --report {report} -- "
        f"{PY} {script} 800 0.02",
    )  # fmt: skip
    try:
        wait_screen(first, "/s  step time")
        doctor_pid = int(
            sqlite3.connect(store).execute("SELECT doctor_pid FROM sessions").fetchone()[0]
        )
        subprocess.run(["tmux", "kill-session", "-t", first], check=True)  # SIGHUP
        time.sleep(2)
        assert psutil.pid_exists(doctor_pid), "the doctor died with its terminal"
        listed = doctor("--store", str(store), "history").stdout
        assert " live " in listed, listed
        tmux("new-session", "-d", "-s", viewer, "-x", "100", "-y", "30",
             f"cd {ROOT} && GPUDOCTOR_STORE={store} {PY} -m gpudoctor attach last; "
             "echo VIEWER-DONE; sleep 60")  # fmt: skip
        wait_screen(viewer, "recorded by another doctor", " loss ")  # the job's output too
        tmux("send-keys", "-t", viewer, "q")
        text = wait_screen(viewer, "VIEWER-DONE")
        assert "left session 1; it is still recorded" in text and "╭" not in text
        assert psutil.pid_exists(doctor_pid)  # q closed the viewer only
        psutil.Process(doctor_pid).wait(timeout=180)  # recorded to the job's end
    finally:
        close(first, tmp_path)
        close(viewer, tmp_path)
    result = json.loads(report.read_text())
    assert result["ended_by"] == "exit" and result["steps"]["count"] == 800
    assert result["doctor"]["terminal_hung_up_at_s"] is not None
    assert any("The terminal went away" in n for n in result["notes"])
    log = Path(result["doctor"]["output_log"])
    assert log.read_text() == expected()  # the job's output, whole, in its log
    assert " exit 0 " in doctor("--store", str(store), "history").stdout


# -- the store: full, locked ---------------------------------------------------------------


def test_a_store_locked_by_another_process_is_written_after(tmp_path: Path) -> None:
    script = job(tmp_path)
    store = tmp_path / "sessions.db"  # the tests' store (conftest)
    doctor_proc = start(tmp_path, PY, str(script), "1500", "0.004")
    the_job(doctor_proc)
    wait_for_line(tmp_path / "out.txt", "step 80 ")
    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process's long write
    time.sleep(4)
    holder.execute("ROLLBACK")
    holder.close()
    assert doctor_proc.wait(timeout=120) == 0
    report = report_of(tmp_path)
    assert report["steps"]["count"] == 1500
    outages = report["doctor"]["store_outages"]
    assert len(outages) == 1 and outages[0]["why"] == "database is locked", outages
    assert outages[0]["seconds"] is not None and outages[0]["seconds"] >= 2.5
    assert any("could not be written" in n and "written after" in n for n in report["notes"])
    # everything reached the store after all: the report rebuilt from it agrees
    rebuilt = json.loads(doctor("report", "last", "--format", "json").stdout)
    assert rebuilt["steps"]["count"] == 1500 and rebuilt["doctor"] == report["doctor"]


def test_a_store_on_a_full_filesystem_loses_nothing_unsaid(tmp_path: Path) -> None:
    assert os.geteuid() == 0, "mounts a small tmpfs: run the suite as root (CI does)"
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(tiny)], check=True)
    try:
        script = job(tmp_path)
        expected = plain_started(script, "2000", "0.002")()  # before: it computes as much
        proc = doctor(
            "--store", str(tiny / "s.db"), "run", "--headless", "--report", str(tmp_path / "r.json"),
            "--", PY, str(script), "2000", "0.002",
        )  # fmt: skip
    finally:
        subprocess.run(["umount", "-l", str(tiny)], capture_output=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == expected
    report = report_of(tmp_path)
    assert report["steps"]["count"] == 2000  # the report is whole
    outages = report["doctor"]["store_outages"]
    assert outages and outages[-1]["why"] == "database or disk is full"
    said = [
        line
        for line in proc.stderr.splitlines()
        if line.startswith("gpudoctor: ") and "could not be written" in line
    ]
    assert len(said) == 1 and "records missing" in said[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


# -- the probe's socket, the job's own doings -----------------------------------------------


@pytest.mark.parametrize("removed", ["socket", "folder"])
def test_the_probe_socket_removed_mid_run_is_made_again(tmp_path: Path, removed: str) -> None:
    """A stray rm, or a cleaner of /tmp taking the doctor's whole folder (the socket and
    the counter pages): the doctor makes it again, the probe sends on, every step counted."""
    script = job(tmp_path)
    doctor_proc = start(tmp_path, PY, str(script), "1200", "0.004")
    path = the_job(doctor_proc).environ()["GPUDOCTOR_SOCKET"]
    wait_for_line(tmp_path / "out.txt", "step 80 ")
    if removed == "socket":
        os.unlink(path)
    else:
        folder = os.path.dirname(path)
        shutil.rmtree(folder)
        # the counter page too is made again (the count exact if the job is killed)
        page = Path(folder) / f"page-{the_job(doctor_proc).pid}"
        deadline = time.monotonic() + 30
        while not page.exists():
            assert time.monotonic() < deadline and doctor_proc.poll() is None
            time.sleep(0.05)
    assert doctor_proc.wait(timeout=120) == 0
    report = report_of(tmp_path)
    assert report["steps"]["count"] == 1200
    assert len(report["doctor"]["socket_remade_at_s"]) == 1
    assert any("socket was removed" in n for n in report["notes"])
    lost = report["probe"]["lost_step_timings"]
    assert lost == 0 or any(f"{lost} step timings" in n for n in report["notes"])


FORKS_AND_CLOSES = """
    import os, subprocess, sys, torch
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(0)
    for step in range(200):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        pid = os.fork()  # a short-lived process each step, as a data or logging helper
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        if step % 20 == 0:
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        if step == 100:
            print("closing stdout", flush=True)
            os.close(1)  # the job closes its own stdout and goes on
    print(f"loss {loss.item():.6f}", file=sys.stderr, flush=True)
"""


def test_a_job_that_forks_200_processes_and_closes_its_stdout(tmp_path: Path) -> None:
    script = tmp_path / "forks.py"
    script.write_text(textwrap.dedent(FORKS_AND_CLOSES))
    alone = subprocess.run([PY, str(script)], capture_output=True, text=True)
    proc = doctor("run", "--headless", "--report", str(tmp_path / "r.json"), "--", PY, str(script))
    assert proc.returncode == alone.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == alone.stdout == "closing stdout\n"
    job_lines = [line for line in proc.stderr.splitlines() if line.startswith("loss")]
    assert job_lines == [alone.stderr.strip()]  # the same loss, bit for bit
    report = report_of(tmp_path)
    assert report["steps"]["count"] == 200
    assert report["probe"]["lost_step_timings"] == 0


# -- the job's output: a flood, bytes that are not text, a terminal's ways -------------------

FLOOD = """
    import sys, time, torch
    line = (b"x" * 1023) + b"\\n"
    chunk = line * 1024  # 1 MiB
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(0)
    end = time.monotonic() + 4
    steps = 0
    while time.monotonic() < end:
        for _ in range(10):  # about 50 MB/s where the disk takes it
            sys.stdout.buffer.write(chunk)
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step(); steps += 1
        time.sleep(0.2)
    sys.stdout.buffer.flush()
    time.sleep(2.5)  # the doctor's next tick rotates the last flood away before this
    sys.stdout.buffer.write(f"done {steps}\\n".encode())
"""


def test_a_job_printing_50_mb_a_second_is_kept_within_the_log_cap(tmp_path: Path) -> None:
    script = tmp_path / "flood.py"
    script.write_text(textwrap.dedent(FLOOD))
    store = Store(tmp_path / "s.db")
    log = OutputLog(tmp_path / "job.log", max_bytes=20 << 20)
    job_ = LaunchedJob([PY, str(script)], store, output=log, own_terminal=True)
    job_.start()
    view = TerminalView(log.path)
    follower = Follower(job_, view)
    follower.start()
    follower.join()
    log.close()
    job_.close()
    assert follower.job_exit is not None and follower.job_exit.exit_code == 0
    assert log.rotations >= 3
    # the disk holds at most the cap twice, plus what came within one tick
    assert log.path.stat().st_size < (20 << 20) + (60 << 20)
    assert log.previous.stat().st_size >= 20 << 20
    tail = [plain(line) for line in view.read()]
    assert tail[-1].startswith("done ")  # the emulator kept up (fed a capped tail a tick)
    steps = int(tail[-1].split()[1])
    from gpudoctor.report.build import build

    assert job_.session_id is not None
    report = build(job_.timeline, job_.session_id, "en")
    assert report.steps.count == steps
    assert report.doctor.output_rotations == log.rotations
    assert any(f"reached its cap {log.rotations} times" in n for n in report.notes)
    store.close()


PROGRESS = """
    import sys, time
    for epoch in range(3):
        for i in range(0, 101, 10):
            bar = "#" * (i // 10) + " " * (10 - i // 10)
            sys.stdout.write(f"\\repoch {epoch}: {i:3d}%|{bar}| \\x1b[32mloss 0.{i:03d}\\x1b[0m")
            sys.stdout.flush()
            time.sleep(0.02)
        sys.stdout.write("\\n")
        sys.stdout.buffer.write(b"bytes \\xff\\xfe\\xfd then \\xe4\\xb8\\xad\\xe6\\x96\\x87 wide\\n")
        sys.stdout.flush()
    time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


def test_progress_bars_colours_and_undecodable_bytes_render_as_in_a_terminal(
    tmp_path: Path,
) -> None:
    script = tmp_path / "progress.py"
    script.write_text(textwrap.dedent(PROGRESS))
    log = tmp_path / "out.log"
    with log.open("wb") as out:
        subprocess.run([PY, str(script)], stdout=out, check=True)
    view = TerminalView(log, columns=60, lines=20)
    lines = view.read()
    assert [plain(line) for line in lines] == [
        f"epoch {n}: 100%|##########| loss 0.100"
        if i == 0
        else "bytes \ufffd\ufffd\ufffd then 中文 wide"
        for n in range(3)
        for i in range(2)
    ]
    assert ("loss 0.100", "green") in lines[0]
    assert all(cell_len(plain(line)) <= 60 for line in lines)


def test_the_output_panel_keeps_its_border_with_progress_bars_and_bad_bytes(
    tmp_path: Path,
) -> None:
    script = tmp_path / "progress.py"
    script.write_text(textwrap.dedent(PROGRESS))
    name = f"gd-out-{tmp_path.name}"
    done = run_in_tmux(
        tmp_path, name,
        f"GPUDOCTOR_STORE={tmp_path / 's.db'} {PY} -m gpudoctor run -- {PY} {script} 60",
    )  # fmt: skip
    try:
        text = wait_screen(name, "epoch 2: 100%", "中文 wide")
        assert "epoch 1:  10%" not in text  # a carriage return overwrote it, as a terminal does
        framed = [row.rstrip() for row in text.splitlines() if row[:1] in "│╭╰" and row]
        widths = {cell_len(row) for row in framed}
        assert widths == {80}, text  # every row, the output's too, ends at the border
        tmux("send-keys", "-t", name, "o")  # the whole output, full screen
        text = wait_screen(name, "the job's output", "Back")
        rows = [row.strip() for row in text.splitlines() if "epoch" in row or "中文" in row]
        assert rows == [
            line for n in range(3)
            for line in (f"epoch {n}: 100%|##########| loss 0.100", "bytes ��� then 中文 wide")
        ]  # fmt: skip
        tmux("send-keys", "-t", name, "Escape")
        wait_screen(name, "Findings")  # back (a key sent at once would read as Alt+key)
        tmux("send-keys", "-t", name, "q")
        wait_screen(name, "still running")
        tmux("send-keys", "-t", name, "s")
        text = wait_screen(name, "SHELL-IS-BACK")
        assert "╭" not in text and "the job's output is in" in text  # (the path wraps)
        assert done.read_text().strip().startswith("EXIT=")
    finally:
        close(name, tmp_path)


def test_a_store_filling_up_under_the_tui_is_said_and_the_job_goes_on(tmp_path: Path) -> None:
    assert os.geteuid() == 0, "mounts a small tmpfs: run the suite as root (CI does)"
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(tiny)], check=True)
    name = f"gd-full-{tmp_path.name}"
    # a job that prints only at its end: its output log is on the full disk too, where a
    # print would fail as it does with `> file` (see the README)
    marker = str(os.getpid())  # the job's --seed: finds it to clean up, whatever happens
    job_ = f"{PY} {SAMPLES / 'healthy.py'} --steps 100000 --seed {marker}"
    done = run_in_tmux(
        tmp_path, name, f"GPUDOCTOR_STORE={tiny / 's.db'} {PY} -m gpudoctor run -- {job_}"
    )
    try:
        wait_screen(name, "cannot write the session store", timeout=120)
        tmux("send-keys", "-t", name, "q")
        wait_screen(name, "still running")
        tmux("send-keys", "-t", name, "s")
        text = wait_screen(name, "SHELL-IS-BACK", timeout=60)
        assert "could not be written" in text and "╭" not in text
        assert done.read_text().strip() == "EXIT=130"  # the job's own code: stopped by SIGINT
    finally:
        close(name, tmp_path)
        subprocess.run(["pkill", "-f", f"healthy.py --steps 100000 --seed {marker}"])
        subprocess.run(["umount", "-l", str(tiny)], capture_output=True)


def test_a_headless_ctrl_c_says_nothing_inside_the_jobs_traceback(tmp_path: Path) -> None:
    """Issue 40, point 13: the doctor's 'waiting for the job to stop' landed in the
    middle of the job's KeyboardInterrupt traceback. A job that stops at once prints its
    traceback alone; the doctor says it waits only for a job still there a moment on."""
    script = tmp_path / "loop.py"
    script.write_text(
        "import time, sys\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.01)\n"
    )
    proc = subprocess.Popen(
        [PY, "-m", "gpudoctor", "run", "--headless", "--no-stacks", "--", PY, str(script)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=as_from_a_terminal,  # SIGINT as a terminal leaves it, not ignored
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" in err and "KeyboardInterrupt" in err, err
    # the traceback whole, from its first line to its last: nothing of the doctor's in it
    # (a job slow to stop, on a busy machine, may be told it is waited for: after it)
    start = err.index("Traceback")
    end = err.index("KeyboardInterrupt", start)
    assert "gpudoctor" not in err[start:end], err


def test_a_probe_whose_folder_is_gone_waits_for_its_doctor_and_no_other(tmp_path: Path) -> None:
    """The socket's folder gone: while the doctor that made it lives, the probe keeps its
    rows and tries again (the doctor makes the folder again); a process given the
    doctor's pid later, or no process, is no doctor and the probe goes dormant."""
    from gpudoctor.probe.channel import DEAD, FULL, Channel
    from gpudoctor.probe.protocol import start_ticks

    path = str(tmp_path / "gone" / "probe.sock")
    ticks = start_ticks(os.getpid())
    assert ticks is not None
    alive = Channel(path, os.getpid(), ticks)  # this process as the doctor
    assert alive.send({"v": 1}) == FULL and not alive.dead
    reused = Channel(path, os.getpid(), ticks - 1)  # its pid, another start
    assert reused.send({"v": 1}) == DEAD and reused.dead
    ended = subprocess.run([PY, "-c", "import os; print(os.getpid())"], capture_output=True)
    gone = Channel(path, int(ended.stdout), None)
    assert gone.send({"v": 1}) == DEAD
