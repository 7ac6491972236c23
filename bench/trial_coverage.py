"""How often the trial's 95% interval holds what it claims to, over many real trials.

    python bench/trial_coverage.py [--trials 16] [--repeat 2] [--steps 100]
        [--neighbour-from K] [-- CMD ...]

Runs `gpudoctor trial` on the same job and remedy `--trials` times (default: the
DataLoader-bound sample job with its own --num-workers, a real ~1.5x gain on 2 cores)
and reports:
- coverage: the share of trials whose interval holds the speedup of all trials pooled
  (the geometric mean of their points; the best stand-in for the true value there is);
  a correct 95% interval gives ~95%;
- repeats inside: the share of ordered pairs of trials (i, j) where j's point falls in
  i's interval; for a correct 95% interval of two independent estimates of equal spread
  this is ~83% (the difference of two estimates spreads sqrt(2) times as wide), so a
  test asserting that a repeat lands inside fails about one time in six.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = [sys.executable, str(ROOT / "sample_jobs" / "dataloader_bound.py"), "--seconds", "600",
       "--decode-work", "8"]  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=16)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--apply", default="more-workers")
    p.add_argument(
        "--neighbour-from", type=int, default=None, metavar="K",
        help="start a process that keeps a core busy before trial K, until the end",
    )  # fmt: skip
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    args = p.parse_args()
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    command = command or JOB
    folder = Path(tempfile.mkdtemp(prefix="gpudoctor-coverage-"))
    results = []
    burner = None
    for n in range(args.trials):
        if n == args.neighbour_from:
            burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            print(f"  (a busy process, pid {burner.pid}, from here on)", flush=True)
        report = folder / f"trial-{n}.json"
        proc = subprocess.run(
            [sys.executable, "-m", "gpudoctor", "--store", str(folder / "s.db"), "trial",
             "--apply", args.apply, "--repeat", str(args.repeat), "--steps", str(args.steps),
             "--report", str(report), "--", *command],
            capture_output=True, text=True,
        )  # fmt: skip
        if proc.returncode != 0:
            if burner is not None:
                burner.kill()
            sys.exit(f"trial {n} failed: {proc.stderr[-2000:]}")
        r = json.loads(report.read_text())["trial"]
        results.append((r["speedup"], r["ci95"][0], r["ci95"][1]))
        busy = r.get("machine_busy")
        said = (
            f"; busy steps {busy['busy_steps']} of {busy['steps']}, "
            f"{'left out' if busy['left_out'] else 'kept'}"
            if busy
            else ""
        )
        print(
            f"  trial {n}: {r['speedup']:.3f} ({r['ci95'][0]:.3f}-{r['ci95'][1]:.3f}) "
            f"{r['verdict']}{said}",
            flush=True,
        )
    if burner is not None:
        burner.kill()
    pooled = math.exp(statistics.fmean(math.log(s) for s, _, _ in results))
    covered = sum(low <= pooled <= high for _, low, high in results)
    pairs = [(i, j) for i in range(len(results)) for j in range(len(results)) if i != j]
    inside = sum(results[i][1] <= results[j][0] <= results[i][2] for i, j in pairs)
    widths = [math.log(high / low) for _, low, high in results]
    spread = statistics.stdev(math.log(s) for s, _, _ in results)
    print(
        f"{len(results)} trials of `{args.apply}` (repeat {args.repeat}, {args.steps} steps a "
        f"run): pooled speedup {pooled:.3f}; coverage {covered}/{len(results)} "
        f"({covered / len(results):.0%}); repeats inside an earlier interval {inside}/{len(pairs)} "
        f"({inside / len(pairs):.0%}); median interval width on the log scale "
        f"{statistics.median(widths):.3f} against 2 x 1.96 x the spread of the points "
        f"{2 * 1.96 * spread:.3f}"
    )


if __name__ == "__main__":
    main()
