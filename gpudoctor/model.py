"""Plain values shared by every layer: samples, steps, facts, findings.

Units are in the field names; ``None`` means "not available" (the device or the
platform does not report it), never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Literal, NamedTuple

Severity = Literal["high", "medium", "low", "info"]
# "estimated": the finding rests on a signal read from outside the process (watch mode:
# stack samples instead of the probe's step timings)
Confidence = Literal["measured", "estimated"]
# "detached": the doctor was told to leave the job running (the TUI's `q`, then `l`);
# "steps": a trial stopped it once it had run the steps the trial measures
EndedBy = Literal["exit", "signal", "oom", "exception", "max-seconds", "detached", "steps"]


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    mem_used_bytes: int | None
    sm_util_pct: int | None
    user: str | None = None  # filled in by the session from psutil (NVML gives pids)
    command: str | None = None


@dataclass(frozen=True, slots=True)
class GpuSample:
    t_mono_ns: int
    index: int
    name: str
    uuid: str | None
    util_gpu_pct: int | None
    util_mem_pct: int | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    power_w: float | None
    power_limit_w: float | None
    temp_c: int | None
    fan_pct: int | None
    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    pcie_rx_bytes_per_s: int | None
    pcie_tx_bytes_per_s: int | None
    clock_event_reasons: tuple[str, ...] | None
    compute_capability: tuple[int, int] | None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True, slots=True)
class ProcSample:
    """One process of the job's tree."""

    pid: int
    ppid: int
    name: str
    role: str  # "main" | "worker" | "child"
    cpu_pct: float  # of one core
    rss_bytes: int
    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    status: str  # psutil status: running, sleeping, disk-sleep, ...
    num_threads: int


@dataclass(frozen=True, slots=True)
class OtherProcess:
    """A process outside the job that took CPU (noisy-neighbour names it)."""

    pid: int
    name: str
    user: str | None
    command: str
    cpu_cores: float  # cores' worth of CPU since the previous scan


@dataclass(frozen=True, slots=True)
class HostSample:
    t_mono_ns: int
    cpu_pct_per_core: tuple[float, ...]
    iowait_pct: float | None
    load_1m: float
    mem_used_bytes: int
    mem_total_bytes: int
    swap_used_bytes: int
    swap_total_bytes: int
    disk_read_bytes_per_s: float
    disk_write_bytes_per_s: float
    net_rx_bytes_per_s: float
    net_tx_bytes_per_s: float
    cores_allowed: int
    job: tuple[ProcSample, ...] = ()
    # CPU taken by everything but the job's tree and the doctor (other processes, and a
    # hypervisor's steal), in cores; None where it was not measured (older records)
    others_cpu_cores: float | None = None
    # of the job's threads' runnable time, the part they waited for a core (schedstat)
    job_run_delay_fraction: float | None = None
    # of the time, the part the main processes' main threads were blocked (asleep, on a
    # lock, a queue, I/O): neither on a core nor waiting for one (their mean)
    main_blocked_fraction: float | None = None
    steal_pct: float | None = None
    others: tuple[OtherProcess, ...] = ()  # the busiest, when others took a core's quarter
    # of others_cpu_cores, the part niced processes ran (a background job at a lower
    # priority than the job's: it yields a core whenever the job wants one); None where
    # it was not measured (older records; a niced job or doctor, whose own time the
    # machine's niced time holds too)
    others_niced_cpu_cores: float | None = None

    @property
    def cpu_pct(self) -> float:
        cores = self.cpu_pct_per_core
        return sum(cores) / len(cores) if cores else 0.0

    @property
    def competing_cpu_cores(self) -> float | None:
        """Others' CPU less what niced processes ran: the cores others hold even when the
        job wants them."""
        if self.others_cpu_cores is None:
            return None
        return max(0.0, self.others_cpu_cores - (self.others_niced_cpu_cores or 0.0))

    @property
    def job_cpu_cores(self) -> float:
        """Cores' worth of CPU the job's whole process tree used."""
        return sum(p.cpu_pct for p in self.job) / 100.0


class StepRecord(NamedTuple):
    """One training step as the probe saw it (times in nanoseconds).

    A NamedTuple, not a dataclass: the doctor builds thousands a second from the
    probe's rows (same field order as protocol.STEP_FIELDS, after the pid)."""

    pid: int
    number: int  # the step's index in its process (protocol field "index")
    t_end_mono_ns: int
    wall_ns: int
    loader_ns: int  # inside DataLoader __next__
    outside_ns: int  # host time between the end of a step and the next model call
    forward_ns: int
    backward_ns: int
    optimizer_ns: int
    forwards: int  # root-module forward calls in this step
    batch_size: int | None
    syncs: int  # host syncs on CUDA tensors
    pageable_copies: int  # host-to-device copies from unpinned memory or blocking
    # 1: measured in detail; 0: only counted and timed, its split fields are 0 and its
    # batch_size None (the probe samples: see gpudoctor/probe/steps.py)
    detail: int = 1


# Each field of a StepRecord as a getter: sums and filters over thousands of steps run
# in C (sum(map(STEP_FIELD["wall_ns"], steps))) rather than in a generator's loop.
STEP_FIELD = {name: itemgetter(i) for i, name in enumerate(StepRecord._fields)}


