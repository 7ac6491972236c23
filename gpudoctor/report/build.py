"""The report of one run, built from a Timeline alone (report/values.py holds its
shape), so `gpudoctor report SESSION` rebuilds offline exactly what the run printed."""

from __future__ import annotations

import re
import socket
import statistics
from typing import Any

from gpudoctor.diagnosis.auto_profile import STEPS as AUTO_STEPS
from gpudoctor.diagnosis.engine import diagnose
from gpudoctor.diagnosis.ranks import RankMeasure
from gpudoctor.diagnosis.speed_of_light import speed_of_light
from gpudoctor.diagnosis.window import Window, percentile
from gpudoctor.i18n import _
from gpudoctor.model import Finding
from gpudoctor.prescribe.predict import first_remedy
from gpudoctor.probe.clock import MAX_BUFFERED_STEPS
from gpudoctor.redact import redact_argv, redact_facts, redact_text
from gpudoctor.report.findings import finding_line
from gpudoctor.report.gpu_timeline import rank_dict
from gpudoctor.report.values import (
    DoctorInfo,
    FindingLine,
    GpuSummary,
    HostSummary,
    HotspotLine,
    ProbeInfo,
    Profile,
    RankLine,
    Report,
    Stall,
    StepMeasures,
    StoreOutage,
)
from gpudoctor.timeline import Timeline
from gpudoctor.units import seconds_text

# Stalls said one by one in the notes; the rest summed in one line.
MAX_STALL_NOTES = 5
# Facts that go into the report's audit, in this order.
AUDIT_KEYS = (
    "torch_version",
    "device",
    "cuda_device_name",
    "cuda_capability",
    "param_dtype",
    "model",
    "parameters",
    "leaf_modules",
    "conv_layers",
    "optimizer",
    "step_mode",
    "dataloaders",
    "cudnn_benchmark",
    "forwards",
    "forwards_with_grad",
    "evaluation_forwards",
    "evaluation_ns",
    "forwards_counted_on",  # forwards, backwards, evaluation: samples, not totals
    "autocast_seen",
    "backwards",
    "optimizer_steps",
    "compiled",
    "data_parallel",
    "ddp",
    "rank",
    "local_rank",
    "world_size",
    "local_world_size",
    "input_shapes",
    "script_options",
    "cuda_total_bytes",
    "cuda_visible_devices",
    "intra_op_threads",
    "overrides_applied",
)


def masked_note() -> str:
    return _(
        "Secrets in the command line or the options the job parsed are shown as *** (the "
        "session store keeps them as they ran, readable by its owner only)."
    )


