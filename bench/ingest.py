"""The doctor's ingest of the probe's messages, per step row: what the live doctor does
with each datagram (sources/probe_server.py's parse, Timeline.ingest_probe) and what a
report or a replay does with each stored one (Store.follow: the stored text decoded,
then the same ingest); and what compaction then does with each stored one, decoding
its text again (as before 2026-12-03) or taking what the live doctor's ingest read
(compaction.Compactor.knows; its cost counted in the ingest's).

    python bench/ingest.py [--seconds 20] [--rounds 5]

The messages are real: a fast training loop (bench/loop_job.py, ~1,500-2,500 steps a
second on a CPU) runs under `gpudoctor run --headless` for SECONDS into a store of its
own; its probe records, as the doctor stored them, are then parsed and ingested ROUNDS
times into fresh timelines, in this process. Reported: microseconds a step row, the
best round of each part (the least disturbed by the machine's other work).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpudoctor.compaction import Compactor
from gpudoctor.sources.probe_server import parse
from gpudoctor.timeline import Timeline

ROOT = Path(__file__).resolve().parent.parent


def record(seconds: float, store: Path) -> list[bytes]:
    job = [
        sys.executable, str(ROOT / "bench" / "loop_job.py"), "--hidden", "4",
        "--batch-size", "4", "--steps", "100000000",
    ]  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "gpudoctor", "run", "--headless", "--max-seconds", str(seconds),
         "--", *job],
        env={**os.environ, "GPUDOCTOR_STORE": str(store)}, check=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    db = sqlite3.connect(store)
    rows = db.execute("SELECT data FROM records WHERE kind='probe' ORDER BY id").fetchall()
    return [data.encode() for (data,) in rows]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        raw = record(args.seconds, Path(folder) / "ingest.db")
    messages = [parse(data) for data in raw]
    assert all(m is not None for m in messages)
    rows = sum(len(m.get("steps", [])) for m in messages if m is not None)
    # as the store gives them to compaction: (id, kind, time, text)
    records = [(i, "probe", i, data.decode()) for i, data in enumerate(raw, 1)]
    parse_s, ingest_s, decoding_s, knowing_s = [], [], [], []
    for _round in range(args.rounds):
        t0 = time.perf_counter()
        parsed = [parse(data) for data in raw]
        t1 = time.perf_counter()
        timeline = Timeline(["job"], time.time(), time.monotonic_ns())
        live = Compactor()
        for (_id, _kind, t, text), message in zip(records, parsed, strict=True):
            assert message is not None
            live.knows(t, text, message, timeline.ingest_probe(message, apart=True))
        t2 = time.perf_counter()
        Compactor().read(records, 0)
        t3 = time.perf_counter()
        live.read(records, 0)
        t4 = time.perf_counter()
        assert not live.known  # every message taken as the ingest read it
        parse_s.append(t1 - t0)
        ingest_s.append(t2 - t1)
        decoding_s.append(t3 - t2)
        knowing_s.append(t4 - t3)
        assert sum(timeline.step_counts.values()) == rows
    best_parse, best_ingest = min(parse_s) / rows * 1e6, min(ingest_s) / rows * 1e6
    print(
        f"{len(raw)} probe messages, {rows} step rows ({rows / args.seconds:.0f} a second of "
        f"the job), best of {args.rounds}: parse {best_parse:.2f} us a row, ingest "
        f"{best_ingest:.2f} us a row, together {best_parse + best_ingest:.2f} us a row "
        f"({(best_parse + best_ingest) * rows / args.seconds / 1e4:.2f}% of a core at the "
        "job's rate)"
    )
    decoding, knowing = min(decoding_s) / rows * 1e6, min(knowing_s) / rows * 1e6
    print(
        f"compaction, best of {args.rounds}: decoding the stored text {decoding:.2f} us a row "
        f"({decoding * rows / args.seconds / 1e4:.2f}% of a core), taking what the ingest "
        f"read {knowing:.3f} us a row ({knowing * rows / args.seconds / 1e4:.3f}% of a core)"
    )


if __name__ == "__main__":
    main()
