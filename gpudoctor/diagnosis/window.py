"""The input of diagnosis: a window of one run, and the measures the rules share.

Pure: built from plain values, no I/O. The rules read these measures rather than
recompute them, so two rules never disagree on what "data wait" means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from itertools import compress
from typing import TYPE_CHECKING, Any

from gpudoctor.diagnosis.gpu_timeline import RankTimeline
from gpudoctor.diagnosis.hotspots import Hotspots, hotspots
from gpudoctor.diagnosis.ledger import Ledger, ledger
from gpudoctor.diagnosis.rollup import StepRollup
from gpudoctor.i18n import _, ngettext
from gpudoctor.model import (
    COUNTER_NAMES,
    EPOCH_KEY,
    STEP_FIELD,
    CpuPeak,
    GpuSample,
    HostSample,
    HotspotChunk,
    JobExit,
    StackChunk,
    StepRecord,
)

if TYPE_CHECKING:
    from gpudoctor.diagnosis.ranks import RankMeasure, RankSummary

# Steps before this are warm-up (allocator growth, cuDNN autotuning, worker start-up,
# compilation): excluded from the step measures. Whole runs shorter than
# 2 * WARMUP_STEPS keep their second half.
WARMUP_STEPS = 5
_NUMBER, _WALL, _DETAIL = (STEP_FIELD[name] for name in ("number", "wall_ns", "detail"))
# GPU samples during the first seconds of a job are start-up (loading, CUDA init).
WARMUP_SECONDS = 5.0
# Watch mode: the share of the main thread's stack samples stands in for the share of
# step time; below this many samples (2 s at py-spy's 20 Hz) it says too little.
MIN_STACK_SAMPLES = 40
# What watch mode estimates from stack samples instead of measuring per step.
# A training loop's own turn between a step's end and the next forward (the `for`, the
# calls' dispatch, the probe's entry to the model's call): 9-12 us measured here on a
# 150 us step of a 10-line loop under the doctor with no input code at all (torch 2.13
# CPU, 2 cores; issue 39). Host time outside the model up to twice that is the loop's,
# not input code's. No anchor: this project's measurement.
LOOP_TURN_NS = 25_000

ESTIMATED_MEASURES = ("data_wait_fraction", "split", "steps_per_s", "step_median_ms")


# The facts' key for the cores other processes held while the job ran: not a probe fact,
# the host readings' (Window.cores_held_by_others), added for a remedy's fitting and a
# rerun's planning (fewer-threads leaves those cores out of the job's share).
CORES_HELD = "cores_held_by_others"


def held_cores(facts: dict[str, Any], cores_allowed: int) -> int:
    """The cores others held while the job ran (facts[CORES_HELD]), one left to the job."""
    return min(int(facts.get(CORES_HELD) or 0), max(0, cores_allowed - 1))


def loader_workers(facts: dict[str, Any]) -> int:
    """The worker processes of the job's (first) DataLoader, 0 without one."""
    return int((facts.get("dataloaders") or [{}])[0].get("num_workers") or 0)


def threads_left(facts: dict[str, Any], cores_allowed: int) -> int:
    """The intra-op threads the job's cores leave room for (fewer-threads keeps these):
    the cores it may use, less those others held and its loader's workers; one at least."""
    return max(1, cores_allowed - held_cores(facts, cores_allowed) - loader_workers(facts))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, q in [0, 100]."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[_nearest_rank(len(ordered), q)]


def _nearest_rank(n: int, q: float) -> int:
    """The index of the q-th percentile's value among n values in order."""
    return max(0, min(n - 1, round(q / 100 * (n - 1))))


def median_ms(ordered_ns: list[int]) -> float:
    """statistics.median of the times in milliseconds (the same float, bit for bit),
    from times in nanoseconds already in order."""
    middle = len(ordered_ns) // 2
    if len(ordered_ns) % 2:
        return ordered_ns[middle] / 1e6
    return (ordered_ns[middle - 1] / 1e6 + ordered_ns[middle] / 1e6) / 2


def percentile_ms(ordered_ns: list[int], q: float) -> float:
    """percentile() of the times in milliseconds, from times in nanoseconds in order."""
    return ordered_ns[_nearest_rank(len(ordered_ns), q)] / 1e6 if ordered_ns else 0.0


