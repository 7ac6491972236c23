"""Watch mode's stack chunks over a week, held as the live doctor holds them
(Timeline.stacks: stack_chunks.StackChunks) against a plain deque of them as before
(capped at 21,600): their memory by tracemalloc, each chunk decoded anew from a real
chunk's stored text, at `watch`'s cadence (one every 10 s).

    python bench/stack_memory.py [--store PATH]

The real chunks come from a store of a watched run (`--store`), or from a 40-second
`gpudoctor watch --pid` of sample_jobs/healthy.py recorded here (its loop counter read).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import deque
from pathlib import Path

from hotspot_memory import WEEK_MIN, chunk_texts, held_mb

from gpudoctor.model import StackChunk
from gpudoctor.stack_chunks import StackChunks

ROOT = Path(__file__).resolve().parent.parent


def recorded() -> Path:
    store = Path(tempfile.mkdtemp()) / "s.db"
    job = subprocess.Popen(
        [sys.executable, str(ROOT / "sample_jobs" / "healthy.py"), "--seconds", "600"],
        stdout=subprocess.DEVNULL,
    )  # its loop's `step` read in each chunk
    try:
        subprocess.run(
            [sys.executable, "-m", "gpudoctor", "--store", str(store), "watch", "--pid",
             str(job.pid), "--headless", "--max-seconds", "40"],
            cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        job.kill()
        job.wait()
    return store


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--store", type=Path)
    args = p.parse_args()
    texts = chunk_texts(args.store or recorded(), "stacks")
    for kind in ("deque(maxlen=21600)", "StackChunks"):
        held: deque[StackChunk] | StackChunks = (
            deque(maxlen=21600) if kind.startswith("deque") else StackChunks()
        )
        grown = held_mb(texts, lambda d: StackChunk(**d), held, 10, 6 * WEEK_MIN)
        print(f"a week of watch (one every 10 s): {kind}: {len(held)} chunks held, {grown:.1f} MB")


if __name__ == "__main__":
    main()
