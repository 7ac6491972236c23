"""Watch mode's stack chunks over a run (sources/stacks.py: py-spy's samples of the
main thread by what they were in, and the loop's counters), in bounded memory
(stretches.py).

A real chunk is ~1.4 kB as objects (its four small dicts) and `watch` makes one every
ten seconds, so a week's doctor held 30 MB of them once the old deque's cap (21,600:
the last 60 hours) was reached, and its report saw only those 60 hours; now 0.5 MB
(bench/stack_memory.py). A merged stretch holds its chunks' samples summed by class,
so the whole run's split and data wait are the same; of the counters it keeps its first
chunk's two readings, ten seconds apart, a sample of the step rate: a reading from
before a longer gap is never compared across it (diagnosis/window.py's _readings), as
a counter may restart with each epoch inside it.
"""

from __future__ import annotations

from gpudoctor.model import StackChunk
from gpudoctor.stretches import OLD_ROOM, RECENT, Stretches


class StackChunks(Stretches[StackChunk]):
    def __init__(self, recent: int = RECENT, old_room: int = OLD_ROOM) -> None:
        super().__init__(fits, merged, recent, old_room)


def fits(a: StackChunk, b: StackChunk, span_ns: int) -> bool:
    """b may join a's stretch: within the span (a watch follows one process)."""
    return b.t_end_mono_ns - a.t_start_mono_ns <= span_ns


def merged(a: StackChunk, b: StackChunk) -> StackChunk:
    """Two chunks as one: b after a, their samples summed by class, a's readings."""
    samples = dict(a.samples)
    for cls, n in b.samples.items():
        samples[cls] = samples.get(cls, 0) + n
    return StackChunk(
        t_start_mono_ns=a.t_start_mono_ns,
        t_end_mono_ns=b.t_end_mono_ns,
        samples=samples,
        counters=a.counters,
        counters_t_mono_ns=a.counters_t_mono_ns,
        last_counters=a.last_counters,
        last_counters_t_mono_ns=a.last_counters_t_mono_ns,
        chunks=a.chunks + b.chunks,
    )
