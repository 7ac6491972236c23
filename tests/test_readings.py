"""Host and GPU readings over a long run: bounded in memory, the recent ones whole, the
whole run's spread evenly so that a plain mean of them is the run's mean over time."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from windows import host

from gpudoctor.readings import RECENT_NS, Readings
from gpudoctor.timeline import HOST_RECENT_ROOM, HOST_ROOM, RECENT_SAMPLES, Timeline

S = 10**9


@dataclass(frozen=True)
class R:
    t_mono_ns: int
    value: float = 0.0
    index: int = 0


def test_a_week_at_1_hz_holds_a_bounded_count_the_last_ten_minutes_whole() -> None:
    """604,800 readings, a second apart with a little jitter: at most the room and the
    recent ten minutes held; every reading of those ten minutes there; the whole run's
    readings evenly spaced from its first hour to its last minute."""
    readings: Readings[R] = Readings(2048, recent_room=3600)
    week = 7 * 24 * 3600
    times = [i * S + (i * 7919 % 50_000_000) for i in range(week)]
    for i, t in enumerate(times):
        readings.append(R(t))
        assert len(readings) <= 2048 + 601 if i % 100_000 == 0 else True
    assert len(readings) <= 2048 + 601
    whole = [t for t in times if t >= times[-1] - RECENT_NS]
    assert [r.t_mono_ns for r in readings][-len(whole) :] == whole and len(whole) >= 600
    spread = readings.evenly()
    gaps = [b.t_mono_ns - a.t_mono_ns for a, b in zip(spread, spread[1:], strict=False)]
    assert spread[0].t_mono_ns < 3600 * S and spread[-1].t_mono_ns == readings[-1].t_mono_ns
    assert 512 <= len(spread) <= 2048 + 1
    assert max(gaps[:-1]) <= 1.5 * statistics.median(gaps)  # the last gap may be short
    assert min(gaps) >= 0.5 * statistics.median(gaps)


def test_a_plain_mean_of_the_spread_readings_is_the_runs_mean_over_time() -> None:
    """A job busy (1.0) for its first seven hours and idle (0.0) for its last hour: the
    spread readings' mean is 7/8, though the recent ten minutes (all idle) are held at
    ten times the older ones' density."""
    readings: Readings[R] = Readings(2048, recent_room=3600)
    hours = 8 * 3600
    for i in range(hours):
        readings.append(R(i * S, 1.0 if i < 7 * 3600 else 0.0))
    plain = statistics.fmean(r.value for r in readings)
    spread = statistics.fmean(r.value for r in readings.evenly())
    assert abs(spread - 7 / 8) < 0.01
    assert abs(plain - 7 / 8) > 0.05  # what the readings held, unweighted, would say


def test_readings_thinned_already_by_the_store_are_weighted_by_time() -> None:
    """A store's older readings come one a minute (compaction.py), its last ten minutes
    one a second: busy for two hours then idle for ten minutes reads 12/13 busy, with
    nothing thinned by the readings themselves (fewer than their room)."""
    readings: Readings[R] = Readings(2048, recent_room=3600)
    for minute in range(120):
        readings.append(R(minute * 60 * S, 1.0))
    for second in range(600):
        readings.append(R(7200 * S + second * S, 0.0))
    assert readings.stride_ns == 0 and len(readings) == 720
    spread = readings.evenly()
    assert abs(statistics.fmean(r.value for r in spread) - 12 / 13) < 0.01
    assert len(spread) == 120 + 10 + 1  # and the newest


def test_a_short_run_keeps_every_reading() -> None:
    """Ten minutes at 5 Hz: all of them, in order, whole and as the whole run's."""
    readings: Readings[R] = Readings(2048, recent_room=3600)
    made = [R(i * S // 5) for i in range(3000)]
    readings.extend(made)
    assert list(readings) == made and list(readings.evenly()) == made
    assert list(reversed(readings)) == made[::-1]
    assert readings[-1] == made[-1] and readings[0] == made[0] and readings[1234] == made[1234]


def test_a_ticks_gpus_are_kept_or_dropped_together() -> None:
    """Eight GPUs read at one time each second for six hours: every tick held has its
    eight readings, in the recent stretch and the old."""
    readings: Readings[R] = Readings(8192, recent_room=4800)
    for i in range(6 * 3600):
        readings.extend(R(i * S, index=g) for g in range(8))
    by_tick: dict[int, list[int]] = {}
    for r in readings:
        by_tick.setdefault(r.t_mono_ns, []).append(r.index)
    assert all(v == list(range(8)) for v in by_tick.values())
    assert len(readings) <= 8192 + 4800 + 8
    assert readings.stride_ns > 0


def test_decoding_only_the_ticks_kept_gives_what_decoding_all_would() -> None:
    """A reader that must decode each tick (a store) asks which ticks would be kept,
    adopts the stride and adds only those: the same readings as adding them all."""
    times = [i * S + (i % 3) * 1000 for i in range(30_000)]
    whole: Readings[R] = Readings(512, recent_room=700)
    for t in times:
        whole.extend(R(t, index=g) for g in range(2))
    planned: Readings[R] = Readings(512, recent_room=700)
    kept, stride = planned.ticks_kept(times, per_tick=2)
    assert len(kept) < len(times) // 10
    planned.adopt(stride)
    for t in times:
        if t in kept:
            planned.extend(R(t, index=g) for g in range(2))
    assert list(planned) == list(whole)
    assert planned.evenly() == whole.evenly()


def test_a_timelines_whole_run_window_spreads_its_host_readings_and_the_live_one_is_recent() -> (
    None
):
    """A timeline read at 1 Hz for eight hours holds at most its rooms of host readings;
    the report's window has them spread over the whole run, the live one the newest
    RECENT_SAMPLES, a second apart."""
    timeline = Timeline(["python", "x.py"], 1.7e9, 0)
    template = host(n=1, t0=0)[0]
    import dataclasses

    for i in range(8 * 3600):
        timeline.host.append(dataclasses.replace(template, t_mono_ns=i * S))
    assert len(timeline.host) <= HOST_ROOM + HOST_RECENT_ROOM
    whole = timeline.window().host
    assert whole[0].t_mono_ns < 3600 * S and whole[-1].t_mono_ns == (8 * 3600 - 1) * S
    live = timeline.window(max_steps=10, max_samples=RECENT_SAMPLES).host
    assert [h.t_mono_ns for h in live] == [
        t * S for t in range(8 * 3600 - RECENT_SAMPLES, 8 * 3600)
    ]
