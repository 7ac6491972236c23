"""A long run's older records made compact in the store (issue 14): a week on 8 ranks
under 1 GB, a report of it in seconds.

Every step row cost about 56 bytes in the store: at 100 steps/s on 8 ranks, 3.9 GB a
day (a step only counted and timed, 31 of 32 on a fast loop, now costs about 32 bytes:
protocol.COUNTED_FIELDS; still 2.2 GB a day). Host and GPU readings cost 0.5 KB and 0.5 KB a GPU each second: on an
8-GPU node another 2.7 GB a week; the probe's routine keys (sequence, cumulative
counts, allocator gauges, four messages a second a rank) 1.7 GB more. So records older
than KEEP_WHOLE_S are compacted a SLOT_S of record time at a time:
- the slot's step rows of each process become one `rollup` record (diagnosis/rollup.py:
  the count, exact sums of each part of a step, a histogram of step times in 2%
  buckets): the report's count, data wait and split stay exact, its median and p90
  within the histogram's 1%;
- a probe message keeps what is not routine (facts, errors, the end); the cumulative
  counts and the allocator's gauges (its peak is the run's own) stay in each process's
  last message of the slot; a message left with nothing is deleted;
- host and GPU readings, and the other nodes' rank summaries (sent every 2 s on a
  multi-node job), are thinned to the first of each SAMPLE_EVERY_S (by node; the
  timeline spreads what it keeps in memory evenly over the run, weighing these by the
  time they stand for: readings.py; its other nodes' ranks the newest sent), counter pages
  (cumulative) to each process's last of the slot;
- py-spy's chunks (watch mode's stack chunks, one every 10 s; the line sampler's) are
  merged into one record a slot, as the live doctor merges its old ones in memory
  (stretches.py): samples summed, a week of watch's 60,000 of each kind ~120 MB of store;
- everything else (facts, findings, ends, exceptions, profiles, stalls...) is kept.
The recent ten minutes stay whole: the live screens and the rules read the recent
steps (the timeline keeps up to 12,500 rows a rank for 8 ranks in memory: two minutes
at 100 steps/s), and a replay of them sees every row. A report loads what the
store holds, so what is kept whole also bounds the report's time.
bench/store_week.py measures a week's store and the commands' times on it.

Pure: it decides what to delete, rewrite and add; store.py does the SQL.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpudoctor import hotspot_chunks, jsontext, stack_chunks
from gpudoctor.diagnosis.rollup import StepRollup
from gpudoctor.model import HotspotChunk, StackChunk
from gpudoctor.timeline import steady, steps_of


def _seconds(name: str, default: float) -> float:
    """A setting from the environment (seconds), the default when unset or not a number."""
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


# Records younger than this stay whole (GPUDOCTOR_KEEP_WHOLE_S to change it).
KEEP_WHOLE_S = _seconds("GPUDOCTOR_KEEP_WHOLE_S", 600.0)
# How often the live doctor compacts its session (GPUDOCTOR_COMPACT_EVERY_S).
COMPACT_EVERY_S = _seconds("GPUDOCTOR_COMPACT_EVERY_S", 60.0)
# The record time compacted together: one rollup a process each (GPUDOCTOR_SLOT_S).
SLOT_S = _seconds("GPUDOCTOR_SLOT_S", 600.0) or 600.0
# Older host and GPU readings: the first of each this many seconds is kept.
SAMPLE_EVERY_S = 60.0
# Records read at a time: a slot is read over several ticks of the doctor's loop (about
# 50 ms for 1,000 probe messages of 25 rows on this machine's cores) and written at once.
PASS_RECORDS = 1000
# ...and at most about this much of their text (at least one record): a fast loop's
# probe messages carry hundreds of rows each (~25 KB), and a pass of 1,000 of them held
# 25 MB of text at once, the doctor's peak memory (bench/RESULTS.md)
PASS_BYTES = 1_000_000
# py-spy's chunks by kind: how one is read from its record, whether b may join a, the two
# as one (a slot's chunks that fit one another become one record, the last of them)
CHUNKS: dict[str, tuple[Callable[..., Any], Callable[..., bool], Callable[..., Any]]] = {
    "stacks": (lambda d: StackChunk(**d), stack_chunks.fits, stack_chunks.merged),
    "hotspots": (HotspotChunk.from_dict, hotspot_chunks.fits, hotspot_chunks.merged),
}
ANY_SPAN = 2**62
KINDS = ("probe", "host", "gpu", "page", "ranks", *CHUNKS)  # what compaction touches
# A probe message's keys that only its process's last message of a slot keeps: the
# cumulative counts, and the CUDA allocator's gauges (whose peak is the run's own).
LAST_ONLY = ("counts", "dropped", "gauges")
ROUTINE = ("v", "seq")  # dropped from every compacted message
# Facts a process sends again and again (its counts of forwards, backwards and optimizer
# steps, its loaders' batches, its time ledger): a fast loop's probe sends them with
# every other message, ~300 bytes each, and a slot kept them all, ~100 MB a day a process
# in the store (a real loop under the doctor: bench/RESULTS.md). A slot keeps each key's
# newest value of a process, in the message that sent it, as a replay and a report read
# only the newest anyway (Timeline.ingest_probe updates its facts). These facts are
# events instead, each one kept: a capture's result (Timeline.profiles notes its time).
EVENT_FACTS = ("profile",)
# The live doctor's messages, already read and rolled up as they came (Compactor.knows),
# kept for compaction up to this many: it reads them again within COMPACT_EVERY_S (a
# few hundred a minute on a fast loop), so the bound holds only while it cannot (its
# store locked or full); past it the oldest are decoded again when their turn comes.
MAX_KNOWN = 5000


@dataclass
class Plan:
    """What compacting one slot does to the store."""

    delete: list[int] = field(default_factory=list)  # record ids
    rewrite: list[tuple[str, int]] = field(default_factory=list)  # (data, id)
    add: list[tuple[str, int, str]] = field(default_factory=list)  # (kind, t, data)


# A message the live doctor read: (pid, its rows, their steady ones rolled up, the rest
# of the message as JSON text), packed: ~1 kB for 400 of a fast loop's rows, where
# the rollup and the rest as objects took ~6 kB (5,000 of them 25 MB more: bench/RESULTS.md)
Known = tuple[int, int, bytes | None, str]


@dataclass
class Compactor:
    """One session's compaction, slot after slot, read over several calls: the slot in
    progress is held here until its last record is read, then written at once."""

    done_id: int = 0  # records up to this id are compacted
    slot: int | None = None  # the slot being read (record time // SLOT_S)
    read_id: int = 0  # its records up to this id were read
    sample_slots: dict[str, int] = field(default_factory=dict)  # kind -> last slot kept
    rollups: dict[int, tuple[StepRollup, int, int, int]] = field(default_factory=dict)
    last: dict[int, tuple[int, dict[str, Any], bool]] = field(default_factory=dict)
    pages: dict[int, int] = field(default_factory=dict)  # pid -> its last page's id
    plan: Plan = field(default_factory=Plan)
    # pid -> fact key -> the record that sent its newest value in the slot
    holders: dict[int, dict[str, int]] = field(default_factory=dict)
    # record id -> (its message, changed): not the last, but holding a newest fact value
    waiting: dict[int, tuple[dict[str, Any], bool]] = field(default_factory=dict)
    # (time, length, hash) of a probe message's text -> (pid, rows, their rollup, the
    # message without its rows): what the live doctor read already (knows)
    known: dict[tuple[int, int, int], Known] = field(default_factory=dict)
    # the slot's py-spy chunks by kind: (record id, its text), in order
    chunks: dict[str, list[tuple[int, str]]] = field(default_factory=dict)

    def knows(self, t: int, data: str, message: dict[str, Any], rollup: StepRollup | None) -> None:
        """A probe message the live doctor stored as `data` at `t`, read (`message`)
        and its steady rows rolled up (`rollup`) as it came: compaction takes these
        rather than decoding the text again (a fast loop's ~1,800 rows a second cost
        about 0.25% of a core to decode twice: bench/RESULTS.md)."""
        if len(self.known) >= MAX_KNOWN:
            del self.known[next(iter(self.known))]  # the oldest: decoded when its turn comes
        rest = json.dumps({k: v for k, v in message.items() if k != "steps"}, separators=(",", ":"))
        rows = message.get("steps") or ()
        packed = rollup.packed() if rollup is not None else None
        self.known[(t, len(data), hash(data))] = (int(message["pid"]), len(rows), packed, rest)

    def restart(self) -> None:
        """The slot in progress forgotten (it could not be written): read it again."""
        self.slot, self.read_id = None, self.done_id
        self.rollups, self.last, self.pages, self.plan = {}, {}, {}, Plan()
        self.holders, self.waiting, self.chunks = {}, {}, {}

    def read(self, records: list[tuple[int, str, int, str]], before_ns: int) -> Plan | None:
        """The next records after `read_id` (id, kind, t_mono_ns, data), in id order.
        The slot's plan once a record of a later slot shows that it is whole; None
        while it is not (or when its end is not older than `before_ns`)."""
        for record_id, kind, t, data in records:
            slot = int(t // (SLOT_S * 1e9))
            if self.slot is None:
                self.slot = slot
            if slot > self.slot:  # the slot is whole (records come in time order)
                return self._finish() if (self.slot + 1) * SLOT_S * 1e9 <= before_ns else None
            self.read_id = record_id
            self._take(record_id, kind, t, data)
        return None

    def _take(self, record_id: int, kind: str, t: int, data: str) -> None:
        plan = self.plan
        if kind == "probe":
            self._message(record_id, t, data)
        elif kind in ("host", "gpu", "ranks"):
            what = kind if kind != "ranks" else f"ranks {_node(data)}"  # by node
            sample_slot = int(t // (SAMPLE_EVERY_S * 1e9))
            if self.sample_slots.get(what) == sample_slot:
                plan.delete.append(record_id)
            else:
                self.sample_slots[what] = sample_slot
        elif kind in CHUNKS:
            self.chunks.setdefault(kind, []).append((record_id, data))
        elif kind == "page":
            pid = _pid(data)
            if pid is not None:
                if pid in self.pages:
                    plan.delete.append(self.pages[pid])
                self.pages[pid] = record_id

    def _message(self, record_id: int, t: int, data: str) -> None:
        """A probe message: its rows into its process's rollup; what is left of it
        settled when the process's next message shows it is not the last."""
        known = self.known.pop((t, len(data), hash(data)), None) if self.known else None
        if known is not None:  # read as it came: the same text, not decoded again
            pid, n, packed, rest = known
            these = StepRollup.unpacked(packed) if packed is not None else None
            message = jsontext.loads(rest)
        else:
            read = _message(data)
            if read is None:
                return  # a record it cannot read stays as it is
            message, pid = read, int(read["pid"])
            rows = message.pop("steps", None)
            n, these = len(rows or ()), None
            if rows:
                these = _rolled(pid, rows)
                if these is None:
                    return  # rows it cannot read: the record stays as it is
        if n:
            assert these is not None
            rollup, count, _, first = self.rollups.get(pid) or (StepRollup(), 0, t, record_id)
            rollup.merge(these)
            self.rollups[pid] = (rollup, count + n, t, first)
        changed = bool(n) or any(k in message for k in ROUTINE)
        for key in ROUTINE:
            message.pop(key, None)
        facts = message.get("facts")
        if isinstance(facts, dict):
            self._supersede(pid, record_id, facts)
        if pid in self.last:  # the one before is not the last: its cumulative keys go
            self._settle(*self.last[pid], last=False)
        self.last[pid] = (record_id, message, changed)

    def _supersede(self, pid: int, record_id: int, facts: dict[str, Any]) -> None:
        """`record_id` sends these facts of `pid` anew: their older values in the slot
        go from the messages that held them (a message left holding none is settled)."""
        holders = self.holders.setdefault(pid, {})
        for key in facts:
            if key in EVENT_FACTS:
                continue
            old, holders[key] = holders.get(key), record_id
            if old is None:
                continue
            if old in self.waiting:
                message = self.waiting.pop(old)[0]
                _drop_fact(message, key)
                if self._holds(message, old):
                    self.waiting[old] = (message, True)
                else:
                    self._write(old, message, True)
            elif pid in self.last and self.last[pid][0] == old:
                message = self.last[pid][1]
                _drop_fact(message, key)
                self.last[pid] = (old, message, True)

    def _holds(self, message: dict[str, Any], record_id: int) -> bool:
        """The message (`record_id`'s) holds the newest value of one of its process's facts."""
        facts = message.get("facts")
        if not isinstance(facts, dict):
            return False
        holders = self.holders.get(int(message["pid"]), {})
        return any(holders.get(key) == record_id for key in facts)

    def _settle(self, record_id: int, message: dict[str, Any], changed: bool, last: bool) -> None:
        if not last:
            removed = [message.pop(key, None) for key in LAST_ONLY]
            changed = changed or any(value is not None for value in removed)
            if self._holds(message, record_id):  # settled when they are sent anew, or at the end
                self.waiting[record_id] = (message, changed)
                return
        self._write(record_id, message, changed)

    def _write(self, record_id: int, message: dict[str, Any], changed: bool) -> None:
        """A message's compacted form into the plan: rewritten, deleted when nothing but
        its pid is left, or as it is."""
        if not changed:
            return  # compacted already
        if set(message) - {"pid"}:
            self.plan.rewrite.append((json.dumps(message, separators=(",", ":")), record_id))
        else:
            self.plan.delete.append(record_id)

    def _finish(self) -> Plan:
        for record_id, message, changed in self.last.values():
            self._settle(record_id, message, changed, last=True)
        for record_id, (message, changed) in self.waiting.items():
            self._write(record_id, message, changed)
        plan = self.plan
        for pid, (rollup, rows, t, first) in self.rollups.items():
            # the ids folded: a follower that read them already (store.follow) skips it
            record = {
                "pid": pid, "rows": rows, "first_id": first, "last_id": self.last[pid][0],
                "t": t, "rollup": rollup.to_dict(),
            }  # fmt: skip
            plan.add.append(("rollup", t, json.dumps(record, separators=(",", ":"))))
        for kind, held in self.chunks.items():
            _merge_chunks(plan, kind, held)
        self.slot = None
        self.rollups, self.last, self.pages, self.plan = {}, {}, {}, Plan()
        self.holders, self.waiting, self.chunks = {}, {}, {}
        return plan

    def written(self) -> None:
        """The slot's plan is in the store: its records are done."""
        self.done_id = self.read_id


