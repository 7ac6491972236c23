"""Every rank of a distributed job measured on its own: its steps, its own work, and
how long it waits for the others.

In DDP every rank's step takes as long as the slowest rank's: the gradient all-reduce,
started from C++ inside backward, holds each rank until all have sent their gradients.
So wall time cannot name a straggler, and no Python hook sees the wait. What the probe
does see, on every rank, is where each step's time went (data, host code, forward,
backward, optimizer). The ranks wait inside backward: the rank that arrives last at
the all-reduce waits least, and every other rank's backward is longer by the time it
waited. A rank's wait is therefore its backward beyond the shortest backward of any
rank, and its own work is its step less that wait. This holds for gloo and NCCL alike
(it needs no access to the collective); it does not see a wait the ranks all share
(a collective that is slow for everyone), which reads as backward for all of them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from gpudoctor.diagnosis.window import Window, percentile
from gpudoctor.model import StepRecord

MIN_STEPS = 5  # steady steps a rank needs before it is compared


@dataclass(frozen=True)
class RankMeasure:
    pid: int
    rank: int | None  # RANK as the launcher set it (None: a process without one)
    local_rank: int | None
    steps: int  # the steps seen (the report: each process's exact count)
    median_ms: float
    p90_ms: float
    samples_per_s: float | None
    data_wait_fraction: float
    uses_dataloader: bool  # else its "data" is the host time before each forward
    # medians over the steps measured in detail, in ms
    parts_ms: dict[str, float]  # data, host, forward, backward, optimizer
    comm_wait_ms: float  # waiting for the other ranks (inside backward)
    own_ms: float  # the step less that wait
    score: float  # own work against the fastest rank's (1.0: the fastest)


def rank_measures(w: Window) -> list[RankMeasure]:
    """Each stepping process with a rank (two or more of them), by rank; [] otherwise."""
    ranked = {
        pid: steps
        for pid, steps in w.steps_by_pid.items()
        if w.facts_by_pid.get(pid, {}).get("rank") is not None
    }
    parts: dict[int, dict[str, float]] = {}
    windows: dict[int, Window] = {}
    for pid, steps in ranked.items():
        one = Window(steps=steps, facts=w.facts_by_pid.get(pid, {}))
        if len(one.steady_steps) < MIN_STEPS:
            continue
        windows[pid] = one
        parts[pid] = _parts_ms(one.detailed_steps, one.uses_dataloader)
    if len(windows) < 2:
        return []
    fastest_backward = min(p["backward"] for p in parts.values())
    own: dict[int, float] = {}
    for pid, one in windows.items():
        wait = parts[pid]["backward"] - fastest_backward
        own[pid] = max(0.0, statistics.median(s.wall_ns for s in one.detailed_steps) / 1e6 - wait)
    least = min(own.values()) or 1e-9
    out = []
    for pid, one in windows.items():
        facts = w.facts_by_pid.get(pid, {})
        walls = [s.wall_ns / 1e6 for s in one.steady_steps]
        out.append(
            RankMeasure(
                pid=pid,
                rank=_int(facts.get("rank")),
                local_rank=_int(facts.get("local_rank")),
                steps=len(ranked[pid]),  # the rows seen; the report puts in exact counts
                median_ms=statistics.median(walls),
                p90_ms=percentile(walls, 90),
                samples_per_s=one.samples_per_s,
                data_wait_fraction=one.data_wait_fraction,
                uses_dataloader=one.uses_dataloader,
                parts_ms=parts[pid],
                comm_wait_ms=parts[pid]["backward"] - fastest_backward,
                own_ms=own[pid],
                score=own[pid] / least,
            )
        )
    return sorted(out, key=lambda m: (m.rank is None, m.rank, m.pid))


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


def _int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None
