"""The report as people read it: the summary the command line prints after a run, and
Markdown. One function per form; what both show (how the run ended, the step measures,
the profile table) is worded once here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpudoctor.diagnosis.hotspots import whose_words
from gpudoctor.i18n import _, ngettext
from gpudoctor.prescribe.batch_size import SAFETY_MARGIN, Found, reason_words
from gpudoctor.prescribe.predict import Prediction
from gpudoctor.prescribe.trial import Comparison, TrialResult
from gpudoctor.prescribe.visit import FixResult, FixStep
from gpudoctor.redact import redact_argv, redact_text
from gpudoctor.report.gpu_timeline import timeline_words
from gpudoctor.report.values import SCHEMA, HotspotLine, Json, Profile, Report, StepMeasures
from gpudoctor.units import cell_width, flop_text, ms_text, pad, rate_text, seconds_text

SUMMARY_OPERATORS = 8  # profile rows in the printed summary (all in Markdown)
SIDE_COLUMNS = 9  # a trial's two sides, named in a column ("baseline", "treatment")


def status_words(report: Report) -> str:
    """How the run ended, in words (the summary, Markdown and history say it alike)."""
    return ended_words(report.ended_by, report.exit_code, report.watched_pid)


def ended_words(ended_by: str | None, exit_code: int | None, watched_pid: int | None) -> str:
    """How a run ended, the one wording every face uses (`watched_pid`: watch mode)."""
    if ended_by is None:
        return _("record incomplete (the doctor stopped first)")
    if watched_pid is not None:
        if ended_by == "detached":
            return _("watched pid {pid}, left running").format(pid=watched_pid)
        return _("watched pid {pid} until it ended").format(pid=watched_pid)
    if ended_by == "detached":
        return _("left running")
    return _("ended by {how}, exit code {code}").format(how=how_words(ended_by), code=exit_code)


def how_words(ended_by: str) -> str:
    """How a job ended (model.EndedBy, a value of the report) in the person's language."""
    return {
        "exit": _("exit"),
        "signal": _("signal"),
        "oom": _("oom"),
        "exception": _("exception"),
        "max-seconds": _("max-seconds"),
        "steps": _("steps"),
        "detached": _("left running"),
    }.get(ended_by, ended_by)


