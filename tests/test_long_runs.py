"""Long runs on many ranks (issue 14): the timeline keeps the recent steps as rows, under
one bound for all processes together, and every steady step rolled up, so that the
report of a long run says what the rows of every step would have said."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sqlite3
import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import PY, ROOT

from gpudoctor import compaction, jsontext
from gpudoctor import timeline as timeline_module
from gpudoctor.compaction import Compactor
from gpudoctor.diagnosis.ranks import RankSummary
from gpudoctor.diagnosis.rollup import QUANTILE_ERROR, StepRollup
from gpudoctor.diagnosis.window import WARMUP_STEPS, median_ms, percentile, percentile_ms
from gpudoctor.model import StepRecord
from gpudoctor.probe import protocol
from gpudoctor.report.build import build
from gpudoctor.series import run_series
from gpudoctor.snapshot import take
from gpudoctor.sources.host import HostReader
from gpudoctor.store import Store, apply_record, encode
from gpudoctor.timeline import MAX_STEP_ROWS, MIN_STEP_ROWS, Timeline, steps_of

RANKS = 8
STEPS = 40_000  # per rank: 320,000 in all, more than MAX_STEP_ROWS
BASE_PID = 5000


def rows(rank: int, start: int, n: int, rng: random.Random) -> list[list[int]]:
    """Probe rows (protocol.STEP_FIELDS) of a DataLoader-fed step: ~20 ms in the run's
    first half, ~10 ms after (the recent rows alone would say 10), a third of it waiting
    for data; every fourth step measured in detail."""
    out = []
    for i in range(start, start + n):
        scale = 20e6 if i < STEPS // 2 else 10e6
        wall = int(rng.lognormvariate(0, 0.3) * scale) + rank * 50_000
        detail = int(i % 4 == 0)
        loader = wall // 3 if detail else 0
        forward, backward = (wall // 6, wall // 4) if detail else (0, 0)
        out.append([i, 10**9 + i * 10_000_000, wall, loader, 0, forward, backward, 0, 1,
                    32 if detail else -1, 0, 0, detail])  # fmt: skip
    return out


def test_a_long_run_on_eight_ranks_keeps_bounded_rows_and_the_whole_runs_measures() -> None:
    rng = random.Random(7)
    timeline = Timeline(["python", "train.py"], 0.0, 0)
    walls: list[float] = []  # rank 0's steady steps, every one
    detailed = [0, 0]  # rank 0's detailed wall and loader
    for start in range(0, STEPS, 400):  # as the probe sends them: 400 rows a message
        for rank in range(RANKS):
            batch = rows(rank, start, 400, rng)
            if rank == 0:
                for r in batch:
                    if r[0] >= WARMUP_STEPS:
                        walls.append(r[2] / 1e6)
                        if r[12]:
                            detailed[0] += r[2]
                            detailed[1] += r[3]
            timeline.ingest_probe({"pid": BASE_PID + rank, "steps": batch})
        if start == 0:
            for rank in range(RANKS):
                timeline.ingest_probe({"pid": BASE_PID + rank, "facts": {"rank": rank}})
    kept = {pid: len(steps) for pid, steps in timeline.steps.items()}
    assert sum(kept.values()) <= MAX_STEP_ROWS
    assert all(n == max(MIN_STEP_ROWS, MAX_STEP_ROWS // RANKS) for n in kept.values()), kept
    assert timeline.counted_steps() == {BASE_PID + r: STEPS for r in range(RANKS)}

    report = build(timeline, 1)
    s = report.steps
    assert s.count == STEPS and s.steady_count == len(walls)
    exact_median, exact_p90 = statistics.median(walls), percentile(walls, 90)
    assert s.median_ms is not None and s.p90_ms is not None
    assert abs(s.median_ms - exact_median) <= QUANTILE_ERROR * exact_median + 0.01
    assert abs(s.p90_ms - exact_p90) <= QUANTILE_ERROR * exact_p90 + 0.01
    assert s.data_wait_fraction == round(detailed[1] / detailed[0], 4)  # sums: exact
    assert report.findings[0].id == "input-bound"


def test_a_short_run_keeps_every_row_and_reads_as_before() -> None:
    rng = random.Random(3)
    timeline = Timeline(["python", "train.py"], 0.0, 0)
    timeline.ingest_probe({"pid": BASE_PID, "steps": rows(0, 0, 400, rng)})
    assert not timeline.rolled_up(BASE_PID)
    assert timeline.window().rollup is None  # the rows themselves give the measures
    walls = [r.wall_ns / 1e6 for r in timeline.steps[BASE_PID] if r.number >= WARMUP_STEPS]
    measures = build(timeline, 1).steps
    assert measures.median_ms == round(statistics.median(walls), 3)
    # 100 detailed rows of batch 32: the batch size a step takes, 32, not the average
    # of the middle two (an even count gave 32.0, and "batch_size": 32.0 in the JSON)
    assert measures.batch_size == 32 and type(measures.batch_size) is int


def test_the_median_and_p90_from_the_rows_ints_are_the_floats_bit_for_bit() -> None:
    """The measures are taken from the rows' own ints in order (no list of new floats
    for a run's 100,000 rows), and are what statistics.median and percentile of the
    times in milliseconds give, to the last bit, odd and even counts."""
    rng = random.Random(5)
    for n in (1, 2, 3, 10, 11, 400, 401):
        walls_ns = sorted(int(rng.lognormvariate(0, 0.5) * 13_333_337) for _ in range(n))
        walls_ms = [w / 1e6 for w in walls_ns]
        assert median_ms(walls_ns) == statistics.median(walls_ms)
        for q in (50, 90, 99):
            assert percentile_ms(walls_ns, q) == percentile(walls_ms, q)
    timeline = Timeline(["python", "train.py"], 0.0, 0)
    timeline.ingest_probe({"pid": BASE_PID, "steps": rows(0, 0, 401, rng)})
    walls = [r.wall_ns / 1e6 for r in timeline.steps[BASE_PID] if r.number >= WARMUP_STEPS]
    measures = build(timeline, 1).steps
    assert (measures.median_ms, measures.p90_ms) == (
        round(statistics.median(walls), 3),
        round(percentile(walls, 90), 3),
    )


# -- the store: older records compacted (compaction.py) ------------------------------------


def record_a_run(
    store: Store, ranks: int, steps: int, live: Compactor | None = None, counters: bool = False
) -> tuple[int, int]:
    """A run as the doctor records it: probe messages of 400 rows per rank (10 ms steps,
    first half twice as slow), a host reading and two GPUs' each second (a real
    reading of this machine, and the H200 recording's), counter pages. (session, end)
    With `live`, each message is also read and rolled up as the live doctor does, and
    handed to that compactor (LaunchedJob._drain). With `counters`, every other message
    carries the facts a real probe sends again and again (its counts and time ledger),
    and a capture's result comes twice (the fact `profile`)."""
    from test_devices import eight_gpus

    rng = random.Random(11)
    timeline = Timeline(["python", "train.py"], 0.0, 0)
    session = store.create_session(timeline, "/tmp")
    host = HostReader().read()
    gpus = eight_gpus()[:2]
    for start in range(0, steps, 400):
        for rank in range(ranks):
            batch = rows(rank, start, 400, rng)
            t = batch[-1][1]
            # as the probe sends it: its version, sequence and cumulative counts, the
            # CUDA allocator's gauges
            message: dict[str, Any] = {
                "v": "1.1", "pid": BASE_PID + rank, "seq": start // 400, "steps": batch,
                "counts": {"steps": start + 400, "rows": start + 400, "dropped": 0},
                "gauges": {"t": t, "peak_reserved": 2**30, "alloc_retries": 0},
            }  # fmt: skip
            if start == 0:
                message["facts"] = {"rank": rank}
            if counters and start // 400 % 2:
                message["facts"] = {
                    "forwards": start + 400, "backwards": start + 400,
                    "dataloader_batches": {"0": start + 400},
                    "ledger_ns": {"first_step_start": 10**9, "last_step_end": t, "checkpoints": 0},
                }  # fmt: skip
            if counters and start in (4_000, 4_400):
                message["facts"] = {**message.get("facts", {}), "profile": {"at": start}}
            text = json.dumps(message)
            store.add_raw(session, "probe", t, text)
            if live is not None:
                read = jsontext.loads(text)
                live.knows(t, text, read, timeline.ingest_probe(read, apart=True))
            store.add(session, "page", t, {"pid": BASE_PID + rank, "steps": start + 400})
        for second in range(4):  # 400 steps of 10 ms: four seconds
            t = 10**9 + (start * 10_000_000) + second * 10**9
            if second % 2 == 0:  # another node's doctor sends its ranks every 2 s
                other = RankSummary(
                    pid=900, rank=4, local_rank=0, host="node2", steps=start + 400,
                    median_ms=20.0, p90_ms=22.0, samples_per_s=None, data_wait_fraction=0.3,
                    uses_dataloader=True, detailed_median_ms=20.0,
                    parts_ms=dict.fromkeys(("data", "host", "forward", "backward", "optimizer"), 1.0),
                )  # fmt: skip
                store.add(session, "ranks", t, {"node": "node2", "ranks": [other.as_dict()]})
            store.add(session, "host", t, encode(dataclasses.replace(host, t_mono_ns=t)))
            store.add(
                session, "gpu", t, [encode(dataclasses.replace(g, t_mono_ns=t)) for g in gpus]
            )
        store.commit()
    return session, 10**9 + steps * 10_000_000


