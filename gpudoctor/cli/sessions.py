"""`gpudoctor history`, `report SESSION`, `replay SESSION`: recorded sessions."""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from gpudoctor import display
from gpudoctor.app import errors, sessions
from gpudoctor.cli.common import UsageError, lang_of, on_terminal, open_store, write_charts
from gpudoctor.i18n import _
from gpudoctor.redact import redact_argv
from gpudoctor.report.build import build
from gpudoctor.report.render import how_words, markdown
from gpudoctor.store import SessionRow, Store, StoreError
from gpudoctor.timeline import Timeline
from gpudoctor.units import clip, pad, short_duration


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


# history's columns (terminal cells): id, started, took, ended, steps, top finding; the
# command takes the rest of the line, or a line of its own below narrower than WIDE
_COLUMNS = (5, 11, 7, 12, 6, 26)
WIDE = 120


def _history(store: Store, limit: int) -> int:
    rows = store.sessions()
    if not rows:
        print(_("no recorded sessions in {path}").format(path=store.path))
        return 0
    # the terminal's width; off a terminal $COLUMNS, else 80
    width = shutil.get_terminal_size((80, 24)).columns
    shown = rows[:limit]
    # a trial is one entry, its runs under it: its record is on its last run
    trials: dict[int, dict[str, Any]] = {}
    run_of: dict[int, str] = {}
    for row in shown:
        for record in store.records_of(row.id, "trial"):
            trials[row.id] = record
            for side in ("baseline", "treatment"):
                for sid in (record.get(side) or {}).get("sessions") or []:
                    if isinstance(sid, int):
                        run_of[sid] = side
    by_id = {row.id: row for row in rows}
    fixed = sum(_COLUMNS) + 2 * len(_COLUMNS)
    wide = width >= WIDE
    head = [_("id"), _("started"), _("took"), _("ended"), _("steps"), _("top finding")]
    print(_line(head, _("command") if wide else "", width, fixed))
    for row in shown:
        if row.id in run_of and row.id not in trials:
            continue  # shown under its trial
        if row.id in trials:
            _print_trial(row, trials[row.id], by_id, run_of, store, width, wide, fixed)
            continue
        cells, command = _session_cells(row, store)
        _print_row(cells, command, width, wide, fixed)
    return 0


def _session_cells(row: SessionRow, store: Store, top: str | None = None) -> tuple[list[str], str]:
    started = time.strftime("%m-%d %H:%M", time.localtime(row.started_unix))
    took = short_duration(row.duration_s) if row.duration_s is not None else "-"
    steps = row.summary.get("steps")
    if row.exit is not None:
        # the job's own code where it ended by itself; a stop the doctor made says so
        code = row.exit.exit_code
        own = row.exit.ended_by in ("exit", "exception", "oom") and code is not None
        how = how_words(row.exit.ended_by)
        ended = f"{how} {code}" if own else how
    else:  # still recorded (`gpudoctor attach ID`), or its doctor died
        ended = _("live") if row.live else _("incomplete")
        steps = store.counted_steps(row.id)
        took = short_duration(time.time() - row.started_unix) if row.live else took
    # a watched job's steps are not counted (py-spy samples them): "watch" says why
    steps = (_("watch") if row.summary.get("mode") == "watch" else "-") if steps is None else steps
    if top is None:
        top = _top_words(row.summary.get("top_finding"))
    return [str(row.id), started, took, ended, str(steps), top], " ".join(redact_argv(row.command))


def _top_words(top: str | None) -> str:
    """The summary's top finding ("input-bound (high)", as recorded) with its severity
    in the person's language."""
    if not top:
        return "-"
    finding, _sep, severity = top.partition(" (")
    if not severity.endswith(")"):
        return top
    words = display.severity_words(severity[:-1]).lower()
    return _("{finding} ({severity})").format(finding=finding, severity=words)


def _line(cells: list[str], command: str, width: int, fixed: int) -> str:
    parts = [
        pad(clip(c, w), w, right=i in (0, 2, 4))
        for i, (c, w) in enumerate(zip(cells, _COLUMNS, strict=True))
    ]
    text = "  ".join(parts)
    if command:
        text += "  " + clip(command, max(10, width - fixed))
    return text.rstrip()


def _print_row(cells: list[str], command: str, width: int, wide: bool, fixed: int) -> None:
    if wide:
        print(_line(cells, command, width, fixed))
    else:
        print(_line(cells, "", width, fixed))
        print("      " + clip(command, width - 6))


def _print_trial(
    row: SessionRow,
    record: dict[str, Any],
    by_id: dict[int, SessionRow],
    run_of: dict[int, str],
    store: Store,
    width: int,
    wide: bool,
    fixed: int,
) -> None:
    """The trial as one entry (its measured speedup, what it applied), its runs under it."""
    low, high = (record.get("ci95") or [None, None])[:2]
    speedup = record.get("speedup")
    verdict = (
        f"x{speedup:.2f} ({low:.2f}-{high:.2f})"
        if isinstance(speedup, (int, float)) and isinstance(low, (int, float))
        and isinstance(high, (int, float))
        else "-"
    )  # fmt: skip
    applied = ", ".join(
        str(c.get("remedy") or c.get("id") or "?") for c in record.get("applied") or []
    )
    runs = sorted(
        sid
        for side in ("baseline", "treatment")
        for sid in (record.get(side) or {}).get("sessions") or []
        if isinstance(sid, int) and sid in by_id
    )
    first = by_id.get(runs[0]) if runs else row
    started = time.strftime("%m-%d %H:%M", time.localtime((first or row).started_unix))
    cells = [str(row.id), started, "", _("trial"), str(len(runs)), verdict]
    what = _("trial of {remedy}: {runs} runs").format(remedy=applied or "?", runs=len(runs))
    _print_row(cells, what, width, wide, fixed)
    for sid in runs:
        run = by_id[sid]
        side = _("baseline") if run_of.get(sid) == "baseline" else _("treatment")
        cells, command = _session_cells(run, store, top=side)
        cells[0] = "└ " + cells[0]
        _print_row(cells, command, width, wide, fixed)


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
