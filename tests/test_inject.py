"""`gpudoctor watch --pid N --inject`: the probe loaded into a job that was started
without the doctor, for real (the doctor's own ptrace call on x86-64, gdb elsewhere, on
this machine's CPython), and removed again."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    PY,
    as_from_a_terminal,
    doctor,
    env_without_probe,
    setpriv_as,
    top_finding,
    wait_for,
    wait_for_output,
)
from test_tui import text_of
from test_watch import _doctor_as, _shared_dir, _skip_unless_readable_by, one_line_error

from gpudoctor.app.follow import Follower
from gpudoctor.jobs import inject
from gpudoctor.jobs.watched import WatchedJob, find_target
from gpudoctor.sources.stacks import find_py_spy
from gpudoctor.store import Store
from gpudoctor.tui.app import make_live_app
from gpudoctor.tui.screens import InjectScreen, ProfileScreen
from gpudoctor.tui.widgets import JobPanel

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        sys.version_info < (3, 14)
        and platform.machine() != "x86_64"
        and shutil.which("gdb") is None,
        reason="CPython 3.10-3.13 off x86-64 is injected by gdb, and it is not installed",
    ),
]

# the distribution's own interpreter (libpython linked in), where there is one
DEBIAN_PYTHON = next(
    (
        str(p)
        for p in sorted(Path("/usr/bin").glob("python3.*"))
        if re.fullmatch(r"python3\.\d+", p.name)
    ),
    "/usr/bin/python3",
)
# CPython 3.14's own sys.remote_exec; before it, the doctor's ptrace call, or gdb
ROUTE = (
    "remote_exec" if sys.version_info >= (3, 14)
    else "ptrace" if platform.machine() == "x86_64"
    else "gdb"
)  # fmt: skip

# An input-bound job whose results depend only on its step count: each sample is made by
# a fixed amount of CPU work and a wait in the DataLoader's main-process loading
# (num_workers=0). It
# logs each step's end (time.monotonic_ns, the doctor's clock too) to a file, and at its
# end prints what a probe would leave behind if it did not remove itself: threads, torch's
# global hook tables, the patched attributes. The same lines plain and injected.
JOB = """
    import sys, threading, time, torch
    from torch.utils.data import DataLoader, Dataset
    from torch.utils.data import dataloader as dl
    from torch.optim import optimizer as optmod
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ORIGINAL = {
        "backward": torch.autograd.backward,
        "next": dl._BaseDataLoaderIter.__dict__["__next__"],
        "setstate": torch.nn.Module.__dict__["__setstate__"],
        "hook_step": torch.optim.Optimizer.__dict__["profile_hook_step"],
        "item": torch.Tensor.item,
        "scaler_step": torch.amp.GradScaler.__dict__["step"],
    }

    class Decoded(Dataset):
        def __len__(self):
            return 4096
        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            x = torch.randn(48, 48, generator=g)
            for _ in range(6):
                x = torch.tanh(x @ x.T / 48)
            time.sleep(0.0005)  # a read from storage: the job lasts 5 s or more anywhere
            return x[0, :16].clone(), i % 3

    data = DataLoader(Decoded(), batch_size=8)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 50, gamma=0.9)
    steps, log = int(sys.argv[1]), open(sys.argv[2], "w")
    n = 0
    while n < steps:
        for x, y in data:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step(); sched.step()
            n += 1
            log.write(f"{time.monotonic_ns()}\\n"); log.flush()
            if n % 50 == 0:
                print(f"step {n} loss {loss.item():.6f}", flush=True)
            if n == steps:
                break
    mod = torch.nn.modules.module
    print("threads", sorted(t.name for t in threading.enumerate()))
    print("hooks", len(optmod._global_optimizer_pre_hooks),
          len(optmod._global_optimizer_post_hooks),
          len(mod._global_module_registration_hooks), len(mod._global_parameter_registration_hooks))
    print("originals", torch.autograd.backward is ORIGINAL["backward"],
          dl._BaseDataLoaderIter.__dict__["__next__"] is ORIGINAL["next"],
          torch.nn.Module.__dict__["__setstate__"] is ORIGINAL["setstate"],
          torch.optim.Optimizer.__dict__["profile_hook_step"] is ORIGINAL["hook_step"],
          torch.Tensor.item is ORIGINAL["item"],
          torch.amp.GradScaler.__dict__["step"] is ORIGINAL["scaler_step"])
    print("patched", [c.__name__ for c in (torch.nn.Sequential, torch.nn.Linear, torch.nn.ReLU)
                      if "__call__" in vars(c)])
    print("finished", n, f"{loss.item():.6f}", [f"{p.sum().item():.6f}" for p in model.parameters()])
