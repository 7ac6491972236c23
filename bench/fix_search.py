"""`gpudoctor fix` against trying every combination of the same knobs (issue 15, part 3):
a job with more than one problem, the final throughput `fix` reached against the best
combination's, and the time each took.

    python bench/fix_search.py [--steps 60] [--runs 2]

The job: dataloader_bound.py loading in the main process (no workers) with decode work
and a storage wait per sample. The knobs `fix` can turn on this CPU machine without an
edit: the workers (the script's --num-workers), the loader's prefetch (the probe's
override) and the training process's intra-op threads (the probe's, `fewer-threads`):
2 x 2 x 2 combinations. Each combination is measured the same way, `--runs` runs of
`--steps` steady steps under the doctor (`run_arm`, as a trial's runs), in an order
that alternates between rounds; the search's time is the sum of its runs. `fix`'s final
configuration is one of the combinations: its throughput is read from the same table.
Goal: at least 0.9 of the best combination's throughput in less than a quarter of the
search's time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpudoctor.app.trial import run_arm  # noqa: E402
from gpudoctor.probe import ENV_OVERRIDES  # noqa: E402
from gpudoctor.store import Store  # noqa: E402

JOB = [
    sys.executable, str(ROOT / "sample_jobs" / "dataloader_bound.py"), "--seconds", "600",
    "--decode-work", "2", "--read-ms", "1", "--num-workers", "0",
]  # fmt: skip


def configuration(
    workers: int, prefetch: int | None, threads: int | None
) -> tuple[list[str], dict[str, str]]:
    argv = [*JOB[:-1], str(workers)]
    overrides: dict[str, object] = {}
    if prefetch is not None:
        overrides["dataloader"] = {"prefetch_factor": prefetch}
    if threads is not None:
        overrides["threads"] = threads
    return argv, ({ENV_OVERRIDES: json.dumps(overrides)} if overrides else {})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GPUDOCTOR_STORE": str(Path(tmp) / "s.db")}
        report = Path(tmp) / "fix.json"
        t0 = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "gpudoctor", "fix", "--steps", str(args.steps), "--report",
             str(report), "--", *JOB],
            env=env, cwd=ROOT, check=True, capture_output=True, text=True,
        )  # fmt: skip
        fix_s = time.monotonic() - t0
        visit = json.loads(report.read_text())["fix"]
        # the search: every combination, `--runs` rounds, the order reversed every round
        store = Store(Path(tmp) / "search.db")
        combos = list(itertools.product((0, cores), (None, 4), (None, 1)))
        rates: dict[tuple[int, int | None, int | None], list[float]] = {c: [] for c in combos}
        search_s = 0.0
        for r in range(args.runs):
            for combo in combos if r % 2 == 0 else combos[::-1]:
                workers, prefetch, threads = combo
                if prefetch is not None and not workers:
                    continue  # prefetch needs workers (the probe leaves it out)
                argv, extra = configuration(*combo)
                t = time.monotonic()
                _, arm = run_arm(argv, extra, args.steps, store)
                search_s += time.monotonic() - t
                rates[combo].append(arm.samples_per_s or 0.0)
    measured = {c: statistics.fmean(v) for c, v in rates.items() if v}
    best = max(measured, key=lambda c: measured[c])
    final_env = json.loads(visit["final_env"].get(ENV_OVERRIDES, "{}"))
    final_argv = visit["final_command"]
    workers = int(final_argv[final_argv.index("--num-workers") + 1])
    prefetch = (final_env.get("dataloader") or {}).get("prefetch_factor")
    final = (workers, prefetch, final_env.get("threads"))
    print(f"fix on {cores} cores: {fix_s:.0f} s, path:")
    for s in visit["steps"]:
        print(f"  {s['remedy']}: measured {s['measured']:.2f}x, kept {s['kept']}")
    print("\n| workers | prefetch | threads | samples/s (mean of runs) |\n|---|---|---|---|")
    for c, v in sorted(measured.items(), key=lambda kv: -kv[1]):
        mark = " (fix's)" if c == final else ""
        print(f"| {c[0]} | {c[1] or 'default'} | {c[2] or 'default'} | {v:.1f}{mark} |")
    ratio = measured.get(final, 0.0) / measured[best]
    print(
        f"\nfix's final configuration {final}: {ratio:.2f} of the best ({best}); fix took "
        f"{fix_s:.0f} s, the search {search_s:.0f} s ({fix_s / search_s:.2f} of it)"
    )


if __name__ == "__main__":
    main()
