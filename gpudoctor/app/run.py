"""`run` and `watch`: a job launched under the doctor, or one watched from outside;
followed by the one loop (jobs/source.py), then concluded: the report, the session
closed in the store, and the exit code the doctor gives back."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpudoctor.app.errors import NotPossible
from gpudoctor.i18n import _
from gpudoctor.jobs import JobSource, LaunchedJob, OnTick, WatchedJob
from gpudoctor.jobs.inject import InjectError, check_route
from gpudoctor.jobs.watched import container_message, find_target, foreign_gpu_pids
from gpudoctor.model import JobExit
from gpudoctor.output_log import OutputLog
from gpudoctor.probe.profile import ENV_PROFILE_STEPS, ENV_PROFILE_TRACE
from gpudoctor.redact import redact_argv
from gpudoctor.report.values import Report
from gpudoctor.sources.nvml import NvmlReader
from gpudoctor.sources.stacks import AttachError, check_access, find_py_spy
from gpudoctor.store import Store, StoreError
from gpudoctor.timeline import Timeline
from gpudoctor.units import clip

# The doctor's own failure while following a job (the TUI's loop broke): the job goes on.
DOCTOR_FAILED = 3


@dataclass(frozen=True)
class RunRequest:
    command: tuple[str, ...]
    interval_s: float = 1.0
    max_seconds: float | None = None
    profile_steps: int | None = None  # torch.profiler over N steps after the warm-up
    profile_trace: Path | None = None  # and its Chrome trace written here
    env: dict[str, str] = field(default_factory=dict)  # more for the job (a trial's remedy)
    exchange_ranks: bool = True  # a multi-node job: trade rank summaries with other nodes
    sample_lines: bool = True  # py-spy names the lines the time outside the model goes to
    auto_profile: bool = True  # a capture by the doctor itself (diagnosis/auto_profile.py)


@dataclass(frozen=True)
class RunResult:
    report: Report
    job_exit: JobExit
    exit_code: int  # what the doctor exits with
    notes: tuple[str, ...] = ()
    timeline: Timeline | None = None  # the run's record (an HTML report draws it)


def launch(
    request: RunRequest,
    store: Store,
    output: IO[Any] | OutputLog | None = None,
    own_terminal: bool = False,
) -> LaunchedJob:
    """The job started under the doctor. `output`: where its stdout and stderr go (None:
    the doctor's terminal; an OutputLog: a log the doctor caps); `own_terminal`: its own session, no stdin (under the TUI, so
    that leaving it running really leaves it running). LaunchError when it cannot start."""
    job = LaunchedJob(
        list(request.command),
        store,
        interval_s=request.interval_s,
        max_seconds=request.max_seconds,
        output=output,
        own_terminal=own_terminal,
        extra_env={**profile_env(request), **request.env},
        exchange_ranks=request.exchange_ranks,
        py_spy=find_py_spy() if request.sample_lines else None,
        auto_profile=request.auto_profile,
    )
    job.start()
    return job


def profile_env(request: RunRequest) -> dict[str, str]:
    """What the probe is told about a profile asked at launch (checked before anything
    starts)."""
    trace = request.profile_trace
    if trace is not None and request.profile_steps is None:
        raise NotPossible(_("--profile-trace needs --profile-steps N"))
    if trace is not None and not trace.parent.is_dir():
        raise NotPossible(
            _("no such folder for --profile-trace: {folder}").format(folder=trace.parent)
        )
    env = {ENV_PROFILE_STEPS: str(request.profile_steps)} if request.profile_steps else {}
    if trace is not None:
        env[ENV_PROFILE_TRACE] = str(trace.resolve())
    return env


@dataclass(frozen=True)
class WatchTarget:
    """A process checked for watching: whether its stacks can be sampled, and why not."""

    pid: int
    command: tuple[str, ...]
    python: bool
    py_spy: str | None
    route: str | None = None  # --inject: how the probe goes in (jobs/inject.py)


def check_watch(pid: int, nvml: NvmlReader, headless: bool, inject: bool = False) -> WatchTarget:
    """What `watch --pid` can see of the process; NotPossible, in one line, for what it
    cannot watch at all (nor inject into, with `inject`)."""
    try:
        target = find_target(pid)
    except AttachError as exc:
        raise NotPossible(str(exc)) from None
    route = None
    if inject:
        if not target.python:
            raise NotPossible(not_python(target.pid, target.command))
        try:
            route = check_route(target.pid)
        except InjectError as exc:
            raise NotPossible(str(exc)) from None
    py_spy = None
    if target.python:
        py_spy = find_py_spy()
        if py_spy is None:
            raise NotPossible(
                _("py-spy is not installed (it samples the job from outside): pip install py-spy")
            )
        try:
            check_access(py_spy, target.pid)
        except AttachError as exc:
            raise NotPossible(str(exc)) from None
    elif headless:
        raise NotPossible(
            _("{why} (in the TUI: drop --headless)").format(
                why=not_python(target.pid, target.command)
            )
        )
    foreign = foreign_gpu_pids(nvml.read())
    if foreign:
        raise NotPossible(container_message(foreign, target.pid))
    return WatchTarget(target.pid, tuple(target.command), target.python, py_spy, route)


def not_python(pid: int, command: list[str] | tuple[str, ...]) -> str:
    return _(
        "pid {pid} ({command}) is not a Python process: only its GPU and host use can be watched"
    ).format(pid=pid, command=clip(" ".join(redact_argv(command)), 60))


def watch(
    pid: int,
    store: Store,
    interval_s: float = 1.0,
    max_seconds: float | None = None,
    nvml: NvmlReader | None = None,
    py_spy: str | None = None,
    inject: str | None = None,
    all_ranks: bool = False,
) -> WatchedJob:
    """The process watched from outside (checked by `check_watch` first), with the probe
    injected by the route `inject` names."""
    try:
        target = find_target(pid)
    except AttachError as exc:
        raise NotPossible(str(exc)) from None
    job = WatchedJob(
        target, store, interval_s=interval_s, max_seconds=max_seconds, nvml=nvml,
        py_spy=py_spy, inject=inject, all_ranks=all_ranks,
    )  # fmt: skip
    try:
        job.start()
    except (StoreError, AttachError) as exc:
        job.close()
        raise NotPossible(str(exc)) from None
    return job


def follow(job: JobSource, store: Store, lang: str, on_tick: OnTick | None = None) -> RunResult:
    """The job followed until it ends or the doctor leaves it, then concluded."""
    job.run(on_tick)
    return conclude(job, store, lang)


def leave_running(job: JobSource) -> None:
    """After a face that followed the job in a thread has closed: if the loop is still
    going (the face failed), leave the job running and let the loop end."""
    if job.timeline.exit is not None:
        return
    job.detach()
    deadline = time.monotonic() + 2 * job.interval_s + 2
    while job.timeline.exit is None and time.monotonic() < deadline:
        time.sleep(0.05)


def conclude(job: JobSource, store: Store, lang: str, notes: tuple[str, ...] = ()) -> RunResult:
    """After the loop: the report, the session ended in the store, the exit code."""
    from gpudoctor.report.build import build  # the diagnosis: needed only at the end

    job_exit = job.timeline.exit
    assert job_exit is not None and job.session_id is not None
    assert job.timeline.end_mono_ns is not None
    report = build(job.timeline, job.session_id, lang)
    try:
        store.finish(job.session_id, job.timeline.end_mono_ns, job_exit, report.summary())
    except StoreError as exc:  # the report is whole; the store says what it misses
        notes += (str(exc),)
    return RunResult(report, job_exit, exit_code(job_exit, report), notes, job.timeline)


def exit_code(job_exit: JobExit, report: Report) -> int:
    """`run` gives back the job's own exit code; 0 when the doctor stopped it as asked
    (--max-seconds) or left it running, and always 0 for `watch` (a watched job's code
    cannot be seen from outside: the doctor only left, or saw it end)."""
    if report.watched_pid is not None or job_exit.ended_by in ("max-seconds", "detached"):
        return 0
    return job_exit.exit_code if job_exit.exit_code is not None else 1
