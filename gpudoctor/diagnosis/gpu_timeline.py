"""The GPU's own timeline, from a profiler trace (DESIGN.md section 10): pure arithmetic
over the events sources/kineto.py reads, one rank at a time, then across ranks.

Definitions follow Holistic Trace Analysis (HTA 0.5.0, its defaults), so that its numbers
check ours (tests/test_gpu_timeline.py):

- The GPU events are kernels, memory copies and memory sets with a stream and a launch
  (correlation), and the device's syncs on the timeline (busy, not compute; not in the
  idle per stream). With two or more `ProfilerStep#N` ranges in the trace, only those
  launched before the last one began count (the last step is cut short by the capture's
  end); with fewer, all do.
- Temporal breakdown: the span from the first GPU event's start to the last one's end;
  busy is the union of all of them; compute is the union of the kernels that are neither
  communication (`nccl...Kernel`), nor memory (`Memcpy`, `Memset`), nor syncs; idle is the
  span less busy; non-compute is busy less compute.
- Idle per stream: each gap between a stream's consecutive events is host wait when the
  next event's launch began after the previous event ended (nothing was queued), kernel
  wait when the gap is shorter than KERNEL_WAIT_US (back-to-back launches), else other.
- Communication/computation overlap: the share of the union of communication kernels
  during which a compute kernel runs.

Beyond HTA: the GPU's own idle (no event on any stream) split the same way, gap by gap,
by the first event after the gap: host wait when it was launched after the gap began,
kernel wait when the gap is shorter than KERNEL_WAIT_US, else other; and by length, the
gaps shorter than LAUNCH_GAP_US (the host launching, operator after operator) apart from
the longer ones. A stream's idle counts its gaps while other streams run; the GPU's does
not, so the findings use it.

Times are microseconds, as in the trace.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# HTA's consecutive_kernel_delay default (30, in the trace's microseconds)
KERNEL_WAIT_US = 30.0
# A GPU gap shorter than this is the host launching the next operator (eager PyTorch's
# dispatch and launch take ~5-50 us an operator: the launch calls in the shared traces
# take 5-9 us, the host's Python around them the rest); a longer one is host work other
# than launching (input, a sync, the loop's own code). This project's bound: no anchor.
LAUNCH_GAP_US = 100.0
TOP_KERNELS = 10
PICTURE_CELLS = 60

# HTA's own patterns (hta/utils/utils.py): communication, memory, and what is not compute
_COMM = re.compile(r"^nccl.*Kernel")
_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
# launch calls of the CUDA and HIP runtimes and drivers
_LAUNCH = re.compile(r"^(cuda|hip)(Launch|ExtLaunch|ModuleLaunch|GraphLaunch)|^cuLaunch")
# host calls that wait for the device (cudaMemcpy without Async blocks too)
_SYNC_CALL = re.compile(
    r"^(cuda|hip)(StreamSynchronize|DeviceSynchronize|EventSynchronize|Memcpy$|MemcpyWithStream)"
)
# Matrix multiplies and convolutions in float32 on the SIMT cores, by the names cuBLAS,
# cuDNN and CUTLASS give their kernels: `sgemm` (ampere_sgemm_128x64_nn, volta_sgemm_...,
# cutlass_80_simt_sgemm_...), `scudnn` (cudnn_ampere_scudnn_128x64_relu_...), `gcgemm`
# (complex float, FFT convolutions), fp32 FMA tiles of xmma (sm80_xmma_gemm_f32f32_f32f32_
# f32_..._ffma_...), and the small float GEMM/GEMV kernels (gemmSN_NN_kernel<float, ...>,
# gemv2T_kernel_val<float, ...>). Tensor-core kernels name their path instead (tensorop,
# s1688gemm: TF32, h16816gemm, hmma, wgmma, xmma_..._bf16/f16/tf32) and are not matched.
_FP32_SIMT = re.compile(
    r"sgemm|scudnn|gcgemm|_ffma_|gemmSN_\w*kernel<float|gemv\w*<float|gemvx?_kernel<float"
)


@dataclass(frozen=True, slots=True)
class GpuEvent:
    ts: float
    dur: float
    stream: int
    correlation: int
    name: str
    cat: str  # "kernel" | "memcpy" | "memset" | "sync" (the device waiting: CUDA's cuda_sync)

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True, slots=True)
class HostCall:
    """A runtime or driver call on the host (a kernel's launch, a sync)."""

    ts: float
    dur: float
    correlation: int
    name: str


@dataclass
class RankTrace:
    """What the reader keeps of one rank's trace."""

    rank: int
    path: str
    device: str | None = None  # the GPU's name, from deviceProperties
    compute_major: int | None = None  # its compute capability's major number
    gpu: list[GpuEvent] = field(default_factory=list)
    calls: list[HostCall] = field(default_factory=list)
    # ProfilerStep#N ranges on the host: (ts, dur, N)
    steps: list[tuple[float, float, int]] = field(default_factory=list)
    cpu_ops: int = 0  # host operators seen (a CPU-only trace has these and nothing else)
    # host operators by name: (calls, time in us, inclusive as recorded)
    cpu_time: dict[str, list[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamIdle:
    stream: int
    host_wait_us: float
    kernel_wait_us: float
    other_us: float

    @property
    def total_us(self) -> float:
        return self.host_wait_us + self.kernel_wait_us + self.other_us


@dataclass(frozen=True)
class KernelTime:
    name: str
    time_us: float
    count: int
    share_pct: float  # of all kernels' time


@dataclass(frozen=True)
class RankTimeline:
    rank: int
    path: str
    device: str | None
    compute_major: int | None
    span_us: float | None  # first GPU event's start to the last one's end
    idle_us: float | None
    compute_us: float | None
    non_compute_us: float | None
    communication_us: float  # union of communication kernels
    memory_us: float  # union of memcpy and memset
    idle: tuple[StreamIdle, ...]
    gpu_idle: StreamIdle  # the GPU's own idle, no event on any stream (stream -1)
    short_gaps_us: float  # of it, in gaps shorter than LAUNCH_GAP_US
    long_host_wait_us: float  # of it, host wait in gaps of LAUNCH_GAP_US or longer
    comm_overlap_pct: float | None  # None: no communication
    top_kernels: tuple[KernelTime, ...]
    steps: int  # ProfilerStep ranges counted (the last one left out, with two or more)
    kernels: int  # kernels (not memcpy/memset) counted
    kernel_us: float  # their time, summed
    kernel_median_us: float | None
    launch_median_us: float | None  # the host's launch calls
    matmul_fp32_us: float  # GEMM and convolution kernels in fp32 without tensor cores
    pageable_copies: int  # host-to-device copies from pageable memory
    sync_calls: tuple[tuple[str, int, float], ...]  # (name, count, total us) host syncs
    cpu_ops: int
    top_cpu_ops: tuple[tuple[str, int, float], ...]  # (name, calls, us): a CPU-only trace
    # one step of the GPU, PICTURE_CELLS cells left to right: how busy each was (0-8)
    picture: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """As stored (the session's record of a capture), read back by from_dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankTimeline:
        d = dict(d)
        d["idle"] = tuple(StreamIdle(**s) for s in d["idle"])
        d["gpu_idle"] = StreamIdle(**d["gpu_idle"])
        d["top_kernels"] = tuple(KernelTime(**k) for k in d["top_kernels"])
        d["sync_calls"] = tuple(tuple(c) for c in d["sync_calls"])
        d["top_cpu_ops"] = tuple(tuple(c) for c in d["top_cpu_ops"])
        d["picture"] = tuple(d.get("picture") or ())
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def pct(self, us: float | None) -> float | None:
        if us is None or not self.span_us:
            return None
        return 100.0 * us / self.span_us

    @property
    def host_wait_us(self) -> float:
        return self.gpu_idle.host_wait_us

    @property
    def kernel_wait_us(self) -> float:
        return self.gpu_idle.kernel_wait_us

    @property
    def launches_per_step(self) -> float | None:
        return self.kernels / self.steps if self.steps else None


def kernel_kind(name: str) -> str:
    """ "communication", "memory", "compute", or "other" (a sync), as HTA classes them."""
    if _COMM.match(name):
        return "communication"
    if _MEMORY.match(name):
        return "memory"
    if not _NOT_COMPUTE.match(name):
        return "compute"
    return "other"


def is_fp32_matmul(name: str) -> bool:
    """A GEMM or convolution kernel in float32 on the SIMT cores (no tensor cores)."""
    return _FP32_SIMT.search(name) is not None


def merged(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of (start, end) intervals, sorted and without overlaps."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def _length(intervals: Sequence[tuple[float, float]]) -> float:
    return sum(e - s for s, e in intervals)


def _overlap(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Length of the intersection of two unions (each sorted, without overlaps)."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _picture(
    trace: RankTrace,
    events: Sequence[GpuEvent],
    launches: dict[int, HostCall],
    every: list[tuple[float, float]],
) -> tuple[int, ...]:
    """The first step on the GPU (the events its host range launched; without step
    marks, the whole span) in PICTURE_CELLS cells: 0 idle, 1-8 how busy (any kernel at
    all is at least 1, so that a GPU busy 2% of the time is not drawn empty)."""
    if not every:
        return ()
    start, end = every[0][0], every[-1][1]
    if trace.steps:
        ts, dur, _n = min(trace.steps)
        mine = [
            e for e in events
            if (c := launches.get(e.correlation)) is not None and ts <= c.ts < ts + dur
        ]  # fmt: skip
        if mine:
            start, end = min(e.ts for e in mine), max(e.end for e in mine)
    width = (end - start) / PICTURE_CELLS
    if width <= 0:
        return ()
    out = []
    for i in range(PICTURE_CELLS):
        busy = _overlap(every, [(start + i * width, start + (i + 1) * width)]) / width
        out.append(0 if busy <= 0 else max(1, min(8, round(8 * busy))))
    return tuple(out)


def _gpu_idle(
    events: Sequence[GpuEvent], launches: dict[int, HostCall]
) -> tuple[StreamIdle, float, float]:
    """The GPU's idle gaps (no event on any stream), split by cause (see the docstring);
    and the time in short gaps, and the host wait in long ones."""
    host = kernel = other = short = long_host = 0.0
    end: float | None = None
    for e in sorted(events, key=lambda e: e.ts):
        if end is not None and e.ts > end:
            gap = e.ts - end
            call = launches.get(e.correlation)
            waited = call is not None and call.ts > end
            if waited:
                host += gap
            elif gap < KERNEL_WAIT_US:
                kernel += gap
            else:
                other += gap
            if gap < LAUNCH_GAP_US:
                short += gap
            elif waited:
                long_host += gap
        end = e.end if end is None else max(end, e.end)
    return StreamIdle(-1, host, kernel, other), short, long_host


def counted_events(trace: RankTrace, launches: dict[int, HostCall] | None = None) -> list[GpuEvent]:
    """The GPU events the analysis counts: with two or more ProfilerStep ranges, those
    launched before the last step began (HTA's default). `launches`: the trace's calls
    by correlation, when the caller has them already."""
    if len(trace.steps) < 2:
        return list(trace.gpu)
    cutoff = max(ts for ts, _, _ in trace.steps)
    if launches is None:
        launches = {c.correlation: c for c in trace.calls}
    return [
        e for e in trace.gpu
        if (c := launches.get(e.correlation)) is not None and c.ts < cutoff
    ]  # fmt: skip


def _by_kind(events: Sequence[GpuEvent]) -> dict[str, list[tuple[float, float]]]:
    """The events' intervals by kernel_kind, each name classed once (a trace runs the
    same kernels thousands of times)."""
    kinds: dict[str, str] = {}
    out: dict[str, list[tuple[float, float]]] = {}
    for e in events:
        kind = kinds.get(e.name)
        if kind is None:
            kind = kinds[e.name] = kernel_kind(e.name)
        out.setdefault(kind, []).append((e.ts, e.end))
    return out


def analyse(trace: RankTrace) -> RankTimeline:
    launches = {c.correlation: c for c in trace.calls}
    events = counted_events(trace, launches)
    every = merged((e.ts, e.end) for e in events)
    kinds = _by_kind(events)
    compute = merged(kinds.get("compute", ()))
    comm = merged(kinds.get("communication", ()))
    memory = merged(kinds.get("memory", ()))
    if every:
        span = every[-1][1] - every[0][0]
        busy = _length(every)
        compute_us = _length(compute)
        idle_us: float | None = span - busy
        non_compute: float | None = busy - compute_us
        span_us: float | None = span
        compute_total: float | None = compute_us
    else:
        span_us = idle_us = non_compute = compute_total = None
    comm_us = _length(comm)
    overlap = 100.0 * _overlap(comm, compute) / comm_us if comm_us else None

    # idle per stream, gap by gap
    by_stream: dict[int, list[GpuEvent]] = {}
    for e in events:
        if e.cat == "sync":
            continue
        by_stream.setdefault(e.stream, []).append(e)
    idle = []
    for stream, evs in by_stream.items():
        evs.sort(key=lambda e: e.ts)
        host = kernel = other = 0.0
        for prev, cur in zip(evs, evs[1:], strict=False):
            gap = cur.ts - prev.end
            call = launches.get(cur.correlation)
            if call is not None and call.ts > prev.end:
                host += gap
            elif gap < KERNEL_WAIT_US:
                kernel += gap
            else:
                other += gap
        idle.append(StreamIdle(stream, host, kernel, other))
    idle.sort(key=lambda s: -s.total_us)
    gpu_idle, short_gaps, long_host_wait = _gpu_idle(events, launches)

    kernels = [e for e in events if e.cat == "kernel"]
    per_name: dict[str, list[float]] = {}
    for e in kernels:
        per_name.setdefault(e.name, []).append(e.dur)
    kernel_total = sum(e.dur for e in kernels)
    top = sorted(per_name.items(), key=lambda kv: -sum(kv[1]))[:TOP_KERNELS]
    top_kernels = tuple(
        KernelTime(name, sum(d), len(d), 100.0 * sum(d) / kernel_total if kernel_total else 0.0)
        for name, d in top
    )
    launch_durs = [launches[e.correlation].dur for e in kernels if e.correlation in launches]
    syncs: dict[str, list[float]] = {}
    for c in trace.calls:
        if _SYNC_CALL.match(c.name):
            syncs.setdefault(c.name, []).append(c.dur)
    steps = max(0, len(trace.steps) - 1) if len(trace.steps) >= 2 else len(trace.steps)
    picture = _picture(trace, events, launches, every)
    return RankTimeline(
        rank=trace.rank,
        path=trace.path,
        device=trace.device,
        compute_major=trace.compute_major,
        span_us=span_us,
        idle_us=idle_us,
        compute_us=compute_total,
        non_compute_us=non_compute,
        communication_us=comm_us,
        memory_us=_length(memory),
        idle=tuple(idle),
        gpu_idle=gpu_idle,
        short_gaps_us=short_gaps,
        long_host_wait_us=long_host_wait,
        comm_overlap_pct=overlap,
        top_kernels=top_kernels,
        steps=steps,
        kernels=len(kernels),
        kernel_us=kernel_total,
        kernel_median_us=statistics.median(e.dur for e in kernels) if kernels else None,
        launch_median_us=statistics.median(launch_durs) if launch_durs else None,
        matmul_fp32_us=sum(e.dur for e in kernels if is_fp32_matmul(e.name)),
        pageable_copies=sum(
            1 for e in events if e.cat == "memcpy" and "HtoD" in e.name and "Pageable" in e.name
        ),
        sync_calls=tuple(
            sorted(((n, len(d), sum(d)) for n, d in syncs.items()), key=lambda t: -t[2])
        ),
        cpu_ops=trace.cpu_ops,
        picture=picture,
        top_cpu_ops=tuple(
            (n, int(v[0]), v[1])
            for n, v in sorted(trace.cpu_time.items(), key=lambda kv: -kv[1][1])[:TOP_KERNELS]
        ),
    )


@dataclass(frozen=True)
class Straggler:
    """The rank that arrives last at the collectives most often. A collective ends on
    every rank at once; the ranks that came early wait inside its kernel, so the rank
    that came last has the shortest kernel (a reading free of the ranks' clocks)."""

    rank: int
    last_share: float  # of the collectives compared, the share where it came last
    collectives: int
    median_late_us: float  # how much later than the median rank it arrived, at those


def straggler(traces: Sequence[RankTrace]) -> Straggler | None:
    """Across ranks: the k-th communication kernel of each rank is the same collective
    (NCCL runs them in the same order on every rank)."""
    if len(traces) < 2:
        return None
    per_rank: dict[int, list[float]] = {}
    for t in traces:
        comm = sorted(
            (e for e in counted_events(t) if kernel_kind(e.name) == "communication"),
            key=lambda e: e.ts,
        )
        per_rank[t.rank] = [e.dur for e in comm]
    n = min((len(v) for v in per_rank.values()), default=0)
    if n == 0:
        return None
    last: dict[int, int] = {}
    late_by: dict[int, list[float]] = {}
    for k in range(n):
        durs = {r: v[k] for r, v in per_rank.items()}
        late = min(durs, key=lambda r: durs[r])
        last[late] = last.get(late, 0) + 1
        late_by.setdefault(late, []).append(statistics.median(durs.values()) - durs[late])
    rank = max(last, key=lambda r: last[r])
    return Straggler(rank, last[rank] / n, n, statistics.median(late_by[rank]))
