"""What the screens show at one moment: an immutable value built from the timeline.

The session (or a replay) builds a Snapshot each tick and hands it to the TUI, which
renders it and never reads NVML, psutil or the timeline itself. Diagnosis runs over a
recent window (the last RECENT_STEPS steps, RECENT_SAMPLES samples), so a tick costs the
same in the first minute and the tenth hour.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from gpudoctor.diagnosis.engine import diagnose
from gpudoctor.diagnosis.window import Window, percentile
from gpudoctor.model import Finding, GpuSample, HostSample, JobExit, StepRecord
from gpudoctor.timeline import Timeline

RECENT_STEPS = 2000
RECENT_SAMPLES = 120  # host ticks (two minutes at 1 Hz), and as many per GPU
HISTORY_POINTS = 60  # sparkline and plot lengths
OUTPUT_TAIL_LINES = 200
OUTPUT_TAIL_BYTES = 32_768


@dataclass(frozen=True)
class Snapshot:
    t_mono_ns: int
    command: tuple[str, ...]
    job_pid: int | None
    elapsed_s: float
    exit: JobExit | None
    gpu_reason: str | None  # why there are no GPU readings, when there are none
    gpus: tuple[GpuSample, ...]  # the latest reading of each GPU
    gpu_util_history: dict[int, tuple[float, ...]]
    host: HostSample | None
    steps_total: int
    step_p50_ms: float | None
    step_p90_ms: float | None
    step_history_ms: tuple[float, ...]  # one point per recent step (the newest last)
    steps_per_s: float | None
    samples_per_s: float | None
    data_wait_fraction: float | None
    split: dict[str, float]
    findings: tuple[Finding, ...]
    facts: dict[str, Any] = field(default_factory=dict)
    job_gpu_pids: frozenset[int] = frozenset()
    output_tail: tuple[str, ...] = ()
    output_path: str | None = None

    @property
    def running(self) -> bool:
        return self.exit is None


def _tail(items: Any, n: int) -> list[Any]:
    """The last n items of a list or deque without copying the rest."""
    if isinstance(items, deque):
        start = max(0, len(items) - n)
        return list(islice(items, start, None))
    return list(items[-n:])


def read_tail(path: Path | None, lines: int = OUTPUT_TAIL_LINES) -> tuple[str, ...]:
    """The last lines of the job's log (carriage-return progress bars keep their last state)."""
    if path is None:
        return ()
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - OUTPUT_TAIL_BYTES))
            data = f.read()
    except OSError:
        return ()
    text = data.decode("utf-8", errors="replace")
    out = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]
    if size > OUTPUT_TAIL_BYTES and out:
        out = out[1:]  # the first line was cut
    while out and not out[-1]:
        out.pop()
    return tuple(out[-lines:])


def recent_window(timeline: Timeline, until_ns: int | None = None) -> Window:
    """The timeline's recent past as a diagnosis window (up to `until_ns`, for replay)."""

    def upto_steps(steps: Any) -> list[StepRecord]:
        recent = _tail(steps, RECENT_STEPS if until_ns is None else len(steps))
        if until_ns is not None:
            recent = [s for s in recent if s.t_end_mono_ns <= until_ns][-RECENT_STEPS:]
        return recent

    host = _tail(timeline.host, RECENT_SAMPLES if until_ns is None else len(timeline.host))
    gpus = _tail(timeline.gpus, 8 * RECENT_SAMPLES if until_ns is None else len(timeline.gpus))
    gauges = list(timeline.gauges)
    if until_ns is not None:
        host = [h for h in host if h.t_mono_ns <= until_ns][-RECENT_SAMPLES:]
        gpus = [g for g in gpus if g.t_mono_ns <= until_ns][-8 * RECENT_SAMPLES :]
        gauges = [(p, g) for p, g in gauges if int(g.get("t", 0)) <= until_ns]
    main = timeline.main_pid()
    by_pid = {pid: tuple(upto_steps(s)) for pid, s in timeline.steps.items()}
    main_steps = by_pid.get(main, ()) if main is not None else ()
    job_pids = {p.pid for h in host for p in h.job} | set(timeline.facts) | set(timeline.steps)
    total = timeline.total_steps()
    if until_ns is not None and main_steps:
        total = main_steps[-1].number + 1
    elif until_ns is not None:
        total = 0
    return Window(
        steps=main_steps,
        step_count=total,
        steps_by_pid=by_pid,
        facts=timeline.merged_facts(),
        facts_by_pid=dict(timeline.facts),
        host=tuple(host),
        gpus=tuple(gpus),
        gauges=tuple(g for pid, g in gauges[-500:] if main is None or pid == main),
        exit=timeline.exit if until_ns is None else None,
        ends=dict(timeline.ends) if until_ns is None else {},
        job_pids=frozenset(job_pids),
        start_mono_ns=timeline.start_mono_ns,
    )


