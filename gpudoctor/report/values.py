"""The report of one run as values (`gpudoctor.report/1`): frozen dataclasses, built
once (report/build.py), written as JSON by `Report.to_json` and as text and Markdown by
report/render.py. The JSON's keys, their order and their values are the contract."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SCHEMA = "gpudoctor.report/1"

Json = Any  # a value as JSON has it: what the probe audited is the job's own shapes


@dataclass(frozen=True)
class RemedyLine:
    id: str
    title: str
    how: str
    guide: str

    def to_dict(self) -> dict[str, Json]:
        return {"id": self.id, "title": self.title, "how": self.how, "guide": self.guide}


@dataclass(frozen=True)
class FindingLine:
    id: str
    severity: str
    title: str
    evidence: str
    estimated_gain: float | None
    confidence: str
    remedies: tuple[RemedyLine, ...]
    # what its first remedy is predicted to buy: {remedy, low, high, basis}
    predicted_speedup: Mapping[str, Json] | None = None

    @property
    def estimated(self) -> bool:
        return self.confidence == "estimated"

    def to_dict(self) -> dict[str, Json]:
        return {
            "id": self.id,
            "severity": self.severity,
            "title": self.title,
            "evidence": self.evidence,
            "estimated_gain": self.estimated_gain,
            "confidence": self.confidence,
            "remedies": [r.to_dict() for r in self.remedies],
            "predicted_speedup": dict(self.predicted_speedup) if self.predicted_speedup else None,
        }


@dataclass(frozen=True)
class StepMeasures:
    """The step measures; in watch mode (`stack_samples` set) estimates from py-spy's
    samples of the main thread, and no count."""

    count: int | None
    steady_count: int | None
    median_ms: float | None
    p90_ms: float | None
    steps_per_s: float | None
    samples_per_s: float | None
    batch_size: float | None
    data_wait_fraction: float | None
    split: Mapping[str, float]
    syncs_per_step: float | None
    stack_samples: int | None = None  # watch mode only

    def to_dict(self) -> dict[str, Json]:
        out: dict[str, Json] = {
            "count": self.count,
            "steady_count": self.steady_count,
            "median_ms": self.median_ms,
            "p90_ms": self.p90_ms,
            "steps_per_s": self.steps_per_s,
            "samples_per_s": self.samples_per_s,
            "batch_size": self.batch_size,
            "data_wait_fraction": self.data_wait_fraction,
            "split": dict(self.split),
            "syncs_per_step": self.syncs_per_step,
        }
        if self.stack_samples is not None:
            out["stack_samples"] = self.stack_samples
        return out


@dataclass(frozen=True)
class GpuSummary:
    index: int
    name: str | None
    used_by_job: bool
    util_mean_pct: float | None
    util_p95_pct: float | None
    mem_used_max_bytes: int | None
    mem_total_bytes: int | None
    power_mean_w: float | None
    power_limit_w: float | None
    temp_max_c: float | None
    clock_event_reasons: tuple[str, ...]
    samples: int

    def to_dict(self) -> dict[str, Json]:
        return {
            "index": self.index,
            "name": self.name,
            "used_by_job": self.used_by_job,
            "util_mean_pct": self.util_mean_pct,
            "util_p95_pct": self.util_p95_pct,
            "mem_used_max_bytes": self.mem_used_max_bytes,
            "mem_total_bytes": self.mem_total_bytes,
            "power_mean_w": self.power_mean_w,
            "power_limit_w": self.power_limit_w,
            "temp_max_c": self.temp_max_c,
            "clock_event_reasons": list(self.clock_event_reasons),
            "samples": self.samples,
        }


@dataclass(frozen=True)
class HostSummary:
    cores: int
    cores_allowed: int
    cpu_mean_pct: float
    job_cpu_cores_mean: float
    job_processes_max: int
    iowait_mean_pct: float | None
    mem_used_max_bytes: int
    mem_total_bytes: int
    swap_used_max_bytes: int
    disk_read_mean_bytes_per_s: int
    disk_write_mean_bytes_per_s: int
    net_rx_mean_bytes_per_s: int
    net_tx_mean_bytes_per_s: int
    samples: int

    def to_dict(self) -> dict[str, Json]:
        return {
            "cores": self.cores,
            "cores_allowed": self.cores_allowed,
            "cpu_mean_pct": self.cpu_mean_pct,
            "job_cpu_cores_mean": self.job_cpu_cores_mean,
            "job_processes_max": self.job_processes_max,
            "iowait_mean_pct": self.iowait_mean_pct,
            "mem_used_max_bytes": self.mem_used_max_bytes,
            "mem_total_bytes": self.mem_total_bytes,
            "swap_used_max_bytes": self.swap_used_max_bytes,
            "disk_read_mean_bytes_per_s": self.disk_read_mean_bytes_per_s,
            "disk_write_mean_bytes_per_s": self.disk_write_mean_bytes_per_s,
            "net_rx_mean_bytes_per_s": self.net_rx_mean_bytes_per_s,
            "net_tx_mean_bytes_per_s": self.net_tx_mean_bytes_per_s,
            "samples": self.samples,
        }


@dataclass(frozen=True)
class ProbeInfo:
    processes: tuple[int, ...]
    stepping_processes: tuple[int, ...]
    steps_by_process: Mapping[int, int]
    errors: tuple[str, ...]
    limits: tuple[str, ...]
    dropped: int
    lost_step_timings: int
    bad_messages: int

    def to_dict(self) -> dict[str, Json]:
        return {
            "processes": list(self.processes),
            "stepping_processes": list(self.stepping_processes),
            "steps_by_process": {str(pid): n for pid, n in self.steps_by_process.items()},
            "errors": list(self.errors),
            "limits": list(self.limits),
            "dropped": self.dropped,
            "lost_step_timings": self.lost_step_timings,
            "bad_messages": self.bad_messages,
        }


@dataclass(frozen=True)
class Stall:
    """A time the doctor did not run (stopped, starved of CPU, swapped out)."""

    at_s: float  # seconds into the run
    seconds: float

    def to_dict(self) -> dict[str, Json]:
        return {"at_s": self.at_s, "seconds": self.seconds}


@dataclass(frozen=True)
class DoctorInfo:
    """What happened to the doctor itself while it recorded, and where the job's output
    went: nothing of a run is lost without being said."""

    stalls: tuple[Stall, ...]
    socket_remade_at_s: tuple[float, ...]  # the probe's socket removed, made again
    terminal_hung_up_at_s: float | None  # the terminal went away: recorded on headless
    output_log: str | None  # the job's output, when the doctor kept it in a file
    output_rotations: int  # times the log reached its cap (the part before: .1)
    # the store could not be written: from when, for how long (None: to the end), why
    store_outages: tuple[StoreOutage, ...] = ()
    store_records_lost: int = 0  # let go when more were waiting than memory keeps

    def to_dict(self) -> dict[str, Json]:
        return {
            "stalls": [s.to_dict() for s in self.stalls],
            "socket_remade_at_s": list(self.socket_remade_at_s),
            "terminal_hung_up_at_s": self.terminal_hung_up_at_s,
            "output_log": self.output_log,
            "output_rotations": self.output_rotations,
            "store_outages": [o.to_dict() for o in self.store_outages],
            "store_records_lost": self.store_records_lost,
        }


@dataclass(frozen=True)
class RankLine:
    """One rank of a distributed job (DESIGN.md: `ranks`): its steps measured on its
    own, its own work and its wait for the others (diagnosis/ranks.py), and its score
    (own work against the fastest rank's)."""

    rank: int | None
    local_rank: int | None
    pid: int
    host: str
    steps: Mapping[str, Json]  # count, median_ms, p90_ms, samples_per_s, data_wait_fraction
    parts_ms: Mapping[str, float]  # data, host, forward, backward, optimizer (medians)
    own_ms: float
    comm_wait_ms: float
    score: float
    gpu: int | None = None  # the GPU it computes on, by its host's NVML index
    gpu_util_pct: float | None = None  # that GPU's mean utilisation

    def to_dict(self) -> dict[str, Json]:
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "pid": self.pid,
            "host": self.host,
            "steps": dict(self.steps),
            "parts_ms": dict(self.parts_ms),
            "own_ms": self.own_ms,
            "comm_wait_ms": self.comm_wait_ms,
            "score": self.score,
            "gpu": self.gpu,
            "gpu_util_pct": self.gpu_util_pct,
        }


