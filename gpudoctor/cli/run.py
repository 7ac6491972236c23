"""`gpudoctor run [OPTIONS] -- CMD`: the job launched under the doctor, headless (a
status line on stderr every second, every minute off a terminal) or in the TUI; the
summary after it, the report file, the job's own exit code."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from gpudoctor.app import errors
from gpudoctor.app import run as running
from gpudoctor.cli.common import (
    StatusLines,
    UsageError,
    command_of,
    err,
    follow_in_tui,
    lang_of,
    on_terminal,
    open_log,
    open_store,
    report_path,
    serve_metrics,
    survives_hangup,
    with_metrics,
    write_charts,
    write_file,
)
from gpudoctor.i18n import _
from gpudoctor.jobs import LaunchedJob, LaunchError
from gpudoctor.store import Store

if TYPE_CHECKING:  # --metrics loads prometheus_client only when asked
    from gpudoctor.metrics import RunCollector


def command(args: argparse.Namespace) -> int:
    request = running.RunRequest(
        command=command_of(args, "run"),
        interval_s=args.interval,
        max_seconds=args.max_seconds,
        profile_steps=args.profile_steps,
        profile_trace=args.profile_trace,
        exchange_ranks=not args.no_rank_exchange,
        sample_lines=not args.no_stacks,
        auto_profile=not args.no_auto_profile,
    )
    path = report_path(args, "run", html=True)
    try:
        running.profile_env(request)  # checked before anything starts
    except errors.NotPossible as exc:
        raise UsageError(f"gpudoctor run: {exc}") from None
    headless = args.headless
    if not headless and not on_terminal():
        print(_("gpudoctor: no terminal for the TUI: running headless."), file=sys.stderr)
        headless = True
    metrics = serve_metrics(args, "run")
    store = open_store(args)
    if not headless:
        return in_tui(request, args, store, metrics)
    try:
        job = running.launch(request, store)
    except LaunchError as exc:
        print(f"gpudoctor: {exc}", file=sys.stderr)
        store.close()
        return exc.exit_code
    try:
        with ctrl_c_reaches_the_job(job), survives_hangup(job):
            on_tick = with_metrics(StatusLines(args.status_every), metrics, job)
            result = running.follow(job, store, lang_of(args), on_tick=on_tick)
    finally:
        job.close()
        store.close()
    return show(result, path)


def show(result: running.RunResult, path: Path | None) -> int:
    """After a run or a watch: the summary, any notes, the report file; the exit code."""
    from gpudoctor.report.render import markdown, summary

    err(summary(result.report))
    for note in result.notes:
        print(f"gpudoctor: {note}", file=sys.stderr)
    if path is not None:
        if path.suffix == ".html" and result.timeline is not None:
            from gpudoctor.report.html import page  # pygal: only when asked
            from gpudoctor.series import run_series

            text = page(result.report, run_series(result.timeline))
        elif path.suffix == ".json":
            text = result.report.to_json()
        else:
            text = markdown(result.report)
            if result.timeline is not None:
                svg = path.with_suffix(".svg")
                text += write_charts(svg, result.timeline, result.report.duration_s, svg.name)
        write_file(path, text)
    return result.exit_code


# after the first Ctrl-C, how long the job may take to stop before the doctor says it waits
SAY_WAITING_AFTER_S = 1.5


class ctrl_c_reaches_the_job:
    """While the job runs headless: Ctrl-C stops it politely (it reaches the job from the
    terminal too; when not, the doctor sends it), twice sends SIGTERM, three times
    SIGKILL; a SIGTERM to the doctor is passed on."""

    def __init__(self, job: LaunchedJob) -> None:
        self.job = job
        self.presses = 0
        self.previous: dict[int, object] = {}

    def __enter__(self) -> ctrl_c_reaches_the_job:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self.on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum != signal.SIGINT:
            self.job.signal_job(signum)
            return
        self.presses += 1
        if self.presses == 1:
            if not terminal_delivered():
                self.job.signal_job(signal.SIGINT)
            # said only if the job is still there in a moment: a job that stops at once
            # prints its own traceback now, and the line would land in the middle of it
            timer = threading.Timer(SAY_WAITING_AFTER_S, self.say_waiting)
            timer.daemon = True
            timer.start()
        else:
            self.job.signal_job(signal.SIGTERM if self.presses == 2 else signal.SIGKILL)

    def say_waiting(self) -> None:
        proc = self.job.proc
        if proc is not None and proc.poll() is None:
            print(
                "\n" + _("gpudoctor: waiting for the job to stop (Ctrl-C again to force)"),
                file=sys.stderr,
                flush=True,
            )


def terminal_delivered() -> bool:
    """Ctrl-C at the terminal reaches the whole foreground group, the job included."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def in_tui(
    request: running.RunRequest,
    args: argparse.Namespace,
    store: Store,
    metrics: RunCollector | None = None,
) -> int:
    """The job in its own session, its output in a capped log file beside the store;
    the app follows it. The report is built and kept as headless; when the terminal
    goes away, the doctor records on, headless, and concludes at the job's end."""
    from gpudoctor.app.follow import Follower
    from gpudoctor.terminal import TerminalView

    lang, path = lang_of(args), report_path(args, "run", html=True)
    log = open_log(store, "job", "run", int(args.output_max_mb * (1 << 20)))
    try:
        job = running.launch(request, store, output=log, own_terminal=True)
    except LaunchError as exc:
        log.close()
        store.close()
        print(f"gpudoctor: {exc}", file=sys.stderr)
        return exc.exit_code
    try:
        live = follow_in_tui(Follower(job, TerminalView(log.path), metrics), lang)
    finally:
        log.close()
    if job.timeline.exit is None:
        job.close()
        store.close()
        print(
            "gpudoctor: " + _("the job (pid {pid}) was left running").format(pid=job.job_pid),
            file=sys.stderr,
        )
        return running.DOCTOR_FAILED
    notes: tuple[str, ...] = (_("the job's output is in {path}").format(path=log.path),)
    if job.timeline.exit.ended_by == "detached":
        notes += (_("the job (pid {pid}) was left running").format(pid=job.job_pid),)
    try:
        result = running.conclude(job, store, lang, notes)
    finally:
        job.close()
        store.close()
    code = show(result, path)
    if live.trial_request is not None and not live.hung_up:
        from gpudoctor.cli import trial

        return trial.from_tui(request.command, live.trial_request, lang, args.store)
    return code
