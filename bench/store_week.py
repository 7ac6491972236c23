"""A week-long run's store (issue 14): its size, and how fast `report`, `history` and a
replay's seek answer on it.

    python bench/store_week.py [--hours 2] [--ranks 8] [--gpus 8] [--rate 100] [--keep PATH]

1. The real ingest path, faster than real time: for HOURS simulated hours, RANKS
   processes each send four probe messages a second (RATE steps a second between them,
   rows as protocol.STEP_FIELDS, a step only counted in its COUNTED_FIELDS, with the
   version, sequence, cumulative counts and the CUDA allocator's gauges the probe
   adds, and every other message the counts of forwards, backwards, optimizer steps
   and loader batches and the time ledger a real probe sends as facts), a counter page
   a second each, a host reading (this machine's, re-stamped)
   and GPUS GPUs' readings a second, written with
   Store.add/add_raw/commit as the doctor writes them; every simulated minute the
   session is compacted as the live doctor compacts it (compaction.py, records older
   than KEEP_WHOLE_S). The store's size is read each hour; what it grows by an hour
   once the first KEEP_WHOLE_S are past is the compacted record of an hour.
2. A week: the compacted hours of step 1 repeated (re-stamped, in time order) until the
   session spans seven days, then its last KEEP_WHOLE_S kept whole, as compaction leaves
   a week. Its size; `gpudoctor report` and `gpudoctor history` run as commands (their
   imports included); a replay's seek (the session loaded, then a snapshot at mid-week
   and at the end, as the replay screen takes them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpudoctor.compaction import KEEP_WHOLE_S, SLOT_S, Compactor
from gpudoctor.model import GpuProcess, GpuSample, JobExit
from gpudoctor.probe.protocol import sent_rows
from gpudoctor.snapshot import take
from gpudoctor.sources.host import HostReader
from gpudoctor.store import Store, encode
from gpudoctor.timeline import Timeline

S = 10**9
WEEK_S = 7 * 24 * 3600


def gpu(index: int, t: int) -> GpuSample:
    """An H200's reading in the shape the NVML reader gives (one process on it)."""
    return GpuSample(
        t_mono_ns=t, index=index, name="NVIDIA H200", uuid=f"GPU-{index:08x}-2b71-bf01-23ea",
        util_gpu_pct=97, util_mem_pct=41, mem_used_bytes=61 << 30, mem_total_bytes=141 << 30,
        power_w=612.5, power_limit_w=700.0, temp_c=61, fan_pct=None, sm_clock_mhz=1980,
        mem_clock_mhz=3201, pcie_rx_bytes_per_s=123_000_000, pcie_tx_bytes_per_s=45_000_000,
        clock_event_reasons=("gpu_idle",) if index < 0 else (), compute_capability=(9, 0),
        processes=(GpuProcess(pid=5000 + index, mem_used_bytes=60 << 30, sm_util_pct=95),),
    )  # fmt: skip


def db_bytes(path: Path) -> int:
    """The store's pages in use (a deleted record's page is reused, not returned)."""
    with sqlite3.connect(path) as con:
        size, free, page = (
            con.execute(f"PRAGMA {p}").fetchone()[0]
            for p in ("page_count", "freelist_count", "page_size")
        )
    return int((size - free) * page)


