"""`--metrics [HOST:]PORT`: the run as OpenMetrics, for Prometheus to scrape.

prometheus_client serves it (its own HTTP server, in its own thread); what it serves is
read at scrape time from the latest snapshot the doctor's loop handed over (an
immutable value: the scrape never touches the timeline the loop is writing).

Names follow Prometheus' conventions (base units, `_seconds`, `_ratio`, `_bytes`) and
sit beside NVIDIA's DCGM exporter: the GPU series carry the same `gpu` (index) and
`UUID` and `hostname` labels as DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED, so the two
join on them (`hostname` in lowercase, as DCGM's exporter has written it since its
`Hostname` was renamed: NVIDIA/dcgm-exporter #655). The ranks' series carry `rank`, `pid` and `hostname` (the rank's node: a
node's doctor serves the other nodes' ranks too, as their doctors sent them); a process
without a rank is rank "". `gpudoctor_rank_gpu_info` (value 1) names the GPU each rank
computes on (diagnosis/devices.py), which joins a rank's series to its GPU's, ours or
DCGM's: `gpudoctor_step_seconds * on (hostname, pid) group_left (gpu)
gpudoctor_rank_gpu_info`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psutil
from prometheus_client import ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from gpudoctor.diagnosis.devices import gpu_of
from gpudoctor.diagnosis.ranks import RankMeasure
from gpudoctor.i18n import _
from gpudoctor.snapshot import Snapshot

DEFAULT_HOST = "127.0.0.1"  # off the network unless asked: --metrics 0.0.0.0:PORT


class MetricsError(Exception):
    """--metrics cannot be served; the message is one line for the user."""


def parse_address(text: str) -> tuple[str, int]:
    """`PORT` or `HOST:PORT` (HOST defaults to 127.0.0.1); MetricsError when not."""
    host, _sep, port = text.rpartition(":")
    host = host.strip("[]") or DEFAULT_HOST
    try:
        number = int(port)
    except ValueError:
        raise MetricsError(
            _("--metrics wants [HOST:]PORT, not {text!r}").format(text=text)
        ) from None
    if not 0 < number < 65536:
        raise MetricsError(_("--metrics: no such port: {number}").format(number=number))
    return host, number


FIRST_HOUR_S = 3600.0


class RunCollector(Collector):
    """What a scrape reads: the latest snapshot the loop handed over, and each job's
    step time over its first hour (the baseline an alert compares the step time with:
    deploy/prometheus/rules.yml), taken from the snapshots as they come."""

    def __init__(self) -> None:
        self._latest: Snapshot | None = None  # swapped whole by the loop's thread
        # told after each snapshot: the node's exporter is sent the series (pushed.py)
        self.on_latest: Callable[[], None] | None = None
        # by (rank, pid, hostname): the median step of each snapshot in the job's first
        # hour, then (the hour over) their median, served from then on
        self._first_hour: dict[tuple[str, str, str], list[float]] = {}
        self.first_hour_s: dict[tuple[str, str, str], float] = {}

    @property
    def latest(self) -> Snapshot | None:
        return self._latest

    @latest.setter
    def latest(self, s: Snapshot | None) -> None:
        self._latest = s
        if s is None:
            return
        for key, median_ms in _medians(s):
            if key in self.first_hour_s:
                continue
            if s.elapsed_s <= FIRST_HOUR_S:
                self._first_hour.setdefault(key, []).append(median_ms / 1e3)
            elif key in self._first_hour:
                self.first_hour_s[key] = statistics.median(self._first_hour.pop(key))
        if self.on_latest is not None:
            self.on_latest()

    def collect(self) -> Iterator[Metric]:
        s = self.latest
        if s is None:
            return
        yield from _steps([s])
        first = GaugeMetricFamily(
            "gpudoctor_first_hour_step_seconds",
            "The job's median step time over its first hour (served once that hour is over)",
            labels=["rank", "pid", "hostname"],
        )
        for key, seconds in dict(self.first_hour_s).items():
            first.add_metric(list(key), seconds)
        yield first
        yield from _gpus(s)
        yield from _host(s)
        yield from _speed_of_light([s])
        yield _findings([s])


def _findings(snapshots: list[Snapshot]) -> GaugeMetricFamily:
    """Each job's current findings, one series each (the job's labels on them too: a
    finding joins the job's other series)."""
    findings = GaugeMetricFamily(
        "gpudoctor_finding_estimated_gain_ratio",
        "A current finding: the share of step time its remedies could win back",
        labels=["rank", "pid", "hostname", "id", "severity"],
    )
    for s in snapshots:
        job = list(_job_key(s))
        for f in s.findings:
            findings.add_metric([*job, f.id, f.severity], f.estimated_gain or 0.0)
    return findings


