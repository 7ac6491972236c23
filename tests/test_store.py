"""The session store: round trips, and what a user sees when it cannot be used."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import PY
from windows import gpus, host

from gpudoctor import store as store_module
from gpudoctor.model import JobExit
from gpudoctor.store import SCHEMA_VERSION, Store, StoreError, decode_host, encode
from gpudoctor.timeline import Timeline


def test_a_session_round_trips_through_the_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    timeline = Timeline(["python", "train.py"], 1.7e9, 5_000)
    sid = store.create_session(timeline, "/work", 1234)
    h = host(n=1)[0]
    g = gpus(n=1, reasons=("sw-power-cap",))[0]
    store.add(sid, "host", h.t_mono_ns, encode(h))
    store.add(sid, "gpu", g.t_mono_ns, [encode(g)])
    message = {
        "v": 1,
        "pid": 7,
        "steps": [[0, 10, 10, 1, 0, 2, 3, 1, 1, 32, 0, 0]],
        "facts": {"device": "cpu"},
    }
    store.add_raw(sid, "probe", 6_000, json.dumps(message))
    store.commit()
    store.finish(sid, 9_000, JobExit(0, "exit"), {"steps": 1})
    store.close()

    again = Store(tmp_path / "s.db")
    loaded = again.load(sid)
    assert loaded.command == ["python", "train.py"]
    assert list(loaded.host) == [h] and list(loaded.gpus) == [g]
    assert loaded.total_steps() == 1 and loaded.steps[7][0].batch_size == 32
    assert loaded.facts[7] == {"device": "cpu"}
    assert loaded.exit == JobExit(0, "exit")
    (row,) = again.sessions()
    assert row.id == sid and row.summary == {"steps": 1} and row.duration_s == pytest.approx(4e-6)


def test_the_record_of_a_doctor_killed_mid_run_can_be_read(tmp_path: Path) -> None:
    """kill -9 the doctor while it records: what it committed (each tick) is there; the
    session reads as incomplete, and its report says where the record ends."""
    path = tmp_path / "s.db"
    job = tmp_path / "slow.py"
    job.write_text(
        "import time, torch\n"
        "m = torch.nn.Linear(4, 4); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(100000):\n"
        "    m(torch.ones(2, 4)).sum().backward(); o.step(); time.sleep(0.01)\n"
    )
    doctor = subprocess.Popen(
        [PY, "-m", "gpudoctor", "--store", str(path), "run", "--headless", "--", PY, str(job)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    job_pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while committed(path, "probe") < 3 or committed(path, "host") < 2:
            assert time.monotonic() < deadline, "the doctor recorded nothing"
            time.sleep(0.2)
        job_pids = [c.pid for c in psutil.Process(doctor.pid).children()]
        doctor.send_signal(signal.SIGKILL)
        doctor.wait()
    finally:
        for pid in job_pids:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
    store = Store(path)
    timeline = store.load(1)
    assert timeline.exit is None and timeline.total_steps() > 0 and len(timeline.host) >= 2
    (row,) = store.sessions()
    assert row.exit is None and row.duration_s is None  # `history` shows it incomplete
    store.close()
    report = subprocess.run(
        [PY, "-m", "gpudoctor", "--store", str(path), "report", "1", "--format", "json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "The doctor stopped before the job ended" in report


def committed(path: Path, kind: str) -> int:
    """Records of a kind the doctor has committed (read as another process would)."""
    if not path.exists():
        return 0
    db = sqlite3.connect(path, timeout=5)  # only reads (a read-only open cannot use WAL)
    try:
        return int(db.execute("SELECT count(*) FROM records WHERE kind=?", (kind,)).fetchone()[0])
    except sqlite3.Error:
        return 0
    finally:
        db.close()


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("these are my notes, not a database\n" * 100)
    with pytest.raises(StoreError, match="cannot use the session store"):
        Store(bad)
    assert bad.read_text().startswith("these are my notes")  # nothing of the user's lost


def test_a_missing_session_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no session 99"):
        Store(tmp_path / "s.db").load(99)


OLD_SCHEMA = """
CREATE TABLE sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, started_unix REAL NOT NULL,
    start_mono_ns INTEGER NOT NULL, command TEXT NOT NULL, cwd TEXT, hostname TEXT,
    gpu_reason TEXT, job_pid INTEGER, end_mono_ns INTEGER, exit_json TEXT, summary_json TEXT
);
CREATE TABLE records (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id INTEGER NOT NULL REFERENCES sessions(id),
    t_mono_ns INTEGER NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL
);
INSERT INTO sessions (started_unix, start_mono_ns, command, hostname, job_pid, end_mono_ns,
    exit_json, summary_json)
