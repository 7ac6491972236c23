"""A process's steady steps rolled up (issue 14): what the whole-run measures need
(count, sums of each part of a step, a histogram of step times), in a few kilobytes
whatever the run's length, so that the timeline can keep only the recent steps as rows.

Step times go into logarithmic buckets 2% wide: a quantile read from them is the
bucket's middle, within 1% of the true value (the sketch's stated error). Sums are
exact: the data wait and the split of a rolled-up run are the same as from its rows.
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.model import STEP_FIELD, StepRecord

BUCKET_RATIO = 1.02
_LOG_RATIO = math.log(BUCKET_RATIO)
QUANTILE_ERROR = (BUCKET_RATIO - 1) / 2  # relative, at most
_WALL, _SYNCS, _DETAIL = (STEP_FIELD[name] for name in ("wall_ns", "syncs", "detail"))


@dataclass
class StepRollup:
    count: int = 0
    wall_ns: int = 0
    syncs: int = 0
    buckets: dict[int, int] = field(default_factory=dict)  # log-bucket of wall_ns -> steps
    # the steps measured in detail (the split comes from these, as from rows)
    detailed: int = 0
    detailed_wall_ns: int = 0
    loader_ns: int = 0
    outside_ns: int = 0
    forward_ns: int = 0
    backward_ns: int = 0
    optimizer_ns: int = 0
    batch_sum: int = 0
    batch_steps: int = 0  # detailed steps that saw a batch size
    forwards: int = 0  # the detailed steps' root-module forward calls
    pageable_copies: int = 0  # and their copies from unpinned memory

    def add(self, s: StepRecord) -> None:
        self.count += 1
        self.wall_ns += s.wall_ns
        self.syncs += s.syncs
        bucket = int(math.log(s.wall_ns) / _LOG_RATIO) if s.wall_ns > 0 else -1
        self.buckets[bucket] = self.buckets.get(bucket, 0) + 1
        if s.detail:
            self._add_detail(s)

    def add_many(self, steps: list[StepRecord]) -> None:
        """The same as add() for each step, in bulk: a fast loop's rows arrive by the
        hundred in each of the probe's messages (bench/ingest.py)."""
        if not steps:
            return
        self.add_walls(list(map(_WALL, steps)))
        self.add_parts(steps)

    def add_parts(self, steps: list[StepRecord]) -> None:
        """Of add_many, what is not the steps' times: their syncs and detailed splits."""
        self.syncs += sum(map(_SYNCS, steps))
        for s in filter(_DETAIL, steps):  # a sample of the steps (gpudoctor/probe/clock.py)
            self._add_detail(s)

    def add_walls(self, walls: list[int]) -> None:
        """Steps only counted and timed (no syncs, no split), by their times alone."""
        if not walls:
            return
        self.count += len(walls)
        self.wall_ns += sum(walls)
        buckets = self.buckets
        if min(walls) > 0:
            counted = Counter(map(int, map(_LOG_RATIO.__rtruediv__, map(math.log, walls))))
        else:
            counted = Counter(int(math.log(w) / _LOG_RATIO) if w > 0 else -1 for w in walls)
        for bucket, n in counted.items():
            buckets[bucket] = buckets.get(bucket, 0) + n

    def _add_detail(self, s: StepRecord) -> None:
        """A step measured in detail: its split (the split comes from these, as from rows)."""
        self.detailed += 1
        self.detailed_wall_ns += s.wall_ns
        self.loader_ns += s.loader_ns
        self.outside_ns += s.outside_ns
        self.forward_ns += s.forward_ns
        self.backward_ns += s.backward_ns
        self.optimizer_ns += s.optimizer_ns
        self.forwards += s.forwards
        self.pageable_copies += s.pageable_copies
        if s.batch_size:
            self.batch_sum += s.batch_size
            self.batch_steps += 1

    def merge(self, other: StepRollup) -> None:
        """Another stretch of the same process's steps added in (the store keeps an old
        stretch of a long run as its rollup: store.py, compaction.py)."""
        for name in _SUMMED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for bucket, n in other.buckets.items():
            self.buckets[bucket] = self.buckets.get(bucket, 0) + n

    def packed(self) -> bytes:
        """The rollup in a few hundred bytes: its sums (64-bit), then its buckets as pairs
        (32-bit: a bucket's index and its steps, a message's few hundred). A probe
        message's rollup, held until compaction takes it (compaction.Compactor.knows),
        costs ~1.4 kB as an object with its bucket dict."""
        pairs = array("i")
        for pair in self.buckets.items():
            pairs.extend(pair)
        return array("q", [getattr(self, name) for name in _SUMMED]).tobytes() + pairs.tobytes()

    @classmethod
    def unpacked(cls, data: bytes) -> StepRollup:
        """The rollup `packed` made."""
        sums, pairs = array("q"), array("i")
        sums.frombytes(data[: 8 * len(_SUMMED)])
        pairs.frombytes(data[8 * len(_SUMMED) :])
        rollup = cls(buckets=dict(zip(pairs[::2], pairs[1::2], strict=True)))
        for name, value in zip(_SUMMED, sums, strict=True):
            setattr(rollup, name, value)
        return rollup

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["buckets"] = {str(k): v for k, v in self.buckets.items()}  # JSON's keys
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepRollup:
        """ValueError/TypeError/KeyError when malformed."""
        buckets = d["buckets"]
        rollup = cls(buckets=dict(zip(map(int, buckets), map(int, buckets.values()), strict=True)))
        for name in _SUMMED:  # (a compacted week holds thousands: bench/store_week.py)
            if name in d:
                setattr(rollup, name, int(d[name]))
        return rollup

    def quantile_ms(self, q: float) -> float:
        """The step time at quantile q (0..1), within QUANTILE_ERROR of the true one
        (statistics.median's interpolation aside)."""
        if not self.count:
            return 0.0
        rank = q * (self.count - 1)
        seen = 0
        for bucket in sorted(self.buckets):
            seen += self.buckets[bucket]
            if seen > rank:
                if bucket < 0:
                    return 0.0
                return math.exp((bucket + 0.5) * _LOG_RATIO) / 1e6
        return 0.0  # not reached: the buckets hold every step


