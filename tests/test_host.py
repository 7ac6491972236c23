"""The host reader's view of a job's process tree, over real processes: children appear
when made, leave when they end, and a grandchild whose parent ended (reparented to init)
is no longer the job's."""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from conftest import busy_neighbours, kill_tree

from gpudoctor.sources import host
from gpudoctor.sources.host import HostReader, descendants, newest_pid

# the job: makes processes when told on stdin, prints their pids
JOB = """
import subprocess, sys
kids = []
for line in sys.stdin:
    if line.strip() == "child":
        kids.append(subprocess.Popen(["sleep", "60"]))
        print(kids[-1].pid, flush=True)
    elif line.strip() == "thread":  # a child made by another thread, which lives on
        import queue, threading, time
        made = queue.Queue()
        def make():
            made.put(subprocess.Popen(["sleep", "60"]))
            time.sleep(120)
        threading.Thread(target=make, daemon=True).start()
        kids.append(made.get())
        print(kids[-1].pid, flush=True)
    elif line.strip() == "nest":
        kids.append(subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE))
        print(kids[-1].pid, kids[-1].stdout.readline().decode().strip(), flush=True)
"""


Ask = Callable[[str], list[int]]


@pytest.fixture
def job() -> Iterator[tuple[subprocess.Popen[str], Ask]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", JOB], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    made: list[int] = []

    def ask(what: str) -> list[int]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(what + "\n")
        proc.stdin.flush()
        pids = [int(x) for x in proc.stdout.readline().split()]
        made.extend(pids)
        return pids

    yield proc, ask
    for pid in made:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.wait()


def tree(reader: HostReader) -> set[int]:
    """The live processes of the job's tree (an ended child stays a zombie until reaped)."""
    return {p.pid for p in reader.read().job if p.status != "zombie"}


def gone(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return  # ended, not yet reaped by its parent
        except FileNotFoundError:
            return
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} did not end")


def test_newest_pid_follows_process_creation() -> None:
    before = newest_pid()
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    after = newest_pid()
    assert before is not None and after is not None
    assert after != before
    assert after >= int(child.stdout)


def test_job_tree_follows_children(job: tuple[subprocess.Popen[str], Ask]) -> None:
    proc, ask = job
    reader = HostReader(proc.pid)
    assert tree(reader) == {proc.pid}
    (child,) = ask("child")
    assert tree(reader) == {proc.pid, child}
    assert tree(reader) == {proc.pid, child}  # read again, nothing made in between
    shell, grandchild = ask("nest")
    assert tree(reader) == {proc.pid, child, shell, grandchild}
    roles = {p.pid: p.role for p in reader.read().job}
    assert roles[proc.pid] == "main" and roles[grandchild] == "child"
    gone(child)
    assert tree(reader) == {proc.pid, shell, grandchild}
    # the shell ends: its sleep is reparented away from the job
    gone(shell)
    assert tree(reader) == {proc.pid}


@pytest.mark.parametrize("children_files", [True, False], ids=["proc-children", "psutil"])
def test_descendants_are_psutils_children_whichever_thread_made_them(
    job: tuple[subprocess.Popen[str], Ask], children_files: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk down the children files finds what psutil's scan of every process finds:
    children, grandchildren, a child made by a thread other than the main one (the kernel
    lists it under that thread); psutil's where the kernel has no such files. An ended
    job has none."""
    if children_files and not host.CHILDREN_FILES:
        pytest.skip("this kernel has no /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN)")
    monkeypatch.setattr(host, "CHILDREN_FILES", children_files)
    proc, ask = job
    assert descendants(proc.pid) == [proc.pid]
    (child,) = ask("child")
    (threads_child,) = ask("thread")
    shell, grandchild = ask("nest")
    found = descendants(proc.pid)
    assert found[0] == proc.pid and len(found) == len(set(found))
    assert set(found) == {proc.pid, child, threads_child, shell, grandchild}
    psutils = {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
    assert set(found) == {proc.pid} | psutils
    reader = HostReader(proc.pid)
    assert tree(reader) == set(found)
    gone(threads_child)
    assert tree(reader) == set(found) - {threads_child}
    ended = subprocess.Popen(["true"])
    ended.wait()
    assert descendants(ended.pid) == []


# the job: a process and its child, each keeping a core busy (a 2-core machine's worth)
BUSY_JOB = """
import os
os.fork()
while True:
    pass
"""


def test_the_reader_sees_the_job_wait_for_cores_others_take_and_names_them() -> None:
    """Two busy processes outside the job on this 2-core machine: the job's threads wait
    for a core (the kernel's run-queue delay) and the reader names who keeps them busy.
    Whatever else runs on the machine only adds to both."""
    job = subprocess.Popen([sys.executable, "-c", BUSY_JOB], start_new_session=True)
    try:
        with busy_neighbours(2) as burners:
            reader = HostReader(job.pid)
            samples = []
            for _ in range(8):  # the busiest are named from the second scan, 5 s apart
                time.sleep(1.0)
                samples.append(reader.read())
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    late = samples[1:]
    assert all(len(s.job) == 2 for s in late)
    delays = sorted(s.job_run_delay_fraction or 0.0 for s in late)
    # four busy processes on two cores: each waits about half the time it could run
    assert delays[len(delays) // 2] > 0.25, delays
    assert all((s.others_cpu_cores or 0.0) >= 0.5 for s in late), [s.others_cpu_cores for s in late]
    named = {o.pid for o in samples[-1].others}
    assert set(burners) <= named, (burners, samples[-1].others)
    assert job.pid not in named and os.getpid() not in named
    assert all(
        o.cpu_cores > 0.2 and o.name.startswith("python")
        for o in samples[-1].others
        if o.pid in burners
    )


def test_the_reader_counts_niced_neighbours_apart() -> None:
    """Two busy processes beside a quiet job, niced (a background job that yields to
    everyone): the machine's niced time is theirs, counted apart from the others' cores
    that compete with the job. The same two not niced: none of it."""
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for nice in (19, 0):
            with busy_neighbours(2, nice=nice) as burners:
                reader = HostReader(job.pid)
                procs = [psutil.Process(pid) for pid in burners]
                time.sleep(1.0)
                reader.read()
                start, t0 = sum(_cpu_s(p) for p in procs), time.monotonic()
                samples = []
                for _ in range(4):
                    time.sleep(1.0)
                    samples.append(reader.read())
                burned = (sum(_cpu_s(p) for p in procs) - start) / (time.monotonic() - t0)
            niced = statistics.fmean(s.others_niced_cpu_cores or 0.0 for s in samples)
            others = statistics.fmean(s.others_cpu_cores or 0.0 for s in samples)
            competing = statistics.fmean(s.competing_cpu_cores or 0.0 for s in samples)
            assert burned > 0.3, burned  # they ran (beside whatever else runs here)
            if nice:
                assert abs(niced - burned) < 0.15 + 0.1 * burned, (niced, burned)
                assert competing <= others - 0.8 * burned + 0.1, (competing, others, burned)
            else:
                assert niced < 0.15 and competing == pytest.approx(others, abs=0.02), (
                    niced,
                    others,
                )
    finally:
        job.kill()
        job.wait()


def _cpu_s(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


# A DataLoader's workers started by a fork server, as CPython 3.14 starts them on Linux
FORKSERVER_LOADER = """
import multiprocessing, sys, time, torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    # the server with torch loaded, as on 3.14 (its server imports the job's script)
    multiprocessing.set_forkserver_preload(["torch"])
    data = TensorDataset(torch.randn(64, 4))
    loader = DataLoader(data, batch_size=8, num_workers=2, persistent_workers=True,
                        multiprocessing_context="forkserver")
    for epoch in range(10000):
        for (x,) in loader:
            time.sleep(0.05)
        if epoch == 0:
            print("ready", flush=True)


if __name__ == "__main__":
    main()
"""


def test_workers_forked_by_a_fork_server_are_the_jobs_workers(tmp_path: Path) -> None:
    """The fork server and the resource tracker are the job's children and no worker;
    the workers, the fork server's children, are (the TUI's job panel counts them)."""
    script = tmp_path / "loader.py"
    script.write_text(FORKSERVER_LOADER)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        reader = HostReader(proc.pid)
        reader.step_pids = {proc.pid}
        reader.read()
        job = reader.read().job
        roles = {p.pid: p.role for p in job}
        children = psutil.Process(proc.pid).children()
        commands = {c.pid: " ".join(c.cmdline()) for c in children}
        server = next(pid for pid, c in commands.items() if "multiprocessing.forkserver" in c)
        tracker = next(pid for pid, c in commands.items() if "resource_tracker" in c)
        workers = {c.pid for c in psutil.Process(server).children()}
        assert len(workers) == 2
        assert roles[proc.pid] == "main"
        assert roles[server] == "child" and roles[tracker] == "child"
        assert {pid for pid, role in roles.items() if role == "worker"} == workers
    finally:
        kill_tree(proc.pid)
        proc.wait()