def ingest(
    path: Path, hours: float, ranks: int, gpus: int, rate: int, compact: bool = True
) -> dict[str, Any]:
    rng = random.Random(1)
    store = Store(path, explicit=True)
    timeline = Timeline(["torchrun", "--nproc_per_node", str(ranks), "train.py"], time.time(), 0)
    session = store.create_session(timeline, "/tmp")
    host = HostReader().read()
    compactor = Compactor()
    per_message = rate // 4
    numbers = [0] * ranks
    write_s = compact_s = 0.0
    sizes = []
    for second in range(int(hours * 3600)):
        t0 = time.perf_counter()
        for quarter in range(4):
            t = second * S + quarter * S // 4
            for rank in range(ranks):
                rows: list[tuple[int, ...]] = []
                for _ in range(per_message):
                    n = numbers[rank]
                    wall = int(rng.lognormvariate(0, 0.1) * 10e6)
                    detail = int(n % 10 == 0)  # the probe's sampled detail
                    rows.append((n, t, wall, wall // 20 if detail else 0, 0,
                                 wall // 3 if detail else 0, wall // 2 if detail else 0,
                                 wall // 10 if detail else 0, 0, 64 if detail else -1, 0, 0,
                                 detail))  # fmt: skip
                    numbers[rank] = n + 1
                message = {  # the rows as the probe sends them
                    "v": "1.1", "pid": 5000 + rank, "seq": second * 4 + quarter, "steps": sent_rows(rows),
                    "gauges": {"t": t, "allocated": 40 << 30, "reserved": 60 << 30,
                               "peak_reserved": 61 << 30, "alloc_retries": 0, "ooms": 0},
                    "counts": {"steps": numbers[rank], "rows": numbers[rank], "dropped": 0},
                }  # fmt: skip
                if quarter % 2:  # the counts and ledger a real probe sends every other time
                    message["facts"] = {
                        "forwards": numbers[rank], "backwards": numbers[rank],
                        "optimizer_steps": numbers[rank],
                        "dataloader_batches": {"0": numbers[rank]},
                        "ledger_ns": {"first_step_start": S, "last_step_end": t,
                                      "evaluation": 0, "evaluation_before": 0,
                                      "checkpoint": 0, "checkpoints": 0,
                                      "evaluation_after": 0, "checkpoint_after": 0},
                    }  # fmt: skip
                store.add_raw(session, "probe", t, json.dumps(message))
        t = second * S + S - 1
        for rank in range(ranks):
            store.add(session, "page", t, {"pid": 5000 + rank, "steps": numbers[rank]})
        store.add(session, "host", t, encode(dataclasses.replace(host, t_mono_ns=t)))
        store.add(session, "gpu", t, [encode(gpu(i, t)) for i in range(gpus)])
        store.commit()
        write_s += time.perf_counter() - t0
        if compact and second % 60 == 59:
            t0 = time.perf_counter()
            while store.compact(session, t - int(KEEP_WHOLE_S * S), compactor):
                pass
            compact_s += time.perf_counter() - t0
        if second % 3600 == 3599:
            sizes.append(db_bytes(path))
    store.finish(session, int(hours * 3600 * S), JobExit(0, "exit"), {})
    store.close()
    seconds = hours * 3600
    return {
        "session": session,
        "write_ms_per_s": write_s / seconds * 1e3,
        "compact_ms_per_s": compact_s / seconds * 1e3,
        "sizes": sizes,
        "steps": sum(numbers),
    }