def build(timeline: Timeline, session_id: int | None, lang: str = "en") -> Report:
    window = timeline.window()
    findings = diagnose(window)
    cores_allowed = timeline.host[-1].cores_allowed if timeline.host else 1
    facts = timeline.merged_facts()
    job_exit = timeline.exit
    counts = timeline.counted_steps()
    profile = facts.get("profile")
    kept = window.gpu_timeline.path if window.gpu_timeline is not None else None
    if profile and kept:  # the probe wrote it in a folder of the run's: the doctor kept it here
        profile = {**profile, "trace": kept}
    step_ms = window.step_median_ms if window.steady_count and not window.estimated else None
    captured = Profile.of(profile, step_ms) if profile else None
    # for people: secrets masked (the store keeps the command as it ran)
    audited = {k: facts[k] for k in AUDIT_KEYS if k in facts}
    command, shown_facts = redact_argv(timeline.command), redact_facts(audited)
    masked = command != list(timeline.command) or shown_facts != audited
    return Report(
        session=session_id,
        mode=timeline.mode,
        watched_pid=timeline.watched_pid,
        estimated=tuple(window.estimated_measures),
        command=tuple(command),
        exit_code=job_exit.exit_code if job_exit else None,
        ended_by=job_exit.ended_by if job_exit else None,
        exception_type=job_exit.exception_type if job_exit else None,
        exception_message=redact_text(job_exit.exception_message or "") or None
        if job_exit
        else None,
        duration_s=round(timeline.duration_s(), 3),
        steps=_steps(window),
        gpus=_gpus(window),
        gpu_status=_gpu_status(timeline),
        host=_host(window),
        facts=shown_facts,
        findings=tuple(_finding(f, window, cores_allowed, lang) for f in findings),
        probe=ProbeInfo(
            processes=tuple(sorted(timeline.facts)),
            stepping_processes=tuple(sorted(counts)),
            steps_by_process=counts,
            errors=tuple(timeline.probe_errors),
            limits=tuple(facts.get("limits", ())),
            dropped=sum(timeline.probe_dropped.values()),
            lost_step_timings=timeline.lost_step_rows(),
            bad_messages=timeline.bad_messages,
        ),
        # torch.profiler's top operators, when asked
        profile=captured,
        notes=tuple(_notes(timeline, window, captured) + ([masked_note()] if masked else [])),
        doctor=_doctor(timeline),
        ranks=tuple(
            _rank(m, counts.get(m.pid, m.steps) if m.host == window.hostname else m.steps)
            for m in window.ranks
        ),
        hotspots=_hotspots(window),
        hotspot_samples=window.hotspots.main_samples if window.hotspots else 0,
        speed_of_light=_speed_of_light(window),
        ledger=window.ledger.to_dict() if window.ledger is not None else None,
        gpu_timeline=rank_dict(window.gpu_timeline) if window.gpu_timeline is not None else None,
    )


def _speed_of_light(w: Window) -> dict[str, Any] | None:
    sol = speed_of_light(w)
    return sol.as_dict() if sol is not None else None


def _hotspots(w: Window) -> tuple[HotspotLine, ...] | None:
    """None when the stacks were not sampled; () when too few samples named no line."""
    if not w.hotspot_chunks:
        return None
    lines = w.hotspots.lines if w.hotspots is not None else ()
    return tuple(
        HotspotLine(
            file=h.file,
            line=h.line,
            function=h.function,
            share=round(h.share, 4),
            where=h.where,
            state=h.state,
            code=redact_text(h.code),
        )
        for h in lines
    )


def _rank(m: RankMeasure, count: int) -> RankLine:
    return RankLine(
        rank=m.rank,
        local_rank=m.local_rank,
        pid=m.pid,
        host=m.host or socket.gethostname(),  # another node's, or this one's
        steps={
            "count": count,
            "median_ms": round(m.median_ms, 3),
            "p90_ms": round(m.p90_ms, 3),
            "samples_per_s": round(m.samples_per_s, 2) if m.samples_per_s else None,
            "data_wait_fraction": round(m.data_wait_fraction, 4),
        },
        parts_ms={k: round(v, 3) for k, v in m.parts_ms.items()},
        own_ms=round(m.own_ms, 3),
        comm_wait_ms=round(m.comm_wait_ms, 3),
        score=round(m.score, 3),
        gpu=m.gpu_index,
        gpu_util_pct=round(m.gpu_util_pct, 1) if m.gpu_util_pct is not None else None,
    )


def _doctor(timeline: Timeline) -> DoctorInfo:
    def at(t_ns: int) -> float:
        return round((t_ns - timeline.start_mono_ns) / 1e9, 1)

    return DoctorInfo(
        stalls=tuple(Stall(at(a), round((b - a) / 1e9, 1)) for a, b in timeline.stalls),
        socket_remade_at_s=tuple(at(t) for t in timeline.socket_remade),
        terminal_hung_up_at_s=at(timeline.hung_up_ns) if timeline.hung_up_ns else None,
        output_log=timeline.output_log,
        output_rotations=timeline.output_rotations,
        store_outages=tuple(
            StoreOutage(at(a), round((b - a) / 1e9, 1) if b is not None else None, why)
            for a, b, why in timeline.store_outages
        ),
        store_records_lost=timeline.store_lost,
    )