def _job_key(s: Snapshot) -> tuple[str, str, str]:
    """The (rank, pid, hostname) labels of a one-process job's series ("": no rank)."""
    return str(s.facts.get("rank", "")), str(s.job_pid or ""), socket.gethostname()


def _rank_key(r: RankMeasure, here: str) -> tuple[str, str, str]:
    """A rank's (rank, pid, hostname) labels: its own node's name (`here`: this one)."""
    return str(r.rank) if r.rank is not None else "", str(r.pid), r.host or here


def _medians(s: Snapshot) -> list[tuple[tuple[str, str, str], float]]:
    """Each rank's (or the one process's) median step now, by its series' labels."""
    if s.ranks:
        here = socket.gethostname()
        return [(_rank_key(r, here), r.median_ms) for r in s.ranks]
    return [] if s.step_p50_ms is None else [(_job_key(s), s.step_p50_ms)]


def _steps(snapshots: list[Snapshot]) -> Iterator[Metric]:
    """The step series of each job (each family once, whatever the number of jobs)."""
    labels = ["rank", "pid", "hostname"]
    here = socket.gethostname()
    # quantiles of recent steps: a summary's samples (a gauge may not carry `quantile`,
    # promtool check metrics says); no _count or _sum, the steps are gpudoctor_steps
    step = StepQuantiles("gpudoctor_step_seconds", "Training step time (recent steps)", "summary")
    wait = GaugeMetricFamily(
        "gpudoctor_data_wait_ratio", "Share of step time waiting for input", labels=labels
    )
    comm = GaugeMetricFamily(
        "gpudoctor_comm_wait_seconds",
        "Time a step waits for the other ranks in collectives",
        labels=labels,
    )
    own = GaugeMetricFamily(
        "gpudoctor_own_work_seconds",
        "A step's time less its wait for the other ranks",
        labels=labels,
    )
    rate = GaugeMetricFamily(
        "gpudoctor_samples_per_second", "Training samples a second", labels=labels
    )
    steps = GaugeMetricFamily("gpudoctor_steps", "Steps counted so far", labels=labels)
    loop = GaugeMetricFamily(
        "gpudoctor_loop_index",
        "A watched job's training loop counter, read from outside lately (its steps are not counted)",
        labels=labels,
    )
    gpu = GaugeMetricFamily(
        "gpudoctor_rank_gpu_info", "The GPU a rank computes on (value 1)",
        labels=[*labels, "gpu", "UUID"],
    )  # fmt: skip
    for s in snapshots:
        _add_steps(s, here, step, (wait, comm, own, rate, steps, gpu))
        # apart from the step series: a loop that stands still has no step time, and
        # its counter is what the stalled-job alert reads
        if s.loop_counter is not None and not s.ranks:
            loop.add_metric(list(_job_key(s)), s.loop_counter)
    yield from (step, wait, comm, own, rate, steps, gpu, loop)


class StepQuantiles(Metric):
    def add_metric(self, values: list[str], value: float) -> None:
        """A quantile's sample: `values` are the labels' values, the quantile last."""
        names = ("rank", "pid", "hostname", "quantile")
        self.add_sample(self.name, dict(zip(names, values, strict=True)), value)


def _add_steps(
    s: Snapshot, here: str, step: StepQuantiles, gauges: tuple[GaugeMetricFamily, ...]
) -> None:
    wait, comm, own, rate, steps, gpu = gauges
    uuids = {g.index: g.uuid or "" for g in s.gpus}
    if s.ranks:
        for r in s.ranks:
            key = list(_rank_key(r, here))
            if r.gpu_index is not None:
                # another node's GPU is named by its index there; its UUID is not sent
                uuid = uuids.get(r.gpu_index, "") if r.host in (None, here) else ""
                gpu.add_metric([*key, str(r.gpu_index), uuid], 1)
            step.add_metric([*key, "0.5"], r.median_ms / 1e3)
            step.add_metric([*key, "0.9"], r.p90_ms / 1e3)
            wait.add_metric(key, r.data_wait_fraction)
            comm.add_metric(key, r.comm_wait_ms / 1e3)
            own.add_metric(key, r.own_ms / 1e3)
            if r.samples_per_s is not None:
                rate.add_metric(key, r.samples_per_s)
            steps.add_metric(key, r.steps)
    elif s.step_p50_ms is not None:
        key = list(_job_key(s))
        # one process: its GPU too (a rank's is above), so that its series join DCGM's
        on = gpu_of(s.facts, s.job_pid, s.gpus) if s.job_pid is not None else None
        if on is not None:
            gpu.add_metric([*key, str(on.index), on.uuid or ""], 1)
        step.add_metric([*key, "0.5"], s.step_p50_ms / 1e3)
        if s.step_p90_ms is not None:
            step.add_metric([*key, "0.9"], s.step_p90_ms / 1e3)
        if s.data_wait_fraction is not None:
            wait.add_metric(key, s.data_wait_fraction)
        if s.samples_per_s is not None:
            rate.add_metric(key, s.samples_per_s)
        if s.mode != "watch" or s.steps_total:  # from outside the steps are not counted
            steps.add_metric(key, s.steps_total)


