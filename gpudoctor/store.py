"""Recorded sessions: one SQLite database (WAL), written as the run goes.

Each tick's records are committed together, so a crash of the doctor or of the job
loses at most the last tick. A session is rebuilt by replaying its records through
the same `Timeline.ingest_*` path the live run used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psutil

from gpudoctor import jsontext
from gpudoctor.compaction import KINDS, PASS_BYTES, PASS_RECORDS, Compactor, apply_rollup
from gpudoctor.diagnosis.gpu_timeline import RankTimeline
from gpudoctor.diagnosis.ranks import RankSummary
from gpudoctor.i18n import _
from gpudoctor.model import (
    CpuPeak,
    GpuProcess,
    GpuSample,
    HostSample,
    HotspotChunk,
    JobExit,
    OtherProcess,
    ProcSample,
    StackChunk,
)
from gpudoctor.timeline import Timeline

T = TypeVar("T")

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
    summary_json TEXT,
    doctor_pid INTEGER,
    output_path TEXT
);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id INTEGER NOT NULL REFERENCES sessions(id),
    t_mono_ns INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS records_by_session ON records(session_id, id);
CREATE INDEX IF NOT EXISTS records_by_kind ON records(session_id, kind, id);
"""
# How long a write waits for another process's lock before it is kept for later.
BUSY_S = 0.25
# Records kept in memory while the store cannot be written: about three hours of one
# process at 1 Hz (a host, a GPU, a probe and a page record a tick), a few MB.
MAX_UNSAVED = 50_000
# At the end, how long the doctor tries to write the session's end into the store.
FINISH_TRIES_S = 5.0
# Columns added since the first stores: added to an older store when it is opened.
ADDED_COLUMNS = {"doctor_pid": "INTEGER", "output_path": "TEXT"}
# The store's layout, in SQLite's user_version: 0 a store from before it was numbered
# (brought up to date by adding ADDED_COLUMNS), 1 numbered, 2 its sessions may hold
# compacted records (`rollup`, compaction.py), which a gpudoctor reading up to 1 would
# silently leave out of its counts. A store numbered higher was written by a newer
# gpudoctor: it is not touched, and says so in one line.
SCHEMA_VERSION = 2


class StoreError(Exception):
    """The store cannot be used; the message is one line for the user."""


def private_folder(path: Path, tighten: bool) -> str | None:
    """A folder only its owner can enter: made 0700 if missing; an existing one that
    others can enter is tightened when `tighten` (the doctor's own folder). Says what it
    did, or None."""
    if not path.exists():
        path.mkdir(parents=True, mode=0o700)
        os.chmod(path, 0o700)  # whatever the umask
        return None
    mode = path.stat().st_mode & 0o777
    if mode & 0o077 and tighten and path.stat().st_uid == os.getuid():
        os.chmod(path, 0o700)
        return _(
            "{path} could be entered by other users (mode {mode:o}): now owner-only (700)"
        ).format(path=path, mode=mode)
    return None


