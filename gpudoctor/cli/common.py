"""What the commands share: usage errors, the store, the checks of common options, the
language, and printing progress and reports."""

from __future__ import annotations

import argparse
import locale
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from gpudoctor.i18n import _
from gpudoctor.output_log import DEFAULT_MAX_MB

if TYPE_CHECKING:
    from gpudoctor.app.follow import Follower
    from gpudoctor.jobs import JobSource, OnTick
    from gpudoctor.metrics import RunCollector
    from gpudoctor.output_log import OutputLog
    from gpudoctor.store import Store
    from gpudoctor.timeline import Timeline
    from gpudoctor.tui.app import LiveApp

USAGE_ERROR = 2


class UsageError(Exception):
    """Bad input: one line for the user, exit code 2."""


def default_lang() -> str:
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(var)
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    try:
        code = locale.getlocale()[0] or ""
    except ValueError:
        code = ""
    return "zh" if code.lower().startswith("zh") else "en"


def lang_asked(argv: list[str]) -> str | None:
    """`--lang X` (or `--lang=X`) among the doctor's own arguments (before the job's)."""
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--lang" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--lang="):
            return arg.split("=", 1)[1]
    return None


def lang_of(args: argparse.Namespace) -> str:
    return getattr(args, "lang", None) or default_lang()


def store_path(args: argparse.Namespace | None) -> tuple[Path, bool]:
    """Where the session store is, and whether the person chose it (--store,
    $GPUDOCTOR_STORE) rather than the default place."""
    from gpudoctor.store import default_path

    chosen = getattr(args, "store", None) or os.environ.get("GPUDOCTOR_STORE")
    return Path(chosen or default_path()), bool(chosen)


def open_store(args: argparse.Namespace) -> Store:
    from gpudoctor.store import Store, StoreError

    path, chosen = store_path(args)
    try:
        store = Store(path, explicit=chosen)
    except StoreError as exc:
        raise UsageError(f"gpudoctor: {exc}") from None
    if store.notice:
        print(f"gpudoctor: {store.notice}", file=sys.stderr)
    return store


def command_of(args: argparse.Namespace, name: str) -> tuple[str, ...]:
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError(
            _(
                "gpudoctor {name}: no command given (usage: gpudoctor {name} [OPTIONS] -- CMD [ARGS...])"
            ).format(name=name)
        )
    return tuple(command)


def report_path(args: argparse.Namespace, name: str, html: bool = False) -> Path | None:
    """--report's path, checked; `html`: a session's report may be a page (.html)."""
    path: Path | None = args.report
    if path is not None:
        kinds = (".json", ".md", ".html") if html else (".json", ".md")
        if path.suffix not in kinds:
            said = ", ".join(kinds[:-1]) + _(" or ") + kinds[-1]
            raise UsageError(
                _("gpudoctor {name}: --report must end in {kinds}: {path}").format(
                    name=name, kinds=said, path=path
                )
            )
        if not path.parent.is_dir():
            raise UsageError(
                _("gpudoctor {name}: no such folder for --report: {folder}").format(
                    name=name, folder=path.parent
                )
            )
    return path


def open_log(
    store: Store, prefix: str, name: str, max_bytes: int = DEFAULT_MAX_MB << 20
) -> OutputLog:
    """A log file for the jobs' output beside the store, or one line and exit 2."""
    from gpudoctor.app import errors, sessions

    try:
        return sessions.open_log(store, prefix, max_bytes)
    except errors.NotPossible as exc:
        store.close()
        raise UsageError(f"gpudoctor {name}: {exc}") from None


def on_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def say(prefix: str) -> Say:
    return Say(prefix)


class Say:
    """A Progress that prints each line on stderr, after the command's name."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __call__(self, text: str, fraction: float | None = None) -> None:
        print(f"{self.prefix}: {text}", file=sys.stderr, flush=True)


def err(text: str) -> None:
    """A whole block of text on stderr, as it is."""
    sys.stderr.write(text)
    sys.stderr.flush()


def write_file(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    print(_("gpudoctor: report written to {path}").format(path=path), file=sys.stderr)


@contextmanager
def survives_hangup(source: JobSource, then: Callable[[], None] | None = None) -> Iterator[None]:
    """While following a job: when the terminal goes away (SIGHUP: an SSH connection
    dropped, a terminal window closed), the doctor leaves the terminal and records on,
    headless; `then` is told (the TUI closes). A doctor started under nohup (SIGHUP
    ignored) or with its own handler is left as it was."""
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_DFL:
        yield
        return

    def on_hangup(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # from now on, headless
        away_from_terminal()
        source.note_hangup()
        if then is not None:
            then()

    signal.signal(signal.SIGHUP, on_hangup)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGHUP) is on_hangup:
            signal.signal(signal.SIGHUP, signal.SIG_DFL)


def away_from_terminal() -> None:
    """stdin, stdout and stderr on /dev/null: a write to a terminal that has gone away
    fails (EIO), and the doctor has more to do than tell it."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
    except OSError:
        return
    for fd in (0, 1, 2):
        with suppress(OSError):
            os.dup2(null, fd)
    os.close(null)


