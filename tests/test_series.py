"""The run over time (gpudoctor/series.py), on timelines whose steps are known exactly:
how steps are cut into intervals, what is counted and what is measured."""

from __future__ import annotations

from collections import deque

import pytest

from gpudoctor.diagnosis.rollup import OLD_BINS, StepRollup
from gpudoctor.diagnosis.window import WARMUP_STEPS
from gpudoctor.model import StepRecord
from gpudoctor.series import STEPS_AN_INTERVAL, rate_lines, run_series
from gpudoctor.step_rows import StepRows
from gpudoctor.timeline import Timeline

T0 = 10**12
S = 10**9


def timeline_of(per_s: int, seconds: int, wall_ms: float, slower_after_s: int = 10**6) -> Timeline:
    """`per_s` steps a second for `seconds`, each wall_ms long (twice that from
    `slower_after_s` on), one in 32 measured in detail with a batch of 8."""
    tl = Timeline(["train.py"], 0.0, T0)
    rows: deque[StepRecord] = deque()
    for n in range(per_s * seconds):
        t = T0 + n * S // per_s + S // (2 * per_s)  # inside its second, never on an edge
        wall = int(wall_ms * 1e6) * (2 if t - T0 >= slower_after_s * S else 1)
        detail = 1 if n % 32 == 0 else 0
        split = wall // 4 if detail else 0
        rows.append(
            StepRecord(
                1, n, t, wall, split, 0, split, split, split, 1,
                8 if detail else None, 0, 0, detail,
            )
        )  # fmt: skip
    tl.steps[1] = StepRows(rows)
    tl.step_counts[1] = len(rows)
    tl.end_mono_ns = T0 + seconds * S
    return tl


def test_each_interval_counts_its_steps_past_warm_up_and_measures_them() -> None:
    tl = timeline_of(per_s=100, seconds=30, wall_ms=10, slower_after_s=15)
    series = run_series(tl, points=30, seen={})
    rates = dict(series.steps_per_s)
    assert len(rates) == 30
    assert rates[0.5] == 100 - WARMUP_STEPS  # the warm-up's steps are not the job's pace
    assert all(rate == 100 for x, rate in rates.items() if x > 1)
    p50 = dict(series.step_p50_ms)
    assert all(v == 10 for x, v in p50.items() if x < 15) and p50[14.5] == 10
    assert all(v == 20 for x, v in p50.items() if x > 15) and p50[15.5] == 20
    # a batch of 8 measured in each detailed step: samples a second are 8 steps' worth
    assert dict(series.samples_per_s)[5.5] == 800
    assert all(abs(v - 25) < 1e-6 for _, v in series.split_pct["forward"])


def test_a_stretch_holds_only_its_own_steps() -> None:
    tl = timeline_of(per_s=100, seconds=30, wall_ms=10, slower_after_s=15)
    last = run_series(tl, points=10, since_ns=T0 + 20 * S, until_ns=T0 + 30 * S, seen={})
    assert [x for x, _ in last.steps_per_s] == [20.5 + i for i in range(10)]
    assert all(rate == 100 for _, rate in last.steps_per_s)
    middle = run_series(tl, points=5, since_ns=T0 + 12 * S, until_ns=T0 + 17 * S, seen={})
    assert [v for _, v in middle.step_p50_ms] == [10, 10, 10, 20, 20]


def test_a_fast_loop_is_counted_whole_though_a_sample_is_measured() -> None:
    tl = timeline_of(per_s=4000, seconds=6, wall_ms=0.25)
    series = run_series(tl, points=6, seen={})
    assert [rate for _, rate in series.steps_per_s][1:] == [4000] * 5
    assert STEPS_AN_INTERVAL < 4000  # more steps than are measured an interval
    assert all(v == 0.25 for _, v in series.step_p50_ms)


def ranked(per_s: tuple[int, ...], seconds: int) -> Timeline:
    """A distributed job: one process a rank, rank r making per_s[r] steps a second of
    batches of 8 (timeline_of's), each with the launcher's RANK."""
    tl = Timeline(["train.py"], 0.0, T0)
    for rank, rate in enumerate(per_s):
        one = timeline_of(per_s=rate, seconds=seconds, wall_ms=1000 / rate)
        pid = 100 + rank
        tl.steps[pid] = StepRows(s._replace(pid=pid) for s in one.steps[1])
        tl.step_counts[pid] = len(tl.steps[pid])
        tl.facts[pid] = {"rank": rank, "local_rank": rank, "step_mode": "optimizer"}
    tl.end_mono_ns = T0 + seconds * S
    return tl


