"""The doctor's memory for a fast loop's step rows (issue 41): probe messages in the
shape the probe sends them (a step only counted as its three numbers, one in ~30
measured in detail as thirteen), fed through the real ingest path
(Timeline.ingest_probe), then the whole run's report built; the RSS grown by the rows,
the process's peak RSS (the report's build included), the ingest cost per step, the
report's time. One process at 3,000 steps a second and 8 ranks at 100 steps a second
each, for as many steps as `--steps` (the rows are full long before).

    python bench/step_rows_memory.py [--steps 600000] [--rounds 3] [--against TREE]

With `--against TREE` (a checkout of another version, `git worktree add /tmp/base
HEAD`) each round runs that tree's gpudoctor and this one, alternated, each in a fresh
process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import gc, json, random, resource, sys, time
import psutil
from gpudoctor.timeline import Timeline
from gpudoctor.report.build import build

ranks, steps, rate = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
rng = random.Random(1)
proc = psutil.Process()
gc.collect()
before = proc.memory_info().rss
timeline = Timeline(["python", "train.py"], 0.0, 0)
ingest_s, step_ns, per = 0.0, int(1e9 / rate), 400
for start in range(0, steps, per):
    for rank in range(ranks):
        batch = []
        for i in range(start, start + per):
            t, wall = 10**9 + i * step_ns, int(rng.lognormvariate(0, 0.3) * step_ns)
            if i % 30 == 0:  # measured in detail
                batch.append([i, t, wall, wall // 3, 0, wall // 4, wall // 4, 0, 1, 32, 0, 0, 1])
            else:
                batch.append([i, t, wall])
        t0 = time.perf_counter()
        timeline.ingest_probe({"pid": 1000 + rank, "steps": batch})
        ingest_s += time.perf_counter() - t0
    if start == 0 and ranks > 1:
        for rank in range(ranks):
            timeline.ingest_probe({"pid": 1000 + rank, "facts": {"rank": rank}})
gc.collect()
grown = proc.memory_info().rss - before
t0 = time.perf_counter()
report = build(timeline, 1)
report_s = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"rows_mb": round(grown / 1e6, 1), "peak_mb": round(peak, 1),
                  "ingest_us": round(ingest_s / (ranks * steps) * 1e6, 3),
                  "report_s": round(report_s, 3), "median_ms": report.steps.median_ms,
                  "p90_ms": report.steps.p90_ms, "findings": [f.id for f in report.findings]}))
"""


def run(tree: Path, ranks: int, steps: int, rate: float) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(ranks), str(steps), str(rate)],
        capture_output=True, text=True, check=True, env=env, cwd=tree,
    )  # fmt: skip
    return dict(json.loads(out.stdout))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=600_000, help="per process")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--against", type=Path, help="another version's checkout")
    args = p.parse_args()
    trees = [("then", args.against), ("now", ROOT)] if args.against else [("now", ROOT)]
    cases = [("1 process at 3,000 steps/s", 1, args.steps, 3000.0),
             ("8 ranks at 100 steps/s each", 8, args.steps // 8, 100.0)]  # fmt: skip
    for name, ranks, steps, rate in cases:
        print(f"{name}, {steps:,} steps each:")
        for n in range(args.rounds):
            for label, tree in trees:
                print(f"  {label:4} round {n + 1}: {json.dumps(run(tree, ranks, steps, rate))}")


if __name__ == "__main__":
    main()
