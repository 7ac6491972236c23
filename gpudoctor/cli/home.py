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
    # through the parser: the options' defaults are the command line's own
    from gpudoctor.cli.parser import build_parser

    store = ["--store", str(args.store)] if args.store else []
    if choice.action == "watch":
        return watch.command(build_parser().parse_args([*store, "watch", "--pid", str(choice.pid)]))
    return run.command(build_parser().parse_args([*store, "run", "--", *choice.command]))
