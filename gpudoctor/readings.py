"""Host or GPU readings over a run of any length, in bounded memory (issue 41).

The doctor reads the host and the GPUs about once a second, for as long as the job runs.
A host reading is ~1 kB (its per-core list, the job's processes), a GPU reading ~340
bytes, so a week of them whole would be hundreds of MB; the store keeps them all. In
memory the newest RECENT_NS stay whole (the live screens and the last minutes' plots),
and older ones are thinned evenly: of each stretch of `stride` nanoseconds the first tick
is kept (all its readings: one per GPU), the stride doubling whenever more than `room`
old readings are held. The kept ones are then evenly spread over the run, so a plain
mean or median of them (the rules' measures: diagnosis/rules/) still stands for the
whole run, each reading for as long a stretch as the next; `evenly()` gives them with
the recent ones thinned to the same stride.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Generic, Protocol, TypeVar, overload

# Whole for the last ten minutes: the live screens read the last two (timeline.py's
# RECENT_SAMPLES), the plots' shortest spans the last one and ten.
RECENT_NS = 600 * 10**9


class _Reading(Protocol):
    @property
    def t_mono_ns(self) -> int: ...


T = TypeVar("T", bound=_Reading)


class Readings(Generic[T]):
    """Readings in time order (as a deque of them would hold them: len, iteration both
    ways, indexing), the newest `recent_ns` whole, at most `recent_room` of them (a clock
    that read faster than once a second), and at most `room` older ones spread evenly."""

    __slots__ = ("room", "recent_ns", "recent_room", "_recent", "_old", "_stride", "_last")

    def __init__(
        self, room: int, recent_ns: int = RECENT_NS, recent_room: int | None = None
    ) -> None:
        self.room = room
        self.recent_ns = recent_ns
        self.recent_room = recent_room if recent_room is not None else room
        self._recent: deque[T] = deque()
        self._old: list[T] = []
        self._stride = 0  # 0: every old reading kept (none thinned yet)
        self._last: int | None = None  # the newest old reading's time

    # -- adding ------------------------------------------------------------------------

    def append(self, reading: T) -> None:
        recent = self._recent
        recent.append(reading)
        newest = reading.t_mono_ns
        while recent and (
            newest - recent[0].t_mono_ns > self.recent_ns or len(recent) > self.recent_room
        ):
            self._age(recent.popleft())

    def extend(self, readings: Iterable[T]) -> None:
        for reading in readings:
            self.append(reading)

    def clear(self) -> None:
        self._recent.clear()
        self._old.clear()
        self._stride, self._last = 0, None

    def _age(self, reading: T) -> None:
        """A reading no longer recent: kept among the old ones if it starts its stretch."""
        if not self._keeps(reading.t_mono_ns, self._last):
            return
        self._old.append(reading)
        self._last = reading.t_mono_ns
        if len(self._old) > self.room:
            self._thin()

    def _keeps(self, t: int, last: int | None) -> bool:
        """Whether a reading at `t` is kept after one kept at `last`: the first tick of
        its stretch (a tick's readings all share its time)."""
        stride = self._stride
        return not stride or last is None or t == last or t // stride != last // stride

    def _thin(self) -> None:
        """The old readings to at most half the room: the stride doubled (the first one:
        twice their mean spacing) until the ticks kept fit, or one stretch holds them all."""
        old = self._old
        span = old[-1].t_mono_ns - old[0].t_mono_ns
        if not self._stride:
            self._stride = max(1, 2 * span // max(1, len(old) - 1))
        while True:
            kept: list[T] = []
            last: int | None = None
            for reading in old:
                if self._keeps(reading.t_mono_ns, last):
                    kept.append(reading)
                    last = reading.t_mono_ns
            if len(kept) <= self.room // 2 or self._stride > span:
                break
            self._stride *= 2
        self._old = kept
        self._last = last

    # -- reading -----------------------------------------------------------------------

    @property
    def stride_ns(self) -> int:
        """How far apart the old readings are (0 while none was thinned)."""
        return self._stride

    def evenly(self) -> tuple[T, ...]:
        """The whole run's readings evenly spread: the old ones, and the recent ones
        thinned to their spacing, the newest always among them (all of them while the
        old ones are as dense: a run of ten minutes, one not thinned yet). The old ones'
        spacing is the stride, or, where they came thinned already (the store keeps one
        a minute of its older readings: compaction.py), the median gap between their
        ticks."""
        spacing = self._stride or _median_gap(self._old)
        gap = _median_gap(self._recent)
        if not spacing or spacing <= gap * 3 // 2:
            return (*self._old, *self._recent)
        out = list(self._old)
        last = self._last
        least = spacing - gap // 2  # a tick read a little early is still its stretch's
        for reading in self._recent:
            t = reading.t_mono_ns
            if last is None or t == last or t - last >= least:
                out.append(reading)
                last = t
        newest = self._recent[-1].t_mono_ns
        if last != newest:  # the newest tick too: the readings' "now" (the cores allowed)
            out.extend(r for r in self._recent if r.t_mono_ns == newest)
        return tuple(out)

    def ticks_kept(self, times: Iterable[int], per_tick: int) -> tuple[set[int], int]:
        """Of ticks at `times` (in order, each of `per_tick` readings) to be added: the
        times of those this would keep, and the stride it would have then; so a caller
        that must decode each reading (a store's records) decodes only those. `adopt` the
        stride before adding the kept ones: they are then kept as they are."""
        shadow: Readings[_Tick] = Readings(self.room, self.recent_ns, self.recent_room)
        shadow._old = [_Tick(r.t_mono_ns) for r in self._old]
        shadow._recent = deque(_Tick(r.t_mono_ns) for r in self._recent)
        shadow._stride, shadow._last = self._stride, self._last
        new = []
        for t in times:
            new.append(t)
            tick = _Tick(t)
            for _ in range(per_tick):
                shadow.append(tick)
        held = {r.t_mono_ns for r in shadow}
        return {t for t in new if t in held}, shadow._stride

    def adopt(self, stride: int) -> None:
        """A stride found by ticks_kept (never a finer one than this holds)."""
        self._stride = max(self._stride, stride)

    def __len__(self) -> int:
        return len(self._old) + len(self._recent)

    def __bool__(self) -> bool:
        return bool(self._recent) or bool(self._old)

    def __iter__(self) -> Iterator[T]:
        yield from self._old
        yield from self._recent

    def __reversed__(self) -> Iterator[T]:
        yield from reversed(self._recent)
        yield from reversed(self._old)

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...
    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return list(self)[i]
        n_old = len(self._old)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("reading index out of range")
        return self._old[i] if i < n_old else self._recent[i - n_old]


class _Tick:
    """A tick's time alone (Readings.ticks_kept's stand-in for its readings)."""

    __slots__ = ("t_mono_ns",)

    def __init__(self, t: int) -> None:
        self.t_mono_ns = t


def _median_gap(readings: Iterable[_Reading]) -> int:
    """The median time between consecutive ticks (0 for fewer than two)."""
    ticks: list[int] = []
    for r in readings:
        if not ticks or r.t_mono_ns != ticks[-1]:
            ticks.append(r.t_mono_ns)
    gaps = sorted(b - a for a, b in zip(ticks, ticks[1:], strict=False))
    return gaps[len(gaps) // 2] if gaps else 0


__all__ = ["RECENT_NS", "Readings"]