def extend_to_a_week(source: Path, target: Path, session: int, hours: float) -> float:
    """The source's compacted span repeated until the session spans a week, then its
    last KEEP_WHOLE_S (whole) at the end."""
    con = sqlite3.connect(target)
    con.execute(f"ATTACH DATABASE '{source}' AS src")
    con.executescript(
        "CREATE TABLE sessions AS SELECT * FROM src.sessions WHERE 0;"
        "CREATE TABLE records (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id INTEGER,"
        " t_mono_ns INTEGER, kind TEXT, data TEXT);"
    )
    con.execute("INSERT INTO sessions SELECT * FROM src.sessions WHERE id=?", (session,))
    # the compacted part: from the start to the first slot whose rows are still whole
    first_whole = con.execute(
        "SELECT MIN(t_mono_ns) FROM src.records WHERE session_id=? AND kind='probe'"
        " AND data LIKE '%\"steps\": [[%'",
        (session,),
    ).fetchone()[0]
    whole_from = int(first_whole // int(SLOT_S * S) * int(SLOT_S * S))
    span = whole_from
    copies = int((WEEK_S - KEEP_WHOLE_S) * S // span) + 1
    for k in range(copies):
        con.execute(
            "INSERT INTO records (session_id, t_mono_ns, kind, data) SELECT session_id,"
            " t_mono_ns + ?, kind, data FROM src.records WHERE session_id=? AND t_mono_ns<?"
            " ORDER BY id",
            (k * span, session, whole_from),
        )
    con.execute(
        "INSERT INTO records (session_id, t_mono_ns, kind, data) SELECT session_id,"
        " t_mono_ns + ?, kind, data FROM src.records WHERE session_id=? AND t_mono_ns>=?"
        " ORDER BY id",
        ((copies - 1) * span, session, whole_from),
    )
    end = (copies - 1) * span + int(hours * 3600 * S)
    con.execute("UPDATE sessions SET end_mono_ns=?", (end,))
    con.execute("CREATE INDEX IF NOT EXISTS records_by_session ON records(session_id, id)")
    con.execute("CREATE INDEX IF NOT EXISTS records_by_kind ON records(session_id, kind, id)")
    con.execute("PRAGMA user_version=1")
    con.commit()
    con.execute("DETACH DATABASE src")
    con.execute("VACUUM")
    con.close()
    return hours * 3600 - whole_from / S


def timed(cmd: list[str], store: Path) -> float:
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "gpudoctor", "--store", str(store), *cmd],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hours", type=float, default=2.0)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--rate", type=int, default=100, help="steps a second, each rank")
    p.add_argument("--uncompacted", action="store_true", help="only step 1, not compacted")
    p.add_argument("--keep", type=Path, help="copy the week's store there (to time trees on it)")
    args = p.parse_args()
    if args.uncompacted:
        with tempfile.TemporaryDirectory() as folder:
            r = ingest(Path(folder) / "s.db", args.hours, args.ranks, args.gpus, args.rate, False)
            print(
                f"store, not compacted: {args.ranks} ranks x {args.rate} steps/s, {args.gpus} "
                "GPUs; after each hour: " + ", ".join(f"{b / 1e6:.0f} MB" for b in r["sizes"])
            )
        return
    with tempfile.TemporaryDirectory() as folder:
        hours_db, week_db = Path(folder) / "hours.db", Path(folder) / "week.db"
        t = time.monotonic()
        r = ingest(hours_db, args.hours, args.ranks, args.gpus, args.rate)
        print(
            f"store, a week: {args.ranks} ranks x {args.rate} steps/s, {args.gpus} GPUs, "
            f"compacting what is older than {KEEP_WHOLE_S:.0f} s ({r['steps']:,} steps "
            f"through Store.add_raw/commit in {time.monotonic() - t:.0f} s)"
        )
        sizes = r["sizes"]
        print("  store after each hour: " + ", ".join(f"{b / 1e6:.1f} MB" for b in sizes))
        per_hour = (sizes[-1] - sizes[-2]) if len(sizes) > 1 else float("nan")
        print(f"  compacted record of an hour: {per_hour / 1e6:.1f} MB")
        print(
            f"  the doctor's writes: {r['write_ms_per_s']:.1f} ms a second of run; "
            f"compaction: {r['compact_ms_per_s']:.1f} ms a second of run"
        )
        whole = extend_to_a_week(hours_db, week_db, int(r["session"]), args.hours)
        print(f"  kept whole at the end: the last {whole / 60:.0f} minutes")
        print(f"  a week's store: {os.path.getsize(week_db) / 1e6:.0f} MB on disk")
        if args.keep is not None:
            shutil.copyfile(week_db, args.keep)
        report = min(timed(["report", "--format", "json", "last"], week_db) for _ in range(2))
        page = timed(["report", "--format", "html", "last"], week_db)
        history = min(timed(["history"], week_db) for _ in range(3))
        store = Store(week_db, explicit=True)
        t0 = time.perf_counter()
        timeline = store.load(int(r["session"]))
        loaded = time.perf_counter() - t0
        mid = timeline.start_mono_ns + WEEK_S // 2 * S
        t0 = time.perf_counter()
        take(timeline, until_ns=mid)
        take(timeline)
        seek = (time.perf_counter() - t0) / 2
        store.close()
        steps = sum(timeline.counted_steps().values())
        print(
            f"  `gpudoctor report`: {report:.2f} s (`--format html`: {page:.2f} s); "
            f"`gpudoctor history`: {history:.2f} s; "
            f"replay: loading {loaded:.2f} s, then {seek * 1e3:.0f} ms a seek "
            f"({steps:,} steps counted)"
        )


if __name__ == "__main__":
    main()
