"""One run's record in memory: every sample, step, fact and the end, in arrival order.

The live session and the offline report fill it the same way (from the same records),
so a report rebuilt from the store is the report the run printed.
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from gpudoctor.diagnosis.gpu_timeline import RankTimeline
from gpudoctor.diagnosis.ranks import RankSummary
from gpudoctor.diagnosis.rollup import BIN_NS, StepBins, StepRollup
from gpudoctor.diagnosis.window import WARMUP_STEPS, Window
from gpudoctor.hotspot_chunks import HotspotChunks
from gpudoctor.model import (
    STEP_FIELD,
    CpuPeak,
    GpuSample,
    HostSample,
    HotspotChunk,
    JobExit,
    StackChunk,
    StepRecord,
)
from gpudoctor.probe import protocol
from gpudoctor.readings import Readings
from gpudoctor.stack_chunks import StackChunks
from gpudoctor.step_rows import COUNTED_TAIL, StepRows

BATCH = protocol.STEP_FIELDS.index("batch_size")
WIDTH = len(protocol.STEP_FIELDS)
COUNTED = protocol.COUNTED_FIELDS
NUMBER = STEP_FIELD["number"]
WALL = STEP_FIELD["wall_ns"]
# A week-long run must not grow the doctor without bound: the timeline keeps the most
# recent samples and steps as rows (the store keeps them all), every steady step rolled
# up per process (diagnosis/rollup.py: the whole run's measures); counts stay exact.
# The rows are kept as columns (step_rows.py): a step only counted costs 24 bytes, one
# measured in detail its record (~270 bytes); a fast loop's 100,000 rows about 4 MB
# (bench/RESULTS.md). The rows of all processes together stay under MAX_STEP_ROWS,
# shared out evenly, never fewer than MIN_STEP_ROWS each; a live "last minute" plot has
# every step of the minute up to 1,666 steps a second.
MAX_STEP_ROWS = 100_000
MIN_STEP_ROWS = 5_000
# A process's `step_mode` fact: where its probe's clock ends a step (probe/clock.py's
# END_NAMES); a process that trains ends it at a backward or an optimizer step.
TRAINING_MODES = frozenset({"backward", "optimizer"})
INFERENCE_MODES = frozenset({"forward", "dataloader"})
# Host and GPU readings: the last ten minutes whole, the rest of the run spread evenly
# over at most this many (readings.py): ~3 MB of host readings and ~5 MB of an 8-GPU
# node's GPU readings at most, for a run of any length (six hours of them kept whole
# were 21 MB and 7 MB: bench/RESULTS.md). Whole: up to six readings a second of the
# host, eight GPUs' at 1 Hz.
HOST_ROOM = 2048
HOST_RECENT_ROOM = 3600
GPU_ROOM = 8192
GPU_RECENT_ROOM = 4800
# Gauges: the newest six hours' at 1 Hz (py-spy's chunks: hotspot_chunks.py, stack_chunks.py).
MAX_SAMPLES_KEPT = 6 * 3600
# A whole run's window (the report's, fix's, trial's) makes records of the newest
# WHOLE_ROWS rows, shared out evenly, never fewer than MIN_WHOLE_ROWS a process (about
# 5 MB at the end of a run, where all 100,000 were 27 MB); a run with more rows takes
# its step measures from its rollup, as a longer one does, and the rules judge those
# newest rows. A run of up to 20,000 steps keeps its exact median from its rows.
WHOLE_ROWS = 20_000
MIN_WHOLE_ROWS = 2_500
# The live screens' window (snapshot.py), and the report's charts' when they say when
# a finding was first seen: the last RECENT_STEPS steps, RECENT_SAMPLES host readings
RECENT_STEPS = 2000
RECENT_SAMPLES = 120  # host ticks (two minutes at 1 Hz), and as many per GPU


def _samples() -> deque[Any]:
    return deque(maxlen=MAX_SAMPLES_KEPT)


def _host_readings() -> Readings[HostSample]:
    return Readings(HOST_ROOM, recent_room=HOST_RECENT_ROOM)


def _gpu_readings() -> Readings[GpuSample]:
    return Readings(GPU_ROOM, recent_room=GPU_RECENT_ROOM)


_new = tuple.__new__  # _new(StepRecord, fields): StepRecord(*fields) without its keywords


def steps_of(pid: int, rows: list[list[Any]]) -> list[StepRecord]:
    """Step rows as the probe sends them (protocol.STEP_FIELDS; a step only counted and
    timed in its first COUNTED_FIELDS), as records; thousands a second on a fast loop, so
    built in bulk (bench/ingest.py). ValueError when a row has neither this version's
    fields, nor a counted step's, nor the first version's (no `detail`: detailed)."""
    widths = set(map(len, rows))
    if widths - {WIDTH, COUNTED}:
        if widths - {WIDTH, COUNTED, protocol.STEP_FIELDS_V1_0}:
            raise ValueError(f"step rows of {sorted(widths)} fields")
        rows = [[*row, 1] if len(row) == protocol.STEP_FIELDS_V1_0 else row for row in rows]
    head = (pid,)  # (a tuple added to a tuple: the fastest way to a record's fields)
    if COUNTED in widths:
        rest, none = COUNTED_TAIL, ()
        return [
            _new(StepRecord, head + tuple(row) + (rest if len(row) == COUNTED else none))
            for row in _known_batches(rows)
        ]
    return [_new(StepRecord, head + tuple(row)) for row in _known_batches(rows)]


def add_rows(
    steps: StepRows, pid: int, rows: list[list[Any]]
) -> tuple[list[int], list[StepRecord]]:
    """A message's step rows added to a process's rows as columns (a step only counted
    as its three numbers, one measured in detail as its record: step_rows.py); what the
    process's rollup takes of them: the steady steps' times, and the steady records of
    the steps measured in detail. ValueError as steps_of."""
    places = [i for i, row in enumerate(rows) if len(row) != COUNTED]
    whole = steps_of(pid, [rows[i] for i in places]) if places else []
    numbers = [row[0] for row in rows]
    walls = [row[2] for row in rows]
    steps.extend_columns(
        pid, (numbers, [row[1] for row in rows], walls), list(zip(places, whole, strict=True))
    )
    if min(numbers, default=WARMUP_STEPS) < WARMUP_STEPS:
        walls = [w for n, w in zip(numbers, walls, strict=True) if n >= WARMUP_STEPS]
    return walls, steady(whole)


def _known_batches(rows: list[list[Any]]) -> list[list[Any]]:
    """The rows with an unknown batch size (-1) as None, set in the rows themselves
    (which costs a fraction of _replace)."""
    for row in rows:  # (a row made a step twice, as a load's are, is None already)
        if len(row) == WIDTH and row[BATCH] is not None and row[BATCH] < 0:
            row[BATCH] = None
    return rows


def steady(steps: list[StepRecord]) -> list[StepRecord]:
    """The steps past the warm-up (all of them, once a process has stepped a while)."""
    if min(map(NUMBER, steps), default=WARMUP_STEPS) >= WARMUP_STEPS:
        return steps
    return [s for s in steps if s.number >= WARMUP_STEPS]


@dataclass
class Timeline:
    command: list[str]
    started_unix: float
    start_mono_ns: int
    gpu_reason: str | None = None  # why there are no GPU readings
    host: Readings[HostSample] = field(default_factory=_host_readings)
    gpus: Readings[GpuSample] = field(default_factory=_gpu_readings)
    steps: dict[int, StepRows] = field(default_factory=dict)
    rollups: dict[int, StepRollup] = field(default_factory=dict)  # every steady step
    # a compacted session's old stretches (end, rows, rollup), by process: a replay
    # of those times shows their steps from these (its rows are gone from the store)
    slots: dict[int, list[tuple[int, int, StepRollup]]] = field(default_factory=dict)
    # the live doctor's steps by stretches of time (each probe message's rollup), for
    # the plots of the time the rows no longer cover (a fast loop's are its last 30 s)
    bins: dict[int, StepBins] = field(default_factory=dict)
    step_counts: dict[int, int] = field(default_factory=dict)
    facts: dict[int, dict[str, Any]] = field(default_factory=dict)
    # the CUDA allocator's gauges (peaks are the run's own: the newest reading keeps them)
    gauges: deque[tuple[int, dict[str, Any]]] = field(default_factory=_samples)
    ends: dict[int, dict[str, Any]] = field(default_factory=dict)
    probe_errors: list[str] = field(default_factory=list)
    probe_dropped: dict[int, int] = field(default_factory=dict)
    # each stepping process's exact step count: its counter page (protocol.py), or the
    # count its messages carry when that is higher (a page read before the last step)
    page_steps: dict[int, int] = field(default_factory=dict)
    bad_messages: int = 0
    # the doctor's own troubles: when it was stalled (from, to), when the probe socket
    # had to be made again, when its terminal went away (it recorded on, headless)
    stalls: list[tuple[int, int]] = field(default_factory=list)
    socket_remade: list[int] = field(default_factory=list)
    hung_up_ns: int | None = None
    # when the store could not be written (from, to or None while it lasts, why), and
    # the records let go meanwhile (kept in memory up to a bound, written after)
    store_outages: list[tuple[int, int | None, str]] = field(default_factory=list)
    store_lost: int = 0
    # the job's output, when the doctor keeps it in a log file; times it was rotated
    output_log: str | None = None
    output_rotations: int = 0
    exit: JobExit | None = None
    end_mono_ns: int | None = None
    # watch mode: the attached process (no probe inside it) and its stack chunks
    watched_pid: int | None = None
    stacks: StackChunks = field(default_factory=StackChunks)
    # run mode: py-spy's samples by the line of the user's code (sources/hotspots.py)
    hotspots: HotspotChunks = field(default_factory=HotspotChunks)
    # the node the doctor ran on, and the other nodes' ranks as their doctors last sent
    # them (a multi-node job: sources/rendezvous.py), by node
    hostname: str | None = None
    remote_ranks: dict[str, tuple[RankSummary, ...]] = field(default_factory=dict)
    # a CPU job's peak, measured by the doctor before it launched the job (no GPU)
    cpu_peak: CpuPeak | None = None
    # each process's latest profiler capture, read as a GPU timeline (jobs/captures.py)
    gpu_timelines: dict[int, RankTimeline] = field(default_factory=dict)
    # when the doctor asked for a capture by itself, and why (diagnosis/auto_profile.py)
    auto_profile: tuple[int, str] | None = None
    # when each profiler capture's result arrived (the newest reading then: a marker)
    profiles: list[int] = field(default_factory=list)
    # a load's step rows not yet made steps, by process (_load_rows, settle)
    _pending: dict[int, deque[list[list[Any]]]] = field(default_factory=dict, repr=False)
    _pending_rows: dict[int, int] = field(default_factory=dict, repr=False)
    _pending_walls: dict[int, array[int]] = field(default_factory=dict, repr=False)
    # each loaded message's last step's end, the steady times before it, its detailed
    # steps' parts: the bins the loaded rows make at `settle()`
    _pending_marks: dict[int, list[tuple[int, int, StepRollup | None]]] = field(
        default_factory=dict, repr=False
    )

    @property
    def mode(self) -> str:
        """The kind of session: "run", launched with the probe; "watch", watched from
        outside (the step measures are estimates); "inject", watched with the probe
        injected (steps counted from the attach)."""
        if self.watched_pid is None:
            return "run"
        return "inject" if self.steps else "watch"

    def ingest_probe(
        self, message: dict[str, Any], apart: bool = False, held: bool = False
    ) -> StepRollup | None:
        """A probe message taken in. `apart`: its steady steps rolled up on their own too
        and returned (None: no steps), which the live doctor hands to compaction
        (compaction.Compactor.knows); else they go straight into the process's rollup,
        without a rollup a message to merge. `held` (a store's records loaded: a report,
        a replay): rolled up now, made steps at `settle()`, the newest only."""
        pid = int(message["pid"])
        rows = message.get("steps") or []
        these = None
        if rows:
            steps = self.steps.get(pid)
            if steps is None:
                steps = self._new_process(pid)
            self.step_counts[pid] = self.step_counts.get(pid, 0) + len(rows)
            if held:
                self._load_rows(pid, rows, steps.maxlen)
            else:
                walls, whole = add_rows(steps, pid, rows)
                rollup = self.rollups[pid]
                if apart:
                    these = StepRollup()
                    these.add_walls(walls)
                    these.add_parts(whole)
                    rollup.merge(these)
                    self.bins.setdefault(pid, StepBins()).add(int(rows[-1][1]), these)
                else:
                    rollup.add_walls(walls)
                    rollup.add_parts(whole)
        if "facts" in message:
            if "profile" in message["facts"]:
                self.profiles.append(self.last_reading_ns())
            self.facts.setdefault(pid, {}).update(message["facts"])
        if message.get("gauges"):
            self.gauges.append((pid, message["gauges"]))
        for error in message.get("errors", []):
            self.probe_errors.append(f"pid {pid}: {error}")
        if "dropped" in message:
            self.probe_dropped[pid] = int(message["dropped"])
        counts = message.get("counts")
        if counts:  # the process's own cumulative count: exact whatever was lost
            count = int(counts.get("steps", 0))
            if count > self.page_steps.get(pid, 0):
                self.page_steps[pid] = count
        if "end" in message:
            self.ends[pid] = message["end"]
        return these

    def _load_rows(self, pid: int, rows: list[list[Any]], kept: int | None) -> None:
        """A stored message's step rows, as a report or a replay loads them: the
        detailed steps' parts rolled up at once, every steady step's time kept (a step
        only counted, most of a fast loop's, is its time alone) and rolled up at
        `settle()`, and the rows held until then, only the newest that the process's
        rows keep: a week's last whole minutes of 8 ranks are ~1M rows, 100,000 kept."""
        walls = self._pending_walls.get(pid)
        if walls is None:  # machine integers: the rows' own int objects are let go
            walls = self._pending_walls[pid] = array("q")
        full = [r for r in rows if len(r) != COUNTED]
        parts = None
        if full:  # the steps measured in detail (a few): their parts now (checked)
            parts = StepRollup()
            parts.add_parts(steady(steps_of(pid, full)))
        # every steady step's time (a row's third field, whatever its width)
        walls.extend([r[2] for r in rows if r[0] >= WARMUP_STEPS])
        if rows:
            marks = self._pending_marks.setdefault(pid, [])
            marks.append((int(rows[-1][1]), len(walls), parts))
        pending = self._pending.setdefault(pid, deque())
        pending.append(rows)
        held = self._pending_rows.get(pid, 0) + len(rows)
        while kept is not None and held - len(pending[0]) >= kept:
            held -= len(pending.popleft())
        self._pending_rows[pid] = held

    def settle(self) -> None:
        """The loaded rows held by `_load_rows` made steps (each process's newest), and
        their times rolled up in one pass."""
        for pid, walls in self._pending_walls.items():
            self._bin_loaded(pid, walls, self._pending_marks.get(pid, []))
        self._pending_walls.clear()
        self._pending_marks.clear()
        for pid, pending in self._pending.items():
            steps = self.steps[pid]
            for rows in pending:  # (their times and parts are rolled up already)
                add_rows(steps, pid, rows)
        self._pending.clear()
        self._pending_rows.clear()

    def _bin_loaded(
        self, pid: int, walls: array[int], marks: list[tuple[int, int, StepRollup | None]]
    ) -> None:
        """The loaded steps rolled up by the bins of their messages' ends (StepBins, as
        the live doctor's), each bin's rollup merged into the run's: the plots of a
        replay draw the stretch the store keeps whole beyond the rows, as live."""
        bins = self.bins.setdefault(pid, StepBins())
        rollup = self.rollups[pid]
        done = 0  # the times rolled up so far
        i = 0
        while i < len(marks):
            start = marks[i][0] // BIN_NS
            j = i
            these = StepRollup()
            while j < len(marks) and marks[j][0] // BIN_NS == start:
                parts = marks[j][2]
                if parts is not None:
                    these.merge(parts)
                j += 1
            last_end, upto, _ = marks[j - 1]
            these.add_walls(walls[done:upto].tolist())
            done = upto
            rollup.merge(these)
            bins.add(last_end, these)
            i = j

    def ingest_rollup(self, pid: int, rows: int, rollup: StepRollup, t_mono_ns: int) -> None:
        """An old stretch of a process's steps, as the store keeps it once compacted
        (compaction.py): counted and rolled up, its rows gone; kept by its end for a
        replay of that time."""
        if pid not in self.steps:
            self._new_process(pid)
        self.step_counts[pid] = self.step_counts.get(pid, 0) + rows
        self.rollups[pid].merge(rollup)
        self.slots.setdefault(pid, []).append((t_mono_ns, rows, rollup))

    def _new_process(self, pid: int) -> StepRows:
        """A stepping process's rows and rollup; every process's rows get an even share
        of MAX_STEP_ROWS again (the most recent kept)."""
        self.rollups[pid] = StepRollup()
        self.steps[pid] = StepRows()
        share = max(MIN_STEP_ROWS, MAX_STEP_ROWS // len(self.steps))
        for rows in self.steps.values():
            if rows.maxlen != share:
                rows.set_maxlen(share)
        return self.steps[pid]

    def rolled_up(self, pid: int) -> bool:
        """Some of the process's steps are no longer kept as rows (only rolled up)."""
        steps = self.steps.get(pid)
        return steps is not None and self.step_counts.get(pid, 0) > len(steps)

    def ingest_page(self, pid: int, steps: int) -> None:
        """A process's exact step count, from its counter page."""
        if steps > self.page_steps.get(pid, 0):
            self.page_steps[pid] = steps

    # -- what the rest reads ------------------------------------------------------------

    def counted_steps(self) -> dict[int, int]:
        """Each stepping process's steps: its counter page's count, or the rows that
        arrived when they are more (a page written before the last rows were sent).
        While some process trains, one that only calls its model forward is not a
        stepping process: it evaluates what the others train (`inferring`)."""
        pids = set(self.step_counts) | {p for p, n in self.page_steps.items() if n > 0}
        pids -= self.inferring()
        return {
            pid: max(self.step_counts.get(pid, 0), self.page_steps.get(pid, 0))
            for pid in sorted(pids)
        }

    def inferring(self) -> set[int]:
        """The processes whose probe counts forwards alone (no backward seen: its clock's
        step ends at a forward or a batch) while another process of the job trains
        (backward or optimizer steps). Hogwild's parent (pytorch/examples' mnist_hogwild)
        tests the model its spawned workers trained, batch by batch; a launcher that
        evaluates after `mp.spawn` does the same; an RL actor makes rollouts for a
        learner. Their forwards are no training steps; a job that only infers keeps its
        forwards as its steps."""
        modes = {pid: f.get("step_mode") for pid, f in self.facts.items()}
        if not any(mode in TRAINING_MODES for mode in modes.values()):
            return set()
        return {pid for pid, mode in modes.items() if mode in INFERENCE_MODES}

    def store_trouble(self) -> str | None:
        """Why the store cannot be written, while it cannot (the records wait in memory)."""
        outages = self.store_outages
        return outages[-1][2] if outages and outages[-1][1] is None else None

    def lost_step_rows(self) -> int:
        """Steps counted whose timings never arrived (the job died between two sends,
        or rows were dropped on the way)."""
        return sum(
            max(0, n - self.step_counts.get(pid, 0)) for pid, n in self.counted_steps().items()
        )

    def main_pid(self) -> int | None:
        """The process with the most steps (rank 0 when ranks tie)."""
        counts = self.counted_steps()
        if not counts:
            return None

        def key(pid: int) -> tuple[int, int]:
            rank = self.facts.get(pid, {}).get("rank")
            return (counts[pid], -int(rank) if rank is not None else 0)

        return max(counts, key=key)

    def main_steps(self) -> StepRows | tuple[()]:
        pid = self.main_pid()
        return self.steps.get(pid, ()) if pid is not None else ()

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

    def last_reading_ns(self) -> int:
        """The newest host or GPU reading (each arrives in time order), or the start."""
        times = [self.start_mono_ns]
        if self.host:
            times.append(self.host[-1].t_mono_ns)
        if self.gpus:
            times.append(self.gpus[-1].t_mono_ns)
        return max(times)

    def end_ns(self) -> int:
        """When the run ended, or the newest reading of one still going."""
        return self.end_mono_ns if self.end_mono_ns is not None else self.last_reading_ns()

    def duration_s(self) -> float:
        return max(0.0, (self.end_ns() - self.start_mono_ns) / 1e9)

    def total_steps(self) -> int:
        pid = self.main_pid()
        return self.counted_steps()[pid] if pid is not None else 0

    def window(
        self,
        max_steps: int | None = None,
        max_samples: int | None = None,
        until_ns: int | None = None,
    ) -> Window:
        """The run as a diagnosis window: all of it, or its recent past (the last
        `max_steps` steps per process, `max_samples` host readings and as many per GPU),
        as it stood at `until_ns` (a replay: the end is not known yet then)."""
        main = self.main_pid()
        whole = max_steps is None and until_ns is None  # the report's, fix's and trial's
        if whole:  # the newest rows made records, the rest from the rollups
            max_steps = max(MIN_WHOLE_ROWS, WHOLE_ROWS // max(1, len(self.steps)))
        by_pid = {pid: _recent(s, max_steps, until_ns, _step_end) for pid, s in self.steps.items()}
        main_steps = by_pid.get(main, ()) if main is not None else ()
        if whole:  # the run's readings evenly spread (the older ones thinned)
            host, gpus = self.host.evenly(), self.gpus.evenly()
        else:
            host = _recent(self.host, max_samples, until_ns, _sample_time)
            gpu_cap = None if max_samples is None else MAX_GPUS * max_samples
            gpus = _recent(self.gpus, gpu_cap, until_ns, _sample_time)
        gauge_cap = None if max_samples is None else RECENT_GAUGES
        gauges = _recent(self.gauges, gauge_cap, until_ns, _gauge_time)
        stacks = _recent(self.stacks, max_samples, until_ns, _chunk_end)
        lines = _recent(self.hotspots, max_samples, until_ns, _chunk_end)
        job_pids = {p.pid for h in host for p in h.job} | set(self.facts) | set(self.steps)
        rollup = (
            self.rollups.get(main)
            if main is not None
            and whole
            and (self.rolled_up(main) or len(self.steps.get(main, ())) > len(main_steps))
            else None
        )
        if until_ns is None:
            step_count = self.total_steps()
        else:
            step_count = main_steps[-1].number + 1 if main_steps else 0
            slots = [s for s in self.slots.get(main, ()) if s[0] <= until_ns] if main else []
            if slots and not main_steps:  # a replay of a compacted stretch: its slot's
                rollup, step_count = slots[-1][2], sum(s[1] for s in slots)  # steps
        return Window(
            steps=main_steps,
            step_count=step_count,
            steps_by_pid=by_pid,
            facts=self.merged_facts(),
            facts_by_pid=dict(self.facts),
            host=host,
            gpus=gpus,
            gauges=tuple(g for pid, g in gauges if main is None or pid == main),
            exit=self.exit if until_ns is None else None,
            ends=dict(self.ends) if until_ns is None else {},
            job_pids=frozenset(job_pids),
            start_mono_ns=self.start_mono_ns,
            end_mono_ns=self.end_ns() if until_ns is None else until_ns,
            stacks=stacks,
            hotspot_chunks=lines,
            rollup=rollup,
            slot_rollups=self._newest_slots(by_pid) if until_ns is None else {},
            steady_since_ns=(
                self.steps[main].first_start(WARMUP_STEPS)
                if whole and main is not None and main in self.steps
                else None
            ),
            hostname=self.hostname,
            remote_ranks=tuple(r for ranks in self.remote_ranks.values() for r in ranks),
            cpu_peak=self.cpu_peak,
            gpu_timeline=self.gpu_timelines.get(main) if main is not None else None,
        )

    def _newest_slots(self, rows: dict[int, tuple[StepRecord, ...]]) -> dict[int, StepRollup]:
        """Each stepping process without a row: its newest compacted stretch that
        holds steps (a store compacted past the job's last step)."""
        out = {}
        for pid, slots in self.slots.items():
            newest = next((r for _, _, r in reversed(slots) if r.count), None)
            if newest is not None and not rows.get(pid):
                out[pid] = newest
        return out


# Recent windows (the TUI's): up to this many GPUs' readings per host reading, and the
# last this many CUDA allocator gauges (four a second: two minutes).
MAX_GPUS = 8
RECENT_GAUGES = 500


def _step_end(s: StepRecord) -> int:
    return s.t_end_mono_ns


def _chunk_end(c: StackChunk | HotspotChunk) -> int:
    return c.t_end_mono_ns


def _sample_time(s: HostSample | GpuSample) -> int:
    return s.t_mono_ns


def _gauge_time(g: tuple[int, dict[str, Any]]) -> int:
    return int(g[1].get("t", 0))


def _recent(items: Any, n: int | None, until_ns: int | None, t_of: Any) -> tuple[Any, ...]:
    """The last n items (all when n is None) up to until_ns; from a deque, read from its
    end without walking the rest of it (a live view takes the last 2,000 of up to
    100,000 rows every second); from step rows, found by bisection and made records."""
    if isinstance(items, StepRows):
        stop = len(items) if until_ns is None else items.ending_by(until_ns)
        return tuple(items.records(0 if n is None else max(0, stop - n), stop))
    if until_ns is not None:
        kept = [x for x in items if t_of(x) <= until_ns]
        return tuple(kept[-n:] if n is not None else kept)
    if n is None or n >= len(items):
        return tuple(items)
    tail = list(islice(reversed(items), n))
    tail.reverse()
    return tuple(tail)
