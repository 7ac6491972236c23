"""What a long run on many ranks costs the doctor's memory (issue 14): synthetic probe
messages for RANKS processes fed through the real ingest path (Timeline.ingest_probe),
then the report built from the timeline; the doctor's RSS growth, the ingest cost per
step with the rollup and without it, side by side, and the report's time.

    python bench/long_run.py [--ranks 8] [--steps 200000]

Each configuration runs in a fresh process (RSS does not shrink once grown): "rows
only" is the timeline as it was (every process keeps up to 200,000 rows, no rollup),
"bounded" this version (MAX_STEP_ROWS shared by all, every steady step rolled up).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time

CHILD = r"""
import gc, json, random, sys, time
import psutil
from gpudoctor import timeline as tl
from gpudoctor.diagnosis.rollup import StepRollup
from gpudoctor.report.build import build

ranks, steps, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if mode == "rows-only":  # as before: 200,000 rows per process, nothing rolled up
    tl.MAX_STEP_ROWS, tl.MIN_STEP_ROWS = 10**12, 200_000
    StepRollup.add = lambda self, s: None
rng = random.Random(1)
proc = psutil.Process()
gc.collect()
before = proc.memory_info().rss
timeline = tl.Timeline(["python", "train.py"], 0.0, 0)
ingest_s = 0.0
for start in range(0, steps, 400):
    for rank in range(ranks):
        batch = [[i, 10**9 + i * 10_000_000, int(rng.lognormvariate(0, 0.3) * 10e6),
                  3_000_000, 0, 2_000_000, 3_000_000, 500_000, 1, 32, 0, 0, int(i % 32 == 0)]
                 for i in range(start, start + 400)]
        t = time.perf_counter()
        timeline.ingest_probe({"pid": 1000 + rank, "steps": batch})
        ingest_s += time.perf_counter() - t
grown = proc.memory_info().rss - before
t = time.perf_counter()
report = build(timeline, 1)
report_s = time.perf_counter() - t
print(json.dumps({"rss_mb": grown / 1e6, "ingest_us": ingest_s / (ranks * steps) * 1e6,
                  "report_s": report_s, "median_ms": report.steps.median_ms,
                  "p90_ms": report.steps.p90_ms}))
"""


def run(ranks: int, steps: int, mode: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(ranks), str(steps), mode],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--steps", type=int, default=200_000, help="per rank")
    args = p.parse_args()
    print(f"long run: {args.ranks} ranks x {args.steps:,} steps through Timeline.ingest_probe")
    random.seed(0)
    for mode in ("rows-only", "bounded", "rows-only", "bounded"):
        t = time.monotonic()
        r = run(args.ranks, args.steps, mode)
        print(
            f"  {mode:9}: RSS +{r['rss_mb']:.0f} MB, ingest {r['ingest_us']:.2f} us/step, "
            f"report {r['report_s']:.2f} s (median {r['median_ms']} ms, p90 {r['p90_ms']} ms); "
            f"{time.monotonic() - t:.0f} s in all"
        )


if __name__ == "__main__":
    main()
