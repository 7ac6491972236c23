"""`gpudoctor exporter --metrics [HOST:]PORT`: the node agent (app/exporter.py), headless
and long-running, until SIGTERM or Ctrl-C; every job it follows is left running."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from types import FrameType

from gpudoctor.cli.common import UsageError, lang_of, open_store
from gpudoctor.i18n import _
from gpudoctor.sources.stacks import find_py_spy


def command(args: argparse.Namespace) -> int:
    from gpudoctor.app.exporter import Exporter
    from gpudoctor.metrics import MetricsError, NodeCollector, serve_collector

    py_spy = find_py_spy()
    if py_spy is None:
        raise UsageError(
            _(
                "gpudoctor exporter: py-spy is not installed (it samples the jobs from "
                "outside): pip install py-spy"
            )
        )
    collector = NodeCollector()
    try:
        serve_collector(args.metrics, collector)
    except MetricsError as exc:
        raise UsageError(f"gpudoctor exporter: {exc}") from None
    store = open_store(args)

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    exporter = Exporter(
        store, collector, py_spy, lang_of(args), refresh_s=args.interval, grace_s=args.grace,
        say=say,
    )  # fmt: skip

    def leave(signum: int, frame: FrameType | None) -> None:
        exporter.stop()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, leave)
    serving = (
        _(
            "gpudoctor exporter: serving every user's training jobs on this node at "
            "http://{address}/metrics (refreshed every {seconds:g} s); Ctrl-C or SIGTERM "
            "leaves them running"
        )
        if os.geteuid() == 0
        else _(
            "gpudoctor exporter: serving your training jobs on this node at "
            "http://{address}/metrics (refreshed every {seconds:g} s; other users' need "
            "root); Ctrl-C or SIGTERM leaves them running"
        )
    )
    say(serving.format(address=_address(args.metrics), seconds=args.interval))
    try:
        exporter.run(args.max_seconds)
    finally:
        store.close()
    return 0


def _address(text: str) -> str:
    from gpudoctor.metrics import parse_address

    host, port = parse_address(text)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