def _speed_of_light(snapshots: list[Snapshot]) -> Iterator[GaugeMetricFamily]:
    """Once the probe counted a step's FLOPs (diagnosis/speed_of_light.py)."""
    labels = ["rank", "pid", "hostname", "device"]
    flops = GaugeMetricFamily(
        "gpudoctor_step_flops", "FLOPs of one training step (counted once)", labels=labels
    )
    achieved = GaugeMetricFamily(
        "gpudoctor_achieved_flops_per_second", "FLOPs a second the job reaches", labels=labels
    )
    mfu = GaugeMetricFamily(
        "gpudoctor_mfu_ratio", "Model FLOPs utilisation: achieved over peak", labels=labels
    )
    peak = GaugeMetricFamily(
        "gpudoctor_peak_flops_per_second", "The device's peak for the step's work",
        labels=labels,
    )  # fmt: skip
    for s in snapshots:
        sol = s.speed_of_light
        if sol is None:
            continue
        key = [*_job_key(s), sol.device]
        flops.add_metric(key, sol.flops_per_step)
        achieved.add_metric(key, sol.achieved_tflops * 1e12)
        if sol.mfu is not None and sol.peak_tflops is not None:
            mfu.add_metric(key, sol.mfu)
            peak.add_metric(key, sol.peak_tflops * 1e12)
    for family in (flops, achieved, mfu, peak):
        if family.samples:
            yield family


def _gpus(s: Snapshot) -> Iterator[GaugeMetricFamily]:
    labels = ["gpu", "UUID", "modelName", "hostname"]  # as DCGM's exporter labels its series
    util = GaugeMetricFamily("gpudoctor_gpu_utilization_ratio", "GPU utilisation", labels=labels)
    used = GaugeMetricFamily("gpudoctor_gpu_memory_used_bytes", "GPU memory used", labels=labels)
    here = socket.gethostname()
    for g in s.gpus:
        key = [str(g.index), g.uuid or "", g.name or "", here]
        if g.util_gpu_pct is not None:
            util.add_metric(key, g.util_gpu_pct / 100)
        if g.mem_used_bytes is not None:
            used.add_metric(key, g.mem_used_bytes)
    yield from (util, used)


def _host(s: Snapshot) -> Iterator[GaugeMetricFamily]:
    """The job's CPU and what others take of it (noisy-neighbour's signals)."""
    h = s.host
    if h is None:
        return
    for name, doc, value in (
        ("gpudoctor_job_cpu_cores", "Cores' worth of CPU the job's processes use",
         h.job_cpu_cores),
        ("gpudoctor_others_cpu_cores",
         "Cores busy with processes other than the job and the doctor (and steal)",
         h.others_cpu_cores),
        ("gpudoctor_others_niced_cpu_cores",
         "Of those, the cores niced processes ran (they yield to the job)",
         h.others_niced_cpu_cores),
        ("gpudoctor_job_run_delay_ratio",
         "Share of the job's runnable time its threads waited for a core",
         h.job_run_delay_fraction),
    ):  # fmt: skip
        if value is not None:
            yield GaugeMetricFamily(name, doc, value=value)


@dataclass(frozen=True)
class NodeEntry:
    """One job the exporter follows: its latest snapshot, whether it still runs, and
    its identity labels (jobs/node.py LABELS; `rank` is also in the snapshot's facts)."""

    snapshot: Snapshot
    running: bool
    labels: dict[str, str]


JOB_LABELS = ["rank", "pid", "hostname"]
IDENTITY_LABELS = ["user", "hpc_job", "pod", "namespace", "container"]


