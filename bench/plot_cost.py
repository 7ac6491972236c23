"""What one refresh of the TUI's plots costs, in process: the run's series over the
whole run (gpudoctor/series.py) and each plot drawn by Plotext at a plot's size on the
plots screen (78x12), the filled areas in braille (finer) and in half blocks (what
the TUI draws).

    python bench/plot_cost.py [--store S.db --session N] [--repeat 10]

Without --store: the session recorded on an H200 (tests/fixtures, 21 s, ~960 steps).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from textual_plotext.plot import Plot

from gpudoctor.series import run_series
from gpudoctor.store import Store, apply_record
from gpudoctor.timeline import Timeline
from gpudoctor.tui.plots import RunPlot

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "gpu_session_dataloader_bound.json.gz"


def recorded() -> Timeline:
    data = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    s = data["session"]
    timeline = Timeline(json.loads(s["command"]), s["started_unix"], s["start_mono_ns"])
    for kind, _t, record in data["records"]:
        apply_record(timeline, kind, record)
    timeline.settle()  # the step rows held as they were read (Timeline._load_rows)
    timeline.end_mono_ns = s["end_mono_ns"]
    return timeline


def ms(work: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--store", type=Path)
    p.add_argument("--session", type=int, default=1)
    p.add_argument("--repeat", type=int, default=10)
    args = p.parse_args()
    timeline = Store(args.store).load(args.session) if args.store else recorded()
    steps = timeline.total_steps()
    print(f"{steps} steps over {timeline.duration_s():.0f} s; median of {args.repeat}")
    # as the live screens ask for it: when each finding was first seen, they know
    took = ms(lambda: run_series(timeline, seen={}), args.repeat)
    print(f"  the series, whole run: {took:.1f} ms")
    s = run_series(timeline)
    for kind in RunPlot.KINDS:
        plot = RunPlot(kind)
        plot._draw(s)  # what the widget gives Plotext
        plot.plt.plotsize(78, 12)
        line = f"  {kind:9} plot: {ms(plot.plt.build, args.repeat):6.1f} ms"
        if kind in ("wait", "split"):  # filled: the same in braille, as first drawn
            fine = Plot()
            fine.plotsize(78, 12)
            for name, points, color, fill in plot._lines(s):
                xs, ys = [x for x, _ in points], [y for _, y in points]
                fine.plot(xs, ys, label=name, color=color, marker="braille", fillx=fill)
            line += f" (filled in braille: {ms(fine.build, args.repeat):.1f} ms)"
        print(line, flush=True)


if __name__ == "__main__":
    main()
