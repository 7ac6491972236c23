"""The run over time: what the pictures draw (the TUI's plots, the HTML report's charts).

A stretch of the run (all of it, or the last minute or ten of a live one) is cut into at
most `points` intervals of equal length (a second at least), and each measure is taken
over each interval as the report takes it over the whole run: the step's median and
p90, steps and samples a second, the data wait and the step's split (diagnosis/
window.py's own definitions, on that interval's steps), each GPU's mean utilisation,
memory and power, the host's CPU, all cores and each. A compacted stretch of a long run
(compaction.py) has no rows: its points are its slots' rollups, one a slot.

Times are seconds since the run's start, whatever the stretch, so that markers (where a
finding was first seen, a profiler capture, an out-of-memory error, the job's end) sit
where they happened.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Reversible
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpudoctor.diagnosis.engine import diagnose
from gpudoctor.diagnosis.rollup import StepRollup
from gpudoctor.diagnosis.window import WARMUP_STEPS, Window, percentile, stack_steps_per_s
from gpudoctor.i18n import _
from gpudoctor.model import StepRecord
from gpudoctor.step_rows import StepRows
from gpudoctor.timeline import RECENT_SAMPLES, RECENT_STEPS, Timeline

POINTS = 120  # intervals across the run: a chart's width has room for about this many
# steps measured an interval, at most: the p90 of 256 evenly spaced steps is within a few
# percent of all of theirs, less than a plot's row (a twelfth of its height)
STEPS_AN_INTERVAL = 256
NO_ROWS = StepRows()  # a process without rows (never added to)
LOOKS = 24  # moments at which the rules are run to say when a finding was first seen
# window.split()'s parts, in the order a step goes
SPLIT_PARTS = ("data_wait", "forward", "backward", "optimizer", "other")


def split_labels() -> dict[str, str]:
    """SPLIT_PARTS' names on a plot, in the language chosen."""
    return {
        "data_wait": _("data wait"),
        "forward": _("forward"),
        "backward": _("backward"),
        "optimizer": _("optimizer"),
        "other": _("other"),
    }


Point = tuple[float, float]  # (seconds since the start, value)
T = TypeVar("T")


@dataclass
class RunSeries:
    since_s: float = 0.0  # the stretch drawn, in seconds since the run's start
    until_s: float = 0.0
    step_p50_ms: list[Point] = field(default_factory=list)
    step_p90_ms: list[Point] = field(default_factory=list)
    steps_per_s: list[Point] = field(default_factory=list)
    samples_per_s: list[Point] = field(default_factory=list)  # when batch sizes are known
    # a distributed job's samples a second, all its ranks on this node together (the
    # lines above are its main rank's), and how many ranks that is; else [] and 0
    ranks_samples_per_s: list[Point] = field(default_factory=list)
    ranks: int = 0
    main_rank: int | None = None  # the rank the other lines are of
    other_nodes: bool = False  # the job has ranks on other nodes too (not in these lines)
    data_wait_pct: list[Point] = field(default_factory=list)
    split_pct: dict[str, list[Point]] = field(default_factory=dict)  # by SPLIT_PARTS
    gpu_util_pct: dict[int, list[Point]] = field(default_factory=dict)  # by GPU index
    gpu_mem_gib: dict[int, list[Point]] = field(default_factory=dict)
    gpu_power_w: dict[int, list[Point]] = field(default_factory=dict)
    cpu_pct: list[Point] = field(default_factory=list)  # of the machine's cores
    cpu_core_pct: dict[int, list[Point]] = field(default_factory=dict)  # by core
    job_cpu_cores: list[Point] = field(default_factory=list)
    ended_at_s: float | None = None  # where the job ended (a marker)
    ended_by: str | None = None
    first_seen_s: dict[str, float] = field(default_factory=dict)  # finding id -> when
    profiles_s: list[float] = field(default_factory=list)  # profiler captures
    ooms_s: list[float] = field(default_factory=list)  # out-of-memory errors
    cursor_s: float | None = None  # a replay's position

    @property
    def empty(self) -> bool:
        return not (self.step_p50_ms or self.gpu_util_pct or self.cpu_pct)

    def markers(self) -> list[tuple[str, str, float]]:
        """Every marker inside the stretch drawn, as (kind, finding id or "", seconds), in
        time order; kind: "seen" (a finding first raised), "profile", "oom", "ended"."""
        out = [("seen", id_, at) for id_, at in self.first_seen_s.items()]
        out += [("profile", "", at) for at in self.profiles_s]
        out += [("oom", "", at) for at in self.ooms_s]
        if self.ended_at_s is not None:
            out.append(("ended" if self.ended_by != "oom" else "ended-oom", "", self.ended_at_s))
        return sorted(
            (m for m in out if self.since_s <= m[2] <= self.until_s + 0.5), key=lambda m: m[2]
        )


