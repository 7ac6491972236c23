"""Recorded sessions: one SQLite database (WAL), written as the run goes.

Each tick's records are committed together, so a crash of the doctor or of the job
loses at most the last tick. A session is rebuilt by replaying its records through
the same `Timeline.ingest_*` path the live run used.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpudoctor.model import GpuProcess, GpuSample, HostSample, JobExit, ProcSample, StackChunk
from gpudoctor.timeline import Timeline

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started_unix REAL NOT NULL,
    start_mono_ns INTEGER NOT NULL,
    command TEXT NOT NULL,
    cwd TEXT,
    hostname TEXT,
    gpu_reason TEXT,
    job_pid INTEGER,
    end_mono_ns INTEGER,
    exit_json TEXT,
    summary_json TEXT
);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id INTEGER NOT NULL REFERENCES sessions(id),
    t_mono_ns INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS records_by_session ON records(session_id, id);
"""


class StoreError(Exception):
    """The store cannot be used; the message is one line for the user."""


def default_path() -> Path:
    env = os.environ.get("GPUDOCTOR_STORE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return Path(base) / "gpudoctor" / "sessions.db"


@dataclass(frozen=True)
class SessionRow:
    id: int
    started_unix: float
    command: list[str]
    exit: JobExit | None
    summary: dict[str, Any]
    duration_s: float | None


class Store:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(str(path), timeout=5.0, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot use the session store {path}: {exc}") from None
        self._pending: list[tuple[int, int, str, str]] = []

    # -- writing ---------------------------------------------------------------------------

    def create_session(self, timeline: Timeline, cwd: str, job_pid: int | None = None) -> int:
        with self.db:
            cur = self.db.execute(
                "INSERT INTO sessions (started_unix, start_mono_ns, command, cwd, hostname,"
                " gpu_reason, job_pid) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    timeline.started_unix,
                    timeline.start_mono_ns,
                    json.dumps(timeline.command),
                    cwd,
                    socket.gethostname(),
                    timeline.gpu_reason,
                    job_pid,
                ),
            )
        assert cur.lastrowid is not None
        return int(cur.lastrowid)

    def set_job_pid(self, session_id: int, pid: int) -> None:
        with self.db:
            self.db.execute("UPDATE sessions SET job_pid=? WHERE id=?", (pid, session_id))

    def add(self, session_id: int, kind: str, t_mono_ns: int, data: Any) -> None:
        self._pending.append((session_id, t_mono_ns, kind, json.dumps(data)))

    def add_raw(self, session_id: int, kind: str, t_mono_ns: int, text: str) -> None:
        """A record that is JSON text already (a probe message, as it arrived)."""
        self._pending.append((session_id, t_mono_ns, kind, text))

    def commit(self) -> None:
        if not self._pending:
            return
        rows, self._pending = self._pending, []
        with self.db:
            self.db.executemany(
                "INSERT INTO records (session_id, t_mono_ns, kind, data) VALUES (?, ?, ?, ?)", rows
            )

    def finish(
        self, session_id: int, end_mono_ns: int, job_exit: JobExit, summary: dict[str, Any]
    ) -> None:
        self.commit()
        with self.db:
            self.db.execute(
                "UPDATE sessions SET end_mono_ns=?, exit_json=?, summary_json=? WHERE id=?",
                (
                    end_mono_ns,
                    json.dumps(dataclasses.asdict(job_exit)),
                    json.dumps(summary),
                    session_id,
                ),
            )

    def close(self) -> None:
        try:
            self.commit()
        finally:
            self.db.close()

    # -- reading ---------------------------------------------------------------------------

    def sessions(self) -> list[SessionRow]:
        try:
            rows = self.db.execute(
                "SELECT id, started_unix, command, exit_json, summary_json, start_mono_ns,"
                " end_mono_ns FROM sessions ORDER BY id DESC"
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the session store {self.path}: {exc}") from None
        out = []
        for sid, started, command, exit_json, summary_json, start_ns, end_ns in rows:
            out.append(
                SessionRow(
                    id=sid,
                    started_unix=started,
                    command=json.loads(command),
                    exit=JobExit(**json.loads(exit_json)) if exit_json else None,
                    summary=json.loads(summary_json) if summary_json else {},
                    duration_s=(end_ns - start_ns) / 1e9 if end_ns else None,
                )
            )
        return out

    def load(self, session_id: int) -> Timeline:
        try:
            row = self.db.execute(
                "SELECT command, started_unix, start_mono_ns, gpu_reason, end_mono_ns, exit_json"
                " FROM sessions WHERE id=?",
                (session_id,),
            ).fetchone()
            if row is None:
                raise StoreError(
                    f"no session {session_id} in {self.path} (see `gpudoctor history`)"
                )
            command, started, start_ns, gpu_reason, end_ns, exit_json = row
            timeline = Timeline(json.loads(command), started, start_ns, gpu_reason=gpu_reason)
            for kind, data in self.db.execute(
                "SELECT kind, data FROM records WHERE session_id=? ORDER BY id", (session_id,)
            ):
                apply_record(timeline, kind, json.loads(data))
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the session store {self.path}: {exc}") from None
        timeline.end_mono_ns = end_ns
        if exit_json:
            timeline.exit = JobExit(**json.loads(exit_json))
        return timeline


# -- records: the one path from a stored row back into a timeline -------------------------


def apply_record(timeline: Timeline, kind: str, data: Any) -> None:
    if kind == "probe":
        timeline.ingest_probe(data)
    elif kind == "host":
        timeline.host.append(decode_host(data))
    elif kind == "gpu":
        timeline.gpus.extend(decode_gpu(g) for g in data)
    elif kind == "stacks":
        timeline.stacks.append(StackChunk(**data))
    elif kind == "watch":
        timeline.watched_pid = int(data["pid"])
        timeline.facts.setdefault(timeline.watched_pid, {}).update(data.get("facts", {}))
    elif kind == "page":
        timeline.ingest_page(int(data["pid"]), int(data["steps"]))
    elif kind == "bad_messages":
        timeline.bad_messages = int(data)
    elif kind == "stall":
        timeline.stalls.append((int(data["from"]), int(data["to"])))
    elif kind == "socket":
        timeline.socket_remade.append(int(data["t"]))
    elif kind == "hangup":
        timeline.hung_up_ns = int(data["t"])
    elif kind == "output":
        timeline.output_log = data.get("path", timeline.output_log)
        timeline.output_rotations = int(data.get("rotations", timeline.output_rotations))


def encode(sample: Any) -> Any:
    return dataclasses.asdict(sample)


def decode_host(d: dict[str, Any]) -> HostSample:
    d = dict(d)
    d["cpu_pct_per_core"] = tuple(d["cpu_pct_per_core"])
    d["job"] = tuple(ProcSample(**p) for p in d.get("job", ()))
    return HostSample(**d)


def decode_gpu(d: dict[str, Any]) -> GpuSample:
    d = dict(d)
    d["processes"] = tuple(GpuProcess(**p) for p in d.get("processes", ()))
    if d.get("clock_event_reasons") is not None:
        d["clock_event_reasons"] = tuple(d["clock_event_reasons"])
    if d.get("compute_capability") is not None:
        d["compute_capability"] = tuple(d["compute_capability"])
    return GpuSample(**d)
