"""`gpudoctor watch --pid`: real jobs started plainly (no probe), attached to from
outside with the real py-spy; the bad inputs as a user meets them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import (
    PY,
    ROOT,
    SAMPLES,
    doctor,
    env_without_probe,
    finding_ids,
    kill_tree,
    setpriv_as,
    shared_folder,
    top_finding,
    wait_for,
)
from nvml_replay import ReplayNvml

from gpudoctor.app.follow import Follower
from gpudoctor.diagnosis.window import Window, stack_loop_counter, stack_steps_per_s
from gpudoctor.jobs.watched import (
    WatchedJob,
    find_target,
    foreign_gpu_pids,
    loader_sizes,
    outside_facts,
)
from gpudoctor.model import StackChunk
from gpudoctor.sources.host import HostReader
from gpudoctor.sources.nvml import NvmlReader
from gpudoctor.sources.stacks import StackSampler, classify, find_py_spy, parse_counters
from gpudoctor.store import Store
from gpudoctor.tui.app import make_live_app
from gpudoctor.tui.widgets import FindingsPanel, HostPanel, JobPanel

# scripts/test.sh installs the dev extras, py-spy among them; without it this fails
assert find_py_spy(), "py-spy is needed: pip install py-spy"


def start_plainly(script: str, *args: str, user: str | None = None) -> subprocess.Popen[bytes]:
    """A job started without the doctor, as most slow jobs are."""
    prefix = setpriv_as(user) if user else []
    return subprocess.Popen(
        [*prefix, PY, str(SAMPLES / script), *args],
        env=env_without_probe(),
        stdout=subprocess.DEVNULL,
        cwd=SAMPLES,
    )


@pytest.fixture
def job() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            kill_tree(proc.pid)
        proc.wait()


def wait_for_torch(proc: subprocess.Popen[bytes]) -> None:
    """Until the job is training, as a job one attaches to usually is: torch's library
    is mapped early in `import torch`, which goes on for a few seconds more here."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        if "libtorch" in maps:
            time.sleep(5.0)
            return
        time.sleep(0.2)
    raise AssertionError("the job never loaded torch")


# -- the diagnosis from outside -------------------------------------------------------------