def summary(report: Report) -> str:
    """What `gpudoctor run` and `watch` print at the end (on stderr)."""
    s = report.steps
    counted = _(", {steps} steps").format(steps=s.count) if s.count is not None else ""
    stepping = report.probe.steps_by_process
    if s.count is not None and len(report.ranks) > 1:
        # ranks step together, here or on other nodes: a step is each rank's (as the
        # samples/s below are said a rank's and all ranks')
        counted = _(", {steps} steps a rank ({ranks} ranks)").format(
            steps=s.count, ranks=len(report.ranks)
        )
    elif s.count is not None and len(stepping) > 1:
        # processes that train on their own (Hogwild): their steps add up
        counted = _(
            ", {steps} steps in the process with the most, {total} in all {n} processes that train"
        ).format(steps=s.count, total=sum(stepping.values()), n=len(stepping))
    lines = [
        "",
        _("gpudoctor: session {session}: {status}, {seconds:.1f} s{counted}").format(
            session=report.session,
            status=status_words(report),
            seconds=report.duration_s,
            counted=counted,
        ),
    ]
    if report.watched:
        line = "  " + _("from outside: {samples} stack samples of the main thread").format(
            samples=s.stack_samples or 0  # None: none came (the first after a few seconds)
        )
        if s.steps_per_s:
            line += _(", about {rate:.1f} steps/s").format(rate=s.steps_per_s)
        if s.data_wait_fraction is not None:
            line += _(", data wait about {wait:.0%}").format(wait=s.data_wait_fraction)
        lines.append(line)
    elif s.median_ms is not None:
        line = "  " + _("step {median} median, {p90} p90").format(
            median=ms_text(s.median_ms), p90=ms_text(s.p90_ms or 0.0)
        )
        rates = [float(r.steps.get("samples_per_s") or 0.0) for r in report.ranks]
        if s.samples_per_s and len(rates) > 1:  # the job's rate is all its ranks' together
            line += _(", {rate:.1f} samples/s a rank, {total:.1f} for the {n} ranks").format(
                rate=s.samples_per_s, total=sum(rates), n=len(rates)
            )
        elif s.samples_per_s:
            line += _(", {rate:.1f} samples/s").format(rate=s.samples_per_s)
        line += _(", data wait {wait:.0%}").format(wait=s.data_wait_fraction)
        lines.append(line)
    if report.ledger is not None:
        lines.append("  " + ledger_words(report.ledger))
    lines.append(f"  GPU: {report.gpu_status}")
    if report.speed_of_light is not None:
        lines += [f"  {line}" for line in speed_words(report.speed_of_light)]
    if not report.findings:
        lines.append("  " + _("no findings: nothing measured points at a bottleneck"))
    for f in report.findings:
        estimated = _(", estimated") if f.estimated else ""
        lines.append(f"  [{f.severity}{estimated}] {f.id}: {f.title}")
        lines.append(f"      {f.evidence}")
        if f.predicted_speedup:
            lines.append(f"      {predicted_words(f.predicted_speedup)}")
        # every remedy, in the report's and the TUI's order
        lines += [f"      -> {r.id}: {r.how}" for r in f.remedies]
    if report.profile is not None:
        p = report.profile
        lines.append(f"  {profile_title(p)}:")
        for op in p.operators[:SUMMARY_OPERATORS]:
            lines.append(
                f"      {op.self_time_us(p.sort):>10.0f} us  {op.calls:>6} calls  {op.name}"
            )
        if p.trace:
            lines.append(f"      trace: {p.trace}")
    if report.gpu_timeline is not None:
        lines.append(f"  {timeline_words(report.gpu_timeline)}")
    if report.hotspots:
        lines.append(
            "  "
            + _("where the time outside the model goes ({source}):").format(
                source=hotspot_source(report)
            )
        )
        lines += [f"      {hotspot_words(h)}" for h in report.hotspots]
    lines += ["  " + _("note: {note}").format(note=note) for note in report.notes]
    return "\n".join(lines) + "\n"


def predicted_words(p: Mapping[str, Json]) -> str:
    """`predicted with more-workers: 1.19x-2.10x (2 cores allowed, ...)`"""
    span = Prediction(float(p["low"]), float(p["high"]), str(p["basis"])).words()
    return _("predicted with {remedy}: {span} ({basis})").format(
        remedy=p["remedy"], span=span, basis=p["basis"]
    )


def ledger_words(ledger: Mapping[str, Json]) -> str:
    """The wall-time ledger in one line: where the run's time went."""
    wall = float(ledger.get("wall_s") or 0.0)

    def part(key: str) -> str:
        seconds = float(ledger.get(key) or 0.0)
        share = seconds / wall if wall > 0 else 0.0
        return f"{seconds_text(seconds)} ({share:.0%})"

    return _(
        "wall time {wall}: start-up {startup}, training {training}, evaluation "
        "{evaluation}, checkpoints {checkpoint}, other host work {other}"
    ).format(
        wall=seconds_text(wall),
        startup=part("startup_s"),
        training=part("training_s"),
        evaluation=part("evaluation_s"),
        checkpoint=part("checkpoint_s"),
        other=part("other_host_s"),
    )


def speed_words(sol: Mapping[str, Json]) -> list[str]:
    """The speed of light in two lines: MFU, then what a step could take; the basis is
    the report's (JSON's `basis`)."""
    flops = float(sol["flops_per_step"])
    achieved = float(sol["achieved_tflops"])
    step = float(sol["step_ms"])
    head = _("speed of light: {flops} a step, {rate} achieved").format(
        flops=flop_text(flops), rate=rate_text(achieved)
    )
    if sol.get("mfu") is None:
        return [
            head
            + _(" (no peak known for {device}: MFU not computed)").format(device=sol.get("device"))
        ]
    peak = float(sol["peak_tflops"])
    could = float(sol["could_take_ms"])
    reach = float(sol["reachable"])
    return [
        head
        + _(", MFU {mfu:.1%} of {peak} ({device})").format(
            mfu=float(sol["mfu"]), peak=rate_text(peak), device=sol["device"]
        ),
        _(
            "a step could take about {could} (its FLOPs at {reach:.0%} of peak, no input wait, "
            "no host syncs); it takes {step}"
        ).format(could=ms_text(could), reach=reach, step=ms_text(step)),
    ]