VALUES (1.7e9, 0, '["python", "old.py"]', 'elsewhere', 99, 2000000000,
    '{"exit_code": 0, "ended_by": "exit"}', '{"steps": 12}');
"""


def test_a_store_from_before_live_sessions_opens_and_lists(tmp_path: Path) -> None:
    """A store written before the doctor recorded its own pid and the output's place:
    the columns are added when it is opened; its sessions read as they did."""
    path = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.executescript(OLD_SCHEMA)
    store = Store(path)
    (row,) = store.sessions()
    assert row.command == ["python", "old.py"] and row.summary == {"steps": 12}
    assert row.doctor_pid is None and not row.live
    sid = store.create_session(Timeline(["python", "new.py"], 1.8e9, 0), "/work", 5)
    new = next(r for r in store.sessions() if r.id == sid)
    assert new.live and new.exit is None  # this process records it
    store.add(sid, "page", 1, {"pid": 5, "steps": 40, "rows_sent": 40})
    store.add(sid, "page", 2, {"pid": 5, "steps": 90, "rows_sent": 80})
    store.add(sid, "page", 2, {"pid": 6, "steps": 7, "rows_sent": 7})
    store.commit()
    assert store.counted_steps(sid) == 97  # each process's latest count, summed
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:  # numbered now: not migrated again
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_numbered_store_from_before_compaction_opens_and_reads_as_rows(tmp_path: Path) -> None:
    """Layout 1 (before compacted sessions) is brought to 2 and its sessions read whole."""
    path = tmp_path / "one.db"
    store = Store(path)
    sid = store.create_session(Timeline(["python", "train.py"], 1.8e9, 0), "/work", 5)
    rows = [[i, 10**9 + i, 10**7, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0] for i in range(40)]
    store.add(sid, "probe", 1, {"pid": 5, "steps": rows})
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version=1")
        db.commit()
    store = Store(path)
    assert store.load(sid).counted_steps() == {5: 40}
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2


def test_readings_with_fields_a_newer_gpudoctor_added_are_read_without_them(
    tmp_path: Path,
) -> None:
    """A newer doctor (the same store schema) records readings with a field this one
    does not know: the session reads, those fields left out; a reading that lacks a
    field it must have is still an error, not a reading made up."""
    store = Store(tmp_path / "s.db")
    sid = store.create_session(Timeline(["python", "train.py"], 1.7e9, 5_000), "/work", 1234)
    h = host(n=1)[0]
    g = gpus(n=1)[0]
    newer_host = {**encode(h), "cpu_pressure_pct": 12.5}
    newer_host["job"] = [{**p, "cgroup": "/user.slice"} for p in newer_host["job"]]
    store.add(sid, "host", h.t_mono_ns, newer_host)
    store.add(sid, "gpu", g.t_mono_ns, [{**encode(g), "nvlink_rx_bytes_per_s": 1e9}])
    store.commit()
    store.finish(sid, 9_000, JobExit(0, "exit"), {"steps": 0})
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db:
        db.execute(
            "UPDATE sessions SET exit_json=?",
            (json.dumps({**encode(JobExit(0, "exit")), "signal_name": None}),),
        )
        db.commit()
    store.close()
    again = Store(tmp_path / "s.db")
    loaded = again.load(sid)
    assert list(loaded.host) == [h] and list(loaded.gpus) == [g]
    assert loaded.exit == JobExit(0, "exit") and again.sessions()[0].exit == JobExit(0, "exit")
    result = subprocess.run(
        [PY, "-m", "gpudoctor", "--store", str(tmp_path / "s.db"), "report", "last"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0 and "python train.py" in result.stdout, result.stderr
    lacking = encode(h)
    del lacking["cores_allowed"]
    with pytest.raises(TypeError):
        decode_host(lacking)


def test_a_store_from_a_newer_gpudoctor_is_left_untouched_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    Store(path).close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
        db.execute("CREATE TABLE rollups (x)")  # whatever the newer one keeps
        db.commit()
    before = path.read_bytes()
    result = subprocess.run(
        [PY, "-m", "gpudoctor", "--store", str(path), "history"], capture_output=True, text=True
    )
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert "written by a newer gpudoctor" in line and "--store" in line
    assert path.read_bytes() == before


def _session(store: Store, started_unix: float, ended: bool = True) -> int:
    sid = store.create_session(Timeline(["python", "t.py"], started_unix, 0), "/work", 5)
    for t in range(3):
        store.add(sid, "host", t, encode(host(n=1)[0]))
    store.commit()
    if ended:
        store.finish(sid, 10, JobExit(exit_code=0, ended_by="exit"), {"steps": 3})
    return sid


def test_prune_deletes_old_sessions_and_their_records_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = Store(path)
    now = time.time()
    old = _session(store, now - 40 * 86400)
    recent = _session(store, now - 3600)
    live = _session(store, now, ended=False)  # this process records it
    store.close()
    result = subprocess.run(
        [PY, "-m", "gpudoctor", "--store", str(path), "history", "--prune", "30d"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("pruned 1 sessions (3 records)")
    store = Store(path)
    assert {r.id for r in store.sessions()} == {recent, live}
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM records WHERE session_id=?", (old,)).fetchone()[0] == 0
    db.close()
    time.sleep(1.1)
    assert store.prune(1.0) == (1, 3)  # the recent one; never a session still recorded
    assert {r.id for r in store.sessions()} == {live}
    store.close()
    bad = subprocess.run(
        [PY, "-m", "gpudoctor", "--store", str(path), "history", "--prune", "soon"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and "not a time: 'soon'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_a_locked_store_keeps_the_records_until_it_can_write_them(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = Store(path)
    sid = store.create_session(Timeline(["python", "x.py"], 1.7e9, 0), "/work", 5)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    store.add(sid, "page", 1, {"pid": 5, "steps": 3, "rows_sent": 3})
    store.commit()
    assert store.trouble == "database is locked" and store.unsaved == 1
    holder.execute("ROLLBACK")
    holder.close()
    store.add(sid, "page", 2, {"pid": 5, "steps": 4, "rows_sent": 4})
    store.commit()
    assert store.trouble is None and store.unsaved == 0
    assert store.counted_steps(sid) == 4 and store.load(sid).page_steps == {5: 4}
    store.close()


def _holding(path: Path) -> subprocess.Popen[str]:
    """Another process in the middle of making a new store (a write lock on it, in
    SQLite's rollback journal, as a doctor holds one while it turns the store to WAL):
    it lets go when its stdin is closed."""
    holder = subprocess.Popen(
        [PY, "-c", "import sqlite3, sys\n"
         f"c = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
         "c.execute('BEGIN IMMEDIATE'); c.execute('CREATE TABLE IF NOT EXISTS t (x)')\n"
         "print('held', flush=True); sys.stdin.read(); c.execute('COMMIT')"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_two_doctors_that_open_a_new_store_at_once_both_open_it(tmp_path: Path) -> None:
    """SQLite refuses a change to WAL at once, without waiting, while another holds a
    lock: the store is opened once the other lets go, within a session start's wait."""
    path = tmp_path / "s.db"
    holder = _holding(path)
    assert holder.stdin is not None
    letting_go = threading.Timer(0.6, holder.stdin.close)
    letting_go.start()
    store = Store(path)
    holder.wait(timeout=10)
    sid = store.create_session(Timeline(["python", "x.py"], 1.7e9, 0), "/work", 5)
    assert [row.id for row in store.sessions()] == [sid]
    store.close()


def test_a_store_held_longer_than_a_start_waits_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gpudoctor.store.FINISH_TRIES_S", 0.3)
    path = tmp_path / "s.db"
    holder = _holding(path)
    try:
        with pytest.raises(
            StoreError, match=r"cannot use the session store .*: database is locked"
        ):
            Store(path)
    finally:
        holder.communicate(timeout=10)


def test_a_sessions_start_waits_for_another_doctors_write_and_then_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's first rows must be written now: another process's write lock on the
    store is waited for (the session is made once it lets go), and one held past the
    wait is a StoreError that names the store and the lock."""
    path = tmp_path / "s.db"
    store = Store(path)
    timeline = Timeline(["python", "x.py"], 1.7e9, 0)
    holder = _holding(path)
    assert holder.stdin is not None
    letting_go = threading.Timer(0.6, holder.stdin.close)
    letting_go.start()
    sid = store.create_session(timeline, "/work", 5)
    holder.wait(timeout=10)
    assert [row.id for row in store.sessions()] == [sid]
    monkeypatch.setattr("gpudoctor.store.FINISH_TRIES_S", 0.3)
    holder = _holding(path)
    try:
        with pytest.raises(StoreError, match=r"cannot write the session store .*s\.db: .*locked"):
            store.create_session(timeline, "/work", 6)
    finally:
        holder.communicate(timeout=10)
    assert [row.id for row in store.sessions()] == [sid]
    store.close()


def test_a_long_sessions_gpu_readings_load_as_the_live_timeline_kept_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More GPU readings than a timeline keeps (readings.py: the last ten minutes whole,
    the older spread; rooms of 12 and 6 readings here, two GPUs a tick): the loaded ones
    are those a live timeline fed every reading kept, only their records decoded, and a
    profiler capture's marker is where the run was when it arrived."""
    monkeypatch.setattr("gpudoctor.timeline.GPU_ROOM", 12)
    monkeypatch.setattr("gpudoctor.timeline.GPU_RECENT_ROOM", 6)
    decoded: list[int] = []
    real_decode = store_module.decode_gpu

    def counting(data: Any) -> Any:
        decoded.append(1)
        return real_decode(data)

    monkeypatch.setattr(store_module, "decode_gpu", counting)
    store = Store(tmp_path / "s.db")
    sid = store.create_session(Timeline(["python", "x.py"], 1.7e9, 0), "/work", 5)
    live = Timeline(["python", "x.py"], 1.7e9, 0)
    ticks = []
    for i, g in enumerate(gpus(n=60)):
        pair = (g, dataclasses.replace(g, index=1, uuid="GPU-y", util_gpu_pct=i))
        ticks.append(pair)
        live.gpus.extend(pair)
        store.add(sid, "host", g.t_mono_ns, encode(host(n=1, t0=g.t_mono_ns)[0]))
        store.add(sid, "gpu", g.t_mono_ns, [encode(x) for x in pair])
        if i == 20:
            store.add_raw(
                sid, "probe", g.t_mono_ns, json.dumps({"pid": 5, "facts": {"profile": {}}})
            )
    store.commit()
    loaded = store.load(sid)
    assert live.gpus.stride_ns > 0  # thinned: the test reads what it means to
    assert list(loaded.gpus) == list(live.gpus) and loaded.gpus[-1].util_gpu_pct == 59
    assert loaded.gpus.evenly() == live.gpus.evenly()
    assert len(decoded) == len(loaded.gpus) < 60
    assert loaded.profiles == [ticks[20][0].t_mono_ns]
    store.close()


def test_a_session_followed_in_pieces_reads_each_record_once_as_a_load_does(
    tmp_path: Path,
) -> None:
    """A follower of a live session (a second doctor showing it, the exporter) reads the
    records written since its last read, whatever their kind, GPU readings too (read in a
    query of their own): none twice, none missed, the same timeline as one load at the
    end, and the id it goes on from is the newest record's."""
    store = Store(tmp_path / "s.db")
    sid = store.create_session(Timeline(["python", "x.py"], 1.7e9, 0), "/work", 5)
    follower, _ = store.load_from(sid)
    at = 0
    for i, g in enumerate(gpus(n=12)):
        store.add(sid, "host", g.t_mono_ns, encode(host(n=1, t0=g.t_mono_ns)[0]))
        store.add(sid, "gpu", g.t_mono_ns, [encode(g)])
        rows = [[10 * i + k, g.t_mono_ns + k, 1_000_000] for k in range(10)]
        store.add_raw(sid, "probe", g.t_mono_ns, json.dumps({"pid": 5, "steps": rows}))
        store.commit()
        if i % 3 == 1:  # read after some ticks, not others
            at = store.follow(sid, follower, at)
            (newest,) = store.db.execute("SELECT MAX(id) FROM records").fetchone()
            assert at == newest
    at = store.follow(sid, follower, at)
    assert store.follow(sid, follower, at) == at  # nothing new: nothing read
    whole = store.load(sid)
    assert list(follower.gpus) == list(whole.gpus) == list(gpus(n=12))
    assert list(follower.host) == list(whole.host) and len(whole.host) == 12
    assert follower.counted_steps() == whole.counted_steps() == {5: 120}
    assert list(follower.steps[5]) == list(whole.steps[5])
    store.close()