def rate_lines(s: RunSeries) -> list[tuple[str, list[Point]]]:
    """The rate a chart of the run draws, named: samples a second where batch sizes are
    known (a distributed job's: all its ranks' together, then its main rank's), else
    steps a second."""
    if s.ranks_samples_per_s:
        together = _("{n} ranks on this node") if s.other_nodes else _("all {n} ranks")
        return [
            (together.format(n=s.ranks), s.ranks_samples_per_s),
            (_("rank {rank}").format(rank=s.main_rank), s.samples_per_s),
        ]
    if s.samples_per_s:
        return [(_("samples/s"), s.samples_per_s)]
    return [(_("steps/s"), s.steps_per_s)]


def marker_words(kind: str, ids: str = "") -> str:
    """A marker in words: `ids`, the findings first raised there (one or more)."""
    if kind == "seen":
        return _("{ids} first seen").format(ids=ids)
    return {
        "profile": _("profile"),
        "oom": _("out of memory"),
        "ended": _("job ended"),
        "ended-oom": _("ended: OOM"),
    }.get(kind, kind)


def run_series(
    timeline: Timeline,
    points: int = POINTS,
    since_ns: int | None = None,
    until_ns: int | None = None,
    seen: dict[str, float] | None = None,
) -> RunSeries:
    """The stretch [since_ns, until_ns] of the run (default: all of it) over at most
    `points` intervals. `seen`: when each finding was first seen, as the live screens
    saw it; without it, found by running the rules across the run (first_seen)."""
    t0 = timeline.start_mono_ns
    end = timeline.end_ns() if until_ns is None else until_ns
    start = max(t0, since_ns) if since_ns is not None else t0
    span_ns = max(1, end - start)
    width_ns = max(10**9, -(-span_ns // max(1, points)))

    def at(t_ns: int) -> int:
        return max(0, (t_ns - start) // width_ns)

    def middle(i: int) -> float:
        return round((start - t0 + (i + 0.5) * width_ns) / 1e9, 1)

    out = RunSeries(since_s=round((start - t0) / 1e9, 1), until_s=round((end - t0) / 1e9, 1))
    main = timeline.main_pid()
    facts = timeline.facts.get(main, {}) if main is not None else {}
    rows = timeline.steps.get(main, NO_ROWS) if main is not None else NO_ROWS
    steps = _by_interval(rows, start, end, width_ns)
    for x, rollup in _rolled_up(timeline, main, rows, start, end):  # their own measures
        one = Window(rollup=rollup, facts=facts)
        _add_steps(out, x, one, rollup.quantile_ms(0.5), rollup.quantile_ms(0.9))
        out.steps_per_s.append((x, round(rollup.count / (rollup.wall_ns / 1e9), 2)))
        slot_rate = _slot_samples_per_s(one)
        if slot_rate is not None:
            out.samples_per_s.append((x, round(slot_rate, 1)))
    for i, first, last in steps:
        # a fast loop's thousands of steps an interval: every n-th measures it (counted
        # all), so a refresh costs the same whatever the step rate
        taken, sample, _ = _interval_steps(rows, first, last)
        if not taken:
            continue
        walls = [s.wall_ns / 1e6 for s in sample]
        x = middle(i)
        one = Window(steps=tuple(sample), facts=facts)
        _add_steps(out, x, one, statistics.median(walls), percentile(walls, 90))
        out.steps_per_s.append((x, round(taken / (width_ns / 1e9), 2)))
        per_step = one.samples_per_step
        if per_step is not None:
            rate = per_step * taken / (width_ns / 1e9)
            out.samples_per_s.append((x, round(rate, 1)))
    ranked = ranks_of(timeline)
    if len(ranked) > 1 and out.samples_per_s:
        out.ranks, out.main_rank = len(ranked), facts.get("rank")
        out.other_nodes = bool(timeline.remote_ranks)
        out.ranks_samples_per_s = _ranks_samples(timeline, ranked, start, end, width_ns, middle)
    if timeline.mode == "watch":  # no steps timed: py-spy's chunks, each its estimates
        chunks = list(_inside(timeline.stacks, start, end, lambda c: c.t_end_mono_ns))
        for n, chunk in enumerate(chunks):
            if not chunk.total:
                continue
            x = round(((chunk.t_start_mono_ns + chunk.t_end_mono_ns) / 2 - t0) / 1e9, 1)
            one = Window(stacks=(chunk,))
            out.data_wait_pct.append((x, round(one.data_wait_fraction * 100, 1)))
            for part, share in one.split().items():
                out.split_pct.setdefault(part, []).append((x, round(share * 100, 1)))
            chunk_rate = stack_steps_per_s(chunks[max(0, n - 1) : n + 1])
            if chunk_rate is not None:
                out.steps_per_s.append((x, round(chunk_rate, 2)))
    gpus: dict[tuple[int, int], list[tuple[float | None, float | None, float | None]]] = {}
    for g in _inside(timeline.gpus, start, end, lambda g: g.t_mono_ns):
        mem = g.mem_used_bytes / 2**30 if g.mem_used_bytes is not None else None
        util = float(g.util_gpu_pct) if g.util_gpu_pct is not None else None
        gpus.setdefault((g.index, at(g.t_mono_ns)), []).append((util, mem, g.power_w))
    for (index, i), readings in sorted(gpus.items()):
        for n, by_gpu in enumerate((out.gpu_util_pct, out.gpu_mem_gib, out.gpu_power_w)):
            values = [v for r in readings if (v := r[n]) is not None]
            if values:
                by_gpu.setdefault(index, []).append((middle(i), round(statistics.fmean(values), 1)))
    host: dict[int, list[tuple[float, float, tuple[float, ...]]]] = {}
    for h in _inside(timeline.host, start, end, lambda h: h.t_mono_ns):
        host.setdefault(at(h.t_mono_ns), []).append(
            (h.cpu_pct, h.job_cpu_cores, h.cpu_pct_per_core)
        )
    for i, taken_h in sorted(host.items()):
        x = middle(i)
        out.cpu_pct.append((x, round(statistics.fmean(c for c, _j, _p in taken_h), 1)))
        out.job_cpu_cores.append((x, round(statistics.fmean(j for _c, j, _p in taken_h), 2)))
        for core in range(max(len(per) for _c, _j, per in taken_h)):
            values = [per[core] for _c, _j, per in taken_h if core < len(per)]
            out.cpu_core_pct.setdefault(core, []).append((x, round(statistics.fmean(values), 1)))
    # a compacted stretch's points came first: all in time order
    for line in (
        out.step_p50_ms,
        out.step_p90_ms,
        out.steps_per_s,
        out.samples_per_s,
        out.data_wait_pct,
    ):
        line.sort()
    for line in out.split_pct.values():
        line.sort()
    ended = timeline.end_mono_ns
    if ended is not None and timeline.exit is not None and (until_ns is None or ended <= until_ns):
        out.ended_at_s = round((ended - t0) / 1e9, 1)
        out.ended_by = timeline.exit.ended_by
    out.profiles_s = [round((t - t0) / 1e9, 1) for t in timeline.profiles if t <= end]
    out.ooms_s = [round((t - t0) / 1e9, 1) for t in oom_times(timeline) if t <= end]
    out.first_seen_s = dict(seen) if seen is not None else first_seen(timeline, until_ns=end)
    return out


def ranks_of(timeline: Timeline) -> list[int]:
    """The processes of a distributed job that train with a rank (the launcher's RANK),
    as the report counts them: none that only infers beside them (a Hogwild parent has
    no rank, and its workers train alone, not as ranks)."""
    inferring = timeline.inferring()
    return [
        pid
        for pid in timeline.counted_steps()
        if pid not in inferring and timeline.facts.get(pid, {}).get("rank") is not None
    ]


def _ranks_samples(
    timeline: Timeline,
    pids: list[int],
    start: int,
    end: int,
    width_ns: int,
    middle: Callable[[int], float],
) -> list[Point]:
    """Samples a second of all `pids` together, at each interval where any of them
    stepped (a compacted stretch: each slot's rollups, by the slot's time)."""
    totals: dict[float, float] = {}
    for pid in pids:
        facts = timeline.facts.get(pid, {})
        rows = timeline.steps.get(pid, NO_ROWS)
        for x, rollup in _rolled_up(timeline, pid, rows, start, end):
            rate = _slot_samples_per_s(Window(rollup=rollup, facts=facts))
            if rate is not None:
                totals[x] = totals.get(x, 0.0) + rate
        for i, first, last in _by_interval(rows, start, end, width_ns):
            # the samples a step come from the detailed steps alone (window.py): those
            # measured, the rest of the interval only counted (8 ranks' plots: 8 times
            # the intervals, each a few rows to read)
            taken, sample, detailed = _interval_steps(rows, first, last)
            if not taken:
                continue
            per_step = Window(steps=tuple(detailed or sample[-1:]), facts=facts).samples_per_step
            if per_step is not None:
                x = middle(i)
                totals[x] = totals.get(x, 0.0) + per_step * taken / (width_ns / 1e9)
    return [(x, round(v, 1)) for x, v in sorted(totals.items())]


def _rolled_up(
    timeline: Timeline, pid: int | None, rows: StepRows, start: int, end: int
) -> Iterator[tuple[float, StepRollup]]:
    """`pid`'s steps where it has no rows, within [start, end], as rollups: (seconds
    since the run's start, the rollup). A store's compacted stretches (its slots, at
    their ends), then the bins (Timeline.bins, at their middles: the live doctor's, or
    those a load made of the rows the store keeps whole) after the last slot that end
    before its oldest row."""
    if pid is None:
        return
    t0 = timeline.start_mono_ns
    last_slot = None
    for t_ns, _rows, rollup in timeline.slots.get(pid, ()):
        if rollup.count and start <= t_ns <= end:
            yield round((t_ns - t0) / 1e9, 1), rollup
        last_slot = t_ns if last_slot is None else max(last_slot, t_ns)
    bins = timeline.bins.get(pid)
    if bins is None:
        return
    before = rows.end_at(0) - rows[0].wall_ns if rows else end
    for first, last, rollup in bins.stretches(start, before):
        if last_slot is not None and first < last_slot:  # (its steps are in the slots)
            continue
        middle = (first + last) // 2
        if middle <= end:
            yield round((middle - t0) / 1e9, 1), rollup


def _slot_samples_per_s(one: Window) -> float | None:
    """A compacted slot's samples a second (its rollup's steps a second of step time,
    as its steps/s point is taken, times the samples a step); None where unknown."""
    r = one.rollup
    per_step = one.samples_per_step
    if r is None or per_step is None or not r.wall_ns:
        return None
    return per_step * r.count / (r.wall_ns / 1e9)


def _add_steps(out: RunSeries, x: float, one: Window, p50: float, p90: float) -> None:
    out.step_p50_ms.append((x, round(p50, 3)))
    out.step_p90_ms.append((x, round(p90, 3)))
    out.data_wait_pct.append((x, round(one.data_wait_fraction * 100, 1)))
    for part, share in one.split().items():
        out.split_pct.setdefault(part, []).append((x, round(share * 100, 1)))


def by_time(lines: dict[int, list[Point]]) -> list[tuple[float, list[float]]]:
    """Many lines (one per GPU, per core) as their values at each time, in time order:
    what a chart draws of them together (their mean, sum, lowest and highest)."""
    at: dict[float, list[float]] = {}
    for points in lines.values():
        for x, y in points:
            at.setdefault(x, []).append(y)
    return sorted(at.items())


def _by_interval(rows: StepRows, start: int, end: int, width_ns: int) -> list[tuple[int, int, int]]:
    """The rows that ended in [start, end], cut into intervals of width_ns from `start`:
    (the interval's index, its first row, the row after its last), the empty ones left
    out. The rows are in time order, so each interval's bounds are found by bisection on
    their ends: a refresh costs the intervals, not a walk over every step of a fast
    loop's minute (90,000 of them)."""
    lo, hi = rows.ending_before(start), rows.ending_by(end)
    out: list[tuple[int, int, int]] = []
    if lo >= hi:
        return out
    first = lo  # the stretch's steps all ended at `start` or after
    for i in range((rows.end_at(hi - 1) - start) // width_ns + 1):
        last = min(hi, max(first, rows.ending_before(start + (i + 1) * width_ns)))
        if last > first:
            out.append((i, first, last))
        first = last
    return out


def _interval_steps(
    rows: StepRows, first: int, last: int
) -> tuple[int, list[StepRecord], list[StepRecord]]:
    """An interval's steps past warm-up: how many, every n-th of them as records (at
    most about STEPS_AN_INTERVAL), and those measured in detail."""
    if min(rows.number_at(first), rows.number_at(last - 1)) < WARMUP_STEPS:  # the start
        taken = [s for s in rows.records(first, last) if s.number >= WARMUP_STEPS]
        stride = max(1, len(taken) // STEPS_AN_INTERVAL)
        return len(taken), taken[::stride], [s for s in taken if s.detail]
    n = last - first
    stride = max(1, n // STEPS_AN_INTERVAL)
    return n, rows.records(first, last, stride), rows.detailed(first, last)


def _inside(rows: Reversible[T], start: int, end: int, t: Any) -> Iterator[T]:
    """The rows (in time order) from `start` to `end`: read from the newest back, so
    the last minute of a long run costs a minute's rows, not the run's."""
    kept: list[T] = []
    for row in reversed(rows):
        when = t(row)
        if when < start:
            break
        if when <= end:
            kept.append(row)
    return reversed(kept)


def oom_times(timeline: Timeline) -> list[int]:
    """When a process's CUDA allocator counted a new out-of-memory error (its gauges),
    or the job ended of one."""
    out: list[int] = []
    last: dict[int, int] = {}
    for pid, gauges in timeline.gauges:
        ooms = int(gauges.get("ooms", 0) or 0)
        if ooms > last.get(pid, 0) and "t" in gauges:
            out.append(int(gauges["t"]))
        last[pid] = max(ooms, last.get(pid, 0))
    return out


def first_seen(
    timeline: Timeline, looks: int = LOOKS, until_ns: int | None = None
) -> dict[str, float]:
    """When each finding was first raised, as the live screens would have raised it:
    the rules over the screens' recent window, at `looks` moments across the run (the
    end of each; within a run's 1/looks)."""
    start = timeline.start_mono_ns
    end = timeline.end_ns() if until_ns is None else until_ns
    seen: dict[str, float] = {}
    for k in range(1, looks + 1):
        until = start + (end - start) * k // looks
        w = timeline.window(RECENT_STEPS, RECENT_SAMPLES, until)
        if not (w.steps or w.host):
            continue
        for f in diagnose(w):
            seen.setdefault(f.id, round((until - start) / 1e9, 1))
    return seen