def private_file(path: Path) -> None:
    """Create `path` readable by its owner only (0600, whatever the umask) if missing."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


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
    hostname: str | None = None
    doctor_pid: int | None = None  # the doctor recording it
    job_pid: int | None = None
    output_path: str | None = None  # the job's output, when the doctor kept it

    @property
    def live(self) -> bool:
        """Still being recorded: not ended, and its doctor runs here still (the same
        process, not a later one given the same pid)."""
        if self.exit is not None or self.doctor_pid is None:
            return False
        if self.hostname is not None and self.hostname != socket.gethostname():
            return False
        try:
            created = psutil.Process(self.doctor_pid).create_time()
        except psutil.Error:
            return False
        return created <= self.started_unix + 1.0


class Store:
    """`explicit`: the user chose where (`--store`, $GPUDOCTOR_STORE): a store there that
    others can read is kept so, with a warning; at the default place it is tightened.
    Either way `notice` holds the one line to show, or None."""

    def __init__(self, path: Path, explicit: bool = False) -> None:
        self.path = path
        self.notice: str | None = None
        try:
            said = [private_folder(path.parent, tighten=not explicit)]
            existed = path.exists()
            private_file(path)  # SQLite gives its -wal and -shm files the same mode
            if existed:
                said.append(_private_store(path, explicit))
            self.notice = "; ".join(line for line in said if line) or None
            # a short wait for a lock: the loop must not stall on a store someone holds
            self.db = sqlite3.connect(str(path), timeout=BUSY_S, check_same_thread=False)
            # another doctor's lock while setting up (two that start at once on a new store:
            # one makes it WAL and its tables), waited for as a session's start waits
            _retried(self._set_up, _locked, pause_s=0.05)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(
                _("cannot use the session store {path}: {why}").format(path=path, why=exc)
            ) from None
        self._pending: list[tuple[int, int, str, str]] = []
        self.trouble: str | None = None  # why the last commit failed, while it fails
        self.lost = 0  # records let go while the store could not be written

    def _set_up(self) -> None:
        """WAL, the tables, an older layout brought up to this one: each step safe to run
        again (after a lock, or beside another doctor doing the same)."""
        version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            self.db.close()
            raise StoreError(
                _(
                    "the session store {path} was written by a newer gpudoctor (store "
                    "layout {version}; this one reads up to {known}): upgrade gpudoctor, "
                    "or record elsewhere with --store PATH"
                ).format(path=self.path, version=version, known=SCHEMA_VERSION)
            )
        # SQLite answers a change of journal mode at once while another holds a lock
        # (no busy wait): the caller tries again
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)
        self._migrate(version)

    def _migrate(self, version: int) -> None:
        """Bring an older layout up to this one (each step safe to run twice: two doctors
        may open an old store at once)."""
        if version < 1:
            have = {row[1] for row in self.db.execute("PRAGMA table_info(sessions)")}
            for name, kind in ADDED_COLUMNS.items():
                if name not in have:
                    try:
                        self.db.execute(f"ALTER TABLE sessions ADD COLUMN {name} {kind}")
                    except sqlite3.OperationalError as exc:  # another doctor added it first
                        if "duplicate column" not in str(exc):
                            raise
        if version < SCHEMA_VERSION:  # 1 -> 2: the same tables, rollups may come
            self.db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    # -- writing ---------------------------------------------------------------------------

    def create_session(self, timeline: Timeline, cwd: str, job_pid: int | None = None) -> int:
        cur = self._write(
            "INSERT INTO sessions (started_unix, start_mono_ns, command, cwd, hostname,"
            " gpu_reason, job_pid, doctor_pid) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                timeline.started_unix,
                timeline.start_mono_ns,
                json.dumps(timeline.command),
                cwd,
                socket.gethostname(),
                timeline.gpu_reason,
                job_pid,
                os.getpid(),
            ),
        )
        assert cur.lastrowid is not None
        return int(cur.lastrowid)

    def set_job_pid(self, session_id: int, pid: int) -> None:
        self._write("UPDATE sessions SET job_pid=? WHERE id=?", (pid, session_id))

    def set_output(self, session_id: int, path: Path) -> None:
        self._write("UPDATE sessions SET output_path=? WHERE id=?", (str(path), session_id))

    def _write(self, sql: str, params: tuple[Any, ...]) -> sqlite3.Cursor:
        """One statement that must be written now (a session's start): a lock held by
        another process is waited for, up to FINISH_TRIES_S; StoreError after that."""

        def execute() -> sqlite3.Cursor:
            with self.db:
                return self.db.execute(sql, params)

        try:
            return _retried(execute, lambda _exc: True, pause_s=0.25)
        except sqlite3.Error as exc:
            raise StoreError(
                _("cannot write the session store {path}: {why}").format(path=self.path, why=exc)
            ) from None

    def add(self, session_id: int, kind: str, t_mono_ns: int, data: Any) -> None:
        self._pending.append((session_id, t_mono_ns, kind, json.dumps(data)))

    def add_raw(self, session_id: int, kind: str, t_mono_ns: int, text: str) -> None:
        """A record that is JSON text already (a probe message, as it arrived)."""
        self._pending.append((session_id, t_mono_ns, kind, text))

    def commit(self) -> None:
        """The records added since the last commit, written together. When the store
        cannot be written (the disk is full, another process holds it locked), they are
        kept and tried again at the next commit; `trouble` says why meanwhile, and past
        MAX_UNSAVED the oldest are let go and counted in `lost`."""
        if not self._pending:
            return
        rows = list(self._pending)
        try:
            with self.db:
                self.db.executemany(
                    "INSERT INTO records (session_id, t_mono_ns, kind, data) VALUES (?, ?, ?, ?)",
                    rows,
                )
        except sqlite3.Error as exc:
            self.trouble = str(exc)
            over = len(self._pending) - MAX_UNSAVED
            if over > 0:
                del self._pending[:over]
                self.lost += over
            return
        del self._pending[: len(rows)]
        self.trouble = None

    @property
    def unsaved(self) -> int:
        return len(self._pending)

    def finish(
        self, session_id: int, end_mono_ns: int, job_exit: JobExit, summary: dict[str, Any]
    ) -> None:
        """The session's end; StoreError when it cannot be written (the records not
        written are counted in the message)."""
        deadline = time.monotonic() + FINISH_TRIES_S
        while True:
            self.commit()
            try:
                if self.trouble is None:
                    with self.db:
                        self.db.execute(
                            "UPDATE sessions SET end_mono_ns=?, exit_json=?, summary_json=?"
                            " WHERE id=?",
                            (
                                end_mono_ns,
                                json.dumps(dataclasses.asdict(job_exit)),
                                json.dumps(summary),
                                session_id,
                            ),
                        )
                    return
            except sqlite3.Error as exc:
                self.trouble = str(exc)
            if time.monotonic() >= deadline:
                unsaved = self.unsaved + self.lost
                raise StoreError(
                    _(
                        "the session store {path} could not be written ({why}): session {id} "
                        "stays incomplete there, {unsaved} records missing (the report above "
                        "is whole)"
                    ).format(path=self.path, why=self.trouble, id=session_id, unsaved=unsaved)
                )
            time.sleep(0.5)

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
                " end_mono_ns, hostname, doctor_pid, job_pid, output_path"
                " FROM sessions ORDER BY id DESC"
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(
                _("cannot read the session store {path}: {why}").format(path=self.path, why=exc)
            ) from None
        out = []
        for row in rows:
            sid, started, command, exit_json, summary_json, start_ns, end_ns = row[:7]
            out.append(
                SessionRow(
                    id=sid,
                    started_unix=started,
                    command=json.loads(command),
                    exit=_built(JobExit, json.loads(exit_json)) if exit_json else None,
                    summary=json.loads(summary_json) if summary_json else {},
                    duration_s=(end_ns - start_ns) / 1e9 if end_ns else None,
                    hostname=row[7],
                    doctor_pid=row[8],
                    job_pid=row[9],
                    output_path=row[10],
                )
            )
        return out

    def load(self, session_id: int) -> Timeline:
        timeline, _ = self.load_from(session_id)
        return timeline

    def load_from(self, session_id: int) -> tuple[Timeline, int]:
        """The session's timeline as recorded so far, and its last record's id (to go on
        from with `follow`)."""
        try:
            row = self.db.execute(
                "SELECT command, started_unix, start_mono_ns, gpu_reason, hostname FROM sessions"
                " WHERE id=?",
                (session_id,),
            ).fetchone()
            if row is None:
                raise StoreError(
                    _("no session {id} in {path} (see `gpudoctor history`)").format(
                        id=session_id, path=self.path
                    )
                )
            command, started, start_ns, gpu_reason, hostname = row
            timeline = Timeline(
                json.loads(command), started, start_ns, gpu_reason=gpu_reason, hostname=hostname
            )
        except sqlite3.Error as exc:
            raise StoreError(
                _("cannot read the session store {path}: {why}").format(path=self.path, why=exc)
            ) from None
        return timeline, self.follow(session_id, timeline, 0)

    def follow(self, session_id: int, timeline: Timeline, after_id: int) -> int:
        """The session's records after `after_id` applied to `timeline` (its end too,
        once recorded); the last record's id."""
        with _no_collections():
            return self._follow(session_id, timeline, after_id)

    def _follow(self, session_id: int, timeline: Timeline, after_id: int) -> int:
        try:
            # up to the newest record now (two reads below: a live session's records
            # written between them are the next follow's)
            (newest,) = self.db.execute(
                "SELECT MAX(id) FROM records WHERE session_id=?", (session_id,)
            ).fetchone()
            last = max(after_id, newest or 0)
            for kind, data in self.db.execute(
                "SELECT kind, data FROM records WHERE session_id=? AND id>? AND id<=?"
                " AND kind!='gpu' ORDER BY id",
                (session_id, after_id, last),
            ):
                record = jsontext.loads(data)
                # a rollup of records this timeline read already, as rows (a follower
                # of a live session that was compacted since): counted once
                if kind != "rollup" or record.get("first_id", after_id + 1) > after_id:
                    apply_record(timeline, kind, record)
            # GPU readings: only those the timeline keeps decoded (readings.py: a week's
            # 8 GPUs, most of them would be decoded for nothing)
            self._read_gpus(session_id, after_id, last, timeline)
            timeline.settle()  # the step rows held as the records were read
            end_ns, exit_json = self.db.execute(
                "SELECT end_mono_ns, exit_json FROM sessions WHERE id=?", (session_id,)
            ).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(
                _("cannot read the session store {path}: {why}").format(path=self.path, why=exc)
            ) from None
        timeline.end_mono_ns = end_ns
        if exit_json:
            timeline.exit = _built(JobExit, json.loads(exit_json))
        return last

    def _read_gpus(self, session_id: int, after_id: int, until_id: int, timeline: Timeline) -> None:
        """The session's GPU records after `after_id` up to `until_id` into the timeline:
        their times read first, and only the records of the ticks it keeps (the newest
        whole, the older spread evenly) read and decoded."""
        ticks = self.db.execute(
            "SELECT id, t_mono_ns FROM records WHERE session_id=? AND id>? AND id<=?"
            " AND kind='gpu' ORDER BY id",
            (session_id, after_id, until_id),
        ).fetchall()
        if not ticks:
            return
        (newest,) = self.db.execute(
            "SELECT data FROM records WHERE id=?", (ticks[-1][0],)
        ).fetchone()
        per_tick = max(1, len(jsontext.loads(newest)))  # the node's GPUs
        kept, stride = timeline.gpus.ticks_kept((t for _, t in ticks), per_tick)
        timeline.gpus.adopt(stride)
        ids = [i for i, t in ticks if t in kept]
        for start in range(0, len(ids), 500):  # (SQLite's bound on a query's variables)
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for (data,) in self.db.execute(
                f"SELECT data FROM records WHERE id IN ({marks}) ORDER BY id", chunk
            ):
                timeline.gpus.extend(decode_gpu(g) for g in jsontext.loads(data))

    def prune(self, older_than_s: float, now: float | None = None) -> tuple[int, int]:
        """Sessions that started more than `older_than_s` ago and are not live, with
        their records, deleted, and the file shrunk; (sessions, records) deleted."""
        cutoff = (time.time() if now is None else now) - older_than_s
        old = [row for row in self.sessions() if row.started_unix < cutoff and not row.live]
        ids = [(row.id,) for row in old]
        try:
            with self.db:
                records = sum(
                    self.db.execute("DELETE FROM records WHERE session_id=?", i).rowcount
                    for i in ids
                )
                self.db.executemany("DELETE FROM sessions WHERE id=?", ids)
        except sqlite3.Error as exc:
            raise StoreError(
                _("cannot prune the session store {path}: {why}").format(path=self.path, why=exc)
            ) from None
        if ids:  # shrinking waits for no one: a doctor writing now keeps it for later
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("VACUUM")
        return len(ids), records

    def compact(self, session_id: int, before_ns: int, compactor: Compactor) -> int:
        """The next records of the session read into compaction.py's slot in progress,
        the slot written once it is whole and older than `before_ns`; the records read
        (0: nothing to do now). A slot that cannot be written (locked, full) is read
        again at the next call."""
        try:
            cursor = self.db.execute(
                "SELECT id, kind, t_mono_ns, data FROM records WHERE session_id=? AND id>?"
                f" AND kind IN {KINDS} ORDER BY id LIMIT ?",
                (session_id, compactor.read_id, PASS_RECORDS),
            )
            records, size = [], 0
            for record in cursor:
                records.append(record)
                size += len(record[3])
                if size >= PASS_BYTES:
                    break
            cursor.close()
            before = compactor.read_id
            plan = compactor.read(records, before_ns)
            if plan is not None:
                with self.db:
                    self.db.executemany(
                        "DELETE FROM records WHERE id=?", [(i,) for i in plan.delete]
                    )
                    self.db.executemany("UPDATE records SET data=? WHERE id=?", plan.rewrite)
                    self.db.executemany(
                        "INSERT INTO records (session_id, kind, t_mono_ns, data)"
                        " VALUES (?, ?, ?, ?)",
                        [(session_id, *added) for added in plan.add],
                    )
                compactor.written()
                return len(records)
        except sqlite3.Error:
            compactor.restart()
            return 0
        return 0 if compactor.read_id == before else len(records)

    def records_of_kind(self, kind: str) -> list[tuple[int, Any]]:
        """Every session's records of one kind (the trials' outcomes), oldest first."""
        try:
            rows = self.db.execute(
                "SELECT session_id, data FROM records WHERE kind=? ORDER BY id", (kind,)
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(
                _("cannot read the session store {path}: {why}").format(path=self.path, why=exc)
            ) from None
        return [(int(sid), json.loads(data)) for sid, data in rows]

    def records_of(self, session_id: int, kind: str) -> list[Any]:
        """The session's records of one kind (a trial's outcome on its last run), oldest
        first."""
        try:
            rows = self.db.execute(
                "SELECT data FROM records WHERE session_id=? AND kind=? ORDER BY id",
                (session_id, kind),
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(
                _("cannot read the session store {path}: {why}").format(path=self.path, why=exc)
            ) from None
        return [json.loads(data) for (data,) in rows]

    def counted_steps(self, session_id: int) -> int | None:
        """An unfinished session's steps so far (its processes' counter pages), or None
        where none was recorded."""
        try:
            rows = self.db.execute(
                "SELECT json_extract(data, '$.pid'), MAX(json_extract(data, '$.steps'))"
                " FROM records WHERE session_id=? AND kind='page' GROUP BY 1",
                (session_id,),
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(
                _("cannot read the session store {path}: {why}").format(path=self.path, why=exc)
            ) from None
        return sum(int(steps) for _, steps in rows) if rows else None


@contextlib.contextmanager
def _no_collections() -> Iterator[None]:
    """No garbage collection while a session's records are read: a week's load makes
    millions of objects that hold no cycles, and the collections they set off walked
    them again and again (a fifth of the load's time: bench/RESULTS.md). Garbage
    without cycles is freed at once all the same."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _retried(attempt: Callable[[], T], again: Callable[[sqlite3.Error], bool], pause_s: float) -> T:
    """`attempt()`, tried again after `pause_s` while it fails with an error `again`
    accepts, up to FINISH_TRIES_S; the last error is raised."""
    deadline = time.monotonic() + FINISH_TRIES_S
    while True:
        try:
            return attempt()
        except sqlite3.Error as exc:
            if not again(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause_s)


def _locked(exc: sqlite3.Error) -> bool:
    """Another connection's lock ('database is locked', 'database table is locked')."""
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc)
    )


def _private_store(path: Path, explicit: bool) -> str | None:
    """An existing store (and its -wal, -shm) that others can read: tightened to 0600
    at the default place, kept at one the user chose. The one line to say, or None."""
    mode = path.stat().st_mode & 0o777
    if not mode & 0o077:
        return None
    if explicit or path.stat().st_uid != os.getuid():
        return _(
            "the session store {path} can be read by other users (mode {mode:o}); kept as you "
            "chose it (chmod 600 it to make it private)"
        ).format(path=path, mode=mode)
    for part in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(part, 0o600)
    return _(
        "the session store {path} was readable by other users (mode {mode:o}): now 600"
    ).format(path=path, mode=mode)


# -- records: the one path from a stored row back into a timeline -------------------------


def apply_record(timeline: Timeline, kind: str, data: Any) -> None:
    if kind == "probe":  # made steps at the end (Timeline.settle: the caller's)
        timeline.ingest_probe(data, held=True)
    elif kind == "host":
        timeline.host.append(decode_host(data))
    elif kind == "gpu":
        timeline.gpus.extend(decode_gpu(g) for g in data)
    elif kind == "stacks":
        timeline.stacks.append(_built(StackChunk, data))
    elif kind == "hotspots":
        timeline.hotspots.append(HotspotChunk.from_dict(data))
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
    elif kind == "store":
        timeline.store_outages.append((int(data["from"]), int(data["to"]), str(data["why"])))
        timeline.store_lost = int(data.get("lost", 0))
    elif kind == "hangup":
        timeline.hung_up_ns = int(data["t"])
    elif kind == "ranks":  # another node's ranks, as its doctor sent them
        with contextlib.suppress(KeyError, TypeError, ValueError):
            timeline.remote_ranks[str(data["node"])] = tuple(
                RankSummary.from_dict(r) for r in data["ranks"]
            )
    elif kind == "rollup":  # an old stretch of steps, compacted (compaction.py)
        with contextlib.suppress(KeyError, TypeError, ValueError):
            timeline.ingest_rollup(*apply_rollup(data))
    elif kind == "cpu_peak":
        with contextlib.suppress(KeyError, TypeError, ValueError):
            timeline.cpu_peak = CpuPeak.from_dict(data)
    elif kind == "auto_profile":  # the doctor's own capture (diagnosis/auto_profile.py)
        with contextlib.suppress(KeyError, TypeError, ValueError):
            timeline.auto_profile = (int(data["t"]), str(data["why"]))
    elif kind == "gpu_timeline":  # a profiler capture's trace, read (jobs/captures.py)
        with contextlib.suppress(KeyError, TypeError, ValueError):
            timeline.gpu_timelines[int(data["pid"])] = RankTimeline.from_dict(data["timeline"])
    elif kind == "output":
        timeline.output_log = data.get("path", timeline.output_log)
        timeline.output_rotations = int(data.get("rotations", timeline.output_rotations))


def encode(sample: Any) -> Any:
    return dataclasses.asdict(sample)


def decode_host(d: dict[str, Any]) -> HostSample:
    d = dict(d)
    d["cpu_pct_per_core"] = tuple(d["cpu_pct_per_core"])
    d["job"] = tuple([_built(ProcSample, p) for p in d.get("job", ())])
    d["others"] = tuple([_built(OtherProcess, p) for p in d.get("others", ())])
    return _built(HostSample, d)


def decode_gpu(d: dict[str, Any]) -> GpuSample:
    d = dict(d)
    d["processes"] = tuple([_built(GpuProcess, p) for p in d.get("processes", ())])
    if d.get("clock_event_reasons") is not None:
        d["clock_event_reasons"] = tuple(d["clock_event_reasons"])
    if d.get("compute_capability") is not None:
        d["compute_capability"] = tuple(d["compute_capability"])
    return _built(GpuSample, d)


_set = object.__setattr__


def _built(cls: type[T], d: dict[str, Any]) -> T:
    """A reading from its stored fields. A newer doctor's record may carry fields this
    one does not know (a reading it added since: HostSample.others_niced_cpu_cores
    was one): those are left out, not a failure to read the whole session. A field
    missing that has no default still fails (TypeError)."""
    if d.keys() == _plain_fields(cls):  # every field, as this doctor writes them: its
        built = object.__new__(cls)  # frozen __init__ sets each through object's
        if hasattr(built, "__dict__"):  # __setattr__ (a week's load builds ~100,000)
            built.__dict__.update(d)
        else:  # a reading's class has slots (model.py: its memory)
            for name, value in d.items():
                _set(built, name, value)
        return built
    try:
        return cls(**d)
    except TypeError:
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        if set(d) <= known:
            raise
        return cls(**{k: v for k, v in d.items() if k in known})


def _plain_fields(cls: type) -> frozenset[str] | None:
    """The fields of a dataclass whose __init__ only sets them (no __post_init__, no
    slots): one that can be built from its fields' values alone; else None."""
    if cls not in _PLAIN:
        plain = not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__")
        _PLAIN[cls] = frozenset(f.name for f in dataclasses.fields(cls)) if plain else None
    return _PLAIN[cls]


_PLAIN: dict[type, frozenset[str] | None] = {}
