"""The session store: round trips, and what a user sees when it cannot be used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from windows import gpus, host

from gpudoctor.model import JobExit
from gpudoctor.store import Store, StoreError, encode
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


def test_records_committed_each_tick_survive_a_crash(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    sid = store.create_session(Timeline(["job"], 0.0, 0), "/")
    store.add(sid, "host", 1, encode(host(n=1)[0]))
    store.commit()
    store.add(sid, "host", 2, encode(host(n=1)[0]))  # not committed: the doctor dies here
    loaded = Store(tmp_path / "s.db").load(sid)
    assert len(loaded.host) == 1 and loaded.exit is None


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("these are my notes, not a database\n" * 100)
    with pytest.raises(StoreError, match="cannot use the session store"):
        Store(bad)
    assert bad.read_text().startswith("these are my notes")  # nothing of the user's lost


def test_a_missing_session_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no session 99"):
        Store(tmp_path / "s.db").load(99)
