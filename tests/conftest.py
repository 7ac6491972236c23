"""Shared helpers: run the real doctor on real jobs, load recorded sessions."""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpudoctor.model import JobExit
from gpudoctor.sources.contention import Owed
from gpudoctor.store import apply_record
from gpudoctor.timeline import Timeline

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_jobs"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
PY = sys.executable


@pytest.fixture(autouse=True)
def _private_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes to the user's own session store, nor sends its runs' series to an
    exporter on the machine (a test that wants one names its own socket)."""
    monkeypatch.setenv("GPUDOCTOR_STORE", str(tmp_path / "sessions.db"))
    monkeypatch.setenv("GPUDOCTOR_EXPORTER_SOCKET", str(tmp_path / "no-exporter.sock"))
    monkeypatch.delenv("GPUDOCTOR_SOCKET", raising=False)


@contextlib.contextmanager
def busy_neighbours(n: int = 2, nice: int = 0) -> Iterator[list[int]]:
    """`n` processes outside the job that keep a core busy each (another user's job on a
    shared server: not a child of the test or of the doctor), their pids; killed on the
    way out. `nice`: their niceness (19: a background job that yields to everyone)."""
    pids = []
    try:
        for _ in range(n):
            shell = subprocess.run(
                ["sh", "-c", f"nice -n {nice} '{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            pids.append(int(shell.stdout))
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def one_core_shared(hogs: int = 3) -> Iterator[Callable[[], None]]:
    """`hogs` busy loops on one core of this machine, killed on the way out; yields what
    puts a child on that core too (a preexec_fn): it gets about 1/(hogs + 1) of it."""
    cpu = min(os.sched_getaffinity(0))

    def on_that_core() -> None:
        os.sched_setaffinity(0, {cpu})

    spin = [PY, "-c", "while True: pass"]
    busy = [subprocess.Popen(spin, preexec_fn=on_that_core) for _ in range(hogs)]
    try:
        yield on_that_core
    finally:
        for process in busy:
            process.kill()
            process.wait()


def setpriv_as(user: str) -> list[str]:
    """The command prefix that runs what follows as `user` (root only), no other groups."""
    group = "nogroup" if user == "nobody" else user
    return ["setpriv", f"--reuid={user}", f"--regid={group}", "--clear-groups"]


def _others_may_enter(folder: Path) -> bool:
    """Whether user nobody may enter and write `folder`: every folder above it
    searchable by others."""
    check = subprocess.run(
        [*setpriv_as("nobody"), "test", "-x", str(folder), "-a", "-w", str(folder)],
        capture_output=True,
    )
    return check.returncode == 0


@functools.cache
def _shared_base() -> Path | None:
    """The first place where a folder made for another user can be reached by them:
    the temporary folder where others may enter it (on some machines, CI's among them,
    /tmp is its owner's alone), else /var/tmp, /dev/shm, or the clone's own build
    folder (the tests that switch users run this clone's doctor as that user, so they
    need it readable anyway)."""
    for base in (Path(tempfile.gettempdir()), Path("/var/tmp"), Path("/dev/shm"), ROOT / "build"):
        with contextlib.suppress(OSError):
            base.mkdir(exist_ok=True)
            probe = Path(tempfile.mkdtemp(prefix="gpudoctor-reach-", dir=base))
            try:
                probe.chmod(0o777)
                if _others_may_enter(probe):
                    return base
            finally:
                probe.rmdir()
    return None


def shared_folder(prefix: str, mode: int = 0o777) -> Path:
    """A new folder another user (nobody) can reach, with `mode`; the test is skipped,
    the reason printed, where this machine has none. Not root: a temporary folder (no
    other user can be switched to; the tests that would, say so)."""
    base = _shared_base() if os.geteuid() == 0 else Path(tempfile.gettempdir())
    if base is None:
        pytest.skip(
            "no folder here that user nobody can reach (tried the temporary folder, "
            "/var/tmp, /dev/shm and this clone's build/): this test switches users"
        )
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    path.chmod(mode)
    return path


def as_from_a_terminal() -> None:
    """SIGINT as a terminal's shell leaves it: a suite started in the background of a
    script inherits it ignored, and the doctor and the job would inherit that in turn
    (the doctor's polite stop, a SIGINT, would then wait for its SIGTERM)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def doctor(*args: str, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`gpudoctor ARGS...` as a user runs it, its output captured."""
    kwargs.setdefault("preexec_fn", as_from_a_terminal)
    return run_owed([PY, "-m", "gpudoctor", *args], timeout, **kwargs)


# A process starved of CPU is owed at most this many times its timeout in all
OWED_TIMES = 4


def run_owed(
    argv: list[str], timeout: float, input: str | None = None, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """subprocess.run(argv, capture_output=True, text=True), its `timeout` lengthened by
    the time the process or any of its children waited for a core meanwhile (runnable,
    no core free: a busy machine, or scripts/test.sh's group beside the rest while the
    rest keeps every core busy, where a doctor's 5 s run was still going after 120 s in
    CI), up to OWED_TIMES times `timeout`. Past it, killed: subprocess.TimeoutExpired."""
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
    ) as proc:
        owed = Owed(timeout, OWED_TIMES * timeout, [proc.pid])
        while True:
            with contextlib.suppress(psutil.Error):  # its children as they come
                owed.see(p.pid for p in psutil.Process(proc.pid).children(recursive=True))
            left = owed.left()
            if left <= 0:
                proc.kill()
                out, err = proc.communicate()
                raise subprocess.TimeoutExpired(argv, timeout, out, err)
            try:
                out, err = proc.communicate(input, timeout=min(left, 1.0))
                break
            except subprocess.TimeoutExpired:
                input = None  # sent: communicate() goes on with the rest
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


# torch's own race at the end of a gloo job: a rank aborts as the process group goes,
# after all its work, plain or doctored alike (bench/ddp_teardown.py on ddp_torchrun.py,
# barrier and all: 2 of 30 plain runs, none doctored; RESULTS.md; rank 1 of test_ranks'
# job once in CI, 2026-12-07). The tests that run such a job run it once more on it.
TEARDOWN_ABORT = "terminate called without an active exception"


def doctor_past_teardown(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`doctor(*args)`, once more when the job failed with torch's teardown abort."""
    proc = doctor(*args, **kwargs)
    if proc.returncode != 0 and TEARDOWN_ABORT in proc.stderr:
        proc = doctor(*args, **kwargs)
    return proc


def run_job(
    tmp_path: Path, script: Path | str, *job_args: str, doctor_args: tuple[str, ...] = ()
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    report = tmp_path / f"report-{Path(script).stem}.json"
    proc = doctor_past_teardown(
        "run", "--headless", "--report", str(report), *doctor_args, "--", PY, str(script), *job_args
    )
    assert report.exists(), proc.stderr[-3000:]
    return proc, json.loads(report.read_text())


def top_finding(report: dict[str, Any]) -> dict[str, Any]:
    """The job's top finding (noisy-neighbour aside, as in finding_ids)."""
    return next(f for f in report["findings"] if f["id"] != "noisy-neighbour")


def finding_ids(report: dict[str, Any], *severities: str) -> list[str]:
    """The job's findings in rank order (of these severities, when named), less
    noisy-neighbour: that one is the machine's, which a shared machine (CI's too) may
    rightly add beside any job; the tests that want it read the findings themselves."""
    return [
        f["id"] for f in report["findings"]
        if f["id"] != "noisy-neighbour" and (not severities or f["severity"] in severities)
    ]  # fmt: skip


def load_recorded_session(name: str) -> Timeline:
    """A session recorded on a real GPU (scripts/gpu_checks.sh), replayed from its records."""
    return load_session_file(FIXTURES / f"gpu_session_{name}.json.gz")


def load_session_file(path: Path) -> Timeline:
    """A recorded session (scripts/export_session.py), replayed from its records."""
    data = json.loads(gzip.decompress(path.read_bytes()))
    s = data["session"]
    timeline = Timeline(
        json.loads(s["command"]), s["started_unix"], s["start_mono_ns"], gpu_reason=s["gpu_reason"]
    )
    for kind, _t, record in data["records"]:
        apply_record(timeline, kind, record)
    timeline.settle()  # the step rows held as they were read (Timeline._load_rows)
    timeline.end_mono_ns = s["end_mono_ns"]
    if s["exit_json"]:
        timeline.exit = JobExit(**json.loads(s["exit_json"]))
    return timeline


async def wait_for(pilot: Any, condition: Any, timeout: float = 60.0) -> None:
    """Pause a Textual app under Pilot until `condition()` holds (a condition, not a sleep)."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await pilot.pause(0.1)


def env_without_probe() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("GPUDOCTOR_SOCKET", None)
    return env


def kill_tree(pid: int) -> None:
    """The process and every process below it, killed: a DataLoader's fork server and its
    workers outlive a job killed alone (they were left running, reparented)."""
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def tree_cpu_s(pid: int) -> float:
    """The CPU time a process and its children have used so far (0 once it is gone)."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    used = 0.0
    for one in tree:
        try:
            t = one.cpu_times()
            used += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return used


def wait_for_output(
    path: Path, text: str, job: subprocess.Popen[Any], stall_s: float = 60.0
) -> None:
    """Until `text` is in the job's output file: for as long as the job keeps using CPU,
    however slowly (a file that runs beside the rest of the suite gets only the CPU the
    rest leaves: scripts/test.sh); fails when the job ends first, or uses no CPU for
    stall_s."""
    most, since = -1.0, time.monotonic()
    while text not in path.read_text():
        assert job.poll() is None, f"the job ended before {text!r}: {path.read_text()[-1000:]}"
        used, now = tree_cpu_s(job.pid), time.monotonic()
        if used > most:
            most, since = used, now
        assert now - since < stall_s, f"no {text!r}, and no CPU used for {stall_s:.0f} s"
        time.sleep(0.1)