def hotspot_source(report: Report) -> str:
    return _("py-spy, {samples} samples of the main thread").format(samples=report.hotspot_samples)


def hotspot_words(h: HotspotLine) -> str:
    """`42% of the main thread, idle  train.py:42 (<module>)  time.sleep(0.02)`"""
    code = f"  {h.code}" if h.code else ""
    return f"{h.share:>4.0%} {whose_words(h.where, h.state)}  {h.place} ({h.function}){code}"


def summary_items(report: Report) -> list[str]:
    """The report's summary as the Markdown's list items (`- ...`, and `  - ...` for a
    GPU's, under the GPU line): what the Markdown and the HTML page both show, in the
    same words and numbers."""
    lines = [
        _("- command: `{command}`").format(command=" ".join(report.command)),
        f"- {status_words(report)}, {report.duration_s:.1f} s",
        _steps_words(report),
        f"- GPU: {report.gpu_status}",
    ]
    for g in report.gpus:
        lines.append(
            "  - "
            + _(
                "GPU {index} {name}: util mean {mean}% p95 {p95}%, memory max {used} of "
                "{total}, power {power} W"
            ).format(
                index=g.index,
                name=g.name,
                mean=g.util_mean_pct,
                p95=g.util_p95_pct,
                used=_gib(g.mem_used_max_bytes),
                total=_gib(g.mem_total_bytes),
                power=g.power_mean_w,
            )
        )
    if report.speed_of_light is not None:
        lines += [f"- {line}" for line in speed_words(report.speed_of_light)]
    if report.ledger is not None:
        lines.append("- " + ledger_words(report.ledger))
    h = report.host
    if h is not None:
        lines.append(
            "- "
            + _(
                "host: {cores} cores allowed, CPU {cpu}%, job {job} cores, iowait {iowait}%"
            ).format(
                cores=h.cores_allowed,
                cpu=h.cpu_mean_pct,
                job=h.job_cpu_cores_mean,
                iowait=h.iowait_mean_pct,
            )
        )
    return [line for line in lines if line]