def test_a_distributed_jobs_samples_are_all_its_ranks_together_beside_its_main_ranks() -> None:
    series = run_series(ranked((100, 100, 50), seconds=10), points=10, seen={})
    assert series.ranks == 3 and series.main_rank == 0
    assert dict(series.samples_per_s)[5.5] == 800  # rank 0's own
    assert dict(series.ranks_samples_per_s)[5.5] == 800 + 800 + 400
    names = [name for name, _ in rate_lines(series)]
    assert names == ["all 3 ranks", "rank 0"]
    # a multi-node job: this node's ranks, said so (the other nodes' are not in the line)
    multi = ranked((100, 100), seconds=10)
    multi.remote_ranks["node-b"] = ()
    names = [name for name, _ in rate_lines(run_series(multi, points=10, seen={}))]
    assert names == ["2 ranks on this node", "rank 0"]
    # one process, or processes without ranks (Hogwild's workers): its own rate alone
    alone = run_series(timeline_of(per_s=100, seconds=10, wall_ms=10), points=10, seen={})
    assert alone.ranks == 0 and not alone.ranks_samples_per_s
    assert [name for name, _ in rate_lines(alone)] == ["samples/s"]
    hogwild = ranked((100, 100), seconds=10)
    for facts in hogwild.facts.values():
        facts.pop("rank")
    assert not run_series(hogwild, points=10, seen={}).ranks_samples_per_s


def test_a_compacted_stretch_has_its_samples_a_second() -> None:
    old = timeline_of(per_s=100, seconds=10, wall_ms=10)
    tl = Timeline(["train.py"], 0.0, T0)
    rollup = StepRollup()
    rollup.add_many(list(old.steps[1]))
    tl.ingest_rollup(1, len(old.steps[1]), rollup, T0 + 10 * S)
    tl.end_mono_ns = T0 + 10 * S
    series = run_series(tl, points=10, seen={})
    assert series.steps_per_s == [(10.0, 100.0)]
    assert series.samples_per_s == [(10.0, 800.0)]


def live_loop(
    per_s: int, seconds: int, wall_ms: float, slower_after_s: int, maxlen: int
) -> Timeline:
    """A loop taken in as the live doctor takes it (Timeline.ingest_probe, apart: each
    message rolled up on its own too), a quarter second of rows a message, its rows
    bounded at `maxlen` (a fast loop's 100,000 are its last half minute)."""
    tl = Timeline(["train.py"], 0.0, T0)
    per = per_s // 4
    for start in range(0, per_s * seconds, per):
        batch = []
        for n in range(start, start + per):
            t = T0 + n * S // per_s + S // (2 * per_s)
            wall = int(wall_ms * 1e6) * (2 if t - T0 >= slower_after_s * S else 1)
            if n % 32:
                batch.append([n, t, wall])
            else:  # measured in detail, a batch of 8
                batch.append(
                    [n, t, wall, wall // 4, 0, wall // 4, wall // 4, wall // 4, 1, 8, 0, 0, 1]
                )
        tl.ingest_probe({"pid": 1, "steps": batch}, apart=True)
        tl.steps[1].set_maxlen(maxlen)
    tl.end_mono_ns = T0 + seconds * S
    return tl


def test_a_fast_loops_plot_covers_the_time_its_rows_no_longer_do() -> None:
    """A fast loop's rows are its last half minute; its plot of the last ten minutes
    drew step time for that half minute alone. The time before its oldest row is drawn
    from the live doctor's bins of ten seconds: step time, steps and samples a second,
    data wait, each as the rows would have said."""
    tl = live_loop(per_s=400, seconds=300, wall_ms=2.5, slower_after_s=100, maxlen=400 * 30)
    assert tl.steps[1].end_at(0) > T0 + 260 * S  # the rows: the last 30 s
    series = run_series(tl, points=60, seen={})
    p50 = dict(series.step_p50_ms)
    early = {x: v for x, v in p50.items() if x < 95}
    late = {x: v for x, v in p50.items() if 105 < x < 265}
    assert len(early) >= 8 and len(late) >= 14  # a point every 10 s before the rows
    assert all(abs(v - 2.5) <= 0.08 for v in early.values())  # within the bins' 3%
    assert all(abs(v - 5.0) <= 0.16 for v in late.values())
    rates = dict(series.steps_per_s)
    assert all(abs(rates[x] - 400) < 1 for x in early) and all(
        abs(rates[x] - 200) < 1 for x in late
    )
    assert all(abs(v - 25) < 0.5 for x, v in series.data_wait_pct if x < 265)
    assert all(abs(v - 1600) < 20 for x, v in series.samples_per_s if 105 < x < 265)


def test_a_long_runs_bins_stay_bounded_and_count_every_step() -> None:
    """Six hours at 8 steps a second: the last ten minutes in bins of ten seconds, the
    rest in at most OLD_BINS stretches spread evenly; every steady step in one of them."""
    tl = live_loop(per_s=8, seconds=21_600, wall_ms=125, slower_after_s=10_800, maxlen=1000)
    bins = tl.bins[1]
    assert len(bins.recent) <= 61 and len(bins.old) <= OLD_BINS
    stretches = bins.stretches()
    assert sum(r.count for _, _, r in stretches) == tl.rollups[1].count == 8 * 21_600 - WARMUP_STEPS
    widths = {e - s for s, e, _ in stretches[1:-62]}
    assert len(widths) == 1 and widths.pop() == bins.stride_ns >= 21_600 * S // OLD_BINS // 2
    series = run_series(tl, points=120, seen={})
    p50 = dict(series.step_p50_ms)
    assert p50[min(p50)] == pytest.approx(125, rel=0.035)  # the first stretch
    assert p50[max(p50)] == pytest.approx(250, rel=0.01)  # the rows