def compact_all(store: Store, session: int, before_ns: int) -> None:
    """Reads until nothing is left to do, as the live doctor does over its ticks."""
    compactor = Compactor()
    while store.compact(session, before_ns, compactor):
        pass


def kinds(store: Store, session: int) -> dict[str, tuple[int, int]]:
    """Records of each kind: (count, bytes)."""
    return {
        kind: (n, size)
        for kind, n, size in store.db.execute(
            "SELECT kind, COUNT(*), SUM(LENGTH(data)) FROM records WHERE session_id=?"
            " GROUP BY kind",
            (session,),
        )
    }


def test_a_replay_draws_the_stretch_the_store_keeps_whole_beyond_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store compacted up to 60 s of a 400 s run, the rest kept whole, loaded with room
    for the newest 50 s of rows: its plot draws the compacted slots, then the stretch kept
    whole before the rows (from the bins the load makes of it, as the live doctor's),
    then the rows, with no gap; before, nothing between 60 s and 350 s. The run's own
    measures are those of the rows rolled up whole."""
    monkeypatch.setattr(compaction, "SLOT_S", 10.0)
    store = Store(tmp_path / "s.db")
    session, end = record_a_run(store, ranks=1, steps=STEPS)  # 10 ms apart: 400 s
    compact_all(store, session, 10**9 + 60 * 10**9)
    monkeypatch.setattr(timeline_module, "MAX_STEP_ROWS", 5_000)
    loaded = store.load(session)
    assert loaded.slots[BASE_PID] and loaded.steps[BASE_PID].end_at(0) > 340 * 10**9
    series = run_series(loaded, points=80, seen={})
    xs = [x for x, _ in series.step_p50_ms]
    # the slots at their last messages' ends (a message is 4 s of steps), the bins every
    # 10 s from the last slot to the rows, the rows every 5 s
    gaps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
    assert xs[0] <= 11 and xs[-1] >= 395 and max(gaps) <= 12
    assert len([x for x in xs if 60 < x < 345]) >= 28
    # each point as the rows say: ~20 ms a step in the first half, ~10 ms after
    for x, p50 in series.step_p50_ms:
        if 70 < x < 190 or 210 < x < 340:
            assert abs(p50 - (20 if x < STEPS * 0.005 else 10)) < 1.5, (x, p50)
    # the run's rollup: the slots' and the loaded steps' together, every steady step
    assert loaded.rollups[BASE_PID].count == STEPS - WARMUP_STEPS
    rest = Store(tmp_path / "s.db").load(session)  # loaded again: the same measures
    assert rest.rollups[BASE_PID] == loaded.rollups[BASE_PID]


def test_the_live_doctors_compaction_takes_what_it_read_and_writes_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live doctor hands each probe message it read and rolled up to its compactor,
    which then does not decode the message's text again: the store it leaves holds the
    same records, bit for bit (the rollups' buckets aside, whose order may differ), as a
    compaction that decodes every message."""
    monkeypatch.setattr(compaction, "SLOT_S", 10.0)
    decoded: list[str] = []
    real_message = compaction._message

    def counted(data: str) -> dict[str, Any] | None:
        decoded.append(data)
        return real_message(data)

    monkeypatch.setattr(compaction, "_message", counted)
    stores = {}
    for name in ("decoding", "live"):
        store = Store(tmp_path / f"{name}.db")
        live = Compactor() if name == "live" else None
        session, end = record_a_run(store, ranks=2, steps=8_000, live=live)
        decoded.clear()
        compactor = live or Compactor()
        while store.compact(session, end - 20 * 10**9, compactor):
            pass
        stores[name] = [
            (kind, t, json.loads(data) if kind == "rollup" else data)
            for kind, t, data in store.db.execute(
                "SELECT kind, t_mono_ns, data FROM records WHERE session_id=?"
                " AND kind IN ('probe', 'rollup', 'page') ORDER BY id",  # (host: read now)
                (session,),
            )
        ]
        probes = sum(kind == "probe" for kind, _, _ in stores[name])
        if name == "live":
            assert not decoded  # each message taken as read, none decoded again
        else:
            assert len(decoded) >= probes > 0
    assert any(kind == "rollup" for kind, _, _ in stores["live"])
    assert stores["live"] == stores["decoding"]


def test_the_live_compactor_keeps_at_most_max_known_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While compaction cannot run (its store locked or full), what the live doctor
    read stays bounded: past MAX_KNOWN the oldest go (decoded when their turn comes)."""
    monkeypatch.setattr(compaction, "MAX_KNOWN", 3)
    compactor = Compactor()
    for t in range(5):
        text = json.dumps({"v": "1.1", "pid": 1, "seq": t, "steps": []})
        compactor.knows(t, text, json.loads(text), None)
    assert sorted(key[0] for key in compactor.known) == [2, 3, 4]


def test_what_the_live_compactor_holds_of_a_message_is_packed_and_reads_back_the_same() -> None:
    """Each message the live doctor read waits for compaction (minutes; up to MAX_KNOWN
    of them) in under a kilobyte: its rollup packed, the rest as text. They read back
    as the same rollup (a zero-length step's bucket, detailed sums, batch sizes) and the
    same message without its rows."""
    rng = random.Random(3)
    batch = rows(0, WARMUP_STEPS, 400, rng)
    batch[5][2] = 0  # a step timed at 0 ns: bucket -1
    message = {"v": "1.1", "pid": BASE_PID, "seq": 9, "steps": batch,
               "counts": {"steps": 400, "rows": 400, "dropped": 0},
               "gauges": {"t": 5, "peak_reserved": 2**40, "alloc_retries": 0}}  # fmt: skip
    text = json.dumps(message)
    read = jsontext.loads(text)
    rollup = Timeline(["python", "train.py"], 0.0, 0).ingest_probe(read, apart=True)
    assert rollup is not None and rollup.detailed == 100 and rollup.buckets[-1] == 1
    compactor = Compactor()
    compactor.knows(7, text, read, rollup)
    ((pid, n, packed, rest),) = compactor.known.values()
    assert (pid, n) == (BASE_PID, 400) and packed is not None
    assert StepRollup.unpacked(packed) == rollup
    assert json.loads(rest) == {k: v for k, v in message.items() if k != "steps"}
    assert len(packed) + len(rest) < 1000  # the rollup's bucket dict alone was ~1.4 kB


def test_a_compaction_pass_holds_about_a_megabyte_of_records_at_once(tmp_path: Path) -> None:
    """A fast loop's probe messages are tens of KB each: a pass of PASS_RECORDS of them
    held tens of MB of text at once in the doctor. A pass stops once it has read
    PASS_BYTES (its last record whole), and the next pass goes on from there."""
    store = Store(tmp_path / "s.db")
    session, _end = record_a_run(store, ranks=2, steps=8_000)
    sizes = [
        n
        for (n,) in store.db.execute(
            f"SELECT LENGTH(data) FROM records WHERE session_id=? AND kind IN {compaction.KINDS}"
            " ORDER BY id",
            (session,),
        )
    ]
    compactor = Compactor()
    passes = []
    while read := store.compact(session, 0, compactor):  # no slot old enough to write
        passes.append(read)
    assert sum(passes) == len(sizes) and len(passes) > 1
    start = 0
    for read in passes[:-1]:
        taken = sizes[start : start + read]
        assert sum(taken[:-1]) < compaction.PASS_BYTES <= sum(taken)
        assert read < compaction.PASS_RECORDS
        start += read


def test_a_compacted_store_gives_the_report_of_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slot = 10  # seconds of record time compacted together (600 in a real run)
    monkeypatch.setattr(compaction, "SLOT_S", float(slot))
    store = Store(tmp_path / "s.db")
    session, end = record_a_run(store, ranks=4, steps=20_000)  # 200 s
    whole = build(store.load(session), session)
    before = kinds(store, session)
    follower = store.load(session)  # a doctor that followed the run live, as rows
    follower_at = store.db.execute("SELECT MAX(id) FROM records").fetchone()[0]

    cutoff = end - 60 * 10**9  # the last minute kept whole
    compact_all(store, session, cutoff)
    after = kinds(store, session)
    compacted = store.load(session)
    report = build(compacted, session)

    # counts exact, measures within the histogram's error, the same findings
    assert compacted.counted_steps() == {BASE_PID + r: 20_000 for r in range(4)}
    s, w = report.steps, whole.steps
    assert (s.count, s.steady_count) == (w.count, w.steady_count) == (20_000, 20_000 - WARMUP_STEPS)
    assert s.median_ms is not None and w.median_ms is not None
    assert s.p90_ms is not None and w.p90_ms is not None
    assert abs(s.median_ms - w.median_ms) <= QUANTILE_ERROR * w.median_ms + 0.01
    assert abs(s.p90_ms - w.p90_ms) <= QUANTILE_ERROR * w.p90_ms + 0.01
    assert s.data_wait_fraction == w.data_wait_fraction
    assert [f.id for f in report.findings] == [f.id for f in whole.findings]
    assert [r.rank for r in report.ranks][:4] == [0, 1, 2, 3]  # from the recent rows
    # whole slots before the cutoff are rolled up, one record a rank a slot; the rows
    # after the last whole slot are kept
    kept = compacted.steps[BASE_PID]
    assert kept[0].t_end_mono_ns >= cutoff - slot * 10**9 and len(kept) >= 6_000
    rolled_slots = (cutoff - 10**9) // (slot * 10**9)  # the run's records start at 1 s
    assert after["rollup"][0] == 4 * rolled_slots
    # readings thinned to one a minute before the cutoff, whole after it
    times = [h.t_mono_ns for h in compacted.host]
    old = [t for t in times if t < cutoff - slot * 10**9]
    assert len(old) == len({t // (60 * 10**9) for t in old}) <= 3
    assert len([t for t in times if t >= cutoff]) >= 59
    assert after["host"][0] == after["gpu"][0] == len(times) < before["host"][0] / 2
    assert after["probe"][1] < before["probe"][1] / 3
    # old probe messages: no rows, no routine keys; each rank's gauges and cumulative
    # counts in its last message of a slot; the facts kept
    old_messages = [
        (t // (slot * 10**9), json.loads(d))
        for t, d in store.db.execute(
            "SELECT t_mono_ns, data FROM records WHERE kind='probe' AND t_mono_ns<?",
            (cutoff - slot * 10**9,),
        )
    ]
    assert not any("steps" in m or "seq" in m or "v" in m for _, m in old_messages)
    gauges = [n for n, m in old_messages if m["pid"] == BASE_PID and "gauges" in m]
    counts = [n for n, m in old_messages if m["pid"] == BASE_PID and "counts" in m]
    assert gauges == counts == sorted(set(gauges)) and len(gauges) >= rolled_slots - 1
    assert sum("facts" in m for _, m in old_messages) == 4
    # the other node's ranks: one summary a minute kept, the newest in the report
    sent = [t for (t,) in store.db.execute("SELECT t_mono_ns FROM records WHERE kind='ranks'")]
    old_sent = [t for t in sent if t < cutoff - slot * 10**9]
    assert len(old_sent) == len({t // (60 * 10**9) for t in old_sent}) <= 3
    assert compacted.remote_ranks["node2"][0].steps == 20_000
    assert 4 in [r.rank for r in report.ranks]
    # a rank's cumulative counter pages: its last of each slot
    pages = [
        (json.loads(d)["pid"], t // (slot * 10**9))
        for t, d in store.db.execute(
            "SELECT t_mono_ns, data FROM records WHERE kind='page' AND t_mono_ns<?",
            (cutoff - slot * 10**9,),
        )
    ]
    assert len(pages) == len(set(pages)) and len(pages) < before["page"][0] / 2

    # a replay of the compacted stretch shows its slot's steps (~20 ms each)
    for at_s, count, median in ((50, 4_900, 20.0), (120, 11_900, 20.0)):
        shown = take(compacted, until_ns=at_s * 10**9)
        assert shown.steps_total is not None and abs(shown.steps_total - count) <= slot * 100
        assert shown.step_p50_ms is not None and 0.9 * median < shown.step_p50_ms < 1.1 * median
        assert shown.data_wait_fraction == pytest.approx(1 / 3, abs=0.01)

    # compacting again changes nothing; a follower that read the rows counts them once
    compact_all(store, session, cutoff)
    assert kinds(store, session) == after
    assert build(store.load(session), session).steps == report.steps
    store.follow(session, follower, follower_at)
    assert follower.counted_steps() == compacted.counted_steps()
    assert build(follower, session).steps.count == 20_000
    store.close()


def test_facts_sent_again_and_again_keep_their_newest_value_a_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real probe sends its counts of forwards and its time ledger with every other
    message (bench/RESULTS.md), and compaction kept each one: ~100 MB a day a process.
    A slot keeps each such fact's newest value of a process in the message that sent it;
    a fact sent once stays where it was, and every capture's result (an event) stays.
    The store loads the same facts, captures and report as before compaction, and a
    live doctor's compaction writes what one that decodes every message writes."""
    slot = 10
    monkeypatch.setattr(compaction, "SLOT_S", float(slot))
    stores = {}
    for name in ("decoding", "live"):
        store = Store(tmp_path / f"{name}.db")
        live = Compactor() if name == "live" else None
        session, end = record_a_run(store, ranks=2, steps=20_000, live=live, counters=True)
        before, whole = kinds(store, session), store.load(session)
        cutoff = end - 60 * 10**9
        compactor = live or Compactor()
        while store.compact(session, cutoff, compactor):
            pass
        compacted = store.load(session)
        assert compacted.facts == whole.facts and compacted.facts[BASE_PID]["rank"] == 0
        assert compacted.facts[BASE_PID]["forwards"] == 20_000
        assert len(compacted.profiles) == len(whole.profiles) == 4  # 2 captures, 2 ranks
        assert build(compacted, session).steps == build(whole, session).steps
        old = [
            (t // (slot * 10**9), json.loads(d))
            for t, d in store.db.execute(
                "SELECT t_mono_ns, data FROM records WHERE kind='probe' AND t_mono_ns<?",
                (cutoff - slot * 10**9,),
            )
        ]
        slots = {n for n, _ in old}
        for pid in (BASE_PID, BASE_PID + 1):
            with_facts = [(n, m["facts"]) for n, m in old if m["pid"] == pid and "facts" in m]
            counted = [n for n, f in with_facts if "forwards" in f]
            assert counted == sorted(slots)  # the newest counts of each slot, once
            assert sum("rank" in f for _, f in with_facts) == 1
            assert sum("profile" in f for _, f in with_facts) == 2
            # the slot's last message with counts holds them (seq 0 is the rank's)
            assert len(with_facts) <= len(slots) + 3
        # what is left of the old stretch's messages: a few hundred bytes a slot a rank
        # (each message with counts was ~200 bytes compacted, two in each second)
        left = sum(len(json.dumps(m)) for _, m in old)
        assert left < 300 * 2 * len(slots) + 2_000, (left, len(slots))
        assert kinds(store, session)["probe"][1] < before["probe"][1]
        stores[name] = sorted(
            d for (d,) in store.db.execute("SELECT data FROM records WHERE kind='probe'")
        )
        store.close()
    assert stores["live"] == stores["decoding"]


def test_a_store_compacted_to_its_end_gives_the_same_step_measures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A doctor that read on after its job's last step (a slow exit on a busy machine)
    compacts the last step rows too: the report from the rollups alone still says the
    data wait and the batch size the rows said."""
    monkeypatch.setattr(compaction, "SLOT_S", 10.0)
    store = Store(tmp_path / "s.db")
    # 400 s: the GPU readings, thinned to one a minute, still enough for their rules
    session, end = record_a_run(store, ranks=1, steps=40_000)
    whole = build(store.load(session), session)
    later = end + 15 * 10**9  # a host reading in a slot after the job's last message
    store.add(
        session, "host", later, encode(dataclasses.replace(HostReader().read(), t_mono_ns=later))
    )
    store.commit()
    compact_all(store, session, later + 60 * 10**9)
    compacted = store.load(session)
    assert not compacted.steps.get(BASE_PID)  # no row left: the rollups alone
    report = build(compacted, session)
    assert [f.id for f in report.findings] == [f.id for f in whole.findings]
    assert [r.rank for r in report.ranks] == [r.rank for r in whole.ranks] == [0, 4]
    s, w = report.steps, whole.steps
    assert (s.count, s.steady_count) == (w.count, w.steady_count) == (40_000, 40_000 - WARMUP_STEPS)
    assert s.data_wait_fraction == w.data_wait_fraction == pytest.approx(1 / 3, abs=0.01)
    assert s.batch_size == w.batch_size == 32
    assert s.split == w.split
    store.close()


def test_the_live_doctor_compacts_its_session_and_the_report_stays(tmp_path: Path) -> None:
    """A fast-step job under the real doctor, told to keep 3 s whole and compact every
    second, a second of records at a time: its store holds rollups and the report rebuilt from it is the report the
    run wrote from memory."""
    db, report = tmp_path / "s.db", tmp_path / "run.json"
    env = {**os.environ, "GPUDOCTOR_KEEP_WHOLE_S": "3", "GPUDOCTOR_COMPACT_EVERY_S": "1",
           "GPUDOCTOR_SLOT_S": "1"}  # fmt: skip
    job = [PY, str(ROOT / "bench" / "loop_job.py"), "--hidden", "16", "--batch-size", "4",
           "--steps", "40000"]  # fmt: skip
    run = subprocess.run(
        [PY, "-m", "gpudoctor", "--store", str(db), "run", "--headless", "--report",
         str(report), "--", *job],
        capture_output=True, text=True, env=env, timeout=180,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    live = json.loads(report.read_text())["steps"]
    again = subprocess.run(
        [PY, "-m", "gpudoctor", "report", "--store", str(db), "--format", "json", "last"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    stored = json.loads(again.stdout)["steps"]
    with sqlite3.connect(db) as con:
        rolled = con.execute("SELECT SUM(json_extract(data, '$.rows')) FROM records"
                             " WHERE kind='rollup'").fetchone()[0]  # fmt: skip
    assert rolled and rolled > live["count"] / 4, (rolled, live["count"])
    assert stored["count"] == live["count"] and stored["steady_count"] == live["steady_count"]
    assert (
        abs(stored["median_ms"] - live["median_ms"]) <= QUANTILE_ERROR * live["median_ms"] + 0.001
    )
    assert abs(stored["p90_ms"] - live["p90_ms"]) <= QUANTILE_ERROR * live["p90_ms"] + 0.001
    assert stored["data_wait_fraction"] == live["data_wait_fraction"]


def test_two_doctors_compacting_one_store_at_once_both_keep_their_sessions(
    tmp_path: Path,
) -> None:
    """Two runs on one server, one store: both write and compact it at once (each its
    own session); each session's count and report are whole."""
    db = tmp_path / "s.db"
    env = {**os.environ, "GPUDOCTOR_KEEP_WHOLE_S": "2", "GPUDOCTOR_COMPACT_EVERY_S": "1",
           "GPUDOCTOR_SLOT_S": "1"}  # fmt: skip
    runs = [
        subprocess.Popen(
            [
                PY,
                "-m",
                "gpudoctor",
                "--store",
                str(db),
                "run",
                "--headless",
                "--report",
                str(tmp_path / f"run{n}.json"),
                "--",
                PY,
                str(ROOT / "bench" / "loop_job.py"),
                "--hidden",
                "16",
                "--batch-size",
                "4",
                "--steps",
                str(steps),
                # a step every 2 ms: seconds of rows for each doctor to compact while the
                # other does, at a tenth of the CPU of a loop flat out (this file runs in
                # the idle CPU the rest of the suite leaves: scripts/test.sh)
                "--pace-ms",
                "2",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )  # fmt: skip
        for n, steps in enumerate((2_000, 3_000))
    ]
    for run in runs:
        _, err = run.communicate(timeout=240)
        assert run.returncode == 0, err
    store = Store(db)
    sessions = sorted(store.sessions(), key=lambda r: r.id)
    assert len(sessions) == 2
    with sqlite3.connect(db) as con:
        rolled = dict(
            con.execute("SELECT session_id, COUNT(*) FROM records WHERE kind='rollup' GROUP BY 1")
        )
    assert all(rolled.get(s.id, 0) > 0 for s in sessions), rolled  # both compacted
    for row in sessions:
        n = 0 if "2000" in row.command else 1
        live = json.loads((tmp_path / f"run{n}.json").read_text())["steps"]
        stored = build(store.load(row.id), row.id).steps
        assert stored.count == live["count"] and stored.steady_count == live["steady_count"]
        assert stored.data_wait_fraction == live["data_wait_fraction"]
    store.close()


def test_rows_taken_in_bulk_roll_up_as_one_at_a_time() -> None:
    """The timeline builds a message's rows and rolls them up in bulk (a fast loop sends
    them by the hundred): the same records and the same rollup as one row at a time, with
    warm-up rows, zero-length steps, unknown batch sizes and a first-version probe's rows
    (no `detail` field) among them."""
    rng = random.Random(5)
    batch = rows(0, 0, 300, rng)
    batch[7][2] = 0  # a step timed at 0 ns (a coarse clock)
    old = [r[:-1] for r in rows(1, 300, 50, rng)]  # STEP_FIELDS_V1_0: all detailed
    timeline = Timeline(["python", "train.py"], 0.0, 0)
    timeline.ingest_probe({"pid": BASE_PID, "steps": [list(r) for r in batch]})
    timeline.ingest_probe({"pid": BASE_PID, "steps": [list(r) for r in old]})
    # a step only counted and timed, as the probe sends it: its first three fields, among
    # whole rows (protocol.COUNTED_FIELDS); the record holds the same as a whole row would
    counted = [
        [n, 10**9 + n, 5_000_000 + n, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0] for n in range(350, 400)
    ]
    assert all(r[3:] == list(protocol.COUNTED_REST) for r in counted)
    mixed = [r[:3] if r[0] % 5 else list(r) for r in counted]
    timeline.ingest_probe({"pid": BASE_PID, "steps": mixed})
    one_by_one = StepRollup()
    expected = []
    for r in [*batch, *(row + [1] for row in old), *counted]:
        n, t, wall, loader, outside, fwd, bwd, opt, forwards, size, syncs, copies, detail = r
        record = StepRecord(
            BASE_PID, n, t, wall, loader, outside, fwd, bwd, opt, forwards,
            None if size < 0 else size, syncs, copies, detail,
        )  # fmt: skip
        expected.append(record)
        if record.number >= WARMUP_STEPS:
            one_by_one.add(record)
    assert list(timeline.steps[BASE_PID]) == expected
    assert timeline.rollups[BASE_PID] == one_by_one
    # every fourth row detailed, two of them (0 and 4) in the warm-up; the 0 ns step apart
    assert one_by_one.count == 400 - WARMUP_STEPS and one_by_one.detailed == 75 - 2 + 50
    assert one_by_one.buckets[-1] == 1
    for width in (2, 4, 11):
        with pytest.raises(ValueError):
            steps_of(BASE_PID, [[1] * width])


def test_a_loaded_session_holds_its_rows_and_makes_the_same_steps_and_rollups() -> None:
    """A store's records loaded (a report, a replay): the rows are rolled up as read and
    made steps at the end, the newest only; the steps kept, the rollups and the report
    are those of the rows taken in one message at a time, as the live doctor does."""
    rng = random.Random(11)
    messages = [
        {"pid": BASE_PID + rank, "steps": protocol.sent_rows([tuple(r) for r in rows(rank, start, 400, rng)])}
        for start in range(0, 30_000, 400)
        for rank in range(RANKS)
    ]  # fmt: skip
    live, loaded = Timeline(["python", "t.py"], 0.0, 0), Timeline(["python", "t.py"], 0.0, 0)
    for m in messages:
        live.ingest_probe(json.loads(json.dumps(m)))
        apply_record(loaded, "probe", json.loads(json.dumps(m)))
    assert loaded.steps == {} or all(len(s) == 0 for s in loaded.steps.values())  # held
    loaded.settle()
    assert loaded.steps == live.steps and loaded.rollups == live.rollups
    assert loaded.step_counts == live.step_counts
    assert all(len(s) == MAX_STEP_ROWS // RANKS for s in loaded.steps.values())
    assert build(loaded, 1).to_json() == build(live, 1).to_json()
