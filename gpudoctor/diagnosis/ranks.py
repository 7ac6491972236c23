"""Every rank of a distributed job measured on its own: its steps, its own work, and
how long it waits for the others.

In DDP every rank's step takes as long as the slowest rank's: the gradient all-reduce,
started from C++ inside backward, holds each rank until all have sent their gradients.
So wall time cannot name a straggler, and no Python hook sees the wait. What the probe
does see, on every rank, is where each step's time went (data, host code, forward,
backward, optimizer). The ranks wait inside backward: the rank that arrives last at
the all-reduce waits least, and every other rank's backward is longer by the time it
waited. A rank's wait is therefore its backward beyond the shortest backward of any
rank, and its own work is its step less that wait. FSDP gathers each layer's
parameters at the start of forward too, so there the ranks that arrive early wait in
forward: a rank's wait is the larger of its backward beyond the shortest backward and
its forward and backward together beyond the shortest of those (a rank whose own
compute is slower has the longest model time, and waits least). This holds for gloo
and NCCL alike (it needs no access to the collective); it does not see a wait the
ranks all share (a collective that is slow for everyone), which reads as model time
for all of them, nor a rank slower in FSDP's compute (the per-layer gathers pace every
rank to it).
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any

from gpudoctor.diagnosis.devices import gpu_of
from gpudoctor.diagnosis.rollup import StepRollup
from gpudoctor.diagnosis.window import Window, median_ms, percentile_ms
from gpudoctor.model import StepRecord

MIN_STEPS = 5  # steady steps a rank needs before it is compared


@dataclass(frozen=True)
class RankSummary:
    """What one rank's own steps say, before it is compared with the others: all that
    a node's doctor sends the other nodes' (sources/rendezvous.py)."""

    pid: int
    rank: int | None  # RANK as the launcher set it (None: a process without one)
    local_rank: int | None
    host: str | None  # the node it runs on
    steps: int  # the steps seen (the report: each process's exact count)
    median_ms: float
    p90_ms: float
    samples_per_s: float | None
    data_wait_fraction: float
    uses_dataloader: bool  # else its "data" is the host time before each forward
    # medians over the steps measured in detail, in ms
    parts_ms: dict[str, float]  # data, host, forward, backward, optimizer
    detailed_median_ms: float  # the median step of those
    # the GPU it computes on, as its node's NVML numbers it (diagnosis/devices.py), and
    # that GPU's mean utilisation over the window: sent, since only its node reads it
    gpu_index: int | None = None
    gpu_util_pct: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankSummary:
        """From another node's doctor: ValueError/TypeError/KeyError when malformed."""
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})


@dataclass(frozen=True)
class RankMeasure:
    pid: int
    rank: int | None
    local_rank: int | None
    steps: int
    median_ms: float
    p90_ms: float
    samples_per_s: float | None
    data_wait_fraction: float
    uses_dataloader: bool
    parts_ms: dict[str, float]
    comm_wait_ms: float  # waiting for the other ranks (inside backward)
    own_ms: float  # the step less that wait
    score: float  # own work against the fastest rank's (1.0: the fastest)
    host: str | None = None
    gpu_index: int | None = None
    gpu_util_pct: float | None = None


def rank_measures(w: Window) -> list[RankMeasure]:
    """Each stepping process with a rank (two or more of them, this node's and the other
    nodes' that their doctors sent), by rank; [] otherwise."""
    return compare(rank_summaries(w) + list(w.remote_ranks))


def rank_summaries(w: Window) -> list[RankSummary]:
    """This node's ranks, each measured on its own: from its rows, or where none are
    kept (a store compacted past the job's last step) from its newest rolled-up stretch."""
    out = []
    for pid, steps in w.steps_by_pid.items():
        facts = w.facts_by_pid.get(pid, {})
        if facts.get("rank") is None:
            continue
        rolled = w.slot_rollups.get(pid) if not steps else None
        one = Window(steps=steps, rollup=rolled, facts=facts)
        measured = (
            _rolled_measures(rolled, one.uses_dataloader)
            if rolled is not None
            else _row_measures(one)
        )
        if measured is None:
            continue
        gpu = gpu_of(facts, pid, w.gpus)
        out.append(
            RankSummary(
                pid=pid,
                rank=_int(facts.get("rank")),
                local_rank=_int(facts.get("local_rank")),
                host=w.hostname,
                samples_per_s=one.samples_per_s,
                data_wait_fraction=one.data_wait_fraction,
                uses_dataloader=one.uses_dataloader,
                gpu_index=gpu.index if gpu else None,
                gpu_util_pct=_mean_util(w, gpu.index) if gpu else None,
                **measured,
            )
        )
    return out


