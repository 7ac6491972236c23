"""`gpudoctor` alone on a terminal: the machine dashboard; then watch the process chosen,
or run the command typed."""

from __future__ import annotations

import argparse


def home(args: argparse.Namespace) -> int:
    from gpudoctor.cli import run, watch
    from gpudoctor.machine import Machine
    from gpudoctor.tui.home import make_home_app

    choice = make_home_app(Machine()).run()
    if choice is None:
        return 0
    common = {"store": args.store, "headless": False, "report": None, "max_seconds": None,
              "interval": 1.0, "lang": None}  # fmt: skip
    if choice.action == "watch":
        return watch.command(argparse.Namespace(pid=choice.pid, **common))
    return run.command(
        argparse.Namespace(
            cmd=list(choice.command), profile_steps=None, profile_trace=None, **common
        )
    )
