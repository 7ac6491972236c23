"""The line sampler's chunks over a week, held as the live doctor holds them
(Timeline.hotspots: hotspot_chunks.HotspotChunks) against a plain deque of them as
before (capped at 21,600): their memory by tracemalloc, each chunk decoded anew from a
real chunk's stored text, at `run`'s cadence (one a minute) and `watch`'s (one every
10 s).

    python bench/hotspot_memory.py [--store PATH]

The real chunks come from a store of a run with named lines (`--store`), or from a
40-second `gpudoctor run --headless` of bench/loop_job.py recorded here.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import tracemalloc
from collections import deque
from pathlib import Path
from typing import Any

from gpudoctor.hotspot_chunks import HotspotChunks
from gpudoctor.model import HotspotChunk

ROOT = Path(__file__).resolve().parent.parent
WEEK_MIN = 7 * 24 * 60


def recorded() -> Path:
    store = Path(tempfile.mkdtemp()) / "s.db"
    job = [sys.executable, str(ROOT / "bench" / "loop_job.py"), "--hidden", "4",
           "--batch-size", "4", "--steps", "100000000"]  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "gpudoctor", "--store", str(store), "run", "--headless",
         "--max-seconds", "40", "--", *job],
        cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return store


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--store", type=Path)
    args = p.parse_args()
    texts = chunk_texts(args.store or recorded(), "hotspots")
    for name, every_s, n in (
        ("run (one a minute)", 60, WEEK_MIN),
        ("watch (one every 10 s)", 10, 6 * WEEK_MIN),
    ):
        for kind in ("deque(maxlen=21600)", "HotspotChunks"):
            held: deque[HotspotChunk] | HotspotChunks = (
                deque(maxlen=21600) if kind.startswith("deque") else HotspotChunks()
            )
            grown = held_mb(texts, HotspotChunk.from_dict, held, every_s, n)
            print(f"a week of {name}: {kind}: {len(held)} chunks held, {grown:.1f} MB")


def chunk_texts(store: Path, kind: str) -> list[str]:
    """The store's records of `kind` as stored (JSON text); exits when there are none."""
    with sqlite3.connect(store) as db:
        texts = [d for (d,) in db.execute("SELECT data FROM records WHERE kind=?", (kind,))]
    if not texts:
        sys.exit(f"no {kind} chunks in {store}")
    print(f"{len(texts)} real chunks from {store}, {sum(map(len, texts)) // len(texts)} bytes each")
    return texts


def held_mb(texts: list[str], build: Any, held: Any, every_s: int, n: int) -> float:
    """The memory (MB, tracemalloc) `held` grew by as n chunks were appended to it, one
    every `every_s`, each `build` from a stored text decoded anew (its own objects)."""
    tracemalloc.start()
    for i in range(n):
        d = json.loads(texts[i % len(texts)])
        d["t_start_mono_ns"] = i * every_s * 10**9
        d["t_end_mono_ns"] = d["t_start_mono_ns"] + 10 * 10**9
        for when in ("counters_t_mono_ns", "last_counters_t_mono_ns"):  # stack chunks'
            if d.get(when) is not None:
                d[when] = d["t_start_mono_ns"] + (1 if when.startswith("c") else 9) * 10**9
        held.append(build(d))
    grown = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return grown / 2**20


if __name__ == "__main__":
    main()
