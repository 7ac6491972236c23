"""`gpudoctor history`, `report SESSION`, `replay SESSION`: recorded sessions."""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path

from gpudoctor.app import errors, sessions
from gpudoctor.cli.common import UsageError, lang_of, on_terminal, open_store, write_charts
from gpudoctor.i18n import _
from gpudoctor.redact import redact_argv
from gpudoctor.report.build import build
from gpudoctor.report.render import markdown
from gpudoctor.store import Store, StoreError
from gpudoctor.timeline import Timeline
from gpudoctor.units import pad


def history(args: argparse.Namespace) -> int:
    store = open_store(args)
    try:
        if args.prune is not None:
            sessions, records = store.prune(args.prune)
            size = store.path.stat().st_size / 1e6
            print(
                f"pruned {sessions} sessions ({records} records); {store.path} is now {size:.1f} MB"
            )
        return _history(store, args.limit)
    except StoreError as exc:
        raise UsageError(f"gpudoctor: {exc}") from None
    finally:
        store.close()


def _history(store: Store, limit: int) -> int:
    rows = store.sessions()
    if not rows:
        print(_("no recorded sessions in {path}").format(path=store.path))
        return 0
    print(
        "  ".join(
            (
                pad("id", 4, right=True), pad(_("started"), 16), pad(_("took"), 7, right=True),
                pad(_("ended"), 22), pad(_("steps"), 6, right=True), pad(_("top finding"), 26),
                _("command"),
            )
        )
    )  # fmt: skip
    for row in rows[:limit]:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.started_unix))
        took = f"{row.duration_s:.0f}s" if row.duration_s is not None else "-"
        steps = row.summary.get("steps")
        if row.exit is not None:
            ended = f"{row.exit.ended_by} ({row.exit.exit_code})"
        else:  # still recorded (`gpudoctor attach ID`), or its doctor died
            ended = _("live") if row.live else _("incomplete")
            steps = store.counted_steps(row.id)
            took = f"{time.time() - row.started_unix:.0f}s" if row.live else took
        # a watched job's steps are not counted (py-spy samples them): "watch" says why
        steps = ("watch" if row.summary.get("mode") == "watch" else "-") if steps is None else steps
        top = row.summary.get("top_finding") or "-"
        command = " ".join(redact_argv(row.command))
        print(
            f"{row.id:>4}  {started:16}  {took:>7}  {pad(ended, 22)}  {steps!s:>6}  {top:26}  "
            f"{command[:60]}"
        )
    return 0


def loaded(args: argparse.Namespace, name: str) -> tuple[int, Timeline]:
    store = open_store(args)
    try:
        return sessions.load(store, args.session)
    except errors.NotPossible as exc:
        raise UsageError(f"gpudoctor {name}: {exc}") from None
    finally:
        store.close()


_FORMATS = {".md": "md", ".json": "json", ".html": "html", ".htm": "html"}


def report(args: argparse.Namespace) -> int:
    output: Path | None = args.output
    if args.format is None:
        args.format = _FORMATS.get(output.suffix.lower(), "md") if output is not None else "md"
    if output is not None and not output.parent.is_dir():
        raise UsageError(
            "gpudoctor report: "
            + _("no such folder for --output: {folder}").format(folder=output.parent)
        )
    if output is None:
        return _report(args)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = _report(args)
    try:
        output.write_text(buffer.getvalue(), encoding="utf-8")
    except OSError as exc:
        raise UsageError(
            "gpudoctor report: "
            + _("cannot write {path}: {why}").format(path=output, why=exc.strerror)
        ) from None
    print(_("gpudoctor: report written to {path}").format(path=output), file=sys.stderr)
    return code


def _report(args: argparse.Namespace) -> int:
    svg: Path | None = args.svg
    if svg is not None and (args.format != "md" or svg.suffix != ".svg"):
        raise UsageError(
            "gpudoctor report: " + _("--svg takes a FILE.svg, for the Markdown format")
        )
    if svg is not None and not svg.parent.is_dir():
        raise UsageError(
            "gpudoctor report: " + _("no such folder for --svg: {folder}").format(folder=svg.parent)
        )
    session_id, timeline = loaded(args, "report")
    rebuilt = build(timeline, session_id, lang_of(args))
    if svg is not None:
        charts = write_charts(svg, timeline, rebuilt.duration_s, str(svg))
        sys.stdout.write(markdown(rebuilt) + charts)
        return 0
    if args.format == "html":
        from gpudoctor.report.html import page  # pygal: only when asked
        from gpudoctor.series import run_series

        store = open_store(args)
        try:
            trials = store.records_of(session_id, "trial")  # a trial that ended with it
            tunes = store.records_of(session_id, "tune")  # a batch-size search that did
        except StoreError as exc:
            raise UsageError(f"gpudoctor report: {exc}") from None
        finally:
            store.close()
        sys.stdout.write(page(rebuilt, run_series(timeline), trials, tunes))
    else:
        sys.stdout.write(rebuilt.to_json() if args.format == "json" else markdown(rebuilt))
    return 0


def replay(args: argparse.Namespace) -> int:
    session_id, timeline = loaded(args, "replay")
    if not on_terminal():
        raise UsageError(
            "gpudoctor replay: " + _("needs a terminal (for a text report: gpudoctor report)")
        )
    from gpudoctor.cli import trial
    from gpudoctor.tui.app import make_replay_app

    lang = lang_of(args)
    viewer = make_replay_app(timeline, session_id, lang)
    viewer.run()
    if viewer.trial_request is not None:
        return trial.from_tui(tuple(timeline.command), viewer.trial_request, lang, args.store)
    return 0


def attach(args: argparse.Namespace) -> int:
    """The live TUI on a session another doctor records (any number may look at once);
    q closes this viewer only."""
    from gpudoctor.app.follow import Follower
    from gpudoctor.cli.common import follow_in_tui
    from gpudoctor.jobs import AttachedSession
    from gpudoctor.terminal import TerminalView

    if not on_terminal():
        raise UsageError(
            "gpudoctor attach: " + _("needs a terminal (headless: gpudoctor report ID)")
        )
    store = open_store(args)
    try:
        row = sessions.find_live(store, args.session)
        source = AttachedSession(store, row)
    except errors.NotPossible as exc:
        store.close()
        raise UsageError(f"gpudoctor attach: {exc}") from None
    except StoreError as exc:
        store.close()
        raise UsageError(f"gpudoctor attach: {exc}") from None
    output = TerminalView(Path(row.output_path)) if row.output_path else None
    try:
        follow_in_tui(Follower(source, output), lang_of(args), viewing=row.id)
    finally:
        store.close()
    if source.timeline.exit is not None:
        said = _("session {id} has ended: gpudoctor report {id}").format(id=row.id)
    elif source.gone == "left":
        said = _("left session {id}; it is still recorded").format(id=row.id)
    else:
        said = _("session {id}: {why}").format(id=row.id, why=source.gone_words)
    print(f"gpudoctor: {said}", file=sys.stderr)
    return 0
