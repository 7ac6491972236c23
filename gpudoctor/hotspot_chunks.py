"""The line sampler's chunks over a run (sources/hotspots.py: py-spy's samples by the
line of the user's code), in bounded memory.

A real fast loop's chunk is ~7 kB as objects. `run` makes one a minute after its first
three and `watch` one every ten seconds, so a week's doctor held 65 MB of them under
`run`, and 140 MB under `watch` once the old deque's cap (21,600) was reached
(bench/hotspot_memory.py): more than all else it keeps for a week (issue 41's 80 MB).
The newest RECENT stay as they came (the live views read the last few); older ones are
merged into stretches of a span that doubles whenever more than OLD_ROOM are held, as
the readings are thinned (readings.py). A merged chunk holds its chunks' samples summed
by line, so the whole run's named lines and their shares (diagnosis/hotspots.py sums
them by line) are the same; a replay stopped inside a merged stretch leaves it out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from itertools import chain

from gpudoctor.model import HotspotChunk, HotspotLine

RECENT = 120  # two hours of `run`'s chunks, twenty minutes of `watch`'s
OLD_ROOM = 240


class HotspotChunks:
    def __init__(self, recent: int = RECENT, old_room: int = OLD_ROOM) -> None:
        self.recent_room = recent
        self.old_room = old_room
        self._recent: deque[HotspotChunk] = deque()
        self._old: list[HotspotChunk] = []
        self._span_ns = 0  # an old stretch's longest span (0: none merged yet)

    def append(self, chunk: HotspotChunk) -> None:
        self._recent.append(chunk)
        if len(self._recent) > self.recent_room:
            self._age(self._recent.popleft())

    def _age(self, chunk: HotspotChunk) -> None:
        old = self._old
        _joined(old, chunk, self._span_ns)
        while len(old) > self.old_room:
            average = (old[-1].t_end_mono_ns - old[0].t_start_mono_ns) // len(old)
            span = 2 * max(self._span_ns, average, 1)
            folded = _folded(old, span)
            if len(folded) == len(old) and self._span_ns:  # nothing more merges (other
                del old[: len(old) - self.old_room]  # processes or rates): the oldest go
                break
            old[:], self._span_ns = folded, span

    def __len__(self) -> int:
        return len(self._old) + len(self._recent)

    def __iter__(self) -> Iterator[HotspotChunk]:
        return chain(self._old, self._recent)

    def __reversed__(self) -> Iterator[HotspotChunk]:
        return chain(reversed(self._recent), reversed(self._old))


def _fits(a: HotspotChunk, b: HotspotChunk, span_ns: int) -> bool:
    """b may join a's stretch: the same process and rates, within the span."""
    return (
        a.pid == b.pid
        and a.rate_hz == b.rate_hz
        and a.busy_rate_hz == b.busy_rate_hz
        and b.t_end_mono_ns - a.t_start_mono_ns <= span_ns
    )


def _joined(stretches: list[HotspotChunk], chunk: HotspotChunk, span_ns: int) -> None:
    """`chunk` merged into the last stretch where it fits, else after it."""
    if stretches and _fits(stretches[-1], chunk, span_ns):
        stretches[-1] = merged(stretches[-1], chunk)
    else:
        stretches.append(chunk)


def _folded(chunks: list[HotspotChunk], span_ns: int) -> list[HotspotChunk]:
    out: list[HotspotChunk] = []
    for c in chunks:
        _joined(out, c, span_ns)
    return out


def merged(a: HotspotChunk, b: HotspotChunk) -> HotspotChunk:
    """Two chunks of one process and rate as one: b after a, their samples summed by
    line (where, file, line, function, kind and source text alike)."""
    counts: dict[tuple[str, str, int, str, str, str], list[int]] = {}
    for where, file, line, function, kind, n_all, n_busy, code in chain(a.lines, b.lines):
        n = counts.setdefault((where, file, line, function, kind, code), [0, 0])
        n[0] += n_all
        n[1] += n_busy
    lines: tuple[HotspotLine, ...] = tuple(
        (where, file, line, function, kind, n_all, n_busy, code)
        for (where, file, line, function, kind, code), (n_all, n_busy) in counts.items()
    )
    return HotspotChunk(
        t_start_mono_ns=a.t_start_mono_ns,
        t_end_mono_ns=b.t_end_mono_ns,
        pid=a.pid,
        rate_hz=a.rate_hz,
        busy_rate_hz=a.busy_rate_hz,
        main_total=a.main_total + b.main_total,
        workers_total=a.workers_total + b.workers_total,
        lines=lines,
    )
