"""What the screens show at one moment: an immutable value built from the timeline.

The session (or a replay) builds a Snapshot each tick and hands it to the TUI, which
renders it and never reads NVML, psutil or the timeline itself. Diagnosis runs over a
recent window (the last RECENT_STEPS steps, RECENT_SAMPLES samples), so a tick costs the
same in the first minute and the tenth hour.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.diagnosis.engine import diagnose
from gpudoctor.diagnosis.gpu_timeline import RankTimeline
from gpudoctor.diagnosis.hotspots import Hotspots
from gpudoctor.diagnosis.ranks import RankMeasure
from gpudoctor.diagnosis.speed_of_light import SpeedOfLight, speed_of_light
from gpudoctor.diagnosis.window import Window
from gpudoctor.model import Finding, GpuSample, HostSample, JobExit
from gpudoctor.prescribe.predict import Prediction, first_remedy
from gpudoctor.redact import redact_argv, redact_text
from gpudoctor.series import RunSeries
from gpudoctor.terminal import OutputLine, TerminalView
from gpudoctor.timeline import RECENT_SAMPLES, RECENT_STEPS, Timeline

HISTORY_POINTS = 60  # sparkline and plot lengths


@dataclass(frozen=True)
class Snapshot:
    t_mono_ns: int
    command: tuple[str, ...]
    job_pid: int | None
    elapsed_s: float
    up_s: float  # the job's age: elapsed_s, or for a watched job since its own start
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
    output_tail: tuple[OutputLine, ...] = ()  # as a terminal shows it (terminal.py)
    output_path: str | None = None
    mode: str = "run"  # "watch": no step timed; the step measures are estimates
    stack_samples: int = 0  # watch mode: py-spy's samples of the main thread
    store_trouble: str | None = None  # why the store cannot be written now (kept in memory)
    ranks: tuple[RankMeasure, ...] = ()  # a distributed job's ranks, each measured alone
    hotspots: Hotspots | None = None  # the lines of the user's code (py-spy's samples)
    speed_of_light: SpeedOfLight | None = None  # once the probe counted a step's FLOPs
    gpu_timeline: RankTimeline | None = None  # the latest profiler capture, read
    # what each finding's first remedy is predicted to buy, by finding id (when known)
    predictions: dict[str, Prediction] = field(default_factory=dict)
    # the run over time (series.py), when a screen shows plots (their stretch)
    series: RunSeries | None = None
    # a watched job: its training loop's own counter as read lately (None: no reading in
    # LOOP_COUNTER_FRESH_NS), the step count of a job whose steps are not counted
    loop_counter: int | None = None

    @property
    def running(self) -> bool:
        return self.exit is None

    @property
    def cores_allowed(self) -> int:
        """The cores the job may use (its host reading), what a remedy's words size to."""
        return self.host.cores_allowed if self.host else (os.cpu_count() or 1)


@dataclass(frozen=True)
class Diagnosed:
    """A snapshot's findings and their remedies' predictions, to keep for a while."""

    findings: tuple[Finding, ...]
    predictions: dict[str, Prediction]


