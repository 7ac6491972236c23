"""`gpudoctor watch --pid PID`: a job the doctor did not start, watched from outside;
every way out leaves it running."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from gpudoctor.app import errors
from gpudoctor.app import run as running
from gpudoctor.cli.common import (
    USAGE_ERROR,
    StatusLines,
    UsageError,
    follow_in_tui,
    lang_of,
    on_terminal,
    open_store,
    report_path,
    serve_metrics,
    survives_hangup,
    with_metrics,
)
from gpudoctor.cli.run import show
from gpudoctor.i18n import _
from gpudoctor.jobs import WatchedJob
from gpudoctor.redact import redact_argv
from gpudoctor.sources.nvml import NvmlReader
from gpudoctor.store import Store
from gpudoctor.units import clip

if TYPE_CHECKING:  # --metrics loads prometheus_client only when asked
    from gpudoctor.metrics import RunCollector


def command(args: argparse.Namespace) -> int:
    if args.all_ranks and not args.inject:
        raise UsageError(_("gpudoctor watch: --all-ranks goes with --inject"))
    path = report_path(args, "watch", html=True)
    lang = lang_of(args)
    headless = args.headless or not on_terminal()
    nvml = NvmlReader()
    try:
        target = running.check_watch(args.pid, nvml, headless, inject=args.inject)
    except errors.NotPossible as exc:
        raise UsageError(f"gpudoctor watch: {exc}") from None
    metrics = serve_metrics(args, "watch")
    store = open_store(args)
    if headless and not args.headless:
        print(_("gpudoctor: no terminal for the TUI: watching headless."), file=sys.stderr)
    try:
        job = running.watch(
            target.pid, store, args.interval, args.max_seconds, nvml, target.py_spy,
            target.route, args.all_ranks,
        )  # fmt: skip
    except errors.NotPossible as exc:
        store.close()
        raise UsageError(f"gpudoctor watch: {exc}") from None
    if not headless:
        return in_tui(job, store, lang, path, target, metrics)
    print(
        _("gpudoctor: watching pid {pid} ({command}); Ctrl-C leaves it running").format(
            pid=target.pid, command=clip(" ".join(redact_argv(target.command)), 80)
        ),
        file=sys.stderr,
    )

    def leave(signum: int, frame: FrameType | None) -> None:
        job.detach()  # Ctrl-C at the doctor: leave, the job goes on

    previous = {s: signal.signal(s, leave) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with survives_hangup(job):
            on_tick = with_metrics(StatusLines(args.status_every), metrics, job)
            result = running.follow(job, store, lang, on_tick=on_tick)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        job.close()
        store.close()
    return show(result, path)


def in_tui(
    job: WatchedJob,
    store: Store,
    lang: str,
    path: Path | None,
    target: running.WatchTarget,
    metrics: RunCollector | None = None,
) -> int:
    from gpudoctor.app.follow import Follower

    try:
        follow_in_tui(Follower(job, metrics=metrics), lang)
    finally:
        job.close()
    if job.timeline.exit is None:
        store.close()
        print(_("gpudoctor: the watch did not end cleanly; the job goes on"), file=sys.stderr)
        return running.DOCTOR_FAILED
    notes = (
        (_("pid {pid} was left running").format(pid=job.job_pid),)
        if job.timeline.exit.ended_by == "detached"
        else ()
    )
    try:
        result = running.conclude(job, store, lang, notes)
    finally:
        store.close()
    show(result, path)
    if not target.python:
        print(f"gpudoctor watch: {running.not_python(target.pid, target.command)}", file=sys.stderr)
        return USAGE_ERROR
    return 0
