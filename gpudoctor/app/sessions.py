"""Recorded sessions as the commands name them, and the log files of the jobs' output."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from gpudoctor.app.errors import NotPossible
from gpudoctor.output_log import DEFAULT_MAX_MB, OutputLog
from gpudoctor.store import SessionRow, Store, StoreError, private_folder
from gpudoctor.timeline import Timeline


def load(store: Store, name: str) -> tuple[int, Timeline]:
    """(id, timeline) of the session named by an id or `last`."""
    try:
        if name == "last":
            rows = store.sessions()
            if not rows:
                raise NotPossible(f"no recorded sessions in {store.path}")
            session_id = rows[0].id
        else:
            try:
                session_id = int(name)
            except ValueError:
                raise NotPossible(f"not a session id: {name!r} (see gpudoctor history)") from None
        return session_id, store.load(session_id)
    except StoreError as exc:
        raise NotPossible(str(exc)) from None


def open_log(store: Store, prefix: str, max_bytes: int = DEFAULT_MAX_MB << 20) -> OutputLog:
    """A new log file in the `logs` folder beside the store (the jobs' own output),
    rotated past `max_bytes`."""
    logs = Path(store.path).parent / "logs"
    try:
        private_folder(logs, tighten=True)  # the job's output: its owner's only
        return OutputLog(logs / time.strftime(f"{prefix}-%Y%m%d-%H%M%S.log"), max_bytes)
    except OSError as exc:
        raise NotPossible(f"cannot write the job's log in {logs}: {exc}") from None


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
            raise NotPossible(
                "no session is being recorded now (see gpudoctor history; a recorded one: "
                "gpudoctor replay ID)"
            )
        return live[0]
    try:
        session_id = int(name)
    except ValueError:
        raise NotPossible(f"not a session id: {name!r} (see gpudoctor history)") from None
    row = next((r for r in rows if r.id == session_id), None)
    if row is None:
        raise NotPossible(f"no session {session_id} in {store.path} (see gpudoctor history)")
    if row.exit is not None:
        raise NotPossible(f"session {session_id} has ended: gpudoctor replay {session_id}")
    here = socket.gethostname()
    if row.hostname is not None and row.hostname != here:
        raise NotPossible(
            f"session {session_id} is recorded on {row.hostname}, not here ({here}): attach there"
        )
    if not row.live:
        raise NotPossible(
            f"session {session_id} is no longer recorded (its doctor, pid {row.doctor_pid}, "
            f"is gone): gpudoctor replay {session_id}"
        )
    return row