def take(
    timeline: Timeline,
    job_pid: int | None = None,
    output: TerminalView | None = None,
    until_ns: int | None = None,
    diagnosed: Diagnosed | None = None,
) -> Snapshot:
    """The snapshot of a live run now, or of a recorded one at `until_ns`; with the
    findings of `diagnosed` when given (a live view diagnoses less often than it ticks)."""
    w = timeline.window(RECENT_STEPS, RECENT_SAMPLES, until_ns)
    latest: dict[int, GpuSample] = {}
    history: dict[int, list[float]] = {}
    for g in w.gpus:
        latest[g.index] = g
        if g.util_gpu_pct is not None:
            history.setdefault(g.index, []).append(float(g.util_gpu_pct))
    steps = w.steady_steps
    walls = [s.wall_ns / 1e6 for s in steps[-HISTORY_POINTS:]]
    measured = bool(steps) or w.estimated or w.rollup is not None
    if diagnosed is None:
        found = tuple(diagnose(w)) if steps or w.host or w.exit else ()
        diagnosed = Diagnosed(found, _predictions(found, w))
    findings = diagnosed.findings
    if until_ns is None:
        now, elapsed = timeline.last_reading_ns(), timeline.duration_s()
    else:
        now, elapsed = until_ns, max(0.0, (until_ns - timeline.start_mono_ns) / 1e9)
    up = elapsed
    if timeline.mode == "watch":  # a watched job was up before the doctor came
        started = timeline.facts.get(timeline.watched_pid or -1, {}).get("started_unix")
        if isinstance(started, (int, float)) and started <= timeline.started_unix:
            up = elapsed + timeline.started_unix - started
    return Snapshot(
        t_mono_ns=now,
        command=tuple(redact_argv(timeline.command)),  # for the screen: secrets masked
        job_pid=job_pid or timeline.watched_pid or timeline.main_pid(),
        elapsed_s=elapsed,
        up_s=up,
        exit=w.exit,
        gpu_reason=timeline.gpu_reason,
        gpus=tuple(latest[i] for i in sorted(latest)),
        gpu_util_history={i: tuple(v[-HISTORY_POINTS:]) for i, v in history.items()},
        host=w.host[-1] if w.host else None,
        steps_total=w.total_steps,
        step_p50_ms=w.step_median_ms if walls or w.steps_per_s else None,
        step_p90_ms=(w.step_p90_ms if walls else w.rollup.quantile_ms(0.9) if w.rollup else None),
        step_history_ms=tuple(walls),
        steps_per_s=w.steps_per_s,
        samples_per_s=w.samples_per_s,
        data_wait_fraction=w.data_wait_fraction if measured else None,
        split=w.split() if measured else {},
        findings=findings,
        facts=w.advice_facts,
        gpu_timeline=w.gpu_timeline,
        job_gpu_pids=w.job_pids,
        output_tail=redacted(output.read()) if output is not None else (),
        output_path=str(output.path) if output is not None else None,
        mode=timeline.mode,
        stack_samples=w.stack_total,
        store_trouble=timeline.store_trouble() if until_ns is None else None,
        ranks=w.ranks,
        hotspots=w.hotspots,
        speed_of_light=speed_of_light(w) if measured else None,
        predictions=diagnosed.predictions,
        loop_counter=_loop_counter(w, now) if timeline.mode == "watch" else None,
    )


# A reading of a watched job's loop counter is served this long: the node exporter reads
# one at least every 80 s (app/exporter.py NODE_STACKS), `watch` every few seconds; an
# older one means the reading stopped (its series goes, no stall is claimed on it).
LOOP_COUNTER_FRESH_NS = 300_000_000_000


def _loop_counter(w: Window, now: int) -> int | None:
    found = w.loop_counter
    if found is None or now - found[0] > LOOP_COUNTER_FRESH_NS:
        return None
    return found[1]


def _predictions(findings: tuple[Finding, ...], w: Window) -> dict[str, Prediction]:
    """Each finding's first remedy's prediction (prescribe/predict.py), when known."""
    cores = w.host[-1].cores_allowed if w.host else (os.cpu_count() or 1)
    predicted = {f.id: first_remedy(f, w, cores) for f in findings}
    return {k: p for k, p in predicted.items() if p is not None}


def timeline_span(timeline: Timeline) -> tuple[int, int]:
    """First and last moment of a recorded run (for moving through a replay)."""
    return timeline.start_mono_ns, timeline.end_ns()


def redacted(lines: tuple[OutputLine, ...]) -> tuple[OutputLine, ...]:
    """The job's output as the screen shows it: secrets masked in each styled part."""
    return tuple(tuple((redact_text(text), style) for text, style in line) for line in lines)
