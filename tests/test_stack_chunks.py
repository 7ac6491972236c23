"""Watch mode's stack chunks over a long run (gpudoctor/stack_chunks.py): bounded, the
newest as they came, the whole run's split and step rate the same as from every chunk:
a stretch's first and last counter readings are never compared as one interval."""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudoctor.compaction import Compactor
from gpudoctor.diagnosis.hotspots import hotspots
from gpudoctor.diagnosis.window import Window, stack_steps_per_s
from gpudoctor.model import HotspotChunk, StackChunk
from gpudoctor.stack_chunks import StackChunks
from gpudoctor.store import Store, encode
from gpudoctor.stretches import OLD_ROOM, RECENT
from gpudoctor.timeline import Timeline

S = 10**9
RATE = 50  # the loop's steps a second
EPOCH = 3000  # steps an epoch: a minute


def chunks(n: int, seed: int = 1) -> Iterator[StackChunk]:
    """n of py-spy's 10 s chunks back to back, as the sampler makes them: the main
    thread's samples drawn at random (~100 Hz), the loop's `i` (enumerate(loader)'s
    index, restarting each minute's epoch, no epoch variable beside it) read 0.2 s after
    each chunk began and 0.2 s before it ended."""
    rng = random.Random(seed)
    for k in range(n):
        t = k * 10 * S
        first, last = t + S // 5, t + 10 * S - S // 5
        samples = {
            "loader": rng.randint(300, 500),
            "input": rng.randint(0, 20),
            "forward": rng.randint(200, 300),
            "backward": rng.randint(200, 300),
            "optimizer": rng.randint(20, 60),
            "other": rng.randint(0, 30),
        }
        yield StackChunk(
            t_start_mono_ns=t,
            t_end_mono_ns=t + 10 * S,
            samples={f"{c}": v for c, v in samples.items()},  # its own strings
            counters={"".join(("train:", "i")): RATE * first // S % EPOCH},
            counters_t_mono_ns=first,
            last_counters={"".join(("train:", "i")): RATE * last // S % EPOCH},
            last_counters_t_mono_ns=last,
        )


def test_a_week_of_watch_s_chunks_is_bounded_and_keeps_the_run_s_split_and_rate() -> None:
    n = 7 * 24 * 360  # watch's cadence: every 10 s, a week
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        timeline = Timeline(["python", "train.py"], 1.7e9, 0, watched_pid=42)
        for c in chunks(n):
            timeline.stacks.append(c)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 2 * 2**20, grown  # each held: ~2.1 kB, 130 MB (the old deque: 46 MB)
    assert len(timeline.stacks) <= RECENT + OLD_ROOM
    held = list(timeline.stacks)
    assert held[-RECENT:] == list(chunks(n))[-RECENT:]  # the newest as they came
    assert held[0].t_start_mono_ns == 0 and held[-1].t_end_mono_ns == n * 10 * S
    assert sum(c.chunks for c in held) == n
    whole = Window(stacks=tuple(chunks(n)))
    kept = timeline.window()
    assert kept.stack_counts == whole.stack_counts  # every sample of the week, by class
    assert kept.split() == whole.split()
    rate = kept.steps_per_s
    assert rate is not None and abs(rate - RATE) < 0.5, rate
    assert rate == pytest.approx(whole.steps_per_s, rel=1e-12)  # every interval's, summed
    # the live view's last two chunks as they came
    live = timeline.window(max_samples=2)
    assert live.stacks == tuple(held[-2:])


def test_a_counter_is_never_compared_across_a_merged_stretch() -> None:
    """A merged stretch spans hours in which `i` restarted every minute: its reading and
    the next chunk's are hours apart, and what `i` rose by between them says nothing of
    the steps run (read as a rise, a week's rate came out a fraction of the loop's)."""
    kept = StackChunks(recent=4, old_room=8)
    for c in chunks(2000):
        kept.append(c)
    stretches = [c for c in kept if c.chunks > 1]
    assert len(stretches) >= 4 and all(
        c.t_end_mono_ns - c.t_start_mono_ns > 30 * 60 * S for c in stretches
    )
    rate = stack_steps_per_s(list(kept))
    assert rate is not None and abs(rate - RATE) < 0.5, rate


def test_a_long_watch_s_store_keeps_a_slot_s_chunks_as_one_record(tmp_path: Path) -> None:
    """A watch of 4,000 s in the store, compacted: each whole 10-minute slot's stack
    chunks are one record, and so are its line chunks of one process and rate (another
    rate's stays apart); the session loaded from it has every sample, the same lines and
    the rate."""
    store = Store(tmp_path / "s.db")
    session = store.create_session(Timeline(["python", "train.py"], 1.7e9, 0), "/")
    made = list(chunks(400))
    lines = [
        HotspotChunk(c.t_start_mono_ns, c.t_end_mono_ns, 42, 10.0 if k != 7 else 20.0, 10.0,
                     30, 5, (("main", "/u/train.py", 40 + k % 3, "main", "loader", 20, 4, "x"),))
        for k, c in enumerate(made)
    ]  # fmt: skip
    for stack, line in zip(made, lines, strict=True):
        store.add(session, "stacks", stack.t_end_mono_ns, encode(stack))
        store.add(session, "hotspots", line.t_end_mono_ns, encode(line))
    store.commit()
    compactor = Compactor()
    while store.compact(session, made[-1].t_end_mono_ns + 1, compactor):
        pass
    held = dict(
        store.db.execute(
            "SELECT kind, COUNT(*) FROM records WHERE session_id=? GROUP BY kind", (session,)
        ).fetchall()
    )
    # six whole slots of 60 chunks, one record each (the line chunk of another rate
    # apart: slot 0's three), the seventh slot's 40 chunks as they came (not whole yet)
    assert held == {"stacks": 6 + 41, "hotspots": 6 + 2 + 41}, held
    loaded = store.load(session)
    assert sum(c.chunks for c in loaded.stacks) == 400
    kept = loaded.window()
    assert kept.stack_counts == Window(stacks=tuple(made)).stack_counts
    rate = kept.steps_per_s
    assert rate == pytest.approx(Window(stacks=tuple(made)).steps_per_s, rel=1e-12), rate
    whole, bounded = hotspots(lines), kept.hotspots
    assert whole is not None and bounded is not None
    assert bounded.main_samples == whole.main_samples
    assert [(h.file, h.line, h.state) for h in bounded.lines] == [
        (h.file, h.line, h.state) for h in whole.lines
    ]
    assert all(
        abs(a.share - b.share) < 1e-9 for a, b in zip(bounded.lines, whole.lines, strict=True)
    )
