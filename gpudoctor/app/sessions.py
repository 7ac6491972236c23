"""Recorded sessions as the commands name them, the log files of the jobs' output, and
the file that keeps a fault of the doctor's own."""

from __future__ import annotations

import shlex
import socket
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

import psutil

from gpudoctor import __version__
from gpudoctor.app.errors import NotPossible
from gpudoctor.i18n import _
from gpudoctor.output_log import DEFAULT_MAX_MB, OutputLog
from gpudoctor.redact import redact_argv, redact_text
from gpudoctor.store import SessionRow, Store, StoreError, private_folder
from gpudoctor.timeline import Timeline
from gpudoctor.units import clip


def load(store: Store, name: str) -> tuple[int, Timeline]:
    """(id, timeline) of the session named by an id or `last`."""
    try:
        if name == "last":
            rows = store.sessions()
            if not rows:
                raise NotPossible(_("no recorded sessions in {path}").format(path=store.path))
            session_id = rows[0].id
        else:
            try:
                session_id = int(name)
            except ValueError:
                raise NotPossible(
                    _("not a session id: {name!r} (see gpudoctor history)").format(name=name)
                ) from None
        return session_id, store.load(session_id)
    except StoreError as exc:
        raise NotPossible(str(exc)) from None


def logs_folder(store_path: Path) -> Path:
    """The `logs` folder beside a store: the jobs' output, the doctor's failure files."""
    return store_path.parent / "logs"


def redacted_traceback(exc: BaseException) -> str:
    """The traceback with the job's secrets masked, as everywhere they are shown."""
    lines = "".join(traceback.format_exception(exc)).splitlines()
    return "".join(redact_text(line) + "\n" for line in lines)


def keep_failure(exc: BaseException, argv: Sequence[str], store_path: Path) -> Path | None:
    """A fault of the doctor's own kept in the `logs` folder for a report (the doctor's
    command line and version, the traceback; secrets masked: it is the file a person is
    asked to attach): its path, or None when it cannot be written (whatever the reason:
    the TUI's loop thread calls it as it fails, and must still tell the app)."""
    logs = logs_folder(store_path)
    path = logs / time.strftime("doctor-failed-%Y%m%d-%H%M%S.txt")
    try:
        private_folder(logs, tighten=False)
        with open(path, "w", encoding="utf-8") as out:
            out.write(f"gpudoctor {__version__}: gpudoctor {shlex.join(redact_argv(list(argv)))}\n")
            out.write(redacted_traceback(exc))
    except Exception:  # noqa: BLE001 (said where it is called from: no file, never a new fault)
        return None
    return path


def failure_words(exc: BaseException) -> str:
    """The fault in one line (type and message, secrets masked, at most 200 characters)."""
    return clip(redact_text(f"{type(exc).__name__}: {exc}".splitlines()[0]), 200)


def open_log(store: Store, prefix: str, max_bytes: int = DEFAULT_MAX_MB << 20) -> OutputLog:
    """A new log file in the `logs` folder beside the store (the jobs' own output),
    rotated past `max_bytes`."""
    logs = logs_folder(Path(store.path))
    try:
        private_folder(logs, tighten=True)  # the job's output: its owner's only
        return OutputLog(logs / time.strftime(f"{prefix}-%Y%m%d-%H%M%S.log"), max_bytes)
    except OSError as exc:
        raise NotPossible(
            _("cannot write the job's log in {folder}: {why}").format(folder=logs, why=exc)
        ) from None


def _left_running(row: SessionRow) -> bool:
    """Its doctor was told to leave the job running (the TUI's q, then l)."""
    return row.exit is not None and row.exit.ended_by == "detached"


def _left_words(row: SessionRow) -> str:
    alive = row.job_pid is not None and psutil.pid_exists(row.job_pid)
    again = (
        _("gpudoctor watch --pid {pid} looks at it again").format(pid=row.job_pid)
        if alive
        else _("the job has ended since")
    )
    return _(
        "session {id} was left running, and its doctor stopped recording it then: {again}; "
        "what was recorded: gpudoctor replay {id}"
    ).format(id=row.id, again=again)


def find_live(store: Store, name: str) -> SessionRow:
    """The session a viewer attaches to: an id, or `last` (the newest still being
    recorded). NotPossible, in one line, when it has ended or is recorded elsewhere."""
    try:
        rows = store.sessions()
    except StoreError as exc:
        raise NotPossible(str(exc)) from None
    if name == "last":
        live = [row for row in rows if row.live]
        if not live:
            left = rows[0] if rows and _left_running(rows[0]) else None
            if left is not None:  # the newest was left running (q, l): not recorded since
                raise NotPossible(_left_words(left))
            raise NotPossible(
                _(
                    "no session is being recorded now (see gpudoctor history; a recorded one: "
                    "gpudoctor replay ID)"
                )
            )
        return live[0]
    try:
        session_id = int(name)
    except ValueError:
        raise NotPossible(
            _("not a session id: {name!r} (see gpudoctor history)").format(name=name)
        ) from None
    row = next((r for r in rows if r.id == session_id), None)
    if row is None:
        raise NotPossible(
            _("no session {id} in {path} (see gpudoctor history)").format(
                id=session_id, path=store.path
            )
        )
    if row.exit is not None and _left_running(row):
        raise NotPossible(_left_words(row))
    if row.exit is not None:
        raise NotPossible(_("session {id} has ended: gpudoctor replay {id}").format(id=session_id))
    here = socket.gethostname()
    if row.hostname is not None and row.hostname != here:
        raise NotPossible(
            _("session {id} is recorded on {host}, not here ({here}): attach there").format(
                id=session_id, host=row.hostname, here=here
            )
        )
    if not row.live:
        raise NotPossible(
            _(
                "session {id} is no longer recorded (its doctor, pid {pid}, is gone): "
                "gpudoctor replay {id}"
            ).format(id=session_id, pid=row.doctor_pid)
        )
    return row
