"""The run over time: what the pictures draw (the HTML report's charts).

The run is cut into at most POINTS intervals of equal length (a second at least), and
each measure is taken over each interval as the report takes it over the whole run:
the step's median and p90, steps a second, the data wait (diagnosis/window.py's own
definition, on that interval's steps), each GPU's mean utilisation, memory and power,
the host's CPU. A compacted stretch of a long run (compaction.py) has no rows: its
points are its slots' rollups (median, p90, data wait), one a slot.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from gpudoctor.diagnosis.engine import diagnose
from gpudoctor.diagnosis.window import WARMUP_STEPS, Window, percentile
from gpudoctor.model import StepRecord
from gpudoctor.timeline import RECENT_SAMPLES, RECENT_STEPS, Timeline

POINTS = 120  # intervals across the run: a chart's width has room for about this many
LOOKS = 24  # moments at which the rules are run to say when a finding was first seen

Point = tuple[float, float]  # (seconds since the start, value)


@dataclass
class RunSeries:
    step_p50_ms: list[Point] = field(default_factory=list)
    step_p90_ms: list[Point] = field(default_factory=list)
    steps_per_s: list[Point] = field(default_factory=list)
    data_wait_pct: list[Point] = field(default_factory=list)
    gpu_util_pct: dict[int, list[Point]] = field(default_factory=dict)  # by GPU index
    gpu_mem_gib: dict[int, list[Point]] = field(default_factory=dict)
    gpu_power_w: dict[int, list[Point]] = field(default_factory=dict)
    cpu_pct: list[Point] = field(default_factory=list)  # of the machine's cores
    job_cpu_cores: list[Point] = field(default_factory=list)
    ended_at_s: float | None = None  # where the job ended (a marker)
    first_seen_s: dict[str, float] = field(default_factory=dict)  # finding id -> when

    @property
    def empty(self) -> bool:
        return not (self.step_p50_ms or self.gpu_util_pct or self.cpu_pct)


def run_series(timeline: Timeline, points: int = POINTS) -> RunSeries:
    start = timeline.start_mono_ns
    span_ns = max(1, timeline.end_ns() - start)
    width_ns = max(10**9, -(-span_ns // points))

    def at(t_ns: int) -> int:
        return max(0, (t_ns - start) // width_ns)

    def middle(i: int) -> float:
        return round((i + 0.5) * width_ns / 1e9, 1)

    out = RunSeries()
    main = timeline.main_pid()
    facts = timeline.facts.get(main, {}) if main is not None else {}
    steps: dict[int, list[StepRecord]] = {}
    for s in timeline.steps.get(main, ()) if main is not None else ():
        if s.number >= WARMUP_STEPS:
            steps.setdefault(at(s.t_end_mono_ns), []).append(s)
    for t_ns, _rows, rollup in timeline.slots.get(main, ()) if main is not None else ():
        if rollup.count:  # a compacted stretch: its slot's own measures
            x = round((t_ns - start) / 1e9, 1)
            out.step_p50_ms.append((x, round(rollup.quantile_ms(0.5), 3)))
            out.step_p90_ms.append((x, round(rollup.quantile_ms(0.9), 3)))
            out.steps_per_s.append((x, round(rollup.count / (rollup.wall_ns / 1e9), 2)))
            one = Window(rollup=rollup, facts=facts)
            out.data_wait_pct.append((x, round(one.data_wait_fraction * 100, 1)))
    for i in sorted(steps):
        rows = steps[i]
        walls = [s.wall_ns / 1e6 for s in rows]
        x = middle(i)
        out.step_p50_ms.append((x, round(statistics.median(walls), 3)))
        out.step_p90_ms.append((x, round(percentile(walls, 90), 3)))
        out.steps_per_s.append((x, round(len(rows) / (width_ns / 1e9), 2)))
        one = Window(steps=tuple(rows), facts=facts)
        out.data_wait_pct.append((x, round(one.data_wait_fraction * 100, 1)))
    gpus: dict[tuple[int, int], list[tuple[float | None, float | None, float | None]]] = {}
    for g in timeline.gpus:
        mem = g.mem_used_bytes / 2**30 if g.mem_used_bytes is not None else None
        util = float(g.util_gpu_pct) if g.util_gpu_pct is not None else None
        gpus.setdefault((g.index, at(g.t_mono_ns)), []).append((util, mem, g.power_w))
    for (index, i), readings in sorted(gpus.items()):
        for n, series in enumerate((out.gpu_util_pct, out.gpu_mem_gib, out.gpu_power_w)):
            values = [v for r in readings if (v := r[n]) is not None]
            if values:
                series.setdefault(index, []).append((middle(i), round(statistics.fmean(values), 1)))
    host: dict[int, list[tuple[float, float]]] = {}
    for h in timeline.host:
        job = sum(p.cpu_pct for p in h.job) / 100
        host.setdefault(at(h.t_mono_ns), []).append((h.cpu_pct, job))
    for i, taken in sorted(host.items()):
        out.cpu_pct.append((middle(i), round(statistics.fmean(c for c, _ in taken), 1)))
        out.job_cpu_cores.append((middle(i), round(statistics.fmean(j for _, j in taken), 2)))
    out.step_p50_ms.sort()
    out.step_p90_ms.sort()
    out.steps_per_s.sort()
    out.data_wait_pct.sort()
    if timeline.end_mono_ns is not None and timeline.exit is not None:
        out.ended_at_s = round((timeline.end_mono_ns - start) / 1e9, 1)
    out.first_seen_s = first_seen(timeline)
    return out


def first_seen(timeline: Timeline, looks: int = LOOKS) -> dict[str, float]:
    """When each finding was first raised, as the live screens would have raised it:
    the rules over the screens' recent window, at `looks` moments across the run (the
    end of each; within a run's 1/looks)."""
    start, end = timeline.start_mono_ns, timeline.end_ns()
    seen: dict[str, float] = {}
    for k in range(1, looks + 1):
        until = start + (end - start) * k // looks
        w = timeline.window(RECENT_STEPS, RECENT_SAMPLES, until)
        if not (w.steps or w.host):
            continue
        for f in diagnose(w):
            seen.setdefault(f.id, round((until - start) / 1e9, 1))
    return seen