def clock_text(seconds: float) -> str:
    """A moment of the run as a clock reads it: 00:03, 12:41, 1:02:05."""
    whole = int(seconds)
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _doctor_notes(timeline: Timeline) -> list[str]:
    """The doctor's own troubles, each in one line (after the probe's)."""
    info = _doctor(timeline)
    kept = not timeline.probe_dropped or not any(timeline.probe_dropped.values())
    notes = []
    for stall in info.stalls[:MAX_STALL_NOTES]:
        notes.append(
            _("The doctor was stalled {seconds:.1f} s at {at} (stopped, or starved of CPU)").format(
                seconds=stall.seconds, at=clock_text(stall.at_s)
            )
            + (_("; the probe kept the step timings meanwhile.") if kept else ".")
        )
    if len(info.stalls) > MAX_STALL_NOTES:
        more = info.stalls[MAX_STALL_NOTES:]
        notes.append(
            _("... and {n} more stalls, {seconds:.1f} s in all.").format(
                n=len(more), seconds=sum(s.seconds for s in more)
            )
        )
    for t in info.socket_remade_at_s:
        notes.append(
            _(
                "The probe's socket was removed at {at} (not by the doctor); the doctor made it "
                "again at once."
            ).format(at=clock_text(t))
        )
    if info.terminal_hung_up_at_s is not None:
        notes.append(
            _(
                "The terminal went away at {at} (SIGHUP): the doctor recorded on, headless, to "
                "the end."
            ).format(at=clock_text(info.terminal_hung_up_at_s))
        )
    for outage in info.store_outages:
        lasted = (
            _("for {seconds:.1f} s: the records were kept and written after").format(
                seconds=outage.seconds
            )
            if outage.seconds is not None
            else _("to the end")
        )
        notes.append(
            _("The session store could not be written from {at} ({why}) {lasted}.").format(
                at=clock_text(outage.at_s), why=outage.why, lasted=lasted
            )
        )
    if info.store_records_lost:
        notes.append(
            _(
                "{n} records were let go meanwhile (more were waiting than the doctor keeps in "
                "memory); the counts stay exact."
            ).format(n=info.store_records_lost)
        )
    if info.output_log:
        n = info.output_rotations
        rotated = ""
        if n == 1:
            rotated = _(" (it reached its cap once: the part before is in {path}.1)").format(
                path=info.output_log
            )
        elif n > 1:
            rotated = _(
                " (it reached its cap {n} times: the last part before is in {path}.1, the older "
                "output was let go)"
            ).format(n=n, path=info.output_log)
        notes.append(
            _("The job's output is in {path}{rotated}.").format(
                path=info.output_log, rotated=rotated
            )
        )
    return notes


def _finding(f: Finding, w: Window, cores: int, lang: str) -> FindingLine:
    prediction = first_remedy(f, w, cores)  # None: nothing measured says what it buys
    predicted = {"remedy": f.remedies[0], **prediction.as_dict()} if prediction else None
    return finding_line(f, w.advice_facts, cores, lang, predicted)


