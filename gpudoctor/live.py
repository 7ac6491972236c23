"""What a run looks like right now: the recent steps, host and GPU, as one line."""

from __future__ import annotations

from itertools import islice, takewhile

from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.timeline import Timeline
from gpudoctor.units import cell_width, clip, ms_text

RECENT_S = 5.0


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
        cutoff = steps[-1].t_end_mono_ns - int(RECENT_S * 1e9)
        # (the rows end in time order: the newest 2,000 made records, the recent kept)
        recent = [s for s in steps[-2000:] if s.t_end_mono_ns >= cutoff]
        # the measures of the report's Window, over the last seconds' steps
        w = Window(steps=tuple(recent or [steps[-1]]))
        parts.append(_("step {ms}").format(ms=ms_text(w.step_median_ms)))
        if w.steps_per_s:
            rate_part = f"{w.steps_per_s:.1f}/s"
            parts.append(rate_part)
        if w.step_wall_s:
            parts.append(_("data wait {wait:.0%}").format(wait=w.data_wait_fraction))
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
