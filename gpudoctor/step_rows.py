"""A process's recent step rows, kept as columns (issue 41: the doctor's memory).

A fast loop's steps are almost all only counted and timed (the probe measures one in
detail now and then: probe/clock.py), and such a step is three numbers: its index, its
end and its time. As a StepRecord (a tuple of 14 fields and three int objects) it cost
about 270 bytes; as three machine integers in arrays it costs 24. A step measured in
detail is kept whole beside them. The rows read back as StepRecords, made when asked
for: the recent ones a live view takes, the stretch a plot bins, never all of them at
once unless a caller asks.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import overload

from gpudoctor.model import StepRecord
from gpudoctor.probe import protocol

# a step only counted: what follows (pid, index, end, wall) in its record (the probe's
# rest of such a row, its batch size unknown: None)
COUNTED_TAIL = tuple(None if f < 0 else f for f in protocol.COUNTED_REST)
_new = tuple.__new__
# The columns are rings of a fixed size, made once for the bound (grown by doubling
# only while unbounded): an append writes into them and lets the oldest go, with no
# allocation, so a week of appends leaves no freed buffers behind (a bounded array that
# grew at one end and was cut at the other grew the doctor's RSS by ~3 MB a minute at
# 2,700 steps a second, though the rows it held did not grow: bench/RESULTS.md).
_FIRST_CAP = 1024
# the detailed rows' lists are cut at their front once this many are let go
_CUT_AT = 1024


class StepRows:
    """Up to `maxlen` rows, oldest first, as a deque of StepRecords would hold them
    (len, iteration both ways, indexing and slices), stored as columns."""

    __slots__ = (
        "pid", "maxlen", "_number", "_end", "_wall", "_cap", "_head", "_n", "_total",
        "_dpos", "_drec", "_d0",
    )  # fmt: skip

    def __init__(self, records: Iterable[StepRecord] = (), maxlen: int | None = None) -> None:
        self.pid: int | None = None
        self.maxlen = maxlen
        self._cap = maxlen if maxlen is not None else _FIRST_CAP
        self._number, self._end, self._wall = (_zeros(self._cap) for _ in range(3))
        self._head = 0  # where the oldest row is in the rings
        self._n = 0  # rows kept
        self._total = 0  # rows ever added: the next row's absolute position
        # the rows measured in detail (or otherwise not a plain counted step): their
        # absolute positions, ascending, and their records, from _d0 on
        self._dpos: list[int] = []
        self._drec: list[StepRecord] = []
        self._d0 = 0
        self.extend(records)

    # -- adding ------------------------------------------------------------------------

    def extend(self, records: Iterable[StepRecord]) -> None:
        numbers: list[int] = []
        ends: list[int] = []
        walls: list[int] = []
        whole: list[tuple[int, StepRecord]] = []
        for r in records:
            if self.pid is None:
                self.pid = r.pid
            if r.pid != self.pid or r[4:] != COUNTED_TAIL:
                whole.append((len(numbers), r))
            numbers.append(r.number)
            ends.append(r.t_end_mono_ns)
            walls.append(r.wall_ns)
        if numbers:
            self._add(array("q", numbers), array("q", ends), array("q", walls), whole)

    def append(self, record: StepRecord) -> None:
        self.extend((record,))

    def extend_columns(
        self,
        pid: int,
        columns: tuple[list[int], list[int], list[int]],
        whole: list[tuple[int, StepRecord]],
    ) -> None:
        """This process's rows by their columns (index, end, wall: a probe message's rows
        unpacked), the ones measured in detail given `whole`, as (place among these rows,
        record).
        ValueError when a column holds what is not a 64-bit integer (nothing added)."""
        try:
            number, end, wall = (array("q", c) for c in columns)
        except (TypeError, OverflowError) as e:
            raise ValueError(f"step rows: {e}") from None
        if self.pid is None:
            self.pid = pid
        self._add(number, end, wall, whole)

    def _add(
        self,
        number: array[int],
        end: array[int],
        wall: array[int],
        whole: list[tuple[int, StepRecord]],
    ) -> None:
        k = len(number)
        if not k:
            return
        if self.maxlen is None and self._n + k > self._cap:  # unbounded: a larger ring
            self._resize(max(2 * self._cap, self._n + k))
        cap = self._cap
        first = self._total  # the first of these rows' absolute position
        self._dpos.extend([first + i for i, _ in whole])
        self._drec.extend([r for _, r in whole])
        self._total += k
        if k > cap:  # more than the ring holds: the newest of them
            number, end, wall, k = number[-cap:], end[-cap:], wall[-cap:], cap
            self._head, self._n = 0, 0
        drop = max(0, self._n + k - cap)
        self._head, self._n = (self._head + drop) % cap, self._n - drop
        at = (self._head + self._n) % cap
        split = min(k, cap - at)  # written up to the rings' end, the rest from their start
        for ring, column in ((self._number, number), (self._end, end), (self._wall, wall)):
            ring[at : at + split] = column[:split]
            if split < k:
                ring[: k - split] = column[split:]
        self._n += k
        self._let_go()

    def set_maxlen(self, maxlen: int | None) -> None:
        self.maxlen = maxlen
        self._resize(maxlen if maxlen is not None else max(_FIRST_CAP, self._n))

    def _resize(self, cap: int) -> None:
        """New rings of `cap` rows, the newest rows kept, oldest first."""
        keep = min(self._n, cap)
        columns = [self._slice(ring, self._n - keep, self._n) for ring in self._rings()]
        self._cap, self._head, self._n = cap, 0, keep
        self._number, self._end, self._wall = (_zeros(cap) for _ in range(3))
        for ring, column in zip(self._rings(), columns, strict=True):
            ring[:keep] = column
        self._let_go()

    def _let_go(self) -> None:
        """The detailed rows older than the oldest row kept, let go."""
        oldest = self._total - self._n
        d0 = bisect.bisect_left(self._dpos, oldest, lo=self._d0)
        self._d0 = d0
        if d0 >= _CUT_AT and 2 * d0 >= len(self._dpos):
            del self._dpos[:d0], self._drec[:d0]
            self._d0 = 0

    def _rings(self) -> tuple[array[int], array[int], array[int]]:
        return self._number, self._end, self._wall

    def _slice(self, ring: array[int], start: int, stop: int) -> array[int]:
        """Rows [start:stop] of one column, oldest first (0 <= start <= stop <= len)."""
        cap, a = self._cap, (self._head + start) % self._cap
        n = stop - start
        if a + n <= cap:
            return ring[a : a + n]
        return ring[a:] + ring[: a + n - cap]

    # -- reading -----------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def records(self, start: int = 0, stop: int | None = None, step: int = 1) -> list[StepRecord]:
        """The rows [start:stop:step] (positions from the oldest kept, as a list's
        slice takes them) as records."""
        start, stop, step = slice(start, stop, step).indices(self._n)
        if step < 1:
            raise ValueError("records() reads forwards; reverse the list it gives")
        if stop <= start:
            return []
        head = (self.pid,)
        tail = COUNTED_TAIL
        numbers, ends, walls = (self._slice(ring, start, stop)[::step] for ring in self._rings())
        out = [
            _new(StepRecord, head + (n, e, w) + tail)
            for n, e, w in zip(numbers, ends, walls, strict=True)
        ]
        base = self._total - self._n + start  # row `start`'s absolute position
        dpos = self._dpos
        i = bisect.bisect_left(dpos, base, lo=self._d0)
        end = bisect.bisect_left(dpos, base + (stop - start), lo=i)
        for k in range(i, end):  # the rows measured in detail, whole, in their places
            offset = dpos[k] - base
            if offset % step == 0:
                out[offset // step] = self._drec[k]
        return out

    @overload
    def __getitem__(self, index: int) -> StepRecord: ...
    @overload
    def __getitem__(self, index: slice) -> list[StepRecord]: ...
    def __getitem__(self, index: int | slice) -> StepRecord | list[StepRecord]:
        if isinstance(index, slice):
            if index.step is not None and index.step < 0:
                return self.records()[index]
            return self.records(index.start or 0, index.stop, index.step or 1)
        n = self._n
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("step row index out of range")
        return self.records(index, index + 1)[0]

    def __iter__(self) -> Iterator[StepRecord]:
        n, chunk = self._n, 4096
        for start in range(0, n, chunk):
            yield from self.records(start, min(n, start + chunk))

    def __reversed__(self) -> Iterator[StepRecord]:
        n, chunk = self._n, 4096
        for stop in range(n, 0, -chunk):
            yield from reversed(self.records(max(0, stop - chunk), stop))

    def tail(self, n: int) -> list[StepRecord]:
        """The newest n rows, oldest first."""
        return self.records(max(0, len(self) - n))

    def ending_by(self, t_ns: int) -> int:
        """How many rows ended at or before t_ns (the rows end in time order)."""
        return self._bisect(t_ns, bisect.bisect_right)

    def ending_before(self, t_ns: int) -> int:
        """How many rows ended before t_ns."""
        return self._bisect(t_ns, bisect.bisect_left)

    def _bisect(self, t_ns: int, find: Callable[..., int]) -> int:
        """Bisection on the ends, in the ring's two stretches: the oldest rows from the
        head to the ring's end, then the newer ones wrapped to its start."""
        cap, head, n, ends = self._cap, self._head, self._n, self._end
        first = min(n, cap - head)
        if first == n:
            return find(ends, t_ns, lo=head, hi=head + n) - head
        # the wrapped stretch starts at ends[0]: a time before it (or at it, for the
        # rows ending before it) is found in the first stretch alone
        in_first = t_ns < ends[0] or (find is bisect.bisect_left and t_ns == ends[0])
        if in_first:
            return find(ends, t_ns, lo=head, hi=head + first) - head
        return first + find(ends, t_ns, lo=0, hi=n - first)

    def _at(self, i: int) -> int:
        return (self._head + i) % self._cap

    def number_at(self, i: int) -> int:
        """Row i's step index, without making its record."""
        return self._number[self._at(i)]

    def end_at(self, i: int) -> int:
        """Row i's end, without making its record."""
        return self._end[self._at(i)]

    def first_start(self, from_number: int) -> int | None:
        """When the first row whose step index is at least `from_number` started (the
        run's steady stretch: after its warm-up); None without one."""
        for i in range(self._n):
            at = self._at(i)
            if self._number[at] >= from_number:
                return self._end[at] - self._wall[at]
        return None

    def columns(self, start: int, stop: int) -> tuple[array[int], array[int], array[int]]:
        """Rows [start:stop]'s step indexes, ends and times (0 <= start <= stop <= len),
        without making their records."""
        return (
            self._slice(self._number, start, stop),
            self._slice(self._end, start, stop),
            self._slice(self._wall, start, stop),
        )

    def detailed(self, start: int, stop: int) -> list[StepRecord]:
        """The rows [start:stop] measured in detail (the others are only counted)."""
        base = self._total - self._n
        i = bisect.bisect_left(self._dpos, base + start, lo=self._d0)
        end = bisect.bisect_left(self._dpos, base + stop, lo=i)
        return [r for r in self._drec[i:end] if r.detail]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepRows):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StepRows(pid={self.pid}, rows={len(self)}, maxlen={self.maxlen})"


def _zeros(n: int) -> array[int]:
    return array("q", bytes(8 * n))