"""
STEPS = "1400"
KINETO_LOG = re.compile(r"[A-Z]+:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \w+\.cpp:\d+\] ")


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inject") / "decoded.py"
    path.write_text(textwrap.dedent(JOB))
    return path


@pytest.fixture(scope="module")
def plain(
    script: Path, tmp_path_factory: pytest.TempPathFactory
) -> subprocess.CompletedProcess[str]:
    log = tmp_path_factory.mktemp("plain") / "steps.log"
    done = subprocess.run(
        [PY, str(script), STEPS, str(log)], capture_output=True, text=True, timeout=200
    )
    assert done.returncode == 0, done.stderr
    return done


def start(
    script: Path, tmp_path: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], Path]:
    """The job started plainly, its output to files; returned once it is past 50 steps."""
    log = tmp_path / "steps.log"
    out = (tmp_path / "out.txt").open("w")
    err = (tmp_path / "err.txt").open("w")
    job = subprocess.Popen(
        [PY, str(script), STEPS, str(log)], stdout=out, stderr=err, text=True,
        preexec_fn=as_from_a_terminal, env=env,
    )  # fmt: skip
    try:
        wait_for_output(tmp_path / "out.txt", "step 50", job)
    except AssertionError as e:
        raise AssertionError(
            f"{e}; its stderr: {(tmp_path / 'err.txt').read_text()[-2000:]}"
        ) from None
    return job, log


def attach_for(
    pid: int, seconds: str, report: Path, *more: str, env: dict[str, str] | None = None
) -> dict[str, object]:
    """`watch --pid PID --inject` for `seconds`, headless: its report (it must succeed)."""
    watched = doctor(
        "watch", "--pid", str(pid), "--inject", *more, "--headless", "--max-seconds", seconds,
        "--report", str(report), timeout=120, env=env,
    )  # fmt: skip
    assert watched.returncode == 0, watched.stderr
    loaded: dict[str, object] = json.loads(report.read_text())
    return loaded


def finish(job: subprocess.Popen[str], tmp_path: Path) -> tuple[int, str, str]:
    code = job.wait(timeout=200)
    return code, (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()


def test_injected_probe_counts_the_steps_made_while_attached_and_leaves_the_job_as_it_was(
    script: Path, plain: subprocess.CompletedProcess[str], tmp_path: Path
) -> None:
    job, log = start(script, tmp_path)
    r: Any = attach_for(job.pid, "3", tmp_path / "r.json")
    code, out, err = finish(job, tmp_path)
    # the job's results, its exit code and everything it printed: as without the doctor
    assert (code, out, err) == (0, plain.stdout, plain.stderr)
    assert "threads ['MainThread']" in out  # the plain run's line: no thread of the probe left

    assert r["mode"] == "inject" and r["ended_by"] == "detached"
    assert top_finding(r)["id"] == "input-bound", [f["id"] for f in r["findings"]]
    split = r["steps"]["split"]
    assert split["data_wait"] > 0.5 and split["forward"] > 0 and split["optimizer"] > 0
    assert_counted_while_attached(r, job.pid, log)
    assert "injected into pid" in " ".join(r["notes"])


def assert_counted_while_attached(r: Any, pid: int, log: Path) -> None:
    """The report's count is the steps the job logged between the first and the last
    step the probe saw."""
    timeline = Store(Path(os.environ["GPUDOCTOR_STORE"])).load(r["session"])
    assert list(timeline.steps) == [pid]
    first, last = timeline.steps[pid][0].t_end_mono_ns, timeline.steps[pid][-1].t_end_mono_ns
    ends = [int(line) for line in log.read_text().split()]
    made = sum(1 for t in ends if first - 5_000_000 <= t <= last + 5_000_000)
    count = r["steps"]["count"]
    # enough steps for the count to mean something (3 s of a job that makes ~100 a second
    # alone, and 56 in the idle CPU scripts/test.sh gives this file on a busy machine),
    # and the count exact to 1% or 2 steps
    assert count >= 20 and abs(count - made) <= max(2, made // 100), (count, made)


@pytest.mark.skipif(ROUTE == "remote_exec", reason="CPython 3.14 is injected by sys.remote_exec")
@pytest.mark.skipif(
    shutil.which("lldb") is None, reason="lldb is not installed (scripts/test.sh installs it)"
)
def test_lldb_injects_where_gdb_is_missing_and_leaves_the_job_as_it_was(
    script: Path, plain: subprocess.CompletedProcess[str], tmp_path: Path, monkeypatch: Any
) -> None:
    """Off x86-64 a machine may have lldb and no gdb: lldb is the route there. Here it is
    run the same way, named by GPUDOCTOR_INJECT_ROUTE: the count exact, the job as it
    was (on an x86-64 CPU with AMX, refused: a debugger's call breaks the job there). A
    route that is not one is refused in one line."""
    job, log = start(script, tmp_path)
    lldb_only = tmp_path / "bin"
    lldb_only.mkdir()
    (lldb_only / "lldb").symlink_to(str(shutil.which("lldb")))
    with monkeypatch.context() as m:
        m.setattr("platform.machine", lambda: "aarch64")
        m.setenv("PATH", f"{Path(PY).parent}{os.pathsep}{lldb_only}")
        assert inject.check_route(job.pid) == "lldb"
    bad = doctor(
        "watch", "--pid", str(job.pid), "--inject", "--headless", "--max-seconds", "1",
        env={**os.environ, "GPUDOCTOR_INJECT_ROUTE": "telepathy"},
    )  # fmt: skip
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "GPUDOCTOR_INJECT_ROUTE=telepathy: the routes are" in bad.stderr
    lldb = {**os.environ, "GPUDOCTOR_INJECT_ROUTE": "lldb"}
    if platform.machine() == "x86_64" and inject.amx_state():
        # a debugger's call breaks a job on a CPU with AMX (gdb 13's did: OSError 514 in
        # its time.sleep, on this project's CI machines): refused, the job untouched
        refused = doctor("watch", "--pid", str(job.pid), "--inject", "--headless", env=lldb)
        assert refused.returncode == 2 and "AMX register state" in refused.stderr, refused.stderr
        assert (finish(job, tmp_path)) == (0, plain.stdout, plain.stderr)
        return
    # 6 s: lldb stops the job for ~2.4 s as it attaches (bench/RESULTS.md), and 3.6 s in
    # CI's fresh clone beside the rest of the suite, which left 6 steps of a 3 s attach
    r: Any = attach_for(job.pid, "6", tmp_path / "r.json", env=lldb)
    code, out, err = finish(job, tmp_path)
    assert (code, out, err) == (0, plain.stdout, plain.stderr)
    assert r["mode"] == "inject" and r["ended_by"] == "detached"
    assert_counted_while_attached(r, job.pid, log)


def test_a_doctor_killed_while_attached_leaves_the_job_as_it_was_and_a_second_attach_works(
    script: Path, plain: subprocess.CompletedProcess[str], tmp_path: Path
) -> None:
    job, _log = start(script, tmp_path)
    watching = subprocess.Popen(
        [PY, "-m", "gpudoctor", "watch", "--pid", str(job.pid), "--inject", "--headless",
         "--status-every", "1"],  # a status line a second into the pipe too
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=as_from_a_terminal,
    )  # fmt: skip
    assert watching.stderr is not None
    deadline = time.monotonic() + 60
    line = ""
    while time.monotonic() < deadline and "steps " not in line:  # its status: steps counted
        line = watching.stderr.readline()
        assert line or watching.poll() is None
    watching.kill()  # SIGKILL: nobody tells the probe
    watching.wait()
    time.sleep(1.5)  # the probe notices at its next flush (a quarter second) and leaves
    # a second doctor's attach finds nothing of the first one's in the way
    again: Any = attach_for(job.pid, "2", tmp_path / "again.json")
    assert again["steps"]["count"] > 0
    code, out, err = finish(job, tmp_path)
    assert (code, out, err) == (0, plain.stdout, plain.stderr)


def test_inject_refused_where_ptrace_is_not_allowed_leaves_the_job_untouched(
    script: Path, tmp_path: Path
) -> None:
    """A job that made itself non-dumpable (as some launchers do), and a doctor without
    CAP_SYS_PTRACE: the kernel refuses the debugger; one line, exit 2."""
    guarded = tmp_path / "guarded.py"
    guarded.write_text(
        "import ctypes, runpy, sys\n"
        "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE: 0\n"
        f"sys.argv = [{str(script)!r}] + sys.argv[1:]\n"
        f"runpy.run_path({str(script)!r}, run_name='__main__')\n"
    )
    job, _log = start(guarded, tmp_path)
    prefix = ["setpriv", "--bounding-set", "-sys_ptrace"] if os.geteuid() == 0 else []
    refused = subprocess.run(
        [*prefix, PY, "-m", "gpudoctor", "watch", "--pid", str(job.pid), "--inject", "--headless"],
        capture_output=True, text=True, timeout=60, preexec_fn=as_from_a_terminal,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    (message,) = refused.stderr.strip().splitlines()
    assert "ptrace" in message and "Traceback" not in message
    # the debugger's own refusal, in words, where py-spy's check did not come first
    tried = subprocess.run(
        [*prefix, PY, "-c", "import sys, tempfile\n"
         "from gpudoctor.jobs import inject\n"
         "folder = tempfile.mkdtemp()\n"
         "try:\n"
         f"    inject.inject({job.pid}, folder, {{'socket': folder + '/s'}}, {ROUTE!r})\n"
         "except inject.InjectError as exc:\n"
         "    print(exc)\n"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "the kernel refused to let the doctor trace pid" in tried.stdout, (
        tried.stdout + tried.stderr
    )
    try:  # untouched: still training, step after step
        made = len((tmp_path / "steps.log").read_text().split())
        time.sleep(1.0)
        assert job.poll() is None and len((tmp_path / "steps.log").read_text().split()) > made
    finally:
        job.kill()
        job.wait()


# What CPython 3.14.10's sys.remote_exec wrote, called on a job started with
# PYTHON_DISABLE_REMOTE_DEBUG=1 (Debian's python3.14, 2026-12-06)
REMOTE_DEBUG_OFF = """Traceback (most recent call last):
  File "<string>", line 1, in <module>
    import sys; sys.remote_exec(31348, "/tmp/b.py")
                ~~~~~~~~~~~~~~~^^^^^^^^^^^^^^^^^^^^
RuntimeError: Remote debugging is not enabled in the remote process
"""


def test_remote_debugging_turned_off_is_named_with_how_to_allow_it() -> None:
    message = inject._refused(31348, REMOTE_DEBUG_OFF)
    assert message.startswith("pid 31348's Python has remote debugging turned off")
    assert "PYTHON_DISABLE_REMOTE_DEBUG" in message and "gpudoctor run" in message


@pytest.mark.skipif(ROUTE != "remote_exec", reason="sys.remote_exec is CPython 3.14's")
def test_a_job_with_remote_debugging_off_is_refused_in_one_line_and_goes_on(
    script: Path, plain: subprocess.CompletedProcess[str], tmp_path: Path
) -> None:
    job, log = start(script, tmp_path, env={**os.environ, "PYTHON_DISABLE_REMOTE_DEBUG": "1"})
    try:
        refused = doctor(
            "watch", "--pid", str(job.pid), "--inject", "--headless", "--max-seconds", "5",
            timeout=60,
        )  # fmt: skip
        assert refused.returncode == 2, refused.stderr
        (message,) = refused.stderr.strip().splitlines()
        assert "remote debugging turned off" in message and "Traceback" not in message
        assert job.poll() is None
        assert finish(job, tmp_path) == (0, plain.stdout, plain.stderr)
    finally:
        job.kill()
        job.wait()


def test_inject_needs_no_gdb_on_x86_64_and_says_what_to_install_elsewhere(
    script: Path, plain: subprocess.CompletedProcess[str], tmp_path: Path, monkeypatch: Any
) -> None:
    job, _log = start(script, tmp_path)
    bare = {**os.environ, "PATH": str(Path(PY).parent)}  # py-spy, not gdb
    # no debugger: the doctor's own ptrace call on x86-64, or PEP 768's on 3.14
    attaches = platform.machine() == "x86_64" or ROUTE == "remote_exec"
    try:
        if attaches:
            r: Any = attach_for(job.pid, "2", tmp_path / "r.json", env=bare)
            assert r["steps"]["count"] > 0
        monkeypatch.setattr("platform.machine", lambda: "aarch64")
        monkeypatch.setenv("PATH", bare["PATH"])
        if ROUTE == "remote_exec":  # CPython 3.14 needs no debugger anywhere
            assert inject.check_route(job.pid) == "remote_exec"
            return
        # off x86-64 the route is gdb's: without it, one line saying what to install
        with pytest.raises(inject.InjectError) as refused:
            inject.check_route(job.pid)
        assert "gdb is not installed" in str(refused.value)
        assert "apt-get install gdb" in str(refused.value)
    finally:
        if attaches:
            code, out, err = finish(job, tmp_path)
            assert (code, out, err) == (0, plain.stdout, plain.stderr)
        job.kill()
        job.wait()


SLEEPER = """
    import sys, time
    started, naps = time.monotonic(), 0
    for _ in range(int(sys.argv[1])):
        try:
            time.sleep(0.02)  # inside clock_nanosleep when the doctor stops it
        except OSError as exc:
            print("sleep raised", exc, flush=True)
            sys.exit(3)
        naps += 1
    print("naps", naps, "at least", time.monotonic() - started >= 0.02 * naps, flush=True)
"""


def test_a_call_into_a_sleeping_thread_returns_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    """The ptrace route's call into a thread stopped inside a system call: the call
    returns its value, and the thread goes on with the call it was in, restarted (gdb
    13's `call` on a CPU with AMX state made time.sleep raise OSError 514 in the job)."""
    if platform.machine() != "x86_64":
        pytest.skip("the ptrace route is x86-64's")
    from gpudoctor.jobs import ptrace

    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text(textwrap.dedent(SLEEPER))
    job = subprocess.Popen(
        [PY, str(sleeper), "300"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while not list(ptrace.find_functions(job.pid, {"getpid"}, "libc.so")):
            assert time.monotonic() < deadline and job.poll() is None
            time.sleep(0.05)
        time.sleep(0.5)  # into its loop of naps
        getpid = ptrace.find_functions(job.pid, {"getpid"}, "libc.so")["getpid"]
        answers = []
        for _ in range(40):
            with ptrace.seized(job.pid) as thread:
                before = thread.regs()
                answers.append(thread.call(getpid))
                after = thread.regs()
            assert (after.rip, after.rsp, after.rax, after.orig_rax) == (
                before.rip, before.rsp, before.rax, before.orig_rax
            )  # fmt: skip
            time.sleep(0.03)
        out, err = job.communicate(timeout=30)
    finally:
        job.kill()
    assert answers == [job.pid] * 40
    assert (job.returncode, out, err) == (0, "naps 300 at least True\n", "")


def start_until(
    job_script: Path, tmp_path: Path, marker: str
) -> tuple[subprocess.Popen[str], Path]:
    """The job started plainly, once it has printed `marker`; its output file."""
    out = tmp_path / "out.txt"
    with out.open("w") as sink:
        job = subprocess.Popen(
            [PY, str(job_script)], stdout=sink, stderr=subprocess.PIPE, text=True,
            cwd=tmp_path, preexec_fn=as_from_a_terminal,
        )  # fmt: skip
    wait_for_output(out, marker, job)
    return job, out


def test_a_job_paused_inside_an_import_gets_the_probe_once_the_import_is_over(
    tmp_path: Path,
) -> None:
    """The probe's own imports never run inside one of the job's: a job caught importing
    (here a module whose import takes seconds) is tried again until it is past it; then
    the probe attaches, and the job's output is what it prints plainly."""
    (tmp_path / "slow_module.py").write_text(
        "import sys, time\n"
        "print('importing', flush=True)\n"
        "end = time.monotonic() + 6\n"
        "while time.monotonic() < end:\n"
        "    time.sleep(0.01)\n"
        "print('probe loaded inside the import:', '_gpudoctor_probe' in sys.modules, flush=True)\n"
    )
    job_script = tmp_path / "job.py"
    job_script.write_text(
        textwrap.dedent(
            """
            import os, time, torch
            import slow_module
            torch.manual_seed(0)
            model = torch.nn.Linear(8, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            end = time.monotonic() + 60  # or once the doctor has come and gone
            while time.monotonic() < end and not os.path.exists("left"):
                loss = model(torch.randn(4, 8)).square().mean()
                opt.zero_grad(); loss.backward(); opt.step()
                time.sleep(0.02)
            print("done")
            """
        )
    )
    job, out = start_until(job_script, tmp_path, "importing")
    r: Any = attach_for(job.pid, "4", tmp_path / "r.json")
    (tmp_path / "left").touch()
    _, err = job.communicate(timeout=60)
    assert job.returncode == 0 and err == "", err
    assert out.read_text().splitlines() == [
        "importing", "probe loaded inside the import: False", "done"
    ]  # fmt: skip
    assert r["mode"] == "inject" and r["steps"]["count"] > 0


def test_a_job_paused_inside_a_garbage_collection_gets_the_probe_outside_it(
    tmp_path: Path,
) -> None:
    """Most of this job's time is inside a collection (a finaliser that waits, called by
    gc.collect with the program below it): the probe never starts there (its thread
    start inside a collection crashed a torch.compile job), and attaches outside one."""
    job_script = tmp_path / "collects.py"
    job_script.write_text(
        textwrap.dedent(
            """
            import gc, os, sys, time, torch

            class Cycle:
                def __init__(self):
                    self.me = self
                def __del__(self):
                    before = "_gpudoctor_probe" in sys.modules
                    time.sleep(0.03)
                    if not before and "_gpudoctor_probe" in sys.modules:
                        print("probe loaded inside a collection", flush=True)

            torch.manual_seed(0)
            model = torch.nn.Linear(8, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            print("collecting", flush=True)
            # the doctor's tries outside a collection, until it has come and gone
            end = time.monotonic() + 60
            while time.monotonic() < end and not os.path.exists("left"):
                Cycle()
                gc.collect()
                loss = model(torch.randn(4, 8)).square().mean()
                opt.zero_grad(); loss.backward(); opt.step()
                time.sleep(0.02)
            print("done")
            """
        )
    )
    job, out = start_until(job_script, tmp_path, "collecting")
    r: Any = attach_for(job.pid, "3", tmp_path / "r.json")
    (tmp_path / "left").touch()
    _, err = job.communicate(timeout=90)
    assert job.returncode == 0 and err == "", err
    assert out.read_text().splitlines() == ["collecting", "done"]
    assert r["mode"] == "inject" and r["steps"]["count"] > 0


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed")
@pytest.mark.skipif(
    platform.machine() == "x86_64" and inject.amx_state(),
    reason="a debugger's call is refused on a CPU with AMX (test_lldb_injects... checks it)",
)
def test_a_debugger_slow_to_reach_the_job_still_starts_the_probe(tmp_path: Path) -> None:
    """A debugger starved of CPU (lldb beside CI's suite) reached the job's safe point
    21 s after the doctor wrote the boot script, which then said "late" and did nothing
    though the doctor was still waiting for it. Here gdb starts 22 s late, past the
    doctor's 20 s wait for it (the interrupt it sends then is ignored, as a starved
    debugger still loading a job's symbols does not act on it at once): the probe starts,
    counts the job's steps, and leaves it as it was."""
    slow = tmp_path / "bin"
    slow.mkdir()
    (slow / "gdb").write_text(
        f"#!/bin/sh\ntrap '' INT\nsleep 22\ntrap - INT\nexec {shutil.which('gdb')} \"$@\"\n"
    )
    (slow / "gdb").chmod(0o755)
    job_script = tmp_path / "job.py"
    job_script.write_text(
        textwrap.dedent(
            """
            import os, time, torch
            torch.manual_seed(0)
            model = torch.nn.Linear(8, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            print("training", flush=True)
            end = time.monotonic() + 120  # or once the doctor has come and gone
            while time.monotonic() < end and not os.path.exists("left"):
                loss = model(torch.randn(4, 8)).square().mean()
                opt.zero_grad(); loss.backward(); opt.step()
                time.sleep(0.02)
            print("done")
            """
        )
    )
    job, out = start_until(job_script, tmp_path, "training")
    env = {
        **os.environ, "GPUDOCTOR_INJECT_ROUTE": "gdb",
        "PATH": f"{slow}{os.pathsep}{os.environ['PATH']}",
    }  # fmt: skip
    started = time.monotonic()
    r: Any = attach_for(job.pid, "2", tmp_path / "r.json", env=env)
    assert time.monotonic() - started > 22  # the slow gdb was the one used
    (tmp_path / "left").touch()
    _, err = job.communicate(timeout=60)
    assert job.returncode == 0 and err == "", err
    assert out.read_text().splitlines() == ["training", "done"]
    assert r["mode"] == "inject" and r["steps"]["count"] > 0


def test_the_ptrace_route_reaches_every_cpython_on_this_machine(tmp_path: Path) -> None:
    """Each CPython 3.10-3.13 installed here (pyenv's, Debian's) takes the doctor's call
    and runs the boot script, which answers that the job has no torch: one line, exit
    2, and the job goes on, its output its own. (torch's CPU wheel here is 3.11's: the
    full probe on the others waits for a machine with their wheels.)"""
    if platform.machine() != "x86_64":
        pytest.skip("the ptrace route is x86-64's")
    found = sorted(
        {
            str(Path(p).resolve())
            for p in glob.glob("/root/.pyenv/versions/3.1[0-3].*/bin/python3.1?")
        }
        | {str(Path(p).resolve()) for p in glob.glob("/usr/bin/python3.1[0-3]")}
    )
    if not found:
        pytest.skip("no other CPython 3.10-3.13 on this machine (pyenv, /usr/bin)")
    loop = "import time\nfor n in range(2000):\n    time.sleep(0.005)\nprint('done', n)\n"
    jobs = [
        subprocess.Popen(
            [python, "-c", loop],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env_without_probe(),
            preexec_fn=as_from_a_terminal,
        )  # fmt: skip
        for python in found
    ]
    try:
        time.sleep(0.5)
        for python, job in zip(found, jobs, strict=True):
            said = doctor("watch", "--pid", str(job.pid), "--inject", "--headless",
                          "--max-seconds", "3")  # fmt: skip
            assert said.returncode == 2, (python, said.stdout, said.stderr)
            assert "has not loaded torch" in said.stderr and "Traceback" not in said.stderr
            assert len(said.stderr.strip().splitlines()) == 1, said.stderr
            assert job.poll() is None, python
        for python, job in zip(found, jobs, strict=True):
            out, err = job.communicate(timeout=120)
            assert (job.returncode, out, err) == (0, "done 1999\n", ""), python
    finally:
        for job in jobs:
            job.kill()
            job.wait()


def test_the_route_reads_the_target_python_from_its_libpython_or_executable() -> None:
    assert inject.python_version(os.getpid()) == sys.version_info[:2]
    assert inject.python_version(2**22 + 7) is None  # no such process


@pytest.mark.skipif(not Path(DEBIAN_PYTHON).exists(), reason=f"no {DEBIAN_PYTHON} here")
def test_a_python_without_libpython_that_hides_its_executable_is_still_told(
    tmp_path: Path,
) -> None:
    """Debian's and python.org's interpreters link libpython in (no libpython in their
    memory map), and a job that made itself non-dumpable hides /proc/PID/exe from a
    doctor without CAP_SYS_PTRACE: the version and the executable come from the first
    mapping of its memory map."""
    job = subprocess.Popen(
        [DEBIAN_PYTHON, "-c", "import ctypes, time\n"
         "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE: 0\n"
         "print('ready', flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert job.stdout is not None and job.stdout.readline() == "ready\n"
        prefix = ["setpriv", "--bounding-set", "-sys_ptrace"] if os.geteuid() == 0 else []
        told = subprocess.run(
            [*prefix, PY, "-c", "import os, sys\n"
             "from gpudoctor.jobs import inject\n"
             f"try:\n    os.readlink('/proc/{job.pid}/exe')\n    print('exe shown')\n"
             "except OSError:\n    print('exe hidden')\n"
             f"print(inject.python_version({job.pid}), inject.executable({job.pid}))\n"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        hidden = "exe hidden" if os.geteuid() == 0 else "exe shown"  # as root, bounded
        version = tuple(int(n) for n in Path(DEBIAN_PYTHON).name[len("python") :].split("."))
        assert told.stdout.split("\n")[:2] == [hidden, f"{version} {DEBIAN_PYTHON}"], (
            told.stdout + told.stderr
        )
    finally:
        job.kill()
        job.wait()


def test_i_in_the_tui_asks_then_loads_the_probe_and_q_removes_it(
    script: Path, plain: subprocess.CompletedProcess[str], tmp_path: Path
) -> None:
    """The TUI's watch view: `i` says what will happen and waits for `y`; the probe goes
    in, the job panel counts steps, `p` comes to the footer; `q` leaves, the probe comes
    out, the job finishes as it would have."""
    job, _log = start(script, tmp_path)
    store = Store(tmp_path / "s.db")
    session = WatchedJob(find_target(job.pid), store, py_spy=find_py_spy())
    session.start()
    app = make_live_app(Follower(session), "en")

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.snapshot is not None)
            assert "p" not in app.screen.active_bindings and "i" in app.screen.active_bindings
            await pilot.press("i")
            await wait_for(pilot, lambda: isinstance(app.screen, InjectScreen))
            words = " ".join(text_of(app.screen.query_one("#quit-text")).split())
            assert f"probe into pid {job.pid}" in words and "half a second" in words
            await pilot.press("y")
            await wait_for(pilot, lambda: session.inject_outcome == "attached", timeout=40)
            await wait_for(
                pilot, lambda: app.snapshot is not None and app.snapshot.mode == "inject"
            )
            assert "p" in app.screen.active_bindings and "i" not in app.screen.active_bindings
            await wait_for(pilot, lambda: "steps" in str(app.query_one(JobPanel).content))
            # p: a capture by the injected probe, read as the GPU's timeline
            await pilot.press("p")
            await wait_for(pilot, lambda: isinstance(app.screen, ProfileScreen))
            table = app.screen.query_one("#profile-table")
            await wait_for(pilot, lambda: "The GPU's timeline" in text_of(table), timeout=60)
            await pilot.press("escape")
            await pilot.press("q")
            await wait_for(pilot, lambda: app.return_value is not None or not app.is_running)

    asyncio.run(drive())
    session.close()
    store.close()
    assert session.timeline.exit is not None and session.timeline.exit.ended_by == "detached"
    assert session.timeline.total_steps() > 0
    # the capture's trace kept beside the store, not in the doctor's folder (gone now)
    (kept,) = [t.path for t in session.timeline.gpu_timelines.values()]
    assert Path(kept).exists() and "gpudoctor-run-" not in kept
    code, out, err = finish(job, tmp_path)
    # torch.profiler's own log lines (Kineto's: "USDT:<date> <pid>:<tid> File.cpp:52]
    # profiler_start", and a CUDA build's "ERROR:... gpuGetDeviceCount failed" where no
    # driver is), as under `run` or torch.profiler in the plain job: the capture asked for
    # is torch's; nothing else in the job's stderr
    kineto = [line for line in err.splitlines() if KINETO_LOG.match(line)]
    left = [line for line in err.splitlines() if line not in kineto]
    assert (code, out, left) == (0, plain.stdout, plain.stderr.splitlines())


DDP_JOB = """
    import os, sys, time, torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(10, 3))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(rank)
    for step in range(int(sys.argv[1])):
        loss = model(torch.randn(8, 10, generator=g)).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(0.01)
        if rank == 0 and step == 20:
            print("training", flush=True)
    if rank == 0:
        print("loss", f"{loss.item():.6f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
"""


def test_all_ranks_injects_into_every_rank_of_a_torchrun_job(tmp_path: Path) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(DDP_JOB))
    torchrun = [str(Path(PY).with_name("torchrun")), "--standalone", "--nproc_per_node", "2"]
    command = [*torchrun, str(script), "500"]
    plain = subprocess.run(command, capture_output=True, text=True, timeout=200, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    out = (tmp_path / "out.txt").open("w")
    job = subprocess.Popen(
        command, stdout=out, stderr=subprocess.DEVNULL, cwd=tmp_path, preexec_fn=as_from_a_terminal
    )
    wait_for_output(tmp_path / "out.txt", "training", job)
    # the launcher alone: it trains nothing, and the doctor says what to give instead
    alone = doctor("watch", "--pid", str(job.pid), "--inject", "--headless", timeout=60)
    assert alone.returncode == 2 and "--all-ranks" in alone.stderr, alone.stderr
    r: Any = attach_for(job.pid, "2", tmp_path / "r.json", "--all-ranks")
    assert job.wait(timeout=200) == 0
    assert (tmp_path / "out.txt").read_text() == plain.stdout
    counted = r["probe"]["steps_by_process"]
    assert len(counted) == 2 and all(n > 10 for n in counted.values()), counted
    assert str(job.pid) not in counted  # the ranks, not the launcher


def test_root_injects_into_another_users_job_and_a_user_may_not(
    script: Path, plain: subprocess.CompletedProcess[str]
) -> None:
    """Root may inject into a user's job (the doctor's folder and socket are made the
    job's to write); a user may not inject into root's, and is told who it belongs to."""
    assert os.geteuid() == 0, "this test switches users: run the suite as root (CI does)"
    _skip_unless_readable_by("nobody")
    shared = _shared_dir()
    try:
        theirs = shared / "decoded.py"
        theirs.write_text(script.read_text())
        theirs.chmod(0o644)
        out = (shared / "out.txt").open("w")
        job = subprocess.Popen(
            [*setpriv_as("nobody"), PY, str(theirs), STEPS, str(shared / "steps.log")],
            stdout=out, stderr=subprocess.STDOUT, cwd=shared, env=env_without_probe(),
        )  # fmt: skip
        wait_for_output(shared / "out.txt", "step 50", job)
        refused = one_line_error(
            _doctor_as("nobody", "watch", "--pid", str(os.getpid()), "--inject", "--headless")
        )
        assert "belongs to user root" in refused, refused
        r: Any = attach_for(job.pid, "2", shared / "r.json")
        assert r["steps"]["count"] > 10
        assert job.wait(timeout=200) == 0
        assert (shared / "out.txt").read_text() == plain.stdout + plain.stderr
    finally:
        shutil.rmtree(shared, ignore_errors=True)
