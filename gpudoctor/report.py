"""The report of one run (`gpudoctor.report/1`), as JSON data and as Markdown.

Built from a Timeline alone, so `gpudoctor report SESSION` rebuilds offline exactly
what the run printed.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from gpudoctor.diagnosis.engine import diagnose
from gpudoctor.diagnosis.remedies import CATALOGUE
from gpudoctor.diagnosis.window import Window, percentile
from gpudoctor.model import Finding
from gpudoctor.prescribe.how import how
from gpudoctor.timeline import Timeline

SCHEMA = "gpudoctor.report/1"

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
    "autocast_seen",
    "backwards",
    "optimizer_steps",
    "compiled",
    "data_parallel",
    "ddp",
    "rank",
    "local_rank",
    "world_size",
    "input_shapes",
    "script_options",
    "cuda_total_bytes",
)


def build(timeline: Timeline, session_id: int | None, lang: str = "en") -> dict[str, Any]:
    window = timeline.window()
    findings = diagnose(window)
    cores_allowed = timeline.host[-1].cores_allowed if timeline.host else 1
    facts = timeline.merged_facts()
    job_exit = timeline.exit
    return {
        "schema": SCHEMA,
        "session": session_id,
        "mode": timeline.mode,
        "watched_pid": timeline.watched_pid,
        # measures estimated rather than measured (watch mode: from stack samples)
        "estimated": list(window.estimated_measures),
        "command": timeline.command,
        "exit_code": job_exit.exit_code if job_exit else None,
        "ended_by": job_exit.ended_by if job_exit else None,
        "exception": (
            {"type": job_exit.exception_type, "message": job_exit.exception_message}
            if job_exit and job_exit.exception_type
            else None
        ),
        "duration_s": round(timeline.duration_s(), 3),
        "steps": _steps(window),
        "gpus": _gpus(window),
        "gpu_status": _gpu_status(timeline),
        "host": _host(window),
        "facts": {k: facts[k] for k in AUDIT_KEYS if k in facts},
        "findings": [_finding(f, facts, cores_allowed, lang) for f in findings],
        "probe": {
            "processes": sorted(timeline.facts),
            "stepping_processes": sorted(timeline.counted_steps()),
            "steps_by_process": {str(pid): n for pid, n in timeline.counted_steps().items()},
            "errors": timeline.probe_errors,
            "limits": facts.get("limits", []),
            "dropped": sum(timeline.probe_dropped.values()),
            "lost_step_timings": timeline.lost_step_rows(),
            "bad_messages": timeline.bad_messages,
        },
        "profile": facts.get("profile"),  # torch.profiler's top operators, when asked
        "notes": _notes(timeline, window),
    }


def _finding(f: Finding, facts: dict[str, Any], cores: int, lang: str) -> dict[str, Any]:
    return {
        "id": f.id,
        "severity": f.severity,
        "title": f.title,
        "evidence": f.evidence,
        "estimated_gain": f.estimated_gain,
        "confidence": f.confidence,
        "remedies": [
            {
                "id": r,
                "title": CATALOGUE[r].title[lang],
                "how": how(r, facts, cores, lang),
                "guide": CATALOGUE[r].guide_section,
            }
            for r in f.remedies
        ],
    }


def _steps(w: Window) -> dict[str, Any]:
    steady = w.steady_steps
    walls = [s.wall_ns / 1e6 for s in steady]
    # batch sizes are seen on the steps measured in detail (the probe samples)
    batches = [s.batch_size for s in w.detailed_steps if s.batch_size]
    samples_per_s = w.samples_per_s
    if w.estimated or w.stacks:  # watch mode: no step was timed
        return {
            "count": None,
            "steady_count": None,
            "median_ms": round(w.step_median_ms, 3) if w.steps_per_s else None,
            "p90_ms": None,
            "steps_per_s": round(w.steps_per_s, 2) if w.steps_per_s else None,
            "samples_per_s": None,
            "batch_size": None,
            "data_wait_fraction": round(w.data_wait_fraction, 4) if w.stack_total else None,
            "split": {k: round(v, 4) for k, v in w.split().items()},
            "syncs_per_step": None,
            "stack_samples": w.stack_total,
        }
    return {
        "count": w.total_steps,
        "steady_count": len(steady),
        "median_ms": round(statistics.median(walls), 3) if walls else None,
        "p90_ms": round(percentile(walls, 90), 3) if walls else None,
        "steps_per_s": round(w.steps_per_s, 2) if w.steps_per_s else None,
        "samples_per_s": round(samples_per_s, 2) if samples_per_s else None,
        "batch_size": statistics.median(batches) if batches else None,
        "data_wait_fraction": round(w.data_wait_fraction, 4) if steady else None,
        "split": {k: round(v, 4) for k, v in w.split().items()},
        "syncs_per_step": round(w.syncs_per_step, 2),
    }


def _gpus(w: Window) -> list[dict[str, Any]]:
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
            {
                "index": index,
                "name": last.name,
                "used_by_job": index in w.job_gpu_indices,
                "util_mean_pct": round(statistics.fmean(util), 1) if util else None,
                "util_p95_pct": percentile(util, 95) if util else None,
                "mem_used_max_bytes": max(mem) if mem else None,
                "mem_total_bytes": last.mem_total_bytes,
                "power_mean_w": round(statistics.fmean(power), 1) if power else None,
                "power_limit_w": last.power_limit_w,
                "temp_max_c": max(
                    (g.temp_c for g in samples if g.temp_c is not None), default=None
                ),
                "clock_event_reasons": reasons,
                "samples": len(samples),
            }
        )
    return out


def _gpu_status(timeline: Timeline) -> str:
    if timeline.gpus:
        return f"{len({g.index for g in timeline.gpus})} GPU(s) read through NVML"
    return timeline.gpu_reason or "no GPU readings"


def _host(w: Window) -> dict[str, Any]:
    hosts = w.steady_host
    if not hosts:
        return {}
    iowait = [h.iowait_pct for h in hosts if h.iowait_pct is not None]
    return {
        "cores": len(hosts[-1].cpu_pct_per_core),
        "cores_allowed": hosts[-1].cores_allowed,
        "cpu_mean_pct": round(statistics.fmean(h.cpu_pct for h in hosts), 1),
        "job_cpu_cores_mean": round(statistics.fmean(h.job_cpu_cores for h in hosts), 2),
        "job_processes_max": max(len(h.job) for h in hosts),
        "iowait_mean_pct": round(statistics.fmean(iowait), 1) if iowait else None,
        "mem_used_max_bytes": max(h.mem_used_bytes for h in hosts),
        "mem_total_bytes": hosts[-1].mem_total_bytes,
        "swap_used_max_bytes": max(h.swap_used_bytes for h in hosts),
        "disk_read_mean_bytes_per_s": round(
            statistics.fmean(h.disk_read_bytes_per_s for h in hosts)
        ),
        "disk_write_mean_bytes_per_s": round(
            statistics.fmean(h.disk_write_bytes_per_s for h in hosts)
        ),
        "net_rx_mean_bytes_per_s": round(statistics.fmean(h.net_rx_bytes_per_s for h in hosts)),
        "net_tx_mean_bytes_per_s": round(statistics.fmean(h.net_tx_bytes_per_s for h in hosts)),
        "samples": len(hosts),
    }


def _notes(timeline: Timeline, w: Window) -> list[str]:
    if timeline.mode == "watch":
        return _watch_notes(timeline, w)
    notes = []
    if not timeline.facts and not timeline.steps:
        notes.append(
            "The probe saw no torch in the job (it never imported torch, or ran Python with "
            "-E/-I): host and GPU readings only."
        )
    elif not timeline.steps and not timeline.lost_step_rows():
        notes.append("The job imported torch but ran no training step the probe could see.")
    elif len(w.steady_steps) < 5:
        notes.append(f"Only {w.total_steps} steps: too few for the step-based findings.")
    lost = timeline.lost_step_rows()
    if lost:
        notes.append(
            f"{lost} steps were counted whose timings never reached the doctor (the job "
            "ended between two sends of the probe, or they were dropped on the way): "
            "the counts are exact, the step times are those of the others."
        )
    if timeline.probe_dropped:
        notes.append(
            f"The probe dropped {sum(timeline.probe_dropped.values())} step records (doctor busy)."
        )
    limits = timeline.merged_facts().get("limits") or []
    for limit in limits:
        notes.append(f"The probe measured less: {limit}.")
    if timeline.bad_messages:
        notes.append(
            f"{timeline.bad_messages} malformed messages on the probe socket were ignored."
        )
    profile = timeline.merged_facts().get("profile")
    if profile:
        notes.append(
            f"{profile.get('steps')} steps ran under torch.profiler (slower, and the table "
            "was built in the job at the end): they are part of the step measures."
        )
    if timeline.exit is None:
        notes.append("The doctor stopped before the job ended: the record ends there.")
    return notes


def _watch_notes(timeline: Timeline, w: Window) -> list[str]:
    notes = [
        f"Watched pid {timeline.watched_pid} from outside (no code in the job): GPU and "
        "host readings are measured; the data wait, the step split and the step rate are "
        "estimated from py-spy's samples of its main thread, and findings that rest on "
        "them say confidence: estimated."
    ]
    facts = timeline.facts.get(timeline.watched_pid or -1, {})
    if not facts.get("stack_sampling"):
        notes.append("No stack sampling (not a Python process): GPU and host readings only.")
    elif not w.stack_total:
        notes.append("py-spy returned no samples of the main thread: no step estimates.")
    elif not w.steps_per_s:
        notes.append(
            "No training-loop counter (a local named step, i, it, ...) rose between "
            "readings: the step rate is unknown."
        )
    if timeline.exit is not None and timeline.exit.ended_by == "detached":
        notes.append("The doctor left; the job was left running, untouched.")
    elif timeline.exit is not None:
        notes.append("The job ended while watched; its exit code is not visible from outside.")
    return notes


# -- text forms ------------------------------------------------------------------------------


def to_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


def status_words(report: dict[str, Any]) -> str:
    ended = report.get("ended_by")
    code = report.get("exit_code")
    if ended is None:
        return "record incomplete (the doctor stopped first)"
    if report.get("mode") == "watch":
        pid = report.get("watched_pid")
        if ended == "detached":
            return f"watched pid {pid}, left running"
        return f"watched pid {pid} until it ended"
    if ended == "detached":
        return "left running"
    return f"ended by {ended}, exit code {code}"


def to_markdown(report: dict[str, Any]) -> str:
    s = report["steps"]
    lines = [
        f"# gpudoctor report (session {report['session']})",
        "",
        f"- command: `{' '.join(report['command'])}`",
        f"- {status_words(report)}, {report['duration_s']:.1f} s",
        _steps_words(s),
        f"- GPU: {report['gpu_status']}",
    ]
    for g in report["gpus"]:
        lines.append(
            f"  - GPU {g['index']} {g['name']}: util mean {g['util_mean_pct']}% p95 "
            f"{g['util_p95_pct']}%, memory max {_gib(g['mem_used_max_bytes'])} of "
            f"{_gib(g['mem_total_bytes'])}, power {g['power_mean_w']} W"
        )
    h = report["host"]
    if h:
        lines.append(
            f"- host: {h['cores_allowed']} cores allowed, CPU {h['cpu_mean_pct']}%, job "
            f"{h['job_cpu_cores_mean']} cores, iowait {h['iowait_mean_pct']}%"
        )
    lines += ["", "## Findings", ""]
    if not report["findings"]:
        lines.append("No findings: nothing measured points at a bottleneck.")
    for n, f in enumerate(report["findings"], 1):
        confidence = ", estimated" if f.get("confidence") == "estimated" else ""
        lines.append(f"{n}. **{f['id']}** ({f['severity']}{confidence}): {f['title']}")
        lines.append(f"   {f['evidence']}")
        for r in f["remedies"]:
            lines.append(f"   - `{r['id']}` {r['title']} [guide: {r['guide']}]: {r['how']}")
    profile = report.get("profile")
    if profile:
        unit = "self device" if profile["sort"] == "device" else "self CPU"
        lines += ["", f"## Profile ({profile['steps']} steps, top operators by {unit} time)", ""]
        lines += ["| operator | calls | self CPU us | self device us |", "|---|---|---|---|"]
        for op in profile["operators"]:
            lines.append(
                f"| `{op['name']}` | {op['calls']} | {op['self_cpu_time_total_us']} | "
                f"{op['self_device_time_total_us']} |"
            )
    if report["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def _steps_words(s: dict[str, Any]) -> str:
    if s.get("stack_samples") is not None:  # watch mode
        words = f"- steps: not timed (watched from outside; {s['stack_samples']} stack samples)"
        if s["steps_per_s"]:
            words += f", about {s['steps_per_s']:.1f} steps/s ({s['median_ms']:.1f} ms a step)"
    else:
        words = f"- steps: {s['count']}"
        if s["median_ms"]:
            words += f", median {s['median_ms']:.1f} ms, p90 {s['p90_ms']:.1f} ms"
        if s["samples_per_s"]:
            words += f", {s['samples_per_s']:.1f} samples/s"
    if s["data_wait_fraction"] is not None:
        approx = "about " if s.get("stack_samples") is not None else ""
        words += f", data wait {approx}{s['data_wait_fraction']:.0%}"
    return words


def _gib(value: int | None) -> str:
    return f"{value / 2**30:.1f} GiB" if value else "n/a"


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """What `gpudoctor history` shows of a run."""
    top = report["findings"][0] if report["findings"] else None
    return {
        "steps": report["steps"]["count"],
        "median_ms": report["steps"]["median_ms"],
        "mode": report["mode"],  # "watch": steps not counted, only estimated
        "top_finding": f"{top['id']} ({top['severity']})" if top else None,
    }
