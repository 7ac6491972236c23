"""Watch mode's stack chunks over a run (sources/stacks.py: py-spy's samples of the
main thread by what they were in, and the loop's counters), in bounded memory
(stretches.py).

A real chunk is ~1.4 kB as objects (its four small dicts) and `watch` makes one every
ten seconds, so a week's doctor held 30 MB of them once the old deque's cap (21,600:
the last 60 hours) was reached, and its report saw only those 60 hours; now 0.7 MB
(bench/stack_memory.py). A merged stretch holds its chunks' samples summed by class,
so the whole run's split and data wait are the same; of the loop counters it keeps its
first and last readings and what the counters did between them, interval by interval
(diagnosis/window.py's counter_rises), so the whole run's step rate is the same too:
its first and last readings, hours apart, are never compared as one interval, as a
counter may restart with each epoch in them.
"""

from __future__ import annotations

from gpudoctor.diagnosis.window import counter_readings, counter_rises
from gpudoctor.model import StackChunk
from gpudoctor.stretches import OLD_ROOM, RECENT, Stretches


class StackChunks(Stretches[StackChunk]):
    def __init__(self, recent: int = RECENT, old_room: int = OLD_ROOM) -> None:
        super().__init__(fits, merged, recent, old_room)


def fits(a: StackChunk, b: StackChunk, span_ns: int) -> bool:
    """b may join a's stretch: within the span (a watch follows one process)."""
    return b.t_end_mono_ns - a.t_start_mono_ns <= span_ns


def merged(a: StackChunk, b: StackChunk) -> StackChunk:
    """Two chunks as one: b after a, their samples summed by class; of the counters, the
    first reading and the last, and what they did in between (window.counter_rises)."""
    samples = dict(a.samples)
    for cls, n in b.samples.items():
        samples[cls] = samples.get(cls, 0) + n
    readings = counter_readings((a, b))
    first = readings[0] if readings else (None, {}, True)
    last = readings[-1] if len(readings) > 1 else (None, {}, True)
    return StackChunk(
        t_start_mono_ns=a.t_start_mono_ns,
        t_end_mono_ns=b.t_end_mono_ns,
        samples=samples,
        counters=first[1],
        counters_t_mono_ns=first[0],
        last_counters=last[1],
        last_counters_t_mono_ns=last[0],
        chunks=a.chunks + b.chunks,
        rises=counter_rises((a, b)),
    )