def _steps(w: Window) -> StepMeasures:
    steady = w.steady_steps
    # batch sizes are seen on the steps measured in detail (the probe samples)
    batches = [s.batch_size for s in w.detailed_steps if s.batch_size]
    if not batches and w.rollup is not None and w.rollup.batch_steps:  # no row kept
        batches = [round(w.rollup.batch_sum / w.rollup.batch_steps)]
    samples_per_s = w.samples_per_s
    split = {k: round(v, 4) for k, v in w.split().items()}
    if not w.steps and (w.estimated or w.stacks):  # watched from outside: no step timed
        return StepMeasures(
            count=None,
            steady_count=None,
            median_ms=round(w.step_median_ms, 3) if w.steps_per_s else None,
            p90_ms=None,
            steps_per_s=round(w.steps_per_s, 2) if w.steps_per_s else None,
            samples_per_s=None,
            batch_size=None,
            data_wait_fraction=round(w.data_wait_fraction, 4) if w.stack_total else None,
            split=split,
            syncs_per_step=None,
            stack_samples=w.stack_total,
        )
    if w.rollup is not None:  # a long run: its rows are the recent steps, the rollup all
        median = w.rollup.quantile_ms(0.5) if w.rollup.count else None
        p90 = w.rollup.quantile_ms(0.9) if w.rollup.count else None
        steady_count = w.rollup.count
    else:
        median = w.step_median_ms if steady else None
        p90 = w.step_p90_ms
        steady_count = len(steady)
    return StepMeasures(
        count=w.total_steps,
        steady_count=steady_count,
        median_ms=round(median, 3) if median is not None else None,
        p90_ms=round(p90, 3) if p90 is not None else None,
        steps_per_s=round(w.steps_per_s, 2) if w.steps_per_s else None,
        samples_per_s=round(samples_per_s, 2) if samples_per_s else None,
        # a size the job's steps took (a median of an even count averaged the middle two)
        batch_size=statistics.median_low(batches) if batches else None,
        # the rollup's steady steps count where compaction left no recent rows
        data_wait_fraction=round(w.data_wait_fraction, 4) if steady_count else None,
        split=split,
        syncs_per_step=round(w.syncs_per_step, 2),
    )


def _gpus(w: Window) -> tuple[GpuSummary, ...]:
    out = []
    for index in sorted({g.index for g in w.gpus}):
        samples = [g for g in w.gpus if g.index == index]
        steady = [g for g in w.steady_gpus if g.index == index] or samples
        util = [float(g.util_gpu_pct) for g in steady if g.util_gpu_pct is not None]
        power = [g.power_w for g in steady if g.power_w is not None]
        mem = [g.mem_used_bytes for g in samples if g.mem_used_bytes is not None]
        reasons = sorted(
            {r for g in steady for r in (g.clock_event_reasons or ()) if r != "gpu-idle"}
        )
        last = samples[-1]
        out.append(
            GpuSummary(
                index=index,
                name=last.name,
                used_by_job=index in w.job_gpu_indices,
                util_mean_pct=round(statistics.fmean(util), 1) if util else None,
                util_p95_pct=percentile(util, 95) if util else None,
                mem_used_max_bytes=max(mem) if mem else None,
                mem_total_bytes=last.mem_total_bytes,
                power_mean_w=round(statistics.fmean(power), 1) if power else None,
                power_limit_w=last.power_limit_w,
                temp_max_c=max((g.temp_c for g in samples if g.temp_c is not None), default=None),
                clock_event_reasons=tuple(reasons),
                samples=len(samples),
            )
        )
    return tuple(out)


def _gpu_status(timeline: Timeline) -> str:
    if timeline.gpus:
        return _("{n} GPU(s) read through NVML").format(n=len({g.index for g in timeline.gpus}))
    return gpu_reason_words(timeline.gpu_reason) if timeline.gpu_reason else _("no GPU readings")


# Why there are no GPU readings, as the NVML reader records it (sources/nvml.py): its
# words, then NVML's own error in brackets, which stays as NVML wrote it.
GPU_REASONS = re.compile(
    r"(no NVIDIA driver|NVML could not list the GPUs|nvidia-ml-py is not installed) \((.*)\)",
    re.S,
)


def gpu_reason_words(reason: str) -> str:
    """The recorded reason in the person's language (an unknown one as recorded)."""
    m = GPU_REASONS.fullmatch(reason)
    if m is None:
        return reason
    words = {
        "no NVIDIA driver": _("no NVIDIA driver ({why})"),
        "NVML could not list the GPUs": _("NVML could not list the GPUs ({why})"),
        "nvidia-ml-py is not installed": _("nvidia-ml-py is not installed ({why})"),
    }[m.group(1)]
    return words.format(why=m.group(2))


