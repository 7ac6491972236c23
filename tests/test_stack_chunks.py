"""Watch mode's stack chunks over a long run (gpudoctor/stack_chunks.py): bounded, the
newest as they came, the whole run's split the same as from every chunk, and its step
rate still read from counters ten seconds apart, never across a merged stretch."""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Iterator

from gpudoctor.diagnosis.window import Window, stack_steps_per_s
from gpudoctor.model import StackChunk
from gpudoctor.stack_chunks import StackChunks
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
