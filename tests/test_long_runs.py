"""Long runs on many ranks (issue 14): the timeline keeps the recent steps as rows, under
one bound for all processes together, and every steady step rolled up, so that the
report of a long run says what the rows of every step would have said."""

from __future__ import annotations

import random
import statistics

from gpudoctor.diagnosis.rollup import QUANTILE_ERROR
from gpudoctor.diagnosis.window import WARMUP_STEPS, percentile
from gpudoctor.report.build import build
from gpudoctor.timeline import MAX_STEP_ROWS, MIN_STEP_ROWS, Timeline

RANKS = 8
STEPS = 40_000  # per rank: 320,000 in all, more than MAX_STEP_ROWS
BASE_PID = 5000


def rows(rank: int, start: int, n: int, rng: random.Random) -> list[list[int]]:
    """Probe rows (protocol.STEP_FIELDS) of a DataLoader-fed step: ~20 ms in the run's
    first half, ~10 ms after (the recent rows alone would say 10), a third of it waiting
    for data; every fourth step measured in detail."""
    out = []
    for i in range(start, start + n):
        scale = 20e6 if i < STEPS // 2 else 10e6
        wall = int(rng.lognormvariate(0, 0.3) * scale) + rank * 50_000
        detail = int(i % 4 == 0)
        loader = wall // 3 if detail else 0
        forward, backward = (wall // 6, wall // 4) if detail else (0, 0)
        out.append([i, 10**9 + i * 10_000_000, wall, loader, 0, forward, backward, 0, 1,
                    32 if detail else -1, 0, 0, detail])  # fmt: skip
    return out


def test_a_long_run_on_eight_ranks_keeps_bounded_rows_and_the_whole_runs_measures() -> None:
    rng = random.Random(7)
    timeline = Timeline(["python", "train.py"], 0.0, 0)
    walls: list[float] = []  # rank 0's steady steps, every one
    detailed = [0, 0]  # rank 0's detailed wall and loader
    for start in range(0, STEPS, 400):  # as the probe sends them: 400 rows a message
        for rank in range(RANKS):
            batch = rows(rank, start, 400, rng)
            if rank == 0:
                for r in batch:
                    if r[0] >= WARMUP_STEPS:
                        walls.append(r[2] / 1e6)
                        if r[12]:
                            detailed[0] += r[2]
                            detailed[1] += r[3]
            timeline.ingest_probe({"pid": BASE_PID + rank, "steps": batch})
        if start == 0:
            for rank in range(RANKS):
                timeline.ingest_probe({"pid": BASE_PID + rank, "facts": {"rank": rank}})
    kept = {pid: len(steps) for pid, steps in timeline.steps.items()}
    assert sum(kept.values()) <= MAX_STEP_ROWS
    assert all(n == max(MIN_STEP_ROWS, MAX_STEP_ROWS // RANKS) for n in kept.values()), kept
    assert timeline.counted_steps() == {BASE_PID + r: STEPS for r in range(RANKS)}

    report = build(timeline, 1)
    s = report.steps
    assert s.count == STEPS and s.steady_count == len(walls)
    exact_median, exact_p90 = statistics.median(walls), percentile(walls, 90)
    assert s.median_ms is not None and s.p90_ms is not None
    assert abs(s.median_ms - exact_median) <= QUANTILE_ERROR * exact_median + 0.01
    assert abs(s.p90_ms - exact_p90) <= QUANTILE_ERROR * exact_p90 + 0.01
    assert s.data_wait_fraction == round(detailed[1] / detailed[0], 4)  # sums: exact
    assert report.findings[0].id == "input-bound"


def test_a_short_run_keeps_every_row_and_reads_as_before() -> None:
    rng = random.Random(3)
    timeline = Timeline(["python", "train.py"], 0.0, 0)
    timeline.ingest_probe({"pid": BASE_PID, "steps": rows(0, 0, 400, rng)})
    assert not timeline.rolled_up(BASE_PID)
    assert timeline.window().rollup is None  # the rows themselves give the measures
    walls = [r.wall_ns / 1e6 for r in timeline.steps[BASE_PID] if r.number >= WARMUP_STEPS]
    assert build(timeline, 1).steps.median_ms == round(statistics.median(walls), 3)
