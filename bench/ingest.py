"""The doctor's ingest of the probe's messages, per step row: what the live doctor does
with each datagram (sources/probe_server.py's parse, Timeline.ingest_probe) and what a
report or a replay does with each stored one (Store.follow: the stored text decoded,
then the same ingest).

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
    parse_s, ingest_s = [], []
    for _round in range(args.rounds):
        t0 = time.perf_counter()
        parsed = [parse(data) for data in raw]
        t1 = time.perf_counter()
        timeline = Timeline(["job"], time.time(), time.monotonic_ns())
        for message in parsed:
            assert message is not None
            timeline.ingest_probe(message)
        t2 = time.perf_counter()
        parse_s.append(t1 - t0)
        ingest_s.append(t2 - t1)
        assert sum(timeline.step_counts.values()) == rows
    best_parse, best_ingest = min(parse_s) / rows * 1e6, min(ingest_s) / rows * 1e6
    print(
        f"{len(raw)} probe messages, {rows} step rows ({rows / args.seconds:.0f} a second of "
        f"the job), best of {args.rounds}: parse {best_parse:.2f} us a row, ingest "
        f"{best_ingest:.2f} us a row, together {best_parse + best_ingest:.2f} us a row "
        f"({(best_parse + best_ingest) * rows / args.seconds / 1e4:.2f}% of a core at the "
        "job's rate)"
    )


if __name__ == "__main__":
    main()