@dataclass(frozen=True)
class StoreOutage:
    at_s: float
    seconds: float | None  # None: it lasted to the end of the run
    why: str  # SQLite's words: "database or disk is full", "database is locked"

    def to_dict(self) -> dict[str, Json]:
        return {"at_s": self.at_s, "seconds": self.seconds, "why": self.why}


@dataclass(frozen=True)
class Operator:
    """One row of torch.profiler's key_averages table, as the probe sent it."""

    name: str
    calls: int
    cpu_time_total_us: float
    self_cpu_time_total_us: float
    device_time_total_us: float
    self_device_time_total_us: float

    def self_time_us(self, sort: str) -> float:
        return self.self_device_time_total_us if sort == "device" else self.self_cpu_time_total_us

    def to_dict(self) -> dict[str, Json]:
        return {
            "name": self.name,
            "calls": self.calls,
            "cpu_time_total_us": self.cpu_time_total_us,
            "self_cpu_time_total_us": self.self_cpu_time_total_us,
            "device_time_total_us": self.device_time_total_us,
            "self_device_time_total_us": self.self_device_time_total_us,
        }


@dataclass(frozen=True)
class Profile:
    """torch.profiler's top operators over a few steps (the probe's capture)."""

    capture: int | None
    steps: int | None
    sort: str  # "device" or "cpu": what the operators are ordered by
    operators: tuple[Operator, ...]
    trace: str | None
    # how long the capture held the job (the profiler's start, its steps, the table and
    # the trace's writing), and how much of that is more than as many ordinary steps
    held_s: float | None = None
    cost_s: float | None = None

    @classmethod
    def of(cls, fact: Mapping[str, Json], step_ms: float | None = None) -> Profile:
        held_ms, steps = fact.get("held_ms"), fact.get("steps")
        held_s = round(held_ms / 1000, 3) if isinstance(held_ms, (int, float)) else None
        cost_s = None
        if held_s is not None and step_ms is not None and isinstance(steps, int):
            cost_s = round(max(0.0, held_s - steps * step_ms / 1000), 3)
        return cls(
            capture=fact.get("capture"),
            steps=steps,
            sort=str(fact.get("sort", "cpu")),
            operators=tuple(Operator(**op) for op in fact.get("operators", ())),
            trace=fact.get("trace"),
            held_s=held_s,
            cost_s=cost_s,
        )

    def to_dict(self) -> dict[str, Json]:
        out: dict[str, Json] = {
            "capture": self.capture,
            "steps": self.steps,
            "sort": self.sort,
            "operators": [op.to_dict() for op in self.operators],
        }
        if self.trace is not None:
            out["trace"] = self.trace
        if self.held_s is not None:
            out["held_s"] = self.held_s
            out["cost_s"] = self.cost_s
        return out