def test_watching_a_dataloader_bound_job_finds_input_bound_and_leaves_it_running(
    tmp_path: Path, job: list[subprocess.Popen[bytes]]
) -> None:
    proc = start_plainly("dataloader_bound.py", "--seconds", "120")
    job.append(proc)
    wait_for_torch(proc)
    report_path = tmp_path / "watch.json"
    result = doctor(
        "watch", "--pid", str(proc.pid), "--headless", "--max-seconds", "24",
        "--report", str(report_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert proc.poll() is None, "the watched job must go on"
    report = json.loads(report_path.read_text())
    assert report["mode"] == "watch" and report["watched_pid"] == proc.pid
    assert finding_ids(report)[0] == "input-bound"
    top = top_finding(report)
    assert top["severity"] == "high" and top["confidence"] == "estimated"
    assert "py-spy" in top["evidence"]
    assert {"data_wait_fraction", "split"} <= set(report["estimated"])
    assert report["steps"]["data_wait_fraction"] > 0.4
    # two whole chunks (5 s and 10 s) at 15 Hz (the other 5 Hz sample busy threads only),
    # less start-ups: 24 s leaves the second one room to end on a busy machine
    assert report["steps"]["stack_samples"] >= 150
    # the loop's `step` counter, read twice, gives a rate; this job makes tens a second
    assert report["steps"]["steps_per_s"] and report["steps"]["steps_per_s"] > 5
    assert report["facts"]["dataloaders"][0]["num_workers"] == 0
    assert report["ended_by"] == "detached" and report["exit_code"] is None
    assert "Traceback" not in result.stderr
    # recorded: the report rebuilds offline the same
    rebuilt = doctor("report", "last", "--format", "json")
    assert top_finding(json.loads(rebuilt.stdout))["confidence"] == "estimated"
    # history says why no steps were counted
    row = doctor("history").stdout.splitlines()[1]
    assert " watch " in row and "input-bound (high)" in row, row


TWO_LOADERS = """
import sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    context = sys.argv[1] if len(sys.argv) > 1 else None  # multiprocessing's start method
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    train = DataLoader(data, batch_size=8, num_workers=2, persistent_workers=True,
                       multiprocessing_context=context)
    val = DataLoader(data, batch_size=8, num_workers=2, persistent_workers=True,
                     multiprocessing_context=context)
    model = torch.nn.Linear(4, 1)
    for epoch in range(1000):
        for x, y in train:
            torch.nn.functional.mse_loss(model(x), y).backward()
            time.sleep(0.1)  # an epoch of 0.8 s: the loaders' workers start that far apart
        with torch.no_grad():
            for x, y in val:
                model(x)
        if epoch == 1:
            print("validated", flush=True)


if __name__ == "__main__":  # CPython 3.14's workers start by forkserver: they import this
    main()
"""


@pytest.mark.parametrize("start", ["default", "forkserver"])
def test_two_loaders_with_their_own_workers_are_two_loaders_not_one_of_four(
    tmp_path: Path, job: list[subprocess.Popen[bytes]], start: str
) -> None:
    """timm's train and validation loaders, 2 persistent workers each: four workers
    running the job's program, seen from outside as one loader of 4 (a remedy then
    offered more than 4); the workers started together are one loader's. Started by a
    fork server (CPython 3.14's default on Linux) the workers are its children, and the
    server and multiprocessing's resource tracker, the job's children, are no loader's."""
    (tmp_path / "two_loaders.py").write_text(TWO_LOADERS)
    command = [PY, str(tmp_path / "two_loaders.py")] + ([] if start == "default" else [start])
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, env=env_without_probe())
    job.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"validated\n"
    facts = outside_facts(proc.pid, HostReader(proc.pid).read(), [])
    assert facts["dataloaders"] == [
        {"num_workers": 2, "seen_from": "processes"},
        {"num_workers": 2, "seen_from": "processes"},
    ]
    assert loader_sizes([10.0, 10.01, None, 30.0, 30.02, 30.03]) == [2, 3]
    assert loader_sizes([]) == []


def test_watching_a_healthy_job_finds_nothing_medium_or_high(
    job: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    proc = start_plainly("healthy.py", "--seconds", "120")
    job.append(proc)
    wait_for_torch(proc)
    report_path = tmp_path / "healthy.json"
    result = doctor(
        "watch", "--pid", str(proc.pid), "--headless", "--max-seconds", "20",
        "--report", str(report_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(report_path.read_text())
    # 20 s at 15 Hz is 300 samples; a watch that counted only whole chunks, of py-spy's
    # count of samples, had 74 (its first chunk only) in a busy CI run
    assert report["steps"]["stack_samples"] > 150
    loud = finding_ids(report, "high", "medium")
    assert loud == [], report["findings"]
    split = report["steps"]["split"]
    assert split["forward"] + split["backward"] + split["optimizer"] > 0.5
    assert proc.poll() is None


def test_a_job_that_ends_while_watched_ends_the_watch(job: list[subprocess.Popen[bytes]]) -> None:
    proc = start_plainly("healthy.py", "--seconds", "4")
    job.append(proc)
    result = doctor("watch", "--pid", str(proc.pid), "--headless", "--max-seconds", "60")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "until it ended" in result.stderr


def test_a_watch_too_short_for_a_stack_sample_says_none_came(
    job: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """py-spy's first chunk comes after a few seconds: a shorter watch has no stack
    sample, and its summary and report said "None stack samples"."""
    proc = subprocess.Popen(
        [PY, "-c", "import time; time.sleep(60)"], env=env_without_probe(),
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    job.append(proc)
    report = tmp_path / "r.md"
    result = doctor(
        "watch", "--pid", str(proc.pid), "--headless", "--max-seconds", "1",
        "--report", str(report),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "from outside: 0 stack samples of the main thread" in result.stderr, result.stderr
    assert "watched from outside; 0 stack samples" in report.read_text()
    assert "None" not in result.stderr + report.read_text()
    assert proc.poll() is None  # left running


def test_ctrl_c_leaves_and_the_job_goes_on(job: list[subprocess.Popen[bytes]]) -> None:
    proc = start_plainly("healthy.py", "--seconds", "120")
    job.append(proc)
    wait_for_torch(proc)
    watcher = subprocess.Popen(
        [PY, "-m", "gpudoctor", "watch", "--pid", str(proc.pid), "--headless"],
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(3)
    watcher.send_signal(signal.SIGINT)
    _, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert "left running" in err and "Traceback" not in err
    time.sleep(0.5)
    assert proc.poll() is None


# -- bad input: one line, exit 2 -------------------------------------------------------------


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_no_such_pid() -> None:
    pid = 4_000_000  # above any pid_max in use
    assert "no process with pid 4000000" in one_line_error(doctor("watch", "--pid", str(pid)))


def test_not_a_python_process(job: list[subprocess.Popen[bytes]]) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    job.append(sleeper)
    line = one_line_error(doctor("watch", "--pid", str(sleeper.pid), "--headless"))
    assert "is not a Python process" in line and "GPU and host" in line


def _skip_unless_readable_by(user: str) -> None:
    """The doctor runs as `user` only where that user can read this clone (its .venv
    and the package): a clone in a private home (mode 0700) is not, and the test says
    so rather than fail on "No module named gpudoctor"."""
    check = subprocess.run(
        [*setpriv_as(user), PY, "-c", "import gpudoctor"], capture_output=True, text=True,
        cwd="/", env=env_without_probe(),
    )  # fmt: skip
    if check.returncode != 0:
        why = (check.stderr.strip().splitlines() or ["cannot run"])[-1]
        pytest.skip(f"user {user} cannot run this clone's doctor ({ROOT}: {why}); clone it "
                    "where other users can read, as CI does, to run this test")  # fmt: skip


def _shared_dir() -> Path:
    """A folder the other user can write its session store in."""
    return shared_folder("gpudoctor-watch-")


def _doctor_as(user: str, *args: str) -> subprocess.CompletedProcess[str]:
    _skip_unless_readable_by(user)
    store = _shared_dir() / "s.db"
    try:
        return subprocess.run(
            [*setpriv_as(user), PY, "-m", "gpudoctor", "--store", str(store), *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env={**env_without_probe(), "HOME": str(store.parent)},
        )
    finally:
        shutil.rmtree(store.parent, ignore_errors=True)


def test_another_users_process_says_who_and_what_grants_it(
    job: list[subprocess.Popen[bytes]],
) -> None:
    assert os.geteuid() == 0, "this test switches users: run the suite as root (CI does)"
    _skip_unless_readable_by("nobody")
    proc = start_plainly("healthy.py", "--seconds", "60")  # root's
    job.append(proc)
    line = one_line_error(_doctor_as("nobody", "watch", "--pid", str(proc.pid), "--headless"))
    assert "belongs to user root" in line and "sudo" in line


def test_ptrace_refused_names_the_fix(job: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    """The same user, but the job is not dumpable (as ptrace_scope or a hardened job
    makes it): py-spy is refused, and the message says what would allow it."""
    assert os.geteuid() == 0, "this test switches users: run the suite as root (CI does)"
    _skip_unless_readable_by("nobody")
    script = _shared_dir() / "undumpable.py"
    script.write_text(
        "import ctypes, time\n"
        "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0\n"
        "time.sleep(60)\n"
    )
    script.chmod(0o644)
    proc = subprocess.Popen([*setpriv_as("nobody"), sys.executable, str(script)])
    job.append(proc)
    time.sleep(1.0)
    line = one_line_error(_doctor_as("nobody", "watch", "--pid", str(proc.pid), "--headless"))
    assert "py-spy may not read" in line and ("SYS_PTRACE" in line or "ptrace_scope" in line)
    shutil.rmtree(script.parent, ignore_errors=True)


def test_py_spy_missing_says_how_to_install_it(
    job: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """The doctor run from an environment without py-spy (a fresh venv that borrows
    this one's packages) and a PATH without it."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    proc = start_plainly("healthy.py", "--seconds", "60")
    job.append(proc)
    site = next(p for p in sys.path if p.endswith("site-packages"))
    env = {
        **env_without_probe(),
        "PYTHONPATH": f"{ROOT}{os.pathsep}{site}",
        "PATH": "/usr/bin:/bin",
    }
    result = subprocess.run(
        [str(bare / "bin" / "python"), "-m", "gpudoctor", "watch", "--pid", str(proc.pid)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    line = one_line_error(result)
    assert "py-spy is not installed" in line and "pip install py-spy" in line


def test_container_pid_namespace_is_recognised_from_nvml_readings() -> None:
    """NVML (recorded on an H200) listing GPU processes this /proc does not have: the
    doctor is in a container without the host's PID namespace."""
    recording = json.loads((Path(__file__).parent / "fixtures" / "nvml_h200_load.json").read_text())
    absent = 4_000_001
    for sample in recording["samples"]:
        for device in sample:
            device["nvmlDeviceGetComputeRunningProcesses"] = {
                "list": [
                    {"friendly": {"pid": {"value": absent}, "usedGpuMemory": {"value": 2**30}}}
                ]
            }
    gpus = NvmlReader(ReplayNvml(recording)).read()
    assert [p.pid for g in gpus for p in g.processes] == [absent]
    assert foreign_gpu_pids(gpus) == [absent]
    # the doctor's own pid is in /proc: a shared namespace, nothing to say
    recording["samples"][0][0]["nvmlDeviceGetComputeRunningProcesses"]["list"][0]["friendly"][
        "pid"
    ]["value"] = os.getpid()
    assert foreign_gpu_pids(NvmlReader(ReplayNvml(recording)).read()) == []


def test_bad_report_path_and_missing_pid_argument() -> None:
    assert "--report must end in .json, .md or .html" in one_line_error(
        doctor("watch", "--pid", "1", "--report", "x.txt")
    )
    assert "--pid" in one_line_error(doctor("watch"))


# -- the pure parts ------------------------------------------------------------------------


def test_stack_classes_follow_the_innermost_meaningful_frame() -> None:
    torch = "/venv/lib/python3.11/site-packages/torch"
    loop = ("main", "/home/u/train.py")
    assert classify([loop, ("__next__", f"{torch}/utils/data/dataloader.py")]) == "loader"
    assert classify([loop, ("get", "/usr/lib/python3.11/queue.py")]) == "input"
    assert classify([loop, ("Tensor.backward", f"{torch}/_tensor.py")]) == "backward"
    assert classify([loop, ("Tensor.item", f"{torch}/_tensor.py")]) == "other"
    assert classify([loop, ("SGD.step", f"{torch}/optim/sgd.py")]) == "optimizer"
    assert classify([loop, ("Module._call_impl", f"{torch}/nn/modules/module.py")]) == "forward"
    assert classify([loop]) == "other"
    # an import inside any of them (the first optimizer step imports torch._dynamo)
    importing = [
        loop,
        ("SGD.step", f"{torch}/optim/sgd.py"),
        ("_find_and_load", "<frozen importlib._bootstrap>"),
        ("<module>", f"{torch}/_dynamo/__init__.py"),
    ]
    assert classify(importing) == "other"


def chunk(t_s: float, counters: dict[str, int], loader: int = 10, other: int = 10) -> StackChunk:
    t = int(t_s * 1e9)
    return StackChunk(t - 5 * 10**9, t, {"loader": loader, "other": other}, counters, t)


def test_step_rate_from_loop_counters_skips_an_epoch_restart() -> None:
    chunks = (
        chunk(0, {"main:step": 100, "main:i": 3}),
        chunk(5, {"main:step": 600, "main:i": 7}),
        chunk(10, {"main:step": 40, "main:i": 2}),  # new epoch: the counter restarted
        chunk(15, {"main:step": 540, "main:i": 9}),
    )
    assert stack_steps_per_s(chunks) == pytest.approx(100.0)  # 1000 steps in 10 s
    w = Window(stacks=chunks)
    assert w.estimated and w.data_wait_fraction == pytest.approx(0.5)
    assert w.step_median_ms == pytest.approx(10.0)
    assert stack_steps_per_s(chunks[:1]) is None


def test_a_counter_that_restarts_each_short_epoch_counts_on_with_the_epoch_beside_it() -> None:
    """timm's train_one_epoch(epoch, ...) over a 10-batch loader at 10 steps/s: readings
    8.5 s and 1.5 s apart each land anywhere in an epoch, and what batch_idx rose by
    said 1.2 steps/s. With the epoch read beside it, it counts on across epochs."""
    period = 10
    times = [0.0, 8.5, 10.0, 18.5, 20.0, 28.5, 30.0, 38.5]
    # ~10 steps/s, each reading landing anywhere in an epoch: batch_idx read as
    # 3, 1, 1, 9, 8, 7, 5, 5 (an epoch is taken to be as long as the largest read, + 1)
    jitter = [3, 6, 1, 4, 8, 2, 5, 0]
    steps = [int(t * 10) + j for t, j in zip(times, jitter, strict=True)]
    true_rate = (steps[-1] - steps[0]) / (times[-1] - times[0])

    def reading(t: float, n: int, with_epoch: bool) -> tuple[float, dict[str, int]]:
        counters = {"train_one_epoch:batch_idx": n % period}
        if with_epoch:
            counters["train_one_epoch:batch_idx@epoch"] = n // period
        return t, counters

    def chunks(with_epoch: bool) -> list[StackChunk]:
        r = [reading(t, n, with_epoch) for t, n in zip(times, steps, strict=True)]
        return [
            StackChunk(
                int(a[0] * 1e9),
                int((b[0] + 1) * 1e9),
                {"loader": 10},
                a[1],
                int(a[0] * 1e9),
                b[1],
                int(b[0] * 1e9),
            )  # fmt: skip
            for a, b in zip(r[::2], r[1::2], strict=True)
        ]

    assert stack_steps_per_s(chunks(True)) == pytest.approx(true_rate, rel=0.02)
    # without the epoch: the counter fell in half its intervals, and gives no rate
    assert stack_steps_per_s(chunks(False)) is None
    assert stack_loop_counter(chunks(True)) == (int(38.5e9), steps[-1] % period)


def test_the_epoch_of_a_loop_counter_is_its_frames_or_its_callers(tmp_path: Path) -> None:
    """Read from a real process by the real py-spy: a counter's epoch comes from its own
    frame, else the nearest calling frame of the job's code that has one."""
    script = textwrap.dedent(
        """
        import sys, time

        def one_epoch(loader, epoch):
            for batch_idx, _ in enumerate(loader):
                inner(batch_idx)

        def inner(j):
            for step in range(7, 8):
                print("ready", flush=True)
                time.sleep(60)

        def main():
            for current_epoch in range(4, 5):
                one_epoch(range(3, 6), epoch=current_epoch + 2)

        main()
        """
    )
    (tmp_path / "loops.py").write_text(script)
    proc = subprocess.Popen(
        [PY, str(tmp_path / "loops.py")], stdout=subprocess.PIPE, env=env_without_probe()
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        py_spy = find_py_spy()
        assert py_spy
        dump = subprocess.run(
            [py_spy, "dump", "--pid", str(proc.pid), "--json", "--locals"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    finally:
        proc.kill()
        proc.wait()
    counters = parse_counters(json.loads(dump.stdout), proc.pid)
    assert counters == {
        "inner:step": 7,
        "inner:step@epoch": 6,  # one_epoch's, the nearest caller with one
        "one_epoch:batch_idx": 0,
        "one_epoch:batch_idx@epoch": 6,
    }


def test_the_loop_counter_served_is_the_one_the_rate_comes_from_and_holds_when_stuck() -> None:
    """gpudoctor_loop_index (the exporter's stalled-job alert reads it): the counter
    that rose, as last read; a loop that stands still still has one (the best-named)."""
    moving = (
        chunk(0, {"main:i": 3, "main:step": 100}),
        chunk(5, {"main:i": 3, "main:step": 600}),
        chunk(10, {"main:i": 3, "main:step": 1100}),
    )
    assert stack_loop_counter(moving) == (10 * 10**9, 1100)
    stuck = (chunk(0, {"main:i": 4, "main:step": 700}), chunk(5, {"main:i": 4, "main:step": 700}))
    assert stack_loop_counter(stuck) == (5 * 10**9, 700)  # "step" names a step best
    assert stack_loop_counter((chunk(0, {}),)) is None
    assert Window(stacks=stuck).loop_counter == (5 * 10**9, 700)


def test_the_chunk_under_way_is_kept_when_the_watch_ends(
    job: list[subprocess.Popen[bytes]],
) -> None:
    """A watch that ends mid-chunk (its time is up, the user leaves) keeps the samples
    since the last whole chunk: py-spy is stopped, writes them, and they are counted;
    before, they were thrown away with the killed py-spy (most of a short watch)."""
    py_spy = find_py_spy()
    assert py_spy is not None
    proc = start_plainly("healthy.py", "--seconds", "120")
    job.append(proc)
    wait_for_torch(proc)
    sampler = StackSampler(py_spy, proc.pid, first_chunk_s=60.0)
    try:
        sampler.start()
        t_start = time.monotonic()
        while time.monotonic() - t_start < 4.0:
            assert sampler.poll() is None  # no whole chunk in 4 s of a 60 s one
            time.sleep(0.5)
        chunk = sampler.finish()
        assert chunk is not None, sampler.last_error
        span_s = (chunk.t_end_mono_ns - chunk.t_start_mono_ns) / 1e9
        assert 4.0 <= span_s < 8.0
        # healthy.py computes all the time: its samples are its steps' parts
        assert sum(chunk.samples.values()) >= 10
        assert chunk.samples["forward"] + chunk.samples["backward"] > 0
        records = [p for p in (sampler._record, sampler._busy) if p is not None]
        assert all(p.poll() is not None for p in records)  # py-spy stopped, not waited for 60 s
    finally:
        sampler.close()
    assert proc.poll() is None  # the job runs on


def test_a_sampler_with_a_rest_runs_no_py_spy_between_its_looks(
    job: list[subprocess.Popen[bytes]],
) -> None:
    """The node exporter's duty cycle (app/exporter.py NODE_STACKS): the first two
    chunks back to back (a step rate from the pair), then after each chunk nothing of the
    sampler's runs for `rest_s`; then the next chunk comes."""
    py_spy = find_py_spy()
    assert py_spy is not None
    proc = start_plainly("healthy.py", "--seconds", "120")
    job.append(proc)
    wait_for_torch(proc)
    sampler = StackSampler(
        py_spy, proc.pid, rate_hz=4, chunk_s=2.0, first_chunk_s=2.0, lines=False, rest_s=4.0
    )
    me = psutil.Process()

    def sampling() -> bool:
        for child in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):  # another test's zombie job
                if "py-spy" in " ".join(child.cmdline()):
                    return True
        return False

    try:
        ends: list[float] = []
        chunks: list[StackChunk] = []
        during_rest: list[bool] = []
        t0 = time.monotonic()
        while len(chunks) < 3:
            assert time.monotonic() - t0 < 60, sampler.last_error
            chunk = sampler.poll()
            now = time.monotonic() - t0
            if chunk is not None:
                ends.append(now)
                chunks.append(chunk)
            elif len(chunks) == 2 and now < ends[1] + 3.5:
                during_rest.append(sampling())
            time.sleep(0.25)
        # no rest after the first; after the second, no py-spy at all for the rest, and
        # the third ended one rest and one chunk later
        assert ends[1] - ends[0] < 4.0
        assert during_rest and not any(during_rest)
        assert ends[2] - ends[1] >= 4.0 + 2.0 - 0.5
        assert all(sum(c.samples.values()) > 0 for c in chunks)
        assert stack_steps_per_s(chunks[:2]) is not None  # a rate from the first two
    finally:
        sampler.close()
    assert proc.poll() is None


def test_one_chunk_read_at_its_start_and_end_gives_a_rate() -> None:
    """Attached while the job was starting up: the chunk's first reading found no loop
    counter yet, its last one did, and the next chunk's first reading pairs with it."""
    first = StackChunk(0, 5 * 10**9, {"loader": 10}, {}, None, {"main:step": 30}, 4 * 10**9)
    assert stack_steps_per_s([first]) is None  # one reading: no rate yet
    second = StackChunk(
        5 * 10**9, 15 * 10**9, {"loader": 10}, {"main:step": 80}, 6 * 10**9,
        {"main:step": 430}, 13 * 10**9,
    )  # fmt: skip
    assert stack_steps_per_s([first, second]) == pytest.approx(400 / 9)
    both = StackChunk(
        0, 5 * 10**9, {"loader": 10}, {"main:step": 5}, 10**9, {"main:step": 305}, 4 * 10**9
    )
    assert stack_steps_per_s([both]) == pytest.approx(100.0)  # one chunk: 300 steps in 3 s


# -- the TUI in watch mode ---------------------------------------------------------------------


def test_tui_watch_shows_the_estimates_and_q_leaves_the_job_running(
    tmp_path: Path, job: list[subprocess.Popen[bytes]]
) -> None:
    proc = start_plainly("dataloader_bound.py", "--seconds", "120")
    job.append(proc)
    wait_for_torch(proc)
    store = Store(tmp_path / "s.db")
    py_spy = find_py_spy()
    session = WatchedJob(find_target(proc.pid), store, py_spy=py_spy)
    session.start()
    app = make_live_app(Follower(session), "en")

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            findings = app.query_one(FindingsPanel)

            def input_bound_shown() -> bool:
                shown = findings.shown or ()
                return bool(shown) and shown[0].id == "input-bound"

            await wait_for(pilot, input_bound_shown, timeout=40)
            assert findings.shown is not None and findings.shown[0].confidence == "estimated"
            job_text = str(app.query_one(JobPanel).content)
            assert f"watching pid {proc.pid}" in job_text and "stack samples" in job_text
            # no p in the footer: nothing can be profiled from outside (issue 40, point 7)
            assert "p" not in app.screen.active_bindings
            # "up" is the job's own age, not the time since the doctor came (point 6)
            snap = app.snapshot
            assert snap is not None
            age = time.time() - psutil.Process(proc.pid).create_time()
            assert abs(snap.up_s - age) < 3 and snap.up_s > snap.elapsed_s + 1
            await pilot.press("q")  # no question: a watched job is never stopped
            await wait_for(pilot, lambda: app.return_value is not None or not app.is_running)

    asyncio.run(drive())
    session.close()
    assert session.timeline.exit is not None
    assert session.timeline.exit.ended_by == "detached"
    time.sleep(0.5)
    assert proc.poll() is None
    store.close()


def test_tui_watch_of_a_process_that_is_not_python_says_so_at_once(tmp_path: Path) -> None:
    """Issue 40, point 3: watching a process that is not Python showed '0 stack samples'
    and 'no steps yet' as if they would come. It says at once what it can see (its GPU
    and host use), and keeps showing them."""
    proc = subprocess.Popen(["sleep", "60"])
    store = Store(tmp_path / "s.db")
    target = find_target(proc.pid)
    assert not target.python
    session = WatchedJob(target, store, py_spy=None)
    session.start()
    app = make_live_app(Follower(session), "en")

    async def drive() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.snapshot is not None and app.snapshot.host)
            text = str(app.query_one(JobPanel).content)
            assert "not a Python process: its GPU and host use only" in text
            assert "stack samples" not in text and "no steps yet" not in text
            assert "cpu" in str(app.query_one(HostPanel).content)
            await pilot.press("q")
            await wait_for(pilot, lambda: app.return_value is not None or not app.is_running)

    try:
        asyncio.run(drive())
    finally:
        session.close()
        store.close()
        proc.kill()
        proc.wait()
