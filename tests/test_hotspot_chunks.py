"""The line sampler's chunks over a long run (gpudoctor/hotspot_chunks.py): bounded, the
newest as they came, and the whole run's named lines the same as from every chunk."""

from __future__ import annotations

import random
import tracemalloc
from collections import deque
from collections.abc import Iterator

from gpudoctor.diagnosis.hotspots import hotspots
from gpudoctor.hotspot_chunks import OLD_ROOM, RECENT, HotspotChunks
from gpudoctor.model import HotspotChunk
from gpudoctor.timeline import Timeline

MINUTE = 60 * 10**9
# (where, file, line, function, kind, source text): a loader's costly lines, the model's
LINES = [
    ("main", "/home/u/train.py", 40 + i, "main", "loader" if i < 3 else "other", f"x = f{i}()")
    for i in range(8)
] + [
    ("workers", "/home/u/data.py", 12 + i, "__getitem__", "dataset", f"y = g{i}()")
    for i in range(4)
]


def chunks(n: int, every_ns: int, seed: int = 1) -> list[HotspotChunk]:
    return list(made_one_by_one(n, every_ns, seed))


def made_one_by_one(n: int, every_ns: int, seed: int = 1) -> Iterator[HotspotChunk]:
    """n chunks of 10 s, one every `every_ns`, their samples drawn at random (10 Hz),
    each made as the sampler makes it: its own strings and tuples."""
    rng = random.Random(seed)
    for i in range(n):
        picked = rng.sample(LINES, 9)
        lines = tuple(
            (w, "".join(f), ln, "".join(fn), k, (a := rng.randint(1, 40)), rng.randint(0, a),
             "".join(code))
            for w, f, ln, fn, k, code in picked
        )  # fmt: skip
        main = sum(line[5] for line in lines if line[0] == "main") + rng.randint(0, 30)
        workers = sum(line[5] for line in lines if line[0] == "workers")
        t = i * every_ns
        yield HotspotChunk(t, t + 10 * 10**9, 42, 10.0, 10.0, main, workers, lines)


def test_a_week_of_chunks_is_bounded_and_names_the_same_lines() -> None:
    made = chunks(7 * 24 * 60, MINUTE)  # run's cadence: one a minute for a week
    kept = HotspotChunks()
    for c in made:
        kept.append(c)
    assert len(kept) <= RECENT + OLD_ROOM
    assert list(kept)[-RECENT:] == made[-RECENT:]  # the newest as they came
    assert list(reversed(kept)) == list(kept)[::-1]
    held = list(kept)
    assert held[0].t_start_mono_ns == 0 and held[-1] is made[-1]
    assert all(a.t_end_mono_ns <= b.t_start_mono_ns for a, b in zip(held, held[1:], strict=False))
    assert sum(c.main_total for c in held) == sum(c.main_total for c in made)
    whole, bounded = hotspots(made), hotspots(kept)
    assert whole is not None and bounded is not None
    assert bounded.main_samples == whole.main_samples
    assert abs(bounded.outside_busy - whole.outside_busy) < 1e-9
    assert abs(bounded.outside_idle - whole.outside_idle) < 1e-9
    assert [(h.where, h.file, h.line, h.state) for h in bounded.lines] == [
        (h.where, h.file, h.line, h.state) for h in whole.lines
    ]
    assert all(
        abs(a.share - b.share) < 1e-9 for a, b in zip(bounded.lines, whole.lines, strict=True)
    )


def test_watch_s_cadence_and_the_timeline_hold_them_in_little_memory() -> None:
    n = 2 * 24 * 360  # watch's cadence: every 10 s, two days
    newest: deque[HotspotChunk] = deque(maxlen=3)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        timeline = Timeline(["python", "train.py"], 1.7e9, 0)
        for c in made_one_by_one(n, 10 * 10**9, seed=2):
            timeline.hotspots.append(c)
            newest.append(c)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 4 * 2**20, grown  # every chunk held: ~7 kB each, 120 MB
    assert len(timeline.hotspots) <= RECENT + OLD_ROOM
    window = timeline.window(max_samples=3)  # a live view: the newest three
    assert window.hotspots == hotspots(newest)
    whole = timeline.window().hotspots  # the report's: every sample, by line
    assert whole is not None and whole.main_samples == sum(
        c.main_total for c in made_one_by_one(n, 10 * 10**9, seed=2)
    )


def test_chunks_of_other_processes_or_rates_are_not_merged() -> None:
    made = chunks(600, MINUTE)
    kept = HotspotChunks(recent=10, old_room=20)
    for i, c in enumerate(made):
        pid = 42 if i % 100 < 50 else 43  # the main process changed (a restart)
        kept.append(HotspotChunk(**{**c.__dict__, "pid": pid}))
    assert len(kept) <= 30
    for c in kept:  # each merged stretch holds one process's chunks
        firsts = [m for m in made if c.t_start_mono_ns <= m.t_start_mono_ns < c.t_end_mono_ns]
        assert len({42 if made.index(m) % 100 < 50 else 43 for m in firsts}) == 1