def _merge_chunks(plan: Plan, kind: str, held: list[tuple[int, str]]) -> None:
    """A slot's chunks of one kind into the plan: each run of them that fit one another
    merged into the run's last record, the others deleted; one it cannot read is left
    as it is (and ends a run)."""
    read, fits, merge = CHUNKS[kind]
    run: list[int] = []
    whole: Any = None

    def close() -> None:
        if len(run) > 1:
            text = json.dumps(dataclasses.asdict(whole), separators=(",", ":"))
            plan.rewrite.append((text, run[-1]))
            plan.delete.extend(run[:-1])

    for record_id, data in held:
        try:
            chunk = read(jsontext.loads(data))
        except (ValueError, TypeError, KeyError):
            chunk = None
        if chunk is not None and whole is not None and fits(whole, chunk, ANY_SPAN):
            whole = merge(whole, chunk)
            run.append(record_id)
            continue
        close()
        run, whole = ([record_id], chunk) if chunk is not None else ([], None)
    close()


def _drop_fact(message: dict[str, Any], key: str) -> None:
    """An older value of a fact, sent anew later in the slot, out of its message."""
    facts = message["facts"]
    del facts[key]
    if not facts:
        del message["facts"]


def _message(data: str) -> dict[str, Any] | None:
    try:
        message = jsontext.loads(data)
        int(message["pid"])
    except (ValueError, TypeError, KeyError):
        return None
    return message if isinstance(message, dict) else None


def _rolled(pid: int, rows: list[Any]) -> StepRollup | None:
    """A message's steady rows rolled up: all of them, or None when one cannot be read."""
    these = StepRollup()
    try:
        these.add_many(steady(steps_of(pid, rows)))
    except (ValueError, TypeError, IndexError):
        return None
    return these


def apply_rollup(data: dict[str, Any]) -> tuple[int, int, StepRollup, int]:
    """A `rollup` record: (pid, rows, rollup, t); ValueError/TypeError/KeyError if bad."""
    rollup = StepRollup.from_dict(data["rollup"])
    return int(data["pid"]), int(data["rows"]), rollup, int(data.get("t", 0))


def _node(data: str) -> str:
    try:
        return str(json.loads(data)["node"])
    except (ValueError, TypeError, KeyError):
        return ""


def _pid(data: str) -> int | None:
    try:
        return int(json.loads(data)["pid"])
    except (ValueError, TypeError, KeyError):
        return None