def markdown(report: Report) -> str:
    lines = [
        _("# gpudoctor report (session {session})").format(session=report.session),
        "",
        *summary_items(report),
    ]
    lines += ["", _("## Findings"), ""]
    if not report.findings:
        lines.append(_("No findings: nothing measured points at a bottleneck."))
    for n, f in enumerate(report.findings, 1):
        confidence = _(", estimated") if f.estimated else ""
        lines.append(f"{n}. **{f.id}** ({f.severity}{confidence}): {f.title}")
        lines.append(f"   {f.evidence}")
        if f.predicted_speedup:
            lines.append(f"   {predicted_words(f.predicted_speedup)}")
        for r in f.remedies:
            lines.append(
                "   - "
                + _("`{id}` {title} [guide: {guide}]: {how}").format(
                    id=r.id, title=r.title, guide=r.guide, how=r.how
                )
            )
    if report.profile is not None:
        p = report.profile
        lines += ["", f"## {profile_title(p, heading=True)}", ""]
        lines += [
            _("| operator | calls | self CPU us | self device us |"),
            "|---|---|---|---|",
        ]
        for op in p.operators:
            lines.append(
                f"| `{op.name}` | {op.calls} | {op.self_cpu_time_total_us} | "
                f"{op.self_device_time_total_us} |"
            )
    if report.gpu_timeline is not None:
        lines += ["", timeline_words(report.gpu_timeline) + "."]
    if report.hotspots:
        lines += ["", _("## Where the time outside the model goes"), ""]
        lines += [_("From {source}.").format(source=hotspot_source(report)), ""]
        lines += [
            _("| share | where | state | line | function | code |"),
            "|---|---|---|---|---|---|",
        ]
        for spot in report.hotspots:
            code = spot.code.replace("|", "\\|")
            lines.append(
                f"| {spot.share:.0%} | {spot.where} | {spot.state} | `{spot.file}:{spot.line}` | "
                f"`{spot.function}` | `{code}` |"
            )
    if report.notes:
        lines += ["", _("## Notes"), ""] + [f"- {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


def profile_title(p: Profile, heading: bool = False) -> str:
    device = p.sort == "device"
    if heading:
        words = (
            _("Profile ({steps} steps, top operators by self device time)")
            if device
            else _("Profile ({steps} steps, top operators by self CPU time)")
        )
    else:
        words = (
            _("profile of {steps} steps, top operators by self device time")
            if device
            else _("profile of {steps} steps, top operators by self CPU time")
        )
    return words.format(steps=p.steps)


def _steps_words(report: Report) -> str:
    s: StepMeasures = report.steps
    if report.watched:
        words = "- " + _("steps: not timed (watched from outside; {samples} stack samples)").format(
            samples=s.stack_samples or 0
        )
        if s.steps_per_s:
            words += _(", about {rate:.1f} steps/s ({ms:.1f} ms a step)").format(
                rate=s.steps_per_s, ms=s.median_ms
            )
    else:
        words = "- " + _("steps: {count}").format(count=s.count)
        if s.median_ms:
            words += _(", median {median}, p90 {p90}").format(
                median=ms_text(s.median_ms), p90=ms_text(s.p90_ms or 0.0)
            )
        if s.samples_per_s:
            words += _(", {rate:.1f} samples/s").format(rate=s.samples_per_s)
    if s.data_wait_fraction is not None:
        words += (
            _(", data wait about {wait:.0%}") if report.watched else _(", data wait {wait:.0%}")
        ).format(wait=s.data_wait_fraction)
    return words


# -- trial, compare, tune ------------------------------------------------------------------------


def trial_text(r: TrialResult) -> str:
    """A trial's (or a comparison's) outcome, as the command line prints it."""
    c = r.comparison
    b, t = c.baseline, c.treatment
    lines = ["", _("gpudoctor trial: {verdict}").format(verdict=verdict_words(c.verdict))]
    lines += [
        "  "
        + _("applied {remedy} via {via}: {change}").format(
            remedy=a.remedy, via=via_words(a.via), change=a.change
        )
        for a in r.applied
    ]
    if r.predicted is not None and r.predicted.known:
        lines.append(
            "  "
            + _("predicted {span} ({basis})").format(
                span=r.predicted.words(), basis=r.predicted.basis
            )
        )
    for side, name in ((b, "baseline"), (t, "treatment")):
        lines.append(
            "  "
            + _("{side} {rate:.1f} {unit}, step {step:.1f} ms median, data wait {wait}").format(
                side=pad(side_words(name), SIDE_COLUMNS),
                rate=round(side.samples_per_s, 2),
                unit=unit_words(side.unit),
                step=side.step_median_ms or 0,
                wait=percent(side.data_wait_fraction),
            )
        )
    lines.append(
        "  "
        + _("{speedup}; data wait {before} -> {after}").format(
            speedup=speedup_words(c),
            before=percent(b.data_wait_fraction),
            after=percent(t.data_wait_fraction),
        )
    )
    if r.extra_pairs:
        lines.append("  " + extra_pairs_words(r.extra_pairs))
    if c.judged:
        lines.append("  " + judged_words(c.looks, *c.judged, c.judged_why))
    if c.crowding is not None:
        lines.append(f"  {c.crowding.words()}")
    if c.too_few_runs:
        lines.append("  " + too_few_runs_words())
    if any(a.changes_numerics for a in r.applied):
        lines.append("  " + _("changes numerics: {loss}").format(loss=loss_words(c)))
    lines.append(
        "  " + _("treatment command: {command}").format(command=redact_text(r.treatment_shown))
    )
    return "\n".join(lines) + "\n"


def judged_words(looks: int, low: float, high: float, why: str = "looks") -> str:
    """The interval a verdict rests on after more than one look, or on a busy machine
    (prescribe/trial.py's JUDGED_LEVEL, Comparison.judged_why), and why."""
    if why == "busy":
        return _(
            "verdict on the 99% interval {low:.2f}-{high:.2f}x: other processes took the "
            "job's cores through these runs, and a load that comes and goes between runs "
            "can read as a change"
        ).format(low=low, high=high)
    return _(
        "verdict on the 99% interval {low:.2f}-{high:.2f}x: these runs were compared {n} "
        "times, and each look more is another chance for noise to read as a change"
    ).format(low=low, high=high, n=looks)


def too_few_runs_words() -> str:
    """Why a trial on a machine busy throughout claims no change (prescribe/trial.py's
    MIN_BUSY_RUNS)."""
    return _(
        "no change claimed: with other processes taking the cores throughout, fewer than "
        "three runs a side cannot tell the change from their load (--extra-pairs 1 or more "
        "runs more)"
    )


def extra_pairs_words(n: int) -> str:
    """Why a trial ran more runs than asked (app/trial.py's settle)."""
    return ngettext(
        "{n} more run a side: the runs before read a change their interval could not tell "
        "from noise",
        "{n} more runs a side: the runs before read a change their interval could not tell "
        "from noise",
        n,
    ).format(n=n)


def loss_words(c: Comparison) -> str:
    """What a change of numerics did to the loss (prescribe/loss.py)."""
    if c.loss is None:
        return _("the loss was not recorded on every run (no backward seen): it cannot be checked")
    return c.loss.words()


def verdict_words(verdict: str) -> str:
    """A trial's verdict (a value of the report's contract) in words."""
    return {
        "faster": _("faster"),
        "slower": _("slower"),
        "no better than noise": _("no better than noise"),
        "crashed": _("crashed"),
    }.get(verdict, verdict)


def side_words(side: str) -> str:
    """A trial's side in words (baseline / treatment are the report's keys)."""
    return {"baseline": _("baseline"), "treatment": _("treatment")}.get(side, side)


def via_words(via: str) -> str:
    return {"flag": _("flag"), "probe": _("probe"), "manual": _("manual")}.get(via, via)


def unit_words(unit: str) -> str:
    return _("samples/s") if unit == "samples" else _("steps/s")


def speedup_words(c: Comparison) -> str:
    """The speedup with its interval; when the interval holds 1, the interval first (the
    point alone would claim what the runs do not show)."""
    low, high = (round(x, 4) for x in c.ci95)
    if c.verdict == "no better than noise":
        return _(
            "speedup somewhere in {low:.2f}-{high:.2f}x (95% interval; measured {speedup:.2f}x)"
        ).format(low=low, high=high, speedup=c.speedup)
    return _("speedup {speedup:.2f}x (95% interval {low:.2f}-{high:.2f})").format(
        speedup=round(c.speedup, 4), low=low, high=high
    )


def trial_markdown(r: TrialResult) -> str:
    c = r.comparison
    b, t = c.baseline, c.treatment
    low, high = (round(x, 4) for x in c.ci95)
    lines = [
        "# gpudoctor trial",
        "",
        "- "
        + _("verdict: **{verdict}**, speedup {speedup:.2f}x (95% interval {low:.2f}-{high:.2f})")
        .format(verdict=verdict_words(c.verdict), speedup=round(c.speedup, 4), low=low, high=high),
        "- "
        + _("baseline: {rate} {unit}, data wait {wait}").format(
            rate=round(b.samples_per_s, 2), unit=unit_words(b.unit),
            wait=percent(b.data_wait_fraction),
        ),
        "- "
        + _("treatment: {rate} {unit}, data wait {wait}").format(
            rate=round(t.samples_per_s, 2), unit=unit_words(t.unit),
            wait=percent(t.data_wait_fraction),
        ),
        "- " + _("treatment command: `{command}`").format(command=redact_text(r.treatment_shown)),
    ]  # fmt: skip
    if r.extra_pairs:
        lines.append(f"- {extra_pairs_words(r.extra_pairs)}")
    if c.judged:
        lines.append(f"- {judged_words(c.looks, *c.judged, c.judged_why)}")
    if c.crowding is not None:
        lines.append(f"- {c.crowding.words()}")
    if c.too_few_runs:
        lines.append(f"- {too_few_runs_words()}")
    lines += [
        "- "
        + _("applied `{remedy}` via {via}: {change}").format(
            remedy=a.remedy, via=via_words(a.via), change=a.change
        )
        for a in r.applied
    ]
    if any(a.changes_numerics for a in r.applied):
        lines.append("- " + _("changes numerics: {loss}").format(loss=loss_words(c)))
    if r.predicted is not None and r.predicted.known:
        lines.append(
            "- "
            + _("predicted {span} ({basis})").format(
                span=r.predicted.words(), basis=r.predicted.basis
            )
        )
    return "\n".join(lines) + "\n"


def trial_document(r: TrialResult) -> dict[str, Any]:
    """The trial report (`--report x.json`)."""
    return {
        "schema": SCHEMA,
        "mode": "trial",
        "command": redact_argv(r.baseline_command),
        "trial": r.to_dict(),
    }


def tune_text(found: Found) -> str:
    return "\n" + _(
        "gpudoctor tune: largest batch size that fits: {largest}; fastest: {fastest} (stopped "
        "by {stopped}; safety margin {margin:.0%} of the memory limit)"
    ).format(
        largest=found.largest, fastest=found.fastest, stopped=found.stopped_by,
        margin=SAFETY_MARGIN,
    ) + "\n"  # fmt: skip


def tune_markdown(found: Found) -> str:
    rows = "\n".join(
        f"| {t.batch_size} | {reason_words(t.reason)} | {t.as_dict()['samples_per_s'] or ''} |"
        for t in found.tries
    )
    return (
        _(
            "# gpudoctor tune batch-size\n\n- largest that fits: {largest}\n- fastest: {fastest}\n"
            "- stopped by: {stopped}\n\n| batch size | result | samples/s |\n|---|---|---|\n"
        ).format(largest=found.largest, fastest=found.fastest, stopped=found.stopped_by)
        + f"{rows}\n"
    )


def tune_document(command: tuple[str, ...], found: Found) -> dict[str, Any]:
    """The batch-size finder's report (`--report x.json`)."""
    return {
        "schema": SCHEMA,
        "mode": "tune",
        "command": redact_argv(command),
        "batch_size": found.as_dict(),
    }


def percent(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "n/a"


def _gib(value: int | None) -> str:
    return f"{value / 2**30:.1f} GiB" if value else "n/a"


def fix_text(r: FixResult) -> str:
    """`gpudoctor fix`: the path taken, the command to use, the whole visit's speedup,
    the edits left to make by hand."""
    tried = ngettext("{n} remedy tried", "{n} remedies tried", len(r.steps)).format(n=len(r.steps))
    lines = [
        "",
        _("gpudoctor fix: {tried} in {seconds:.0f} s").format(tried=tried, seconds=r.elapsed_s),
    ]
    if r.steps:
        rows = [
            ("#", _("remedy"), _("change"), _("predicted"), _("measured (95% interval)"), _("kept"))
        ]
        for n, s in enumerate(r.steps, 1):
            c = s.comparison
            rows.append(
                (
                    str(n),
                    s.remedy,
                    "; ".join(ch.change for ch in s.changes),
                    s.predicted.words(),
                    f"{c.speedup:.2f}x [{c.ci95[0]:.2f}, {c.ci95[1]:.2f}]",
                    _("yes") if s.kept else _("no"),
                )
            )
        widths = [max(cell_width(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            cells = "  ".join(
                v + " " * (w - cell_width(v)) for v, w in zip(row, widths, strict=True)
            )
            lines.append(("  " + cells).rstrip())
        lines += [
            f"  #{n} {numerics_words(s)}" for n, s in enumerate(r.steps, 1) if s.changes_numerics
        ]
        lines += [
            f"  #{n} {busy_words(s)}" for n, s in enumerate(r.steps, 1) if s.comparison.crowding
        ]
    if r.overall is not None:
        lines.append(
            "  "
            + _(
                "the whole visit: {speedup} (the final configuration against the job as it was)"
            ).format(speedup=speedup_words(r.overall))
        )
        use = _("use: {command}")
        if r.final.overrides:  # the probe's: they act only under the doctor
            lines.append("  " + use.format(command=redact_text(r.final.shown(under_doctor=True))))
            if r.final_diff:
                lines.append("  " + _("or make the change part of the script:"))
                lines += ["    " + line for line in r.final_diff.splitlines()]
            else:
                lines.append("  " + _("or make the change in the script by hand:"))
                lines += [f"    {c.change}" for c in r.final.applied if c.via == "probe"]
        else:
            lines.append("  " + use.format(command=redact_text(r.final.shown())))
    else:
        lines.append(
            "  " + _("nothing tried made it measurably faster: the command stays as it was")
        )
    why = {"budget": _("the time budget"), "no remedy left": _("no applicable remedy left")}
    lines.append("  " + _("stopped by {why}").format(why=why.get(r.stopped_by, r.stopped_by)))
    if r.edits:
        lines.append("  " + _("edits to make by hand (the doctor cannot apply them on a rerun):"))
        lines += [f"    - {e}" for e in r.edits]
    return "\n".join(lines) + "\n"


def busy_words(s: FixStep) -> str:
    """A fix step measured while other processes took the job's cores: who, and for a
    change kept on all its steps, that its gain may be those cores won (more processes or
    threads of the job's own take a larger share of contested cores: the scheduler shares
    by runnable thread), which a quiet machine would not give."""
    crowding = s.comparison.crowding
    assert crowding is not None
    words = crowding.words()
    if s.kept and not crowding.left_out:
        words += _(
            "; part of its gain may be cores taken from those processes, which a quiet "
            "machine would not give: trial it again there"
        )
    return words


def numerics_words(s: FixStep) -> str:
    """A fix step whose change alters numerics: what the loss did, and so whether the
    change could be kept on its speed."""
    words = _("changes numerics: {loss}").format(loss=loss_words(s.comparison))
    if not s.loss_kept:
        words += _("; not kept whatever its speed")
    return words


def fix_markdown(r: FixResult) -> str:
    lines = ["# gpudoctor fix", ""]
    lines += [_("| # | remedy | change | predicted | measured | 95% interval | kept |")]
    lines += ["|---|---|---|---|---|---|---|"]
    for n, s in enumerate(r.steps, 1):
        c = s.comparison
        change = "; ".join(ch.change for ch in s.changes).replace("|", "\\|")
        kept = _("yes") if s.kept else _("no")
        lines.append(
            f"| {n} | `{s.remedy}` | {change} | {s.predicted.words()} | {c.speedup:.2f}x | "
            f"{c.ci95[0]:.2f}-{c.ci95[1]:.2f} | {kept} |"
        )
    lines.append("")
    lines += [f"- #{n} {numerics_words(s)}" for n, s in enumerate(r.steps, 1) if s.changes_numerics]
    lines += [f"- #{n} {busy_words(s)}" for n, s in enumerate(r.steps, 1) if s.comparison.crowding]
    if r.overall is not None:
        lines.append(
            "- " + _("the whole visit: {speedup}").format(speedup=speedup_words(r.overall))
        )
        lines.append("- " + _("use: `{command}`").format(command=redact_text(r.final.shown())))
        if r.final_diff:
            lines += ["", "```diff", r.final_diff.rstrip("\n"), "```", ""]
    else:
        lines.append("- " + _("nothing tried made it measurably faster"))
    lines += ["- " + _("by hand: {edit}").format(edit=e) for e in r.edits]
    return "\n".join(lines) + "\n"


def fix_document(r: FixResult) -> dict[str, Any]:
    """The fix report (`--report x.json`)."""
    return {
        "schema": SCHEMA,
        "mode": "fix",
        "command": redact_argv(r.first_command),
        "fix": r.to_dict(),
    }
