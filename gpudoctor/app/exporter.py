"""`gpudoctor exporter`: every training job on the node, watched from outside and served
as OpenMetrics on one port (metrics.py's NodeCollector).

One loop in one thread: each refresh it looks at the node (jobs/node.py), starts
watching each new training process as `watch` does (never injecting, never stopping
it; each a session in the store, as a watch is) with a lighter stack sampler, takes one
turn of each watched job, and hands the collector one entry per job. A job that ended
is served as it ended (`gpudoctor_job_running` 0) for `grace_s` more, then dropped; so is
a job whose own `run` doctor sent its series (pushed.py).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpudoctor.app.run import conclude
from gpudoctor.i18n import _
from gpudoctor.jobs.node import NodeJob, training_jobs
from gpudoctor.jobs.watched import WatchedJob, find_target
from gpudoctor.metrics import NodeCollector, NodeEntry, PushedEntry
from gpudoctor.pushed import FRESH_S, PushedJob, Receiver, receiving_path
from gpudoctor.snapshot import take
from gpudoctor.sources.nvml import NvmlReader
from gpudoctor.sources.stacks import AttachError, check_access
from gpudoctor.store import Store, StoreError

REFRESH_S = 10.0  # a new job is served within two refreshes (bench/exporter_cost.py: 5 s cost
# 0.3% of a core more with 8 jobs)
GRACE_S = 60.0  # an ended job's series stay this long (a scrape or two at 15-30 s)
# A node agent samples each job's stacks far less than `watch` (20 Hz, all the time): 4 Hz
# gives the 40 samples a finding needs (diagnosis/window.py MIN_STACK_SAMPLES) in its
# first 10 s chunk and a step rate from it and the next (20 s, at once), then a 20 s
# chunk every 80 s (a finding lasts minutes; the findings rest on the last chunks, so
# they hold through the rests): 8 jobs at 4 Hz all the time took 2.5% of a core
# (bench/RESULTS.md); no second run of busy threads (the lines of the user's code are
# `watch`'s).
NODE_STACKS = {
    "rate_hz": 4, "chunk_s": 20.0, "first_chunk_s": 10.0, "lines": False, "rest_s": 60.0,
}  # fmt: skip


@dataclass
class Followed:
    node_job: NodeJob
    job: WatchedJob
    entry: NodeEntry | None = None
    ended_at: float | None = None


class Exporter:
    def __init__(
        self,
        store: Store,
        collector: NodeCollector,
        py_spy: str | None,
        lang: str,
        refresh_s: float = REFRESH_S,
        grace_s: float = GRACE_S,
        say: Callable[[str], None] = print,
    ) -> None:
        self.store = store
        self.collector = collector
        self.py_spy = py_spy
        self.lang = lang
        self.refresh_s = refresh_s
        self.grace_s = grace_s
        self.say = say
        self.nvml = NvmlReader()
        self.followed: dict[tuple[int, float], Followed] = {}
        self.known: dict[tuple[int, float], NodeJob] = {}
        self.refused: set[tuple[int, float]] = set()  # could not be watched: said once
        self.awaiting: dict[tuple[int, float], float] = {}  # launched jobs: since when
        self.unreadable_said = False
        self.stopping = False
        # the series `run` doctors on the node send (pushed.py): their jobs are not
        # watched from outside while they come
        self.receiver: Receiver | None = None
        self.pushed_seen: dict[int, PushedEntry] = {}  # served at the last refresh, running
        self.pushed_ended: dict[int, tuple[PushedEntry, float]] = {}  # and since when ended
        path = receiving_path()
        if path is not None:
            try:
                self.receiver = Receiver(path)
            except OSError as exc:
                say(
                    _(
                        "gpudoctor exporter: cannot listen on {path} ({why}): jobs under "
                        "gpudoctor run are watched from outside like the others"
                    ).format(path=path, why=exc.strerror or exc)
                )

    def run(self, max_seconds: float | None = None) -> None:
        """Refresh until `stop` (a signal's handler) or `max_seconds`; then leave every
        job running."""
        started = time.monotonic()
        try:
            while not self.stopping:
                turn = time.monotonic()
                self.refresh()
                if max_seconds is not None and time.monotonic() - started >= max_seconds:
                    break
                pause = self.refresh_s - (time.monotonic() - turn)
                deadline = time.monotonic() + max(0.0, pause)
                while not self.stopping and time.monotonic() < deadline:
                    time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        finally:
            self.leave()

    def stop(self) -> None:
        self.stopping = True

    def refresh(self) -> None:
        """One look at the node and one turn of each job; the collector's entries."""
        census = training_jobs(self.known)
        self.known = {j.key: j for j in census.jobs}
        self.awaiting = {k: t for k, t in self.awaiting.items() if k in self.known}
        if census.unreadable and not self.unreadable_said:
            self.unreadable_said = True
            self.say(
                _(
                    "gpudoctor exporter: {n} Python processes of other users cannot be read "
                    "(run the exporter as root to follow every job on the node)"
                ).format(n=census.unreadable)
            )
        pushed = self._pushed()
        for node_job in census.jobs:
            key = node_job.key
            if node_job.pid in pushed:
                f = self.followed.get(key)
                if f is not None and f.ended_at is None:  # its own doctor speaks for it
                    f.job.leave()
                    self._conclude(f)
                    del self.followed[key]
            elif key not in self.followed and key not in self.refused:
                if self._awaited(node_job):
                    continue  # its doctor's first series are on their way
                self._follow(node_job)
        now = time.monotonic()
        for key, f in list(self.followed.items()):
            if f.ended_at is None:
                self._turn(f, now)
            elif now - f.ended_at >= self.grace_s:
                del self.followed[key]
        self.collector.entries = tuple(f.entry for f in self.followed.values() if f.entry)
        self.collector.pushed = self._pushed_entries(pushed, now)

    def _pushed_entries(self, pushed: dict[int, PushedJob], now: float) -> tuple[PushedEntry, ...]:
        """The jobs their own doctor speaks for, and those of them that ended: served as
        they were last, `gpudoctor_job_running` 0, for the grace period (as a watched
        job's are). One whose doctor went quiet while it runs is watched from outside."""
        alive = {key[0]: key for key in self.known}
        served: list[PushedEntry] = []
        for pid, job in pushed.items():
            if pid in alive:
                entry = PushedEntry(pid, tuple(job.families), self.known[alive[pid]].labels)
                self.pushed_seen[pid] = entry
                served.append(entry)
        for pid in list(self.pushed_seen):
            if pid in alive and pid not in pushed:  # its doctor is gone: watched now
                del self.pushed_seen[pid]
            elif pid not in alive:  # the job ended
                entry = self.pushed_seen.pop(pid)
                self.pushed_ended[pid] = (dataclasses.replace(entry, running=False), now)
                if self.receiver is not None:  # its doctor's last words change nothing
                    self.receiver.jobs.pop(pid, None)
        for pid, (entry, ended_at) in list(self.pushed_ended.items()):
            if now - ended_at >= self.grace_s or pid in self.pushed_seen:
                del self.pushed_ended[pid]
            else:
                served.append(entry)
        return tuple(served)

    def _awaited(self, node_job: NodeJob) -> bool:
        """A job under `gpudoctor run` is given FRESH_S for its doctor to send its
        series (a doctor started before this exporter never does: then it is watched
        from outside like the others)."""
        if not node_job.launched or self.receiver is None:
            return False
        first = self.awaiting.setdefault(node_job.key, time.monotonic())
        return time.monotonic() - first < FRESH_S

    def _pushed(self) -> dict[int, PushedJob]:
        """The jobs whose own doctor sent its series lately, by pid."""
        if self.receiver is None:
            return {}
        self.receiver.take()
        return self.receiver.fresh()

    def _follow(self, node_job: NodeJob) -> None:
        try:
            target = find_target(node_job.pid)
            if self.py_spy is not None:
                check_access(self.py_spy, node_job.pid)
        except AttachError as exc:
            self.refused.add(node_job.key)
            self.say(f"gpudoctor exporter: {exc}")
            return
        job = WatchedJob(
            target, self.store, interval_s=self.refresh_s, nvml=self.nvml,
            py_spy=self.py_spy, stacks=NODE_STACKS,
        )  # fmt: skip
        try:
            job.start()
        except (StoreError, AttachError) as exc:
            job.close()
            self.refused.add(node_job.key)
            self.say(f"gpudoctor exporter: {exc}")
            return
        self.followed[node_job.key] = Followed(node_job, job)

    def _turn(self, f: Followed, now: float) -> None:
        ended = f.job.turn()
        if ended is not None:
            f.ended_at = now
            self._conclude(f)
        f.entry = self._entry(f, running=ended is None)

    def _entry(self, f: Followed, running: bool) -> NodeEntry:
        snapshot = take(f.job.timeline, f.node_job.pid)
        rank = f.node_job.labels.get("rank", "")
        if rank:  # the series' rank label (metrics.py reads it from the facts)
            snapshot = dataclasses.replace(snapshot, facts={**snapshot.facts, "rank": rank})
        return NodeEntry(snapshot, running, f.node_job.labels)

    def _conclude(self, f: Followed) -> None:
        """The watch's session ended in the store, as `watch` ends it."""
        try:
            conclude(f.job, self.store, self.lang)
        finally:
            f.job.close()

    def leave(self) -> None:
        """Every job still followed left running; its session ended in the store."""
        for f in self.followed.values():
            if f.ended_at is None:
                f.job.leave()
                f.ended_at = time.monotonic()
                self._conclude(f)
        self.nvml.close()
        if self.receiver is not None:
            self.receiver.close()
