"""One run's record in memory: every sample, step, fact and the end, in arrival order.

The live session and the offline report fill it the same way (from the same records),
so a report rebuilt from the store is the report the run printed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.diagnosis.window import Window
from gpudoctor.model import GpuSample, HostSample, JobExit, StepRecord
from gpudoctor.probe import protocol

BATCH = protocol.STEP_FIELDS.index("batch_size")
# A week-long run must not grow the doctor without bound: the timeline keeps the most
# recent samples and steps (the store keeps them all); counts stay exact.
MAX_STEPS_KEPT = 200_000  # per process
MAX_SAMPLES_KEPT = 6 * 3600  # host and GPU readings: six hours at 1 Hz


def _samples() -> deque[Any]:
    return deque(maxlen=MAX_SAMPLES_KEPT)


@dataclass
class Timeline:
    command: list[str]
    started_unix: float
    start_mono_ns: int
    gpu_reason: str | None = None  # why there are no GPU readings
    host: deque[HostSample] = field(default_factory=_samples)
    gpus: deque[GpuSample] = field(default_factory=_samples)
    steps: dict[int, deque[StepRecord]] = field(default_factory=dict)
    step_counts: dict[int, int] = field(default_factory=dict)
    facts: dict[int, dict[str, Any]] = field(default_factory=dict)
    gauges: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    ends: dict[int, dict[str, Any]] = field(default_factory=dict)
    probe_errors: list[str] = field(default_factory=list)
    probe_dropped: dict[int, int] = field(default_factory=dict)
    bad_messages: int = 0
    exit: JobExit | None = None
    end_mono_ns: int | None = None

    def ingest_probe(self, message: dict[str, Any]) -> None:
        pid = int(message["pid"])
        rows = message.get("steps") or []
        if rows:
            steps = self.steps.get(pid)
            if steps is None:
                steps = self.steps[pid] = deque(maxlen=MAX_STEPS_KEPT)
            self.step_counts[pid] = self.step_counts.get(pid, 0) + len(rows)
            append = steps.append
            for row in rows:
                record = StepRecord(pid, *row)
                if row[BATCH] < 0:
                    record = record._replace(batch_size=None)
                append(record)
        if "facts" in message:
            self.facts.setdefault(pid, {}).update(message["facts"])
        if message.get("gauges"):
            self.gauges.append((pid, message["gauges"]))
        for error in message.get("errors", []):
            self.probe_errors.append(f"pid {pid}: {error}")
        if "dropped" in message:
            self.probe_dropped[pid] = int(message["dropped"])
        if "end" in message:
            self.ends[pid] = message["end"]

    # -- what the rest reads ------------------------------------------------------------

    def main_pid(self) -> int | None:
        """The process with the most steps (rank 0 when ranks tie)."""
        if not self.steps:
            return None

        def key(pid: int) -> tuple[int, int]:
            rank = self.facts.get(pid, {}).get("rank")
            return (self.step_counts[pid], -int(rank) if rank is not None else 0)

        return max(self.steps, key=key)

    def main_steps(self) -> Sequence[StepRecord]:
        pid = self.main_pid()
        return self.steps[pid] if pid is not None else ()

    def merged_facts(self) -> dict[str, Any]:
        """Facts of the main process, filled in from the others."""
        out: dict[str, Any] = {}
        main = self.main_pid()
        for pid, facts in self.facts.items():
            if pid != main:
                for key, value in facts.items():
                    out.setdefault(key, value)
        if main is not None:
            out.update(self.facts.get(main, {}))
        return out

    def duration_s(self) -> float:
        end = self.end_mono_ns
        if end is None:
            candidates = [s.t_mono_ns for s in self.host] + [g.t_mono_ns for g in self.gpus]
            end = max(candidates, default=self.start_mono_ns)
        return max(0.0, (end - self.start_mono_ns) / 1e9)

    def total_steps(self) -> int:
        pid = self.main_pid()
        return self.step_counts[pid] if pid is not None else 0

    def window(self) -> Window:
        main = self.main_pid()
        job_pids = {p.pid for h in self.host for p in h.job} | set(self.facts) | set(self.steps)
        return Window(
            steps=tuple(self.main_steps()),
            step_count=self.total_steps(),
            steps_by_pid={pid: tuple(s) for pid, s in self.steps.items()},
            facts=self.merged_facts(),
            facts_by_pid=dict(self.facts),
            host=tuple(self.host),
            gpus=tuple(self.gpus),
            gauges=tuple(g for pid, g in self.gauges if main is None or pid == main),
            exit=self.exit,
            ends=dict(self.ends),
            job_pids=frozenset(job_pids),
            start_mono_ns=self.start_mono_ns,
        )