def stack_steps_per_s(chunks: tuple[StackChunk, ...] | list[StackChunk]) -> float | None:
    """A step rate from the loop counters read in the chunks, in time order (each chunk's
    first and last readings): the counter that rose the most often (best-named first when
    tied), over the intervals where it rose. A counter that restarts with each epoch
    counts on across epochs with the epoch read beside it (an epoch is as long as the
    largest value the counter was read at, plus one); without one, an interval where the
    counter fell is left out, and a counter that fell in at least two intervals and as
    often as in half as many as it rose gives no rate: its epochs are shorter than the
    time between readings, and what it rose by says nothing of how many steps were run."""
    rises = _rises(chunks)
    if not rises:
        return None
    _, steps, ns = rises[_best(rises)]
    return steps / (ns / 1e9) if ns else None


def stack_loop_counter(chunks: tuple[StackChunk, ...] | list[StackChunk]) -> tuple[int, int] | None:
    """The training loop's own counter at its latest reading, (when, value): the one
    stack_steps_per_s takes the rate from, else (it did not rise in these chunks: a loop
    that stands still) the best-named one in that reading. None without a reading."""
    readings = counter_readings(chunks)
    if not readings:
        return None
    t, latest, _joined = readings[-1]
    rises = _rises(chunks)
    best = _best(rises) if rises else None
    if best is None or best not in latest:
        named = [key for key in latest if EPOCH_KEY not in key]
        if not named:
            return None
        best = min(named, key=_name_rank)
    return t, latest[best]


# A reading of the loop counters: when, the counters, and whether the one before it
# may be compared with it (not a merged stretch's first: stack_chunks.py)
Reading = tuple[int, dict[str, int], bool]


def counter_readings(chunks: tuple[StackChunk, ...] | list[StackChunk]) -> list[Reading]:
    """The chunks' readings of the loop counters (each chunk's first and last), in order.
    A merged stretch's are its first chunk's first and its last chunk's last: the hours
    between them are not one interval (a counter may restart each epoch in them), its
    own rises stand for them (counter_rises)."""
    out: list[Reading] = []
    for c in chunks:
        joined = True  # with the chunk before's last: the chunks follow one another
        for t, counters in (
            (c.counters_t_mono_ns, c.counters),
            (c.last_counters_t_mono_ns, c.last_counters),
        ):
            if counters and t is not None:
                out.append((t, counters, joined))
                joined = c.chunks == 1
    return out


def counter_rises(chunks: tuple[StackChunk, ...] | list[StackChunk]) -> dict[str, list[int]]:
    """Each counter's [intervals it rose in, steps, ns, intervals it fell in, its
    period] over the chunks: between their readings (counter_readings), and inside the
    merged stretches (StackChunk.rises). A counter's period (an epoch's length) is the
    largest value it was read at, plus one."""
    readings = counter_readings(chunks)
    out: dict[str, list[int]] = {}
    for c in chunks:
        for key, (rose, steps, ns, fell, period) in (c.rises or {}).items():
            r = out.setdefault(key, [0, 0, 0, 0, 0])
            r[0], r[1], r[2], r[3] = r[0] + rose, r[1] + steps, r[2] + ns, r[3] + fell
            r[4] = max(r[4], period)
    for _t, counters, _joined in readings:
        for key, value in counters.items():
            r = out.setdefault(key, [0, 0, 0, 0, 0])
            r[4] = max(r[4], value + 1)
    for (t_a, a, _joined), (t_b, b, joined) in zip(readings, readings[1:], strict=False):
        dt = t_b - t_a
        if not joined or dt <= 0:
            continue
        for key, value in b.items():
            before = a.get(key)
            if before is None or EPOCH_KEY in key:
                continue
            epoch_a, epoch_b = a.get(key + EPOCH_KEY), b.get(key + EPOCH_KEY)
            epochs = epoch_b - epoch_a if epoch_a is not None and epoch_b is not None else 0
            if epochs < 0:
                continue  # the loops ran again from their start (a second training run)
            r = out[key]
            steps = epochs * r[4] + value - before
            if steps > 0:
                r[0], r[1], r[2] = r[0] + 1, r[1] + steps, r[2] + dt
            elif steps < 0:
                r[3] += 1
    return out


