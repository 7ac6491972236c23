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
from collections.abc import Iterable, Iterator
from operator import itemgetter
from typing import overload

from gpudoctor.model import StepRecord

# a step only counted: what follows (pid, index, end, wall) in its record
COUNTED_TAIL = (0, 0, 0, 0, 0, 0, None, 0, 0, 0)
_new = tuple.__new__
# rows let go from the front are freed in batches of at least this many (and an eighth
# of the bound): a bounded append then costs no move of the whole arrays each time
_TRIM_AT = 4096
_FIRST = itemgetter(0)


class StepRows:
    """Up to `maxlen` rows, oldest first, as a deque of StepRecords would hold them
    (len, iteration both ways, indexing and slices), stored as columns."""

    __slots__ = ("pid", "maxlen", "_number", "_end", "_wall", "_lo", "_base", "_dpos", "_drec")

    def __init__(self, records: Iterable[StepRecord] = (), maxlen: int | None = None) -> None:
        self.pid: int | None = None
        self.maxlen = maxlen
        self._number, self._end, self._wall = array("q"), array("q"), array("q")
        self._lo = 0  # the arrays' first row still kept (the ones before it are let go)
        self._base = 0  # the absolute position of the arrays' first row
        # the rows measured in detail (or otherwise not a plain counted step): their
        # absolute positions, ascending, and their records
        self._dpos: array[int] = array("q")
        self._drec: list[StepRecord] = []
        self.extend(records)

    # -- adding ------------------------------------------------------------------------

    def extend(self, records: Iterable[StepRecord]) -> None:
        number, end, wall = self._number, self._end, self._wall
        for r in records:
            if self.pid is None:
                self.pid = r.pid
            if r.pid != self.pid or r[4:] != COUNTED_TAIL:
                self._dpos.append(self._base + len(number))
                self._drec.append(r)
            number.append(r.number)
            end.append(r.t_end_mono_ns)
            wall.append(r.wall_ns)
        self._bound()

    def append(self, record: StepRecord) -> None:
        self.extend((record,))

    def extend_columns(
        self,
        pid: int,
        columns: tuple[list[int], list[int], list[int]],
        whole: list[tuple[int, StepRecord]],
    ) -> None:
        """Rows by their columns (index, end, wall: a probe message's rows unpacked), the
        ones measured in detail given `whole`, as (place among these rows, record).
        ValueError when a column holds what is not a 64-bit integer (nothing added)."""
        try:
            number, end, wall = (array("q", c) for c in columns)
        except (TypeError, OverflowError) as e:
            raise ValueError(f"step rows: {e}") from None
        if self.pid is None:
            self.pid = pid
        if pid != self.pid:  # (rows of another process: kept whole, as they are)
            whole = [(i, r) for i, r in whole]
            known = {i for i, _ in whole}
            whole += [
                (i, _new(StepRecord, (pid, n, e, w) + COUNTED_TAIL))
                for i, (n, e, w) in enumerate(zip(number, end, wall, strict=True))
                if i not in known
            ]
            whole.sort(key=_FIRST)
        at = self._base + len(self._number)
        self._dpos.extend([at + i for i, _ in whole])
        self._drec.extend([r for _, r in whole])
        self._number.extend(number)
        self._end.extend(end)
        self._wall.extend(wall)
        self._bound()

    def set_maxlen(self, maxlen: int | None) -> None:
        self.maxlen = maxlen
        self._bound()

    def _bound(self) -> None:
        if self.maxlen is None:
            return
        over = len(self._number) - self._lo - self.maxlen
        if over > 0:
            self._lo += over
        if self._lo >= max(_TRIM_AT, (self.maxlen or 0) // 8):
            self._free()

    def _free(self) -> None:
        """The rows before _lo let go (the arrays shortened at their front)."""
        gone = self._lo
        del self._number[:gone], self._end[:gone], self._wall[:gone]
        self._base += gone
        self._lo = 0
        first = bisect.bisect_left(self._dpos, self._base)
        if first:
            del self._dpos[:first]
            del self._drec[:first]

    # -- reading -----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._number) - self._lo

    def __bool__(self) -> bool:
        return len(self._number) > self._lo

    def records(self, start: int = 0, stop: int | None = None, step: int = 1) -> list[StepRecord]:
        """The rows [start:stop:step] (positions from the oldest kept, as a list's
        slice takes them) as records."""
        start, stop, step = slice(start, stop, step).indices(len(self))
        if step < 1:
            raise ValueError("records() reads forwards; reverse the list it gives")
        lo = self._lo
        pid, tail = self.pid, COUNTED_TAIL
        head = (pid,)
        numbers = self._number[lo + start : lo + stop : step]
        ends = self._end[lo + start : lo + stop : step]
        walls = self._wall[lo + start : lo + stop : step]
        out = [
            _new(StepRecord, head + (n, e, w) + tail)
            for n, e, w in zip(numbers, ends, walls, strict=True)
        ]
        if self._drec:  # the rows measured in detail, whole, in their places
            base = self._base + lo
            dpos = self._dpos
            i = bisect.bisect_left(dpos, base + start)
            end = bisect.bisect_left(dpos, base + stop)
            for k in range(i, end):
                offset = dpos[k] - base - start
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
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("step row index out of range")
        return self.records(index, index + 1)[0]

    def __iter__(self) -> Iterator[StepRecord]:
        n, chunk = len(self), 4096
        for start in range(0, n, chunk):
            yield from self.records(start, min(n, start + chunk))

    def __reversed__(self) -> Iterator[StepRecord]:
        n, chunk = len(self), 4096
        for stop in range(n, 0, -chunk):
            yield from reversed(self.records(max(0, stop - chunk), stop))

    def tail(self, n: int) -> list[StepRecord]:
        """The newest n rows, oldest first."""
        return self.records(max(0, len(self) - n))

    def ending_by(self, t_ns: int) -> int:
        """How many rows ended at or before t_ns (the rows end in time order)."""
        return bisect.bisect_right(self._end, t_ns, lo=self._lo) - self._lo

    def ending_before(self, t_ns: int) -> int:
        """How many rows ended before t_ns."""
        return bisect.bisect_left(self._end, t_ns, lo=self._lo) - self._lo

    def number_at(self, i: int) -> int:
        """Row i's step index, without making its record."""
        return self._number[self._lo + i]

    def end_at(self, i: int) -> int:
        """Row i's end, without making its record."""
        return self._end[self._lo + i]

    def first_start(self, from_number: int) -> int | None:
        """When the first row whose step index is at least `from_number` started (the
        run's steady stretch: after its warm-up); None without one."""
        number, lo = self._number, self._lo
        for i in range(lo, len(number)):
            if number[i] >= from_number:
                return self._end[i] - self._wall[i]
        return None

    def detailed(self, start: int, stop: int) -> list[StepRecord]:
        """The rows [start:stop] measured in detail (the others are only counted)."""
        base = self._base + self._lo
        i = bisect.bisect_left(self._dpos, base + start)
        end = bisect.bisect_left(self._dpos, base + stop)
        return [r for r in self._drec[i:end] if r.detail]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepRows):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StepRows(pid={self.pid}, rows={len(self)}, maxlen={self.maxlen})"