@dataclass(frozen=True)
class HotspotLine:
    """A line of the user's code and its share of the main thread's time (outside the
    model) or of the DataLoader workers' time, busy on a CPU or idle: py-spy's."""

    file: str
    line: int
    function: str
    share: float
    where: str  # "main" | "workers"
    state: str  # "busy" | "idle"
    code: str

    @property
    def place(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}"

    def to_dict(self) -> dict[str, Json]:
        return {
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "share": self.share,
            "where": self.where,
            "state": self.state,
            "code": self.code,
        }


@dataclass(frozen=True)
class Report:
    session: int | None
    mode: str  # "run" | "watch" | "inject" (watched, the probe injected)
    watched_pid: int | None
    estimated: tuple[str, ...]  # measures estimated rather than measured (watch mode)
    command: tuple[str, ...]
    exit_code: int | None
    ended_by: str | None
    exception_type: str | None
    exception_message: str | None
    duration_s: float
    steps: StepMeasures
    gpus: tuple[GpuSummary, ...]
    gpu_status: str
    host: HostSummary | None
    facts: Mapping[str, Json]  # what the probe audited (AUDIT_KEYS)
    findings: tuple[FindingLine, ...]
    probe: ProbeInfo
    profile: Profile | None
    notes: tuple[str, ...]
    doctor: DoctorInfo
    ranks: tuple[RankLine, ...] = ()  # a distributed job's ranks, each measured alone
    # the lines of the user's code the time outside the model goes to (py-spy's samples);
    # None when the job's stacks were not sampled (the key is then left out)
    hotspots: tuple[HotspotLine, ...] | None = None
    hotspot_samples: int = 0  # the main thread's samples behind them
    # how fast the job could be (diagnosis/speed_of_light.py); None: FLOPs not counted
    speed_of_light: Mapping[str, Json] | None = None
    # where the wall time went (diagnosis/ledger.py); None before the first step
    ledger: Mapping[str, Json] | None = None
    # the latest profiler capture read as the GPU's timeline (`gpudoctor trace`'s rank
    # form); None when nothing was captured (the key is then left out)
    gpu_timeline: Mapping[str, Json] | None = None

    @property
    def watched(self) -> bool:
        return self.mode == "watch"

    def to_dict(self) -> dict[str, Json]:
        return {
            "schema": SCHEMA,
            "session": self.session,
            "mode": self.mode,
            "watched_pid": self.watched_pid,
            "estimated": list(self.estimated),
            "command": list(self.command),
            "exit_code": self.exit_code,
            "ended_by": self.ended_by,
            "exception": (
                {"type": self.exception_type, "message": self.exception_message}
                if self.exception_type
                else None
            ),
            "duration_s": self.duration_s,
            "steps": self.steps.to_dict(),
            "gpus": [g.to_dict() for g in self.gpus],
            "gpu_status": self.gpu_status,
            "host": self.host.to_dict() if self.host is not None else {},
            "facts": dict(self.facts),
            "findings": [f.to_dict() for f in self.findings],
            "probe": self.probe.to_dict(),
            "profile": self.profile.to_dict() if self.profile is not None else None,
            "notes": list(self.notes),
            "doctor": self.doctor.to_dict(),
            "ranks": [r.to_dict() for r in self.ranks],
            **(
                {"hotspots": [h.to_dict() for h in self.hotspots]}
                if self.hotspots is not None
                else {}
            ),
            **(
                {"speed_of_light": dict(self.speed_of_light)}
                if self.speed_of_light is not None
                else {}
            ),
            **({"ledger": dict(self.ledger)} if self.ledger is not None else {}),
            **({"gpu_timeline": dict(self.gpu_timeline)} if self.gpu_timeline is not None else {}),
        }

    def to_json(self) -> str:
        return to_json(self.to_dict())

    def summary(self) -> dict[str, Json]:
        """What `gpudoctor history` shows of a run (kept in the store)."""
        top = self.findings[0] if self.findings else None
        return {
            "steps": self.steps.count,
            "median_ms": self.steps.median_ms,
            "mode": self.mode,  # "watch": steps not counted, only estimated
            "top_finding": f"{top.id} ({top.severity})" if top else None,
        }


def to_json(data: Mapping[str, Json]) -> str:
    """The one JSON form of every report the doctor writes (run, trial, tune)."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
