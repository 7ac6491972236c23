"""Recorded sessions as the commands name them, and the log files of the jobs' output."""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO

from gpudoctor.app.errors import NotPossible
from gpudoctor.store import Store, StoreError
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


def open_log(store: Store, prefix: str) -> tuple[Path, IO[bytes]]:
    """A new log file in the `logs` folder beside the store (the jobs' own output)."""
    logs = Path(store.path).parent / "logs"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        path = logs / time.strftime(f"{prefix}-%Y%m%d-%H%M%S.log")
        return path, path.open("ab")
    except OSError as exc:
        raise NotPossible(f"cannot write the job's log in {logs}: {exc}") from None