def _rises(chunks: tuple[StackChunk, ...] | list[StackChunk]) -> dict[str, tuple[int, int, int]]:
    """Each counter's rises: (intervals, steps, ns); the counters whose epochs are
    shorter than the readings' spacing left out (stack_steps_per_s)."""
    return {
        key: (rose, steps, ns)
        for key, (rose, steps, ns, fell, _period) in counter_rises(chunks).items()
        if rose and not (fell >= 2 and 2 * fell >= rose)
    }


def _best(rises: dict[str, tuple[int, int, int]]) -> str:
    """The counter that rose the most often, the best-named first when tied."""

    return min(rises, key=lambda key: (-rises[key][0], _name_rank(key)))


def _name_rank(key: str) -> int:
    """How well a counter's name ("function:name") names a step: COUNTER_NAMES' order."""
    return COUNTER_NAMES.index(key.rsplit(":", 1)[-1])


@dataclass(frozen=True)
class Window:
    steps: tuple[StepRecord, ...] = ()
    step_count: int | None = None  # all the run's steps (`steps` may be the recent ones)
    steps_by_pid: dict[int, tuple[StepRecord, ...]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    facts_by_pid: dict[int, dict[str, Any]] = field(default_factory=dict)
    host: tuple[HostSample, ...] = ()
    gpus: tuple[GpuSample, ...] = ()
    gauges: tuple[dict[str, Any], ...] = ()
    exit: JobExit | None = None
    ends: dict[int, dict[str, Any]] = field(default_factory=dict)
    job_pids: frozenset[int] = frozenset()
    start_mono_ns: int = 0
    end_mono_ns: int = 0  # the run's end, or its newest reading while it runs
    stacks: tuple[StackChunk, ...] = ()  # watch mode: py-spy's samples of the main thread
    # py-spy's samples by the line of the user's code (diagnosis/hotspots.py)
    hotspot_chunks: tuple[HotspotChunk, ...] = ()
    # the whole run's steady steps of the main process rolled up, when the rows no longer
    # hold them all (a long run): the step measures come from it (diagnosis/rollup.py)
    rollup: StepRollup | None = None
    # a process whose rows were all compacted (a store compacted past its job's last
    # step: a long evaluation after training): its newest stretch, rolled up
    slot_rollups: dict[int, StepRollup] = field(default_factory=dict)
    # when the steady steps began, where the steps above are only the newest of the
    # rows kept (a whole run's window: its host and GPU readings are from there on)
    steady_since_ns: int | None = None
    hostname: str | None = None  # this node
    remote_ranks: tuple[RankSummary, ...] = ()  # the other nodes' ranks, as sent
    cpu_peak: CpuPeak | None = None
    # the main process's latest profiler capture, read as a GPU timeline
    gpu_timeline: RankTimeline | None = None  # a CPU job's peak (speed_of_light.py)

    # -- steps -------------------------------------------------------------------------

    @property
    def total_steps(self) -> int:
        return self.step_count if self.step_count is not None else len(self.steps)

    @cached_property
    def steady_steps(self) -> tuple[StepRecord, ...]:
        """The steps after the run's warm-up: its first WARMUP_STEPS steps by number (a
        window of recent steps has none of them, and keeps all it has)."""
        steps = self.steps
        if len(steps) >= 2 * WARMUP_STEPS:
            if min(map(_NUMBER, steps)) >= WARMUP_STEPS:
                return tuple(steps)
            return tuple(s for s in steps if s.number >= WARMUP_STEPS)
        if steps and steps[0].number >= WARMUP_STEPS:
            return steps
        return steps[len(steps) // 2 :]

    @cached_property
    def ranks(self) -> tuple[RankMeasure, ...]:
        """A distributed job's ranks, each measured on its own (diagnosis/ranks.py);
        measured once per window for the rules, the screen and the report."""
        from gpudoctor.diagnosis.ranks import rank_measures  # it builds Windows itself

        return tuple(rank_measures(self))

    @cached_property
    def detailed_steps(self) -> tuple[StepRecord, ...]:
        """The steady steps the probe measured in detail (it samples short steps): the
        split and the data wait come from these; counts and step times from all."""
        steady = self.steady_steps
        detailed = tuple(compress(steady, map(_DETAIL, steady)))
        return detailed or self.steady_steps

    @cached_property
    def steady_count(self) -> int:
        """The steady steps timed: the rollup's in a long run (its recent rows may be
        none), else the rows'."""
        return self.rollup.count if self.rollup is not None else len(self.steady_steps)

    @cached_property
    def step_wall_s(self) -> float:
        if self.rollup is not None:
            return self.rollup.wall_ns / 1e9
        wall_ns: int = sum(map(_WALL, self.steady_steps))
        return wall_ns / 1e9

    @cached_property
    def step_median_ms(self) -> float:
        """The median step; estimated as the mean (1 / steps a second) in watch mode."""
        if self.rollup is not None and self.rollup.count:
            return self.rollup.quantile_ms(0.5)
        if self.steady_steps:
            return median_ms(self.walls_in_order_ns)
        rate = self.steps_per_s if self.estimated else None
        return 1000.0 / rate if rate else 0.0

    @cached_property
    def walls_in_order_ns(self) -> list[int]:
        """The steady steps' times, shortest first: the ints the rows hold, so a run's
        100,000 rows cost a list of references, not 100,000 new floats (the doctor's
        peak memory as it builds the report at a job's end: bench/RESULTS.md)."""
        return sorted(map(_WALL, self.steady_steps))

    @cached_property
    def step_p90_ms(self) -> float | None:
        """The steady steps' p90 (nearest rank), None without steady steps."""
        walls = self.walls_in_order_ns
        return percentile_ms(walls, 90) if walls else None

    @cached_property
    def steps_per_s(self) -> float | None:
        wall_s = self.step_wall_s
        if wall_s:
            return self.steady_count / wall_s
        return stack_steps_per_s(self.stacks) if self.estimated else None

    @property
    def loop_counter(self) -> tuple[int, int] | None:
        """A watched job's loop counter as last read (when, value): stack_loop_counter."""
        return stack_loop_counter(self.stacks) if self.stacks else None

    def has_steps(self, minimum: int) -> bool:
        """Enough of the job's steps seen to judge the step measures: steps the probe
        timed (rolled up in a long run, whose recent rows may be none), or in watch mode
        enough stack samples of the main thread."""
        if self.steady_count >= minimum:
            return True
        return self.estimated and self.stack_total >= MIN_STACK_SAMPLES

    @cached_property
    def advice_facts(self) -> dict[str, Any]:
        """The facts a remedy's words and snippet are fitted with: the probe's, the cores
        others held (how many threads to keep), and the job's GPU's compute capability
        (which dtype mixed precision should use)."""
        caps = [g.compute_capability for g in self.gpus if g.compute_capability]
        facts = {**self.facts, CORES_HELD: self.cores_held_by_others}
        return {**facts, "compute_capability": caps[-1]} if caps else facts

    @cached_property
    def hotspots(self) -> Hotspots | None:
        """The lines of the user's code the time outside the model goes to (py-spy's)."""
        return hotspots(self.hotspot_chunks)

    # -- watch mode: stack samples ---------------------------------------------------------

    @cached_property
    def stack_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for chunk in self.stacks:
            for cls, n in chunk.samples.items():
                out[cls] = out.get(cls, 0) + n
        return out

    @cached_property
    def stack_total(self) -> int:
        return sum(self.stack_counts.values())

    @cached_property
    def estimated(self) -> bool:
        """The step measures are estimates from stack samples (watch mode): no probe
        timed any step."""
        return not self.steps and self.stack_total > 0

    @cached_property
    def estimated_measures(self) -> tuple[str, ...]:
        if not self.estimated:
            return ()
        return tuple(m for m in ESTIMATED_MEASURES if m != "steps_per_s" or self.steps_per_s)

    def _stack_share(self, *classes: str) -> float:
        total = self.stack_total
        return sum(self.stack_counts.get(c, 0) for c in classes) / total if total else 0.0

    @cached_property
    def samples_per_s(self) -> float | None:
        """Steps a second times the samples a step takes (`samples_per_step`)."""
        per_step = self.samples_per_step
        if per_step is None or not self.steps_per_s:
            return None
        return per_step * self.steps_per_s

    @cached_property
    def samples_per_step(self) -> float | None:
        """The samples a step takes, on average over the steps measured in detail (the
        probe sees batches on those only), each its DataLoader batches' samples and 0
        for one that fetched none: a loader that reads a batch ahead (Accelerate's, so
        every Hugging Face Trainer's) fetches a step's batch in the step before, and an
        epoch's last step then fetches none. None unless at least half of them saw a
        batch (no DataLoader, or batch sizes it could not tell)."""
        r = self.rollup
        if r is not None:
            if not r.detailed or 2 * r.batch_steps < r.detailed:
                return None
            return r.batch_sum / r.detailed
        detailed = self.detailed_steps
        batches = [s.batch_size for s in detailed if s.batch_size]
        if not batches or 2 * len(batches) < len(detailed):
            return None
        return sum(batches) / len(detailed)

    @cached_property
    def ledger(self) -> Ledger | None:
        """Where the run's wall time went (diagnosis/ledger.py); None before its first
        step, or in watch mode."""
        if self.estimated:
            return None
        return ledger(self.facts, self.start_mono_ns, self.end_mono_ns)

    @cached_property
    def uses_dataloader(self) -> bool:
        if self.estimated:
            return self.stack_counts.get("loader", 0) > 0
        if self.rollup is not None:
            return self.rollup.loader_ns > 0
        return any(s.loader_ns > 0 for s in self.detailed_steps)

    @cached_property
    def data_wait_fraction(self) -> float:
        """Share of step time waiting for input: inside DataLoader `__next__`, or for a
        job with no DataLoader, host time between a step's end and the next forward.
        Watch mode: the share of the main thread's samples in the DataLoader or other
        input waits (queue gets, file and image reads)."""
        if self.estimated:
            return self._stack_share("loader", "input")
        wall, loader, outside, _, _, _ = self._detailed_sums
        if wall <= 0:
            return 0.0
        if self.uses_dataloader:
            return min(1.0, loader / wall)
        # host time outside the model is input code's at most: the loop's own turn is in it
        n = self.rollup.detailed if self.rollup is not None else len(self.detailed_steps)
        return min(1.0, max(0, outside - n * LOOP_TURN_NS) / wall)

    @cached_property
    def _detailed_sums(self) -> tuple[int, int, int, int, int, int]:
        """Over the steps measured in detail: wall, loader, outside, forward, backward,
        optimizer (ns), from the rollup of the whole run or from the rows."""
        r = self.rollup
        if r is not None:
            return (
                r.detailed_wall_ns, r.loader_ns, r.outside_ns,
                r.forward_ns, r.backward_ns, r.optimizer_ns,
            )  # fmt: skip
        steps = self.detailed_steps
        return (
            sum(map(_WALL, steps)),
            sum(map(STEP_FIELD["loader_ns"], steps)),
            sum(map(STEP_FIELD["outside_ns"], steps)),
            sum(map(STEP_FIELD["forward_ns"], steps)),
            sum(map(STEP_FIELD["backward_ns"], steps)),
            sum(map(STEP_FIELD["optimizer_ns"], steps)),
        )

    def split(self) -> dict[str, float]:
        """Where a step goes, as fractions of step time (watch mode: of the main
        thread's samples)."""
        if self.estimated:
            return {
                "data_wait": self.data_wait_fraction,
                "forward": self._stack_share("forward"),
                "backward": self._stack_share("backward"),
                "optimizer": self._stack_share("optimizer"),
                "other": self._stack_share("other"),
            }
        wall, _, _, forward, backward, optimizer = self._detailed_sums
        if wall <= 0:
            return {}
        parts = {
            "data_wait": self.data_wait_fraction,
            "forward": forward / wall,
            "backward": backward / wall,
            "optimizer": optimizer / wall,
        }
        parts["other"] = max(0.0, 1.0 - sum(parts.values()))
        return parts

    # Syncs and copies are counted on the steps measured in detail only (a step that is
    # only counted carries no split: probe/clock.py, sampling), so they are per such step.

    @cached_property
    def syncs_per_step(self) -> float:
        if self.rollup is not None and self.rollup.detailed:
            return self.rollup.syncs / self.rollup.detailed
        steps = self.detailed_steps
        return sum(s.syncs for s in steps) / len(steps) if steps else 0.0

    @cached_property
    def pageable_copies_per_step(self) -> float:
        r = self.rollup
        if r is not None and r.detailed and not self.steps:  # no row kept
            return r.pageable_copies / r.detailed
        steps = self.detailed_steps
        return sum(s.pageable_copies for s in steps) / len(steps) if steps else 0.0

    # -- host and GPU --------------------------------------------------------------------

    @cached_property
    def steady_host(self) -> tuple[HostSample, ...]:
        """Host samples while the job was stepping (after its warm-up)."""
        steps = self.steady_steps
        if not steps:
            return self.host
        t0 = steps[0].t_end_mono_ns - steps[0].wall_ns
        if self.steady_since_ns is not None:
            t0 = min(t0, self.steady_since_ns)
        t1 = steps[-1].t_end_mono_ns
        inside = tuple(h for h in self.host if t0 <= h.t_mono_ns <= t1 + 1_000_000_000)
        return inside or self.host

    @cached_property
    def cores_held_by_others(self) -> int:
        """Whole cores other processes held while the job stepped, even when the job
        wanted them (niced work left out: it yields): the median of the steady host
        readings, rounded."""
        held = [h.competing_cpu_cores for h in self.steady_host]
        known = [c for c in held if c is not None]
        return round(percentile(known, 50)) if known else 0

    def own_threads_oversubscribe(self) -> str | None:
        """The training process's intra-op threads and its DataLoader workers together ask
        for more cores than the job has: the cores it may use less those other processes
        hold (the probe's facts, the host readings), as words; else None. Beside a busy
        process torch's threads wait on each other at every op: the test's small MLP on
        2 cores beside one busy process stepped in 27-56 ms with 2 threads and in 3.6 ms
        with one (bench/RESULTS.md, "Beside a busy process")."""
        facts = self.advice_facts  # the probe's, and the cores others held
        threads = facts.get("intra_op_threads")
        allowed = self.steady_host[-1].cores_allowed if self.steady_host else 0
        if not isinstance(threads, int) or threads <= 1 or not allowed:
            return None
        if threads <= threads_left(facts, allowed):
            return None
        workers = loader_workers(facts)
        held = held_cores(facts, allowed)
        words = (
            _("{threads} intra-op threads and {workers} on {allowed}")
            if workers
            else _("{threads} intra-op threads on {allowed}")
        ).format(
            threads=threads,
            workers=ngettext("{n} loader worker", "{n} loader workers", workers).format(n=workers),
            allowed=ngettext("{n} allowed core", "{n} allowed cores", allowed).format(n=allowed),
        )
        if held:
            words += _(", {n} of them held by other processes").format(n=held)
        return words

    @cached_property
    def steady_gpus(self) -> tuple[GpuSample, ...]:
        t0 = self.start_mono_ns + int(WARMUP_SECONDS * 1e9)
        if self.steps:
            first = self.steady_steps[0].t_end_mono_ns - self.steady_steps[0].wall_ns
            if self.steady_since_ns is not None:
                first = min(first, self.steady_since_ns)
            t0 = max(t0, first)
        steady = tuple(g for g in self.gpus if g.t_mono_ns >= t0)
        return steady

    @cached_property
    def job_gpu_indices(self) -> frozenset[int]:
        """The GPUs the job's processes hold memory on (all GPUs when none is known)."""
        used = {g.index for g in self.gpus for p in g.processes if p.pid in self.job_pids}
        return frozenset(used) if used else frozenset(g.index for g in self.gpus)

    def job_gpu_samples(self) -> tuple[GpuSample, ...]:
        return tuple(g for g in self.steady_gpus if g.index in self.job_gpu_indices)

    @cached_property
    def device_type(self) -> str:
        device = str(self.facts.get("device", "cpu"))
        return device.split(":")[0]