def _host(w: Window) -> HostSummary | None:
    hosts = w.steady_host
    if not hosts:
        return None
    iowait = [h.iowait_pct for h in hosts if h.iowait_pct is not None]
    return HostSummary(
        cores=len(hosts[-1].cpu_pct_per_core),
        cores_allowed=hosts[-1].cores_allowed,
        cpu_mean_pct=round(statistics.fmean(h.cpu_pct for h in hosts), 1),
        job_cpu_cores_mean=round(statistics.fmean(h.job_cpu_cores for h in hosts), 2),
        job_processes_max=max(len(h.job) for h in hosts),
        iowait_mean_pct=round(statistics.fmean(iowait), 1) if iowait else None,
        mem_used_max_bytes=max(h.mem_used_bytes for h in hosts),
        mem_total_bytes=hosts[-1].mem_total_bytes,
        swap_used_max_bytes=max(h.swap_used_bytes for h in hosts),
        disk_read_mean_bytes_per_s=round(statistics.fmean(h.disk_read_bytes_per_s for h in hosts)),
        disk_write_mean_bytes_per_s=round(
            statistics.fmean(h.disk_write_bytes_per_s for h in hosts)
        ),
        net_rx_mean_bytes_per_s=round(statistics.fmean(h.net_rx_bytes_per_s for h in hosts)),
        net_tx_mean_bytes_per_s=round(statistics.fmean(h.net_tx_bytes_per_s for h in hosts)),
        samples=len(hosts),
    )


def _notes(timeline: Timeline, w: Window, captured: Profile | None = None) -> list[str]:
    if timeline.mode == "watch":
        return _watch_notes(timeline, w)
    notes = []
    if timeline.mode == "inject":
        notes.append(
            _(
                "The probe was injected into pid {pid}, which was already running: its steps "
                "are counted from the attach, and the probe was removed when the doctor left."
            ).format(pid=timeline.watched_pid)
        )
    if timeline.auto_profile is not None:
        t, why = timeline.auto_profile
        notes.append(
            _(
                "The doctor captured {steps} steps with torch.profiler by itself at {at:.0f} s, "
                "to read the GPU's own timeline: {why} (--no-auto-profile turns this off)"
            ).format(steps=AUTO_STEPS, at=(t - timeline.start_mono_ns) / 1e9, why=why)
        )
    # a script's parsed options come without torch: only torch's own facts say it loaded
    saw_torch = any("torch_version" in facts for facts in timeline.facts.values())
    if not saw_torch and not timeline.steps:
        notes.append(
            _(
                "The probe saw no torch at work in the job (it never imported torch, made no "
                "model, loader or optimizer, or ran Python with -E/-I): host and GPU readings "
                "only."
            )
        )
    elif not timeline.steps and not timeline.lost_step_rows():
        notes.append(_("The job imported torch but ran no training step the probe could see."))
    elif w.steady_count < 5:
        notes.append(
            _("Only {steps} steps: too few for the step-based findings.").format(
                steps=w.total_steps
            )
        )
    lost = timeline.lost_step_rows()
    dropped = min(lost, sum(timeline.probe_dropped.values()))
    if dropped:
        notes.append(
            _(
                "{n} step timings were dropped by the probe while the doctor could not take them "
                "(it keeps up to {kept:,} meanwhile): the counts are exact, the step times are "
                "those of the others."
            ).format(n=dropped, kept=MAX_BUFFERED_STEPS)
        )
    if lost - dropped and timeline.mode == "inject":
        notes.append(
            _(
                "{n} step timings never reached the doctor (the probe was removed before it "
                "could send them): the counts are exact, the step times are those of the others."
            ).format(n=lost - dropped)
        )
    elif lost - dropped:
        notes.append(
            _(
                "{n} step timings never reached the doctor (the job ended before the probe could "
                "send them): the counts are exact, the step times are those of the others."
            ).format(n=lost - dropped)
        )
    limits = timeline.merged_facts().get("limits") or []
    for limit in limits:
        notes.append(_("The probe measured less: {limit}.").format(limit=limit))
    if timeline.remote_ranks:
        hosts = sorted({r.host or "?" for ranks in timeline.remote_ranks.values() for r in ranks})
        notes.append(
            _(
                "Ranks on other nodes ({hosts}) are as their doctors last sent them through the "
                "job's rendezvous store, every 2 s while it ran: their counts may fall short of "
                "their last steps."
            ).format(hosts=", ".join(hosts))
        )
    if timeline.bad_messages:
        notes.append(
            _("{n} malformed messages on the probe socket were ignored.").format(
                n=timeline.bad_messages
            )
        )
    if captured is not None:
        notes.append(_capture_note(captured, timeline.duration_s()))
    if timeline.exit is None:
        notes.append(_("The doctor stopped before the job ended: the record ends there."))
    return notes + _doctor_notes(timeline)