# Loop counters worth reading, best first (an `enumerate` index, a step counter).
COUNTER_NAMES = (
    "global_step",
    "step",
    "steps",
    "iteration",
    "iter_num",
    "it",
    "batch_idx",
    "batch_index",
    "i",
)
# An epoch's number, read beside a loop counter in its frame or a frame that calls it: a
# counter that restarts each epoch (`enumerate(loader)`'s index) counts on across
# epochs with it; without it, readings further apart than an epoch see a counter that
# rose by any amount (issue 39: timm's 10-batch epochs read 1.2 steps/s against 10).
EPOCH_NAMES = ("epoch", "epoch_idx", "epoch_num", "current_epoch")
EPOCH_KEY = "@epoch"  # "function:name@epoch": the epoch read with that counter


@dataclass(frozen=True)
class StackChunk:
    """What the main thread of a watched process was doing over a few seconds, from
    py-spy's samples (watch mode, where no probe runs inside the job).

    `samples` counts the main thread's samples by what they were in: "loader" (inside
    torch.utils.data), "input" (other input waits: queue gets, file and image reads),
    "forward", "backward", "optimizer", "other". `counters` are the training loop's
    integer locals (`step`, `i`, ...) read at `counters_t_mono_ns` as the chunk began,
    by "function:name" (and the epoch read with each, if any, by "function:name@epoch"),
    and `last_counters` read at `last_counters_t_mono_ns` shortly before it ended (none
    in a store from before they were read); two readings give a step rate.

    `chunks` > 1: an old stretch of a long run, that many chunks merged (stack_chunks.py):
    their samples summed, the counter readings its first chunk's first and its last
    chunk's last, and `rises` what the counters did between (diagnosis/window.py's
    counter_rises: by counter, the intervals it rose in, steps, ns, the intervals it
    fell in, its period)."""

    t_start_mono_ns: int
    t_end_mono_ns: int
    samples: dict[str, int]
    counters: dict[str, int] = field(default_factory=dict)
    counters_t_mono_ns: int | None = None
    last_counters: dict[str, int] = field(default_factory=dict)
    last_counters_t_mono_ns: int | None = None
    chunks: int = 1
    rises: dict[str, list[int]] | None = None

    @property
    def total(self) -> int:
        return sum(self.samples.values())


# One line of a HotspotChunk: where ("main" or "workers"), file, line, function, what
# the sample was in (stacks.classify's class for the main thread, "worker" for a
# DataLoader worker), samples in the all-threads run, samples in the busy-only run,
# and the source line itself ("" when it could not be read).
HotspotLine = tuple[str, str, int, str, str, int, int, str]


@dataclass(frozen=True)
class HotspotChunk:
    """py-spy's samples over a few seconds of the job's main thread and of its
    DataLoader workers, by the line of the user's own code they were in (library
    frames folded into their caller in the user's code: sources/hotspots.py).

    Two py-spy runs sample side by side: one every thread whatever its state
    (`rate_hz`), one only threads on a CPU (`busy_rate_hz`): a line's busy share is
    the second's, its idle share the rest. `main_total` and `workers_total` count
    the first run's samples of each (lines with no user frame included)."""

    t_start_mono_ns: int
    t_end_mono_ns: int
    pid: int
    rate_hz: float
    busy_rate_hz: float
    main_total: int
    workers_total: int
    lines: tuple[HotspotLine, ...] = ()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HotspotChunk:
        lines = tuple(
            (str(w), str(f), int(n), str(fn), str(c), int(a), int(b), str(t))
            for w, f, n, fn, c, a, b, t in d.get("lines", ())
        )
        return cls(**{**d, "lines": lines})


@dataclass(frozen=True)
class CpuPeak:
    """A fp32 matmul's best rate on this machine's cores (sources/cpu_peak.py): a CPU
    job's peak, as a GPU's datasheet figure is a GPU job's."""

    tflops: float
    cores: int
    size: int
    dtype: str = "float32"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CpuPeak:
        return cls(
            float(d["tflops"]), int(d["cores"]), int(d["size"]), str(d.get("dtype", "float32"))
        )


@dataclass(frozen=True)
class JobFacts:
    """What the probe audited in one process of the job (merged over its life)."""

    pid: int
    values: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


@dataclass(frozen=True)
class JobExit:
    exit_code: int | None
    ended_by: EndedBy
    signal: int | None = None
    exception_type: str | None = None
    exception_message: str | None = None


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    title: str
    evidence: str
    remedies: tuple[str, ...] = ()
    estimated_gain: float | None = None
    confidence: Confidence = "measured"

    def rank_key(self) -> tuple[int, bool, float]:
        """By severity, then measured before estimated, then estimated gain."""
        order = {"high": 0, "medium": 1, "low": 2, "info": 3}
        return (
            order[self.severity],
            self.confidence == "estimated",
            -(self.estimated_gain or 0.0),
        )


@dataclass(frozen=True)
class Remedy:
    id: str
    guide_section: str
    title: dict[str, str]
    explanation: dict[str, str]
    snippet: str
    flags: tuple[str, ...] = ()  # script flags that apply it, when the script has one
    probe_override: str | None = None  # how the probe can apply it in-process
    beyond_guide: bool = False
    # it changes what the job computes (precision, fusion, reduction order): a rerun
    # keeps it only when the loss stays within tolerance (prescribe/loss.py)
    changes_numerics: bool = False