@dataclass(frozen=True)
class PushedEntry:
    """A job whose own doctor sent its series (pushed.py): served as they came, with the
    exporter's identity labels for it."""

    pid: int
    families: tuple[Metric, ...]
    labels: dict[str, str]
    running: bool = True  # False: ended, its last series served for the grace period


class NodeCollector(Collector):
    """`gpudoctor exporter`: every job on the node, from the entries the exporter's loop
    hands over whole each refresh (a scrape never waits on the loop). No device series:
    DCGM's exporter serves those on a cluster; `gpudoctor_rank_gpu_info` joins to them."""

    def __init__(self) -> None:
        self.entries: tuple[NodeEntry, ...] = ()
        self.pushed: tuple[PushedEntry, ...] = ()

    def collect(self) -> Iterator[Metric]:
        """Each family once: the watched jobs' and the pushed jobs' samples together."""
        pushed = self.pushed
        families: dict[str, Metric] = {}
        for family in self._own():
            families[family.name] = family
        for entry in pushed:
            for family in entry.families:
                mine = families.get(family.name)
                if mine is None:
                    mine = families[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                mine.samples.extend(family.samples)
        yield from families.values()

    def _own(self) -> Iterator[Metric]:
        entries = self.entries
        pushed = self.pushed
        snapshots = [e.snapshot for e in entries]
        yield from _steps(snapshots)
        yield _findings(snapshots)
        yield from _speed_of_light(snapshots)
        info = GaugeMetricFamily(
            "gpudoctor_job_info",
            "A training job the exporter follows (value 1): its user and scheduler job",
            labels=[*JOB_LABELS, *IDENTITY_LABELS],
        )
        running = GaugeMetricFamily(
            "gpudoctor_job_running",
            "1 while the job runs; 0 once it ended (served for the grace period)",
            labels=JOB_LABELS,
        )
        cpu = GaugeMetricFamily(
            "gpudoctor_job_cpu_cores", "Cores' worth of CPU the job's processes use",
            labels=JOB_LABELS,
        )  # fmt: skip
        delay = GaugeMetricFamily(
            "gpudoctor_job_run_delay_ratio",
            "Share of the job's runnable time its threads waited for a core",
            labels=JOB_LABELS,
        )
        here = socket.gethostname()
        for p in pushed:  # the job's own doctor serves the rest
            key = [p.labels.get("rank", ""), str(p.pid), here]
            info.add_metric([*key, *(p.labels.get(k, "") for k in IDENTITY_LABELS)], 1)
            running.add_metric(key, 1 if p.running else 0)
        for e in entries:
            key = list(_job_key(e.snapshot))
            info.add_metric([*key, *(e.labels.get(k, "") for k in IDENTITY_LABELS)], 1)
            running.add_metric(key, 1 if e.running else 0)
            h = e.snapshot.host
            if h is not None and h.job_cpu_cores is not None:
                cpu.add_metric(key, h.job_cpu_cores)
            if h is not None and h.job_run_delay_fraction is not None:
                delay.add_metric(key, h.job_run_delay_fraction)
        yield from (info, running, cpu, delay)
        yield GaugeMetricFamily(
            "gpudoctor_exporter_jobs", "Training jobs the exporter follows now",
            value=sum(e.running for e in entries) + sum(p.running for p in pushed),
        )  # fmt: skip
        yield CounterMetricFamily(
            "gpudoctor_exporter_samplers_cpu_seconds",
            "CPU time of the exporter's stack samplers (py-spy, its child processes)",
            value=children_cpu_s(),
        )


def children_cpu_s() -> float:
    """The CPU time of this process's children, ended (reaped) and running."""
    times = os.times()
    total = times.children_user + times.children_system
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                t = child.cpu_times()
                total += t.user + t.system
    return total


def serve(address: str) -> RunCollector:
    """Start serving a run's snapshots (a thread of prometheus_client's); MetricsError
    in one line."""
    collector = RunCollector()
    serve_collector(address, collector)
    return collector


def serve_collector(address: str, collector: Collector) -> None:
    """Start serving `collector`, and the doctor's own cost; MetricsError in one line."""
    host, port = parse_address(address)
    registry = CollectorRegistry()
    registry.register(collector)
    # the doctor's own cost, by prometheus_client's process collector (/proc):
    # gpudoctor_process_cpu_seconds_total, _resident_memory_bytes (an alert's budget)
    ProcessCollector(namespace="gpudoctor", registry=registry)
    try:
        start_http_server(port, host, registry=registry)
    except OSError as exc:
        raise MetricsError(
            _("cannot serve --metrics on {host}:{port}: {why}").format(
                host=host, port=port, why=exc.strerror
            )
        ) from None