# the fields merge() adds up (all but the histogram), named once
_SUMMED = tuple(f.name for f in dataclasses.fields(StepRollup) if f.name != "buckets")


# A live doctor's steps rolled up by stretches of time (StepBins), for the plots of the
# time its rows no longer cover: a fast loop's 100,000 rows are its last half minute,
# and a plot of its last ten minutes showed step time for that half minute alone.
BIN_NS = 10 * 10**9  # the plots' interval over ten minutes (series.POINTS: 120 of 5 s)
RECENT_BINS_NS = 600 * 10**9  # the last ten minutes: bins of BIN_NS each
OLD_BINS = 240  # older stretches, at most: twice as wide each time there would be more
# A bin once closed keeps its step times in buckets three times as wide (6%: a plot's
# quantiles within 3%), packed: ~0.5 kB, where a bin of 1,000 steps as an object with
# its bucket dict took ~6 kB (8 ranks' 300 bins each: 13 MB; bench/week_memory.py)
COARSE = 3


def _closed(rollup: StepRollup) -> bytes:
    """A closed bin's rollup, its buckets coarsened, packed."""
    coarse: dict[int, int] = {}
    for bucket, n in rollup.buckets.items():
        middle = bucket if bucket < 0 else bucket - bucket % COARSE + COARSE // 2
        coarse[middle] = coarse.get(middle, 0) + n
    return dataclasses.replace(rollup, buckets=coarse).packed()


def _merged(first: bytes, second: bytes) -> bytes:
    rollup = StepRollup.unpacked(first)
    rollup.merge(StepRollup.unpacked(second))
    return rollup.packed()


class StepBins:
    """A process's steady steps by stretches of time: the last ten minutes in bins of
    BIN_NS, older ones in at most OLD_BINS stretches spread evenly over the run (two
    merged into one, twice as wide, whenever there would be more), each (its start, its
    rollup). A probe message's rollup goes into the bin of its last step's end; the
    newest bin takes them as they come, the others are closed (_closed)."""

    __slots__ = ("current", "recent", "old", "stride_ns")

    def __init__(self) -> None:
        self.current: tuple[int, StepRollup] | None = None
        self.recent: list[tuple[int, bytes]] = []
        self.old: list[tuple[int, bytes]] = []
        self.stride_ns = BIN_NS

    def add(self, t_ns: int, rollup: StepRollup) -> None:
        start = t_ns // BIN_NS * BIN_NS
        if self.current is not None and start <= self.current[0]:  # (or late: the newest)
            self.current[1].merge(rollup)
            return
        if self.current is not None:
            self.recent.append((self.current[0], _closed(self.current[1])))
        fresh = StepRollup()
        fresh.merge(rollup)
        self.current = (start, fresh)
        while self.recent and self.recent[0][0] + BIN_NS <= t_ns - RECENT_BINS_NS:
            self._age(*self.recent.pop(0))

    def _age(self, start: int, packed: bytes) -> None:
        """A bin older than the last ten minutes into the old stretches."""
        if self.old and start < self.old[-1][0] + self.stride_ns:
            self.old[-1] = (self.old[-1][0], _merged(self.old[-1][1], packed))
            return
        self.old.append((start, packed))
        if len(self.old) > OLD_BINS:
            self.stride_ns *= 2
            pairs = zip(self.old[::2], self.old[1::2], strict=False)
            merged = [(a, _merged(first, second)) for (a, first), (_, second) in pairs]
            self.old = merged + self.old[len(self.old) - len(self.old) % 2 :]

    def stretches(
        self, since_ns: int = 0, until_ns: int | None = None
    ) -> list[tuple[int, int, StepRollup]]:
        """(start, end, rollup) of each bin or stretch with steps whose middle is from
        `since_ns` and whose end is by `until_ns`, oldest first (only those unpacked: a
        refresh of the last ten minutes' plots reads their bins, not the run's)."""
        bins: list[tuple[int, bytes | StepRollup]] = [*self.old, *self.recent]
        if self.current is not None:
            bins.append(self.current)
        ends = [start for start, _ in bins[1:]] + [bins[-1][0] + BIN_NS] if bins else []
        out = []
        for (start, kept), end in zip(bins, ends, strict=True):
            if (start + end) // 2 < since_ns or (until_ns is not None and end > until_ns):
                continue
            rollup = StepRollup.unpacked(kept) if isinstance(kept, bytes) else kept
            if rollup.count:
                out.append((start, end, rollup))
        return out