def _capture_note(p: Profile, run_s: float) -> str:
    """What a profiler capture cost the job: the time it held the training thread against
    as many ordinary steps (the steady median: Profile.cost_s), and that as a share of
    the run."""
    if p.held_s is None or p.cost_s is None:
        return _(
            "{steps} steps ran under torch.profiler (slower, and the table was built in the "
            "job at the end): they are part of the step measures."
        ).format(steps=p.steps)
    share = p.cost_s / run_s if run_s > 0 else 0.0
    if p.cost_s < 0.0005:  # within the steps' own spread: nothing to set against the run
        return _(
            "{steps} steps ran under torch.profiler: the capture held the job {held} (its "
            "start, the steps, the table and the trace's writing), no longer than {steps} "
            "ordinary steps take; those steps are part of the step measures."
        ).format(steps=p.steps, held=seconds_text(p.held_s))
    return _(
        "{steps} steps ran under torch.profiler: the capture held the job {held} (its start, "
        "the steps, the table and the trace's writing), {cost} more than {steps} ordinary "
        "steps take, {share:.1%} of the run; those steps are part of the step measures."
    ).format(steps=p.steps, held=seconds_text(p.held_s), cost=seconds_text(p.cost_s), share=share)


def _watch_notes(timeline: Timeline, w: Window) -> list[str]:
    notes = [
        _(
            "Watched pid {pid} from outside (no code in the job): GPU and host readings are "
            "measured; the data wait, the step split and the step rate are estimated from "
            "py-spy's samples of its main thread, and findings that rest on them say "
            "confidence: estimated."
        ).format(pid=timeline.watched_pid)
    ]
    facts = timeline.facts.get(timeline.watched_pid or -1, {})
    if not facts.get("stack_sampling"):
        notes.append(_("No stack sampling (not a Python process): GPU and host readings only."))
    elif not w.stack_total:
        notes.append(_("py-spy returned no samples of the main thread: no step estimates."))
    elif not w.steps_per_s:
        spots = w.hotspots
        lines = spots.of("main") if spots is not None else ()
        module = next((h for h in lines if h.function == "<module>"), None)
        if module is not None:  # nanoGPT's train.py: its loop and iter_num are the module's
            notes.append(
                _(
                    "The training loop runs at the top level of {file} (not in a function): "
                    "py-spy reads a function's local variables, not a module's, so its "
                    "counter cannot be read from outside and the step rate is unknown. "
                    "`gpudoctor run` counts its steps."
                ).format(file=module.place.rsplit(":", 1)[0])
            )
        else:
            notes.append(
                _(
                    "No training-loop counter (a local named step, i, it, ...) rose between "
                    "readings: the step rate is unknown."
                )
            )
    if timeline.exit is not None and timeline.exit.ended_by == "detached":
        notes.append(_("The doctor left; the job was left running, untouched."))
    elif timeline.exit is not None:
        notes.append(_("The job ended while watched; its exit code is not visible from outside."))
    return notes
