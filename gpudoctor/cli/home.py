"""`gpudoctor` alone on a terminal: the machine dashboard; then watch the process chosen,
or run the command typed."""

from __future__ import annotations

import argparse


def same_process(pid: int | None, started_s: float | None) -> bool:
    """The pid is still the process that was chosen: it started when that one did (a
    pid freed by an ended process can be another user's job a moment later)."""
    import psutil

    if pid is None:
        return False
    try:
        now_started = psutil.Process(pid).create_time()
    except psutil.Error:
        return False
    return started_s is None or abs(now_started - started_s) < 0.01


def home(args: argparse.Namespace) -> int:
    from gpudoctor.cli import run, watch
    from gpudoctor.cli.common import UsageError

    # through the parser: the options' defaults are the command line's own
    from gpudoctor.cli.parser import build_parser
    from gpudoctor.i18n import _
    from gpudoctor.machine import Machine
    from gpudoctor.tui.home import make_home_app

    store = ["--store", str(args.store)] if args.store else []
    notice: str | None = None
    while True:  # the run or the watch ends (or is left): back to the machine view
        choice = make_home_app(Machine(), notice=notice).run()
        if choice is None:
            return 0
        notice = None
        try:
            if choice.action == "watch":
                if not same_process(choice.pid, choice.started_s):
                    notice = _("process {pid} has ended: nothing watched").format(pid=choice.pid)
                    continue
                argv = [*store, "watch", "--pid", str(choice.pid)]
                watch.command(build_parser().parse_args(argv))
            else:
                run.command(build_parser().parse_args([*store, "run", "--", *choice.command]))
        except UsageError as exc:  # said on the machine view, which comes back
            notice = str(exc)
