"""How often the measured speedup lands inside the predicted range (issue 15, part 2):
`gpudoctor trial` on sample jobs with a remedy that applies, the prediction it prints
(prescribe/predict.py) beside what the runs measured.

    python bench/predictions.py [--steps 80]

Each case is one trial (two runs a side, alternated). A case counts as inside when the
measured speedup lies within [low, high]; its error is how far outside the range it
fell (0 inside), relative to the measured speedup. Goal: at least 8 cases in 10 inside.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "sample_jobs"
BOUND = [str(JOBS / "dataloader_bound.py"), "--seconds", "600"]

CASES: list[tuple[str, list[str], list[str]]] = [
    ("storage wait 1 ms/sample, light decode", [*BOUND, "--decode-work", "1", "--read-ms", "1"], []),
    ("storage wait 3 ms/sample, light decode", [*BOUND, "--decode-work", "1", "--read-ms", "3"], []),
    ("storage wait 0.5 ms/sample, decode x2", [*BOUND, "--decode-work", "2", "--read-ms", "0.5"], []),
    ("decode only (x4), no storage wait", [*BOUND, "--decode-work", "4"], []),
    ("decode only (x1), no storage wait", [*BOUND, "--decode-work", "1"], []),
    ("one worker already, storage wait 2 ms", [*BOUND, "--decode-work", "1", "--read-ms", "2", "--num-workers", "1"], []),
    ("no flag: the probe sets the workers", [str(JOBS / "dataloader_no_flag.py"), "--seconds", "600", "--decode-work", "1", "--read-ms", "1"], []),
    ("no flag, decode only (x2)", [str(JOBS / "dataloader_no_flag.py"), "--seconds", "600", "--decode-work", "2"], []),
    ("in-memory loader (not input-bound)", [str(JOBS / "in_memory_loader.py"), "--seconds", "600"], ["--apply", "more-workers"]),
    ("storage wait 1 ms, prefetch with 2 workers", [*BOUND, "--decode-work", "1", "--read-ms", "1", "--num-workers", "2"], ["--apply", "prefetch"]),
]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=80)
    args = parser.parse_args()
    inside = 0
    print("| case | remedy | predicted | measured (95% interval) | inside | error |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GPUDOCTOR_STORE": str(Path(tmp) / "s.db")}
        for n, (name, job, extra) in enumerate(CASES):
            report = Path(tmp) / f"{n}.json"
            proc = subprocess.run(
                [sys.executable, "-m", "gpudoctor", "trial", "--steps", str(args.steps),
                 "--report", str(report), *extra, "--", sys.executable, *job],
                env=env, capture_output=True, text=True,
            )  # fmt: skip
            if proc.returncode != 0 or not report.exists():
                print(f"| {name} | - | - | failed: {proc.stderr.strip()[-200:]} | - | - |")
                continue
            t = json.loads(report.read_text())["trial"]
            remedy = t["applied"][0]["remedy"] if t["applied"] else "-"
            p = t.get("predicted") or {}
            low, high = p.get("low"), p.get("high")
            measured, (ci_lo, ci_hi) = t["speedup"], t["ci95"]
            if low is None or high is None:
                print(
                    f"| {name} | {remedy} | not estimated | {measured:.2f}x [{ci_lo:.2f}, {ci_hi:.2f}] | - | - |"
                )
                continue
            ok = low <= measured <= high
            inside += ok
            error = 0.0 if ok else min(abs(measured - low), abs(measured - high)) / measured
            print(
                f"| {name} | {remedy} | {low:.2f}x-{high:.2f}x | {measured:.2f}x "
                f"[{ci_lo:.2f}, {ci_hi:.2f}] | {'yes' if ok else 'no'} | {error:.0%} |"
            )
    print(f"\ninside the predicted range: {inside} of {len(CASES)}")


if __name__ == "__main__":
    main()