def _row_measures(one: Window) -> dict[str, Any] | None:
    """A rank's step measures from its rows (None: too few steady ones)."""
    if len(one.steady_steps) < MIN_STEPS:
        return None
    return {
        "steps": len(one.steps),  # the rows seen; the report puts in exact counts
        "median_ms": median_ms(one.walls_in_order_ns),
        "p90_ms": percentile_ms(one.walls_in_order_ns, 90),
        "parts_ms": _parts_ms(one.detailed_steps, one.uses_dataloader),
        "detailed_median_ms": statistics.median(s.wall_ns for s in one.detailed_steps) / 1e6,
    }


def _rolled_measures(rollup: StepRollup, loader: bool) -> dict[str, Any] | None:
    """A rank's step measures from a rolled-up stretch: the parts and the detailed step
    as means (a rollup keeps sums), not medians (None: too few steps)."""
    if rollup.count < MIN_STEPS or not rollup.detailed:
        return None
    wall, loader_ns, outside, forward, backward, optimizer = (
        rollup.detailed_wall_ns, rollup.loader_ns, rollup.outside_ns,
        rollup.forward_ns, rollup.backward_ns, rollup.optimizer_ns,
    )  # fmt: skip
    data = loader_ns if loader else outside
    n = rollup.detailed * 1e6
    return {
        "steps": rollup.count,
        "median_ms": rollup.quantile_ms(0.5),
        "p90_ms": rollup.quantile_ms(0.9),
        "parts_ms": {
            "data": data / n,
            "host": max(0, wall - data - forward - backward - optimizer) / n,
            "forward": forward / n,
            "backward": backward / n,
            "optimizer": optimizer / n,
        },
        "detailed_median_ms": wall / n,
    }


def compare(summaries: list[RankSummary]) -> list[RankMeasure]:
    """The ranks against each other: each one's wait for the others and own work."""
    ranks = {(s.host, s.pid): s for s in summaries}  # one per process, the newest
    if len(ranks) < 2:
        return []
    fastest_backward = min(s.parts_ms["backward"] for s in ranks.values())
    fastest_model = min(_model(s) for s in ranks.values())
    waits = {
        key: max(s.parts_ms["backward"] - fastest_backward, _model(s) - fastest_model)
        for key, s in ranks.items()
    }
    own = {key: max(0.0, s.detailed_median_ms - waits[key]) for key, s in ranks.items()}
    least = min(own.values()) or 1e-9
    out = [
        RankMeasure(
            pid=s.pid,
            rank=s.rank,
            local_rank=s.local_rank,
            steps=s.steps,
            median_ms=s.median_ms,
            p90_ms=s.p90_ms,
            samples_per_s=s.samples_per_s,
            data_wait_fraction=s.data_wait_fraction,
            uses_dataloader=s.uses_dataloader,
            parts_ms=s.parts_ms,
            comm_wait_ms=waits[key],
            own_ms=own[key],
            score=own[key] / least,
            host=s.host,
            gpu_index=s.gpu_index,
            gpu_util_pct=s.gpu_util_pct,
        )
        for key, s in ranks.items()
    ]
    return sorted(out, key=lambda m: (m.rank is None, m.rank, m.host or "", m.pid))


def _model(s: RankSummary) -> float:
    """Forward and backward: where DDP (backward) and FSDP (forward too) collectives wait."""
    return s.parts_ms["forward"] + s.parts_ms["backward"]


def _parts_ms(steps: tuple[StepRecord, ...], loader: bool) -> dict[str, float]:
    def median(values: list[int]) -> float:
        return statistics.median(values) / 1e6 if values else 0.0

    data = [s.loader_ns if loader else s.outside_ns for s in steps]
    # host code: the step's time outside the data wait and the model's parts
    host = [
        max(0, s.wall_ns - d - s.forward_ns - s.backward_ns - s.optimizer_ns)
        for s, d in zip(steps, data, strict=True)
    ]
    return {
        "data": median(data),
        "host": median(host),
        "forward": median([s.forward_ns for s in steps]),
        "backward": median([s.backward_ns for s in steps]),
        "optimizer": median([s.optimizer_ns for s in steps]),
    }


def _mean_util(w: Window, index: int) -> float | None:
    readings = [g.util_gpu_pct for g in w.gpus if g.index == index and g.util_gpu_pct is not None]
    return statistics.fmean(readings) if readings else None


def _int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None