def follow_in_tui(follower: Follower, lang: str, viewing: int | None = None) -> LiveApp:
    """The live TUI over a job's loop (started here, in its own thread). Returns once
    the app has closed and the loop has ended: at once when the job ended or was left,
    at the job's end when the terminal went away (the doctor recorded on, headless)."""
    from gpudoctor.app.run import leave_running
    from gpudoctor.tui.app import make_live_app

    live = make_live_app(follower, lang, viewing)  # it starts the loop once it is up
    with survives_hangup(follower.source, live.hang_up):
        try:
            live.run()
        finally:
            follower.listen(None)
            if not live.hung_up:
                leave_running(follower.source)  # the app failed: the job goes on
    if live.hung_up or follower.ended:
        follower.join()
    return live


def serve_metrics(args: argparse.Namespace, name: str) -> RunCollector | None:
    """`--metrics [HOST:]PORT`: started before the job (a port in use is one line and
    exit 2, with nothing launched); and, where the node's exporter listens, the series
    sent to it too (pushed.py); None when neither."""
    from gpudoctor.pushed import listening_exporter

    exporter = listening_exporter()
    if not getattr(args, "metrics", None) and exporter is None:
        return None
    from gpudoctor.metrics import MetricsError, RunCollector, serve

    collector = RunCollector()
    if getattr(args, "metrics", None):
        try:
            collector = serve(args.metrics)
        except MetricsError as exc:
            raise UsageError(f"gpudoctor {name}: {exc}") from None
    if exporter is not None:
        from gpudoctor.pushed import Pusher

        collector.on_latest = Pusher(exporter, collector).push
    return collector


# Off a terminal (a log file, nohup.out, a CI job's log) the headless status line comes
# once a minute: a line a second is 86,400 lines a day among the job's own (Hugging Face's
# Trainer logs every 500 steps by default; tqdm's `mininterval` is for terminals).
STATUS_EVERY_S_OFF_TERMINAL = 60.0
# a tick comes every `--interval` seconds, give or take the loop's own work: a line due
# within this much of a tick is printed at it
STATUS_SLACK_S = 0.25


class StatusLines:
    """The headless status line on stderr (live.status_line) at most every `every_s`
    seconds: None, once a second on a terminal and STATUS_EVERY_S_OFF_TERMINAL off one;
    0, never. The first comes `every_s` after the start, at a tick."""

    def __init__(self, every_s: float | None) -> None:
        if every_s is None:
            every_s = 1.0 if sys.stderr.isatty() else STATUS_EVERY_S_OFF_TERMINAL
        self.every_s = every_s
        self.last = time.monotonic()

    def __call__(self, timeline: Timeline) -> None:
        now = time.monotonic()
        if not self.every_s or now - self.last < self.every_s - STATUS_SLACK_S:
            return
        self.last = now
        from gpudoctor.live import status_line

        # never wider than the terminal (a wrapped line is two): $COLUMNS off one, else 80
        width = shutil.get_terminal_size((80, 24)).columns - 1
        print(status_line(timeline, width), file=sys.stderr, flush=True)


def with_metrics(on_tick: OnTick, collector: RunCollector | None, source: JobSource) -> OnTick:
    """The headless tick: the status line, and the snapshot --metrics serves."""
    if collector is None:
        return on_tick

    def tick(timeline: Timeline) -> None:
        from gpudoctor.snapshot import take

        collector.latest = take(timeline, source.job_pid)
        on_tick(timeline)

    return tick


def write_charts(svg: Path, timeline: Timeline, duration_s: float, link: str) -> str:
    """The run's charts written to `svg` for a Markdown report, and the Markdown that
    shows them (the image at `link`), or "" when there is nothing to draw."""
    from gpudoctor.report.html import charts_file  # pygal: only when asked
    from gpudoctor.series import run_series

    drawn = charts_file(run_series(timeline), duration_s)
    if drawn is None:
        print(_("gpudoctor: nothing to draw: no {path} written").format(path=svg), file=sys.stderr)
        return ""
    svg.write_text(drawn, encoding="utf-8")
    print(_("gpudoctor: the charts written to {path}").format(path=svg), file=sys.stderr)
    title = _("The run over time")
    return f"\n## {title}\n\n![{title}]({link})\n"