def take(
    timeline: Timeline,
    job_pid: int | None = None,
    output_path: Path | None = None,
    until_ns: int | None = None,
) -> Snapshot:
    """The snapshot of a live run now, or of a recorded one at `until_ns`."""
    w = recent_window(timeline, until_ns)
    latest: dict[int, GpuSample] = {}
    history: dict[int, list[float]] = {}
    for g in w.gpus:
        latest[g.index] = g
        if g.util_gpu_pct is not None:
            history.setdefault(g.index, []).append(float(g.util_gpu_pct))
    steps = w.steady_steps or w.steps
    walls = [s.wall_ns / 1e6 for s in steps]
    wall_s = sum(walls) / 1e3
    detailed = w.detailed_steps
    batches = [s.batch_size for s in detailed if s.batch_size]
    samples_per_s = (
        statistics.fmean(batches) * len(steps) / wall_s
        if batches and len(batches) == len(detailed) and wall_s
        else None
    )
    findings = tuple(diagnose(w)) if steps or w.host or w.exit else ()
    now = until_ns if until_ns is not None else _last_time(timeline)
    elapsed = max(0.0, (now - timeline.start_mono_ns) / 1e9)
    if until_ns is None and timeline.end_mono_ns is not None:
        elapsed = timeline.duration_s()
    return Snapshot(
        t_mono_ns=now,
        command=tuple(timeline.command),
        job_pid=job_pid,
        elapsed_s=elapsed,
        exit=w.exit,
        gpu_reason=timeline.gpu_reason,
        gpus=tuple(latest[i] for i in sorted(latest)),
        gpu_util_history={i: tuple(v[-HISTORY_POINTS:]) for i, v in history.items()},
        host=w.host[-1] if w.host else None,
        steps_total=w.total_steps,
        step_p50_ms=statistics.median(walls) if walls else None,
        step_p90_ms=percentile(walls, 90) if walls else None,
        step_history_ms=tuple(walls[-HISTORY_POINTS:]),
        steps_per_s=len(steps) / wall_s if wall_s else None,
        samples_per_s=samples_per_s,
        data_wait_fraction=w.data_wait_fraction if steps else None,
        split=w.split() if steps else {},
        findings=findings,
        facts=w.facts,
        job_gpu_pids=w.job_pids,
        output_tail=read_tail(output_path),
        output_path=str(output_path) if output_path else None,
    )


def _last_time(timeline: Timeline) -> int:
    times = [timeline.start_mono_ns]
    if timeline.host:
        times.append(timeline.host[-1].t_mono_ns)
    if timeline.gpus:
        times.append(timeline.gpus[-1].t_mono_ns)
    return max(times)


def timeline_span(timeline: Timeline) -> tuple[int, int]:
    """First and last moment of a recorded run (for moving through a replay)."""
    end = timeline.end_mono_ns or _last_time(timeline)
    return timeline.start_mono_ns, end
