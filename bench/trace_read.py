"""`gpudoctor trace` against Holistic Trace Analysis 0.5.0 (issue 42): time and peak
memory, each in a fresh process, on the shared traces and on a trace made big by
repeating one's steps; ours alone on one of a gigabyte (HTA loads a trace whole).

    python bench/trace_read.py [--big-mb 1024] [--hta-mb 100]

Each line: what was read, its uncompressed size, seconds and peak RSS (MB) of ours and
of HTA's `TraceAnalysis(trace_dir=...)` with its temporal breakdown.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / "tests" / "fixtures" / "traces" / "hta"  # ../shared/traces, copied
PY = sys.executable

OURS = """
import sys
from pathlib import Path
from gpudoctor.sources import kineto
from gpudoctor.diagnosis.gpu_timeline import analyse
for t in kineto.read_all([Path(sys.argv[1])]):
    analyse(t)
"""
HTAS = """
import sys, warnings, logging, contextlib, io
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)
"""


def measure_fresh(code: str, path: Path) -> tuple[float, float]:
    out = subprocess.run(
        [PY, __file__, "--one", code, str(path)], capture_output=True, text=True, check=True
    )
    seconds, mb = out.stdout.split()
    return float(seconds), float(mb)


def raw_mb(path: Path) -> float:
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    total = 0
    for f in files:
        with gzip.open(f) if f.suffix == ".gz" else f.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                total += len(chunk)
    return total / 1e6


def big_trace(source: Path, target_mb: float, folder: Path) -> Path:
    """One rank's trace whose events are `source`'s, repeated one after another (each
    copy shifted past the one before, its correlations renumbered) until the file is
    `target_mb` uncompressed."""
    with gzip.open(source) as f:
        data = json.load(f)
    events = data.pop("traceEvents")
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events) - min(
        e.get("ts", 0) for e in events if "ts" in e
    )
    one = len(json.dumps(events)) / 1e6
    copies = max(1, int(target_mb / one))
    out = folder / f"big-{int(target_mb)}mb.json"
    with out.open("w") as f:
        head = json.dumps(data)[:-1]
        f.write(head + ', "traceEvents": [')
        first = True
        for k in range(copies):
            shift = k * (span + 1000)
            for e in events:
                e2 = dict(e)
                if "ts" in e2:
                    e2["ts"] = e2["ts"] + shift
                args = e2.get("args")
                if isinstance(args, dict) and "correlation" in args:
                    e2["args"] = {**args, "correlation": args["correlation"] + k * 10**8}
                f.write(("" if first else ",") + json.dumps(e2))
                first = False
        f.write("]}")
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        code, path = sys.argv[2], Path(sys.argv[3])
        t0 = time.monotonic()
        subprocess.run([PY, "-c", code, str(path)], check=True, cwd=ROOT)
        seconds = time.monotonic() - t0
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"{seconds:.2f} {peak:.0f}")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-mb", type=float, default=1024)
    parser.add_argument("--hta-mb", type=float, default=100)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="trace-bench-"))
    print("trace | uncompressed MB | ours s | ours peak MB | HTA s | HTA peak MB")
    for folder in sorted(SHARED.iterdir()):
        if not folder.is_dir():
            continue
        copy = work / folder.name
        shutil.copytree(folder, copy)
        ours = measure_fresh(OURS, folder)
        try:
            theirs = measure_fresh(HTAS, copy)
            hta = f"{theirs[0]:.2f} | {theirs[1]:.0f}"
        except subprocess.CalledProcessError:
            hta = "fails | -"
        print(f"{folder.name} | {raw_mb(folder):.1f} | {ours[0]:.2f} | {ours[1]:.0f} | {hta}")
    source = SHARED / "v100-ns" / "rank-0.json.gz"
    medium = work / "medium"
    medium.mkdir()
    mid = big_trace(source, args.hta_mb, medium)
    ours = measure_fresh(OURS, mid)
    theirs = measure_fresh(HTAS, medium)
    print(f"{mid.name} | {raw_mb(mid):.0f} | {ours[0]:.2f} | {ours[1]:.0f} | "
          f"{theirs[0]:.2f} | {theirs[1]:.0f}")  # fmt: skip
    big = big_trace(source, args.big_mb, work)
    ours = measure_fresh(OURS, big)
    print(f"{big.name} | {raw_mb(big):.0f} | {ours[0]:.2f} | {ours[1]:.0f} | (not run) | -")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
