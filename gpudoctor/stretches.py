"""Chunks of samples over a run (py-spy's, a few seconds each), held in bounded memory:
the newest as they came, older ones merged into stretches.

A week's doctor made up to 60,000 chunks of each kind it keeps (hotspot_chunks.py,
stack_chunks.py say what each costs). The newest `recent` stay as they came (the live
views read the last few); older ones are merged into stretches of a span that doubles
whenever more than `old_room` are held, as the readings are thinned (readings.py), so a
run of any length holds at most recent + old_room of them and its whole stretch of time.
What merging keeps (samples summed, which readings) is the kind's own `merged`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from itertools import chain
from typing import Generic, Protocol, TypeVar

RECENT = 120  # two hours of `run`'s line chunks, twenty minutes of `watch`'s chunks
OLD_ROOM = 240


class Chunk(Protocol):
    @property
    def t_start_mono_ns(self) -> int: ...

    @property
    def t_end_mono_ns(self) -> int: ...


C = TypeVar("C", bound=Chunk)


class Stretches(Generic[C]):
    """`fits(a, b, span_ns)`: whether b may join a's stretch (b after a, within the
    span); `merged(a, b)`: the two as one."""

    def __init__(
        self,
        fits: Callable[[C, C, int], bool],
        merged: Callable[[C, C], C],
        recent: int = RECENT,
        old_room: int = OLD_ROOM,
    ) -> None:
        self.recent_room = recent
        self.old_room = old_room
        self._fits = fits
        self._merged = merged
        self._recent: deque[C] = deque()
        self._old: list[C] = []
        self._span_ns = 0  # an old stretch's longest span (0: none merged yet)

    def append(self, chunk: C) -> None:
        self._recent.append(chunk)
        if len(self._recent) > self.recent_room:
            self._age(self._recent.popleft())

    def _age(self, chunk: C) -> None:
        old = self._old
        self._join(old, chunk, self._span_ns)
        while len(old) > self.old_room:
            average = (old[-1].t_end_mono_ns - old[0].t_start_mono_ns) // len(old)
            span = 2 * max(self._span_ns, average, 1)
            folded: list[C] = []
            for c in old:
                self._join(folded, c, span)
            if len(folded) == len(old) and self._span_ns:  # nothing more merges (other
                del old[: len(old) - self.old_room]  # processes or rates): the oldest go
                break
            old[:], self._span_ns = folded, span

    def _join(self, stretches: list[C], chunk: C, span_ns: int) -> None:
        """`chunk` merged into the last stretch where it fits, else after it."""
        if stretches and self._fits(stretches[-1], chunk, span_ns):
            stretches[-1] = self._merged(stretches[-1], chunk)
        else:
            stretches.append(chunk)

    def __len__(self) -> int:
        return len(self._old) + len(self._recent)

    def __iter__(self) -> Iterator[C]:
        return chain(self._old, self._recent)

    def __reversed__(self) -> Iterator[C]:
        return chain(reversed(self._recent), reversed(self._old))
