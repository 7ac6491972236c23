"""A process's step rows kept as columns (gpudoctor/step_rows.py) read back exactly as
the deque of records they replace: every read, across the bound, mixed with steps
measured in detail."""

from __future__ import annotations

import random
from collections import deque

import pytest

from gpudoctor.diagnosis.window import Window
from gpudoctor.live import RECENT_S, recent_measures
from gpudoctor.model import StepRecord
from gpudoctor.step_rows import StepRows
from gpudoctor.timeline import Timeline, add_rows, steps_of

PID = 7


def probe_rows(start: int, n: int, rng: random.Random) -> list[list[int]]:
    """Rows as the probe sends them: most only counted (three numbers), one in ~30 in
    detail (thirteen), in time order."""
    out = []
    for i in range(start, start + n):
        t, wall = 10**9 + i * 1_000_000, rng.randrange(200_000, 2_000_000)
        if rng.random() < 1 / 30:
            out.append([i, t, wall, wall // 3, 0, wall // 4, wall // 4, 0, 1, 8, 0, 0, 1])
        else:
            out.append([i, t, wall])
    return out


@pytest.mark.parametrize("maxlen", [None, 2_500, 5_000, 9_000])
def test_the_columns_read_back_as_the_records_a_deque_would_hold(maxlen: int | None) -> None:
    rng = random.Random(maxlen or 1)
    rows, plain = StepRows(maxlen=maxlen), deque[StepRecord](maxlen=maxlen)
    start = 0
    for n in [400] * 40 + [1, 7, 3_000, 400]:  # past the bound, round the ring, over it
        message = probe_rows(start, n, rng)
        start += n
        plain.extend(steps_of(PID, [list(r) for r in message]))
        add_rows(rows, PID, message)
        assert len(rows) == len(plain)
    kept = list(plain)
    assert list(rows) == kept and list(reversed(rows)) == kept[::-1]
    assert rows[0] == kept[0] and rows[-1] == kept[-1] and rows[1234] == kept[1234]
    for a, b, step in ((0, None, 1), (100, 4_000, 1), (17, 3_333, 7), (-500, None, 3)):
        assert rows[a:b:step] == kept[a:b:step]
    assert rows.tail(2_000) == kept[-2_000:]
    assert rows.detailed(100, 3_100) == [s for s in kept[100:3_100] if s.detail]
    assert any(s.detail for s in kept) and not all(s.detail for s in kept)
    for i in range(0, len(kept), 97):  # both stretches of the ring, wherever it wraps
        t = kept[i].t_end_mono_ns
        assert (rows.ending_by(t), rows.ending_before(t)) == (i + 1, i)
        assert (rows.ending_by(t - 1), rows.ending_before(t + 1)) == (i, i + 1)
    assert rows.ending_by(kept[-1].t_end_mono_ns + 1) == len(kept) and rows.ending_by(0) == 0
    assert (rows.number_at(5), rows.end_at(5)) == (kept[5].number, kept[5].t_end_mono_ns)
    with pytest.raises(IndexError):
        rows[len(kept)]


def test_a_smaller_bound_keeps_the_newest_and_a_record_of_its_own_stays_whole() -> None:
    odd = StepRecord(PID, 3, 10**9, 5, 0, 0, 0, 0, 0, 0, None, 2, 0, 0)  # syncs, not counted
    rows = StepRows([odd, *steps_of(PID, [[4, 10**9 + 1, 6], [5, 10**9 + 2, 7]])])
    assert rows[0] == odd and rows[0].syncs == 2
    rows.set_maxlen(2)
    assert [s.number for s in rows] == [4, 5] and rows.detailed(0, 2) == []


def test_a_row_that_is_not_numbers_is_refused_whole() -> None:
    rows = StepRows()
    add_rows(rows, PID, [[0, 1, 2]])
    with pytest.raises(ValueError):
        add_rows(rows, PID, [[1, 2, 3], [2, "x", 4]])
    timeline = Timeline(["train.py"], 0.0, 0)
    with pytest.raises(ValueError):
        timeline.ingest_probe({"pid": PID, "steps": [[0, 1.5, 2]]})
    assert [s.number for s in rows] == [0]


@pytest.mark.parametrize(("spacing_ns", "loader"), [(1_000_000, True), (5_000_000, False)])
def test_the_status_lines_measures_read_from_the_columns_are_the_windows(
    spacing_ns: int, loader: bool
) -> None:
    """The headless line's last seconds (live.recent_measures) read from the columns
    equal the report's Window over the same rows as records: a step every 1 ms (the
    newest 2,000 rows are under 5 s) and every 5 ms (the 5 s cut first), with and
    without a DataLoader, from the warm-up on."""
    rng = random.Random(spacing_ns)
    rows = StepRows(maxlen=9_000)
    start = 0
    for n in [3, 9, 400] + [400] * 20:
        message = probe_rows(start, n, rng)
        for row in message:
            row[1] = 10**9 + row[0] * spacing_ns
            if len(row) > 3 and not loader:  # the time outside the model instead
                row[3], row[4] = 0, row[3]
        start += n
        add_rows(rows, PID, message)
        cutoff = rows[-1].t_end_mono_ns - int(RECENT_S * 1e9)
        recent = [s for s in rows[-2000:] if s.t_end_mono_ns >= cutoff]
        w = Window(steps=tuple(recent))
        expected = (w.step_median_ms, w.steps_per_s, w.data_wait_fraction)
        assert recent_measures(rows) == expected, len(rows)
    wait = recent_measures(rows)[2]
    assert wait is not None and 0 < wait < 1  # (loader or the time outside the model)
