"""What a run looks like right now: the recent steps, host and GPU, as one line."""

from __future__ import annotations

from itertools import islice, takewhile

from gpudoctor.diagnosis.window import WARMUP_STEPS, Window, median_ms
from gpudoctor.i18n import _
from gpudoctor.step_rows import StepRows
from gpudoctor.timeline import Timeline
from gpudoctor.units import cell_width, clip, ms_text

RECENT_S = 5.0
# of a fast loop's last seconds, the newest rows only (3,000 steps a second: 0.7 s)
RECENT_ROWS = 2000


# watch mode: the data wait over the last stack chunks (py-spy's, 10 s each)
RECENT_CHUNKS = 2


def status_line(timeline: Timeline, width: int | None = None) -> str:
    """The line; within `width` terminal columns when given (the terminal's, so that it
    never wraps): the job's CPU cores go first, then the step rate, then it is cut with
    an ellipsis."""
    elapsed = timeline.duration_s()
    steps = timeline.main_steps()
    parts = [_("steps {n}").format(n=timeline.total_steps())]
    rate_part: str | None = None  # the parts that go first when the line is too wide
    cpu_part: str | None = None
    short_cpu: str | None = None
    if timeline.mode == "watch":
        parts = [f"pid {timeline.watched_pid}"] + _stack_words(timeline)
    elif steps:
        median, rate, wait = recent_measures(steps)
        parts.append(_("step {ms}").format(ms=ms_text(median)))
        if rate:
            rate_part = f"{rate:.1f}/s"
            parts.append(rate_part)
        if wait is not None:
            parts.append(_("data wait {wait:.0%}").format(wait=wait))
    if timeline.gpus:
        last_t = timeline.gpus[-1].t_mono_ns
        utils = [
            g.util_gpu_pct
            for g in takewhile(lambda g: g.t_mono_ns == last_t, reversed(timeline.gpus))
        ]
        utils.reverse()  # (the newest tick's, read from the end: not the run's readings)
        shown = " ".join(f"{u}%" if u is not None else "n/a" for u in utils)
        parts.append(f"GPU {shown}")
    else:
        parts.append("GPU n/a")
    if timeline.host:
        # the findings' measure (the median of the job's cores over host samples), over
        # the last seconds: in a steady run the line and the evidence say one number
        hosts = list(islice(reversed(timeline.host), round(RECENT_S)))
        cpu = sorted(h.cpu_pct for h in hosts)[len(hosts) // 2]
        cores = sorted(h.job_cpu_cores for h in hosts)[len(hosts) // 2]
        short_cpu = _("CPU {cpu:.0f}%").format(cpu=cpu)
        cpu_part = _("CPU {cpu:.0f}% (job {cores:.1f} cores)").format(cpu=cpu, cores=cores)
        parts.append(cpu_part)
    trouble = timeline.store_trouble()
    if trouble is not None:
        parts.append(_("store not written ({trouble}): kept in memory").format(trouble=trouble))
    head = f"[gpudoctor {elapsed:4.0f}s] "
    line = head + " · ".join(parts)
    if width is None or cell_width(line) <= width:
        return line
    if cpu_part is not None and short_cpu is not None:  # the job's cores first
        parts[parts.index(cpu_part)] = short_cpu
    if cell_width(head + " · ".join(parts)) > width and rate_part is not None:  # the rate
        parts.remove(rate_part)
    return clip(head + " · ".join(parts), width)


def recent_measures(steps: StepRows) -> tuple[float, float | None, float | None]:
    """The last RECENT_S seconds' median step (ms), steps a second and data wait (None
    with no step time): the report's Window's measures over those steps, at most the
    newest RECENT_ROWS. A run past its warm-up (the common case) is read from the rows'
    columns and its few steps measured in detail: a fast loop's 2,000 records made each
    second were a quarter of the headless doctor's CPU (bench/RESULTS.md)."""
    n = len(steps)
    cutoff = steps.end_at(n - 1) - int(RECENT_S * 1e9)
    # (the rows end in time order: the newest step is always in)
    start = min(n - 1, max(n - RECENT_ROWS, steps.ending_before(cutoff)))
    numbers, _ends, walls = steps.columns(start, n)
    if len(walls) < 2 * WARMUP_STEPS or min(numbers) < WARMUP_STEPS:
        w = Window(steps=tuple(steps.records(start, n)))
        return w.step_median_ms, w.steps_per_s, w.data_wait_fraction if w.step_wall_s else None
    # every row a steady one: Window(steps=these).steady_steps would keep them all
    wall_ns = sum(walls)
    if not wall_ns:
        return median_ms(sorted(walls)), None, None
    detailed = Window(steps=tuple(steps.detailed(start, n)))
    return median_ms(sorted(walls)), len(walls) / (wall_ns / 1e9), detailed.data_wait_fraction


def _stack_words(timeline: Timeline) -> list[str]:
    """Estimates from the last stack chunks (watch mode), marked with ~."""
    w = timeline.window(max_samples=RECENT_CHUNKS)
    if not w.stack_total:
        return [_("no stack samples yet")]
    words = [
        _("data wait ~{wait:.0%} ({samples} samples)").format(
            wait=w.data_wait_fraction, samples=w.stack_total
        )
    ]
    if w.steps_per_s:
        words.append(_("~{rate:.1f} steps/s").format(rate=w.steps_per_s))
    return words
