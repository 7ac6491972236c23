"""A job the doctor follows, and the one loop that follows it.

Two kinds: a job the doctor launched with the probe inside (launched.py) and a process
it watches from outside (watched.py). Both are a `Recorder`: the timeline and the store,
the host and GPU readings each tick, and `run`, the loop that waits for the job's
messages and its end, ticks at the interval, and ends with the job, at --max-seconds,
or when the doctor leaves (`detach`). What differs is a handful of small methods.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import selectors
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from gpudoctor.compaction import COMPACT_EVERY_S, KEEP_WHOLE_S, Compactor
from gpudoctor.diagnosis.gpu_timeline import RankTimeline
from gpudoctor.jobs.captures import keep
from gpudoctor.model import EndedBy, GpuSample, HostSample, JobExit
from gpudoctor.processes import ProcessLister
from gpudoctor.sources.host import HostReader
from gpudoctor.sources.nvml import NvmlReader
from gpudoctor.sources.pages import read_pages
from gpudoctor.sources.probe_server import ProbeServer
from gpudoctor.store import Store, encode
from gpudoctor.timeline import Timeline

OnTick = Callable[[Timeline], None]
# Without a pidfd (Linux < 5.3) the loop looks for the job's end this often.
POLL_S = 0.1
# A turn of the loop this much later than it asked to wake: the doctor was stalled
# (stopped, starved of CPU, swapped out) and says so in the report. The loop wakes at
# least once an interval; a second late is far beyond the scheduler's own jitter.
STALL_S = 1.0
# The most one tick spends compacting the store (the rest waits for the next tick).
COMPACT_BUDGET_S = 0.1
# The doctor's own garbage collector. A fast loop's step rows arrive by the thousand a
# second, and CPython collects after every 700 new objects by default, its full
# collections walking everything the doctor and its TUI hold: 0.6% of a core over a
# loop of 1,500 steps a second with the TUI. With a collection every GC_EVERY new
# objects, and what start-up made (modules, the TUI's widgets) frozen out of them at
# the first tick, 0.2% (bench/RESULTS.md, "The doctor's garbage collections"). Garbage
# without cycles is freed at once either way; cycles wait for a collection a little
# longer. The doctor's process only: the probe never runs this.
GC_EVERY = 20_000


class JobSource(Protocol):
    """What the application layer and the TUI need of a job being followed."""

    timeline: Timeline
    store: Store  # where it is recorded (a fault of the doctor's is kept beside it)
    session_id: int | None
    interval_s: float
    can_stop: bool  # the doctor may stop it (one it launched), or only leave it
    can_profile: bool  # torch.profiler can be asked for over its next steps

    @property
    def job_pid(self) -> int | None: ...

    def run(self, on_tick: OnTick | None = None) -> JobExit: ...

    def stop(self, reason: EndedBy = "max-seconds") -> None: ...

    def detach(self) -> None: ...

    def note_hangup(self) -> None: ...

    def request_profile(self, steps: int) -> None: ...

    def close(self) -> None: ...


class GpuProcessNames:
    """Adds the user and command of each GPU process (asked once per pid) to NVML's
    readings, so the GPU panel and the recording say whose they are."""

    def __init__(self) -> None:
        self._lister = ProcessLister()
        self._known: dict[int, tuple[str, str]] = {}

    def fill(self, gpus: list[GpuSample]) -> list[GpuSample]:
        pids = {p.pid for g in gpus for p in g.processes}
        if not pids:
            return gpus
        new = pids - set(self._known)
        if new:
            self._known.update(self._lister.describe(new))
        for pid in set(self._known) - pids:
            del self._known[pid]
        out = []
        for g in gpus:
            procs = tuple(
                dataclasses.replace(p, user=self._known[p.pid][0], command=self._known[p.pid][1])
                if p.pid in self._known
                else p
                for p in g.processes
            )
            out.append(dataclasses.replace(g, processes=procs))
        return out


class Recorder(ABC):
    """What launching and watching share: the timeline and the store, the host and GPU
    readings each tick, leaving the job running, and the loop. A kind of job says the
    parts marked abstract for itself."""

    can_stop = True
    can_profile = False
    first_tick_s: float | None = None  # None: one interval after the start

    def __init__(
        self,
        command: list[str],
        store: Store,
        interval_s: float = 1.0,
        max_seconds: float | None = None,
        nvml: NvmlReader | None = None,
    ) -> None:
        self.command = command
        self.store = store
        self.interval_s = interval_s
        self.max_seconds = max_seconds
        self.nvml = nvml if nvml is not None else NvmlReader()
        self._detached = False
        self._hangup_ns: int | None = None  # set from the main thread: see note_hangup
        self._handles_changed = False  # the kind of job's files changed: wait on the new
        self.timeline = Timeline(
            command, time.time(), time.monotonic_ns(), gpu_reason=self.nvml.reason,
            hostname=socket.gethostname(),
        )  # fmt: skip
        self.session_id: int | None = None
        self.host: HostReader | None = None
        self.names = GpuProcessNames()
        self.compactor = Compactor()
        self._compacted = time.monotonic()
        # each process's count as its last page record holds it: what `history` reads of a
        # doctor that died (the timeline's page_steps also moves with the probe's messages)
        self._pages_recorded: dict[int, int] = {}

    @property
    @abstractmethod
    def job_pid(self) -> int | None: ...

    @abstractmethod
    def start(self) -> None:
        """Begin: the job launched, or the process found; the session created."""

    # -- the loop ---------------------------------------------------------------------------

    def run(self, on_tick: OnTick | None = None) -> JobExit:
        """Follow the job until it ends, --max-seconds, or `detach`; how it ended."""
        assert self.session_id is not None and self.job_pid is not None
        selector = selectors.DefaultSelector()
        self._wait_on(selector)
        pidfd = open_pidfd(self.job_pid)
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ, "exit")
        gc.set_threshold(GC_EVERY, *gc.get_threshold()[1:])
        frozen = False
        started = time.monotonic()
        first = self.interval_s if self.first_tick_s is None else self.first_tick_s
        next_tick = started + first
        ended = False
        awake = started  # when the loop last came back from waiting
        try:
            while not ended:
                if self._detached:
                    self._readable("probe")
                    self._read_counts()
                    return self._finish(ended=False, returncode=None)
                timeout = max(0.0, next_tick - time.monotonic())
                if pidfd is None:
                    timeout = min(timeout, POLL_S)
                events = selector.select(timeout)
                now = time.monotonic()
                late = now - awake - timeout
                if late >= STALL_S:
                    self._stalled(now - late, now)
                awake = now
                for key, _ in events:
                    if key.data == "exit":
                        ended = True
                    else:
                        self._readable(key.data)
                ended = ended or self._job_ended()
                if ended:
                    break
                now = time.monotonic()
                if now >= next_tick:
                    if not frozen:  # start-up is done: the TUI has drawn its first frame
                        gc.freeze()
                        frozen = True
                    self._note_hangup()
                    self._tick()
                    if self._handles_changed:
                        self._wait_on(selector)
                    if on_tick is not None:
                        on_tick(self.timeline)
                    next_tick = max(next_tick + self.interval_s, now + self.interval_s / 2)
                if self.max_seconds is not None and now - started >= self.max_seconds:
                    self._time_is_up()
                self._escalate()
            returncode = self._wrap_up()
            self._note_hangup()
        finally:
            selector.close()
            if pidfd is not None:
                os.close(pidfd)
        return self._finish(ended=True, returncode=returncode)

    def _wait_on(self, selector: selectors.BaseSelector) -> None:
        """(Again) wait on the kind of job's own files, as `_handles` gives them now."""
        self._handles_changed = False
        for key in list(selector.get_map().values()):
            if key.data != "exit":  # by the number it was registered with: a remade
                selector.unregister(key.fd)  # socket's fileno() is another one
        for handle, tag in self._handles():
            selector.register(handle, selectors.EVENT_READ, tag)

    def _stalled(self, since: float, until: float) -> None:
        """The doctor did not run from `since` to `until` (time.monotonic): said in the
        report (the probe keeps its rows meanwhile, up to a bound)."""
        assert self.session_id is not None
        span = (int(since * 1e9), int(until * 1e9))  # the clock of time.monotonic_ns
        self.timeline.stalls.append(span)
        self.store.add(self.session_id, "stall", span[1], {"from": span[0], "to": span[1]})

    def _commit(self) -> None:
        """The tick's records into the store; when it cannot be written (full, locked)
        they stay in memory for the next try, and the outage goes in the timeline."""
        assert self.session_id is not None
        before = self.store.trouble
        self.store.commit()
        trouble, now = self.store.trouble, time.monotonic_ns()
        self.timeline.store_lost = self.store.lost
        if trouble is None and time.monotonic() - self._compacted >= COMPACT_EVERY_S:
            self._compact()
        if trouble is not None and before is None:
            self.timeline.store_outages.append((now, None, trouble))
        elif trouble is None and before is not None and self.timeline.store_outages:
            since, _, why = self.timeline.store_outages[-1]
            self.timeline.store_outages[-1] = (since, now, why)
            record = {"from": since, "to": now, "why": why, "lost": self.store.lost}
            self.store.add(self.session_id, "store", now, record)

    def _compact(self) -> None:
        """The session's records older than KEEP_WHOLE_S made compact (compaction.py),
        a few passes at a time: a tick is not held for more than COMPACT_BUDGET_S."""
        assert self.session_id is not None
        self._compacted = time.monotonic()
        before = time.monotonic_ns() - int(KEEP_WHOLE_S * 1e9)
        deadline = self._compacted + COMPACT_BUDGET_S
        while self.store.compact(self.session_id, before, self.compactor):
            if time.monotonic() >= deadline:
                self._compacted -= COMPACT_EVERY_S  # more at the next tick
                break

    def detach(self) -> None:
        """Leave the job running: the loop ends at its next turn (thread-safe)."""
        self._detached = True

    def note_hangup(self) -> None:
        """The doctor's terminal went away; it records on, headless (thread-safe, and
        safe in a signal handler: the loop writes the record at its next tick)."""
        if self._hangup_ns is None:
            self._hangup_ns = time.monotonic_ns()

    def _note_hangup(self) -> None:
        t = self._hangup_ns
        if t is not None and self.timeline.hung_up_ns is None:
            assert self.session_id is not None
            self.timeline.hung_up_ns = t
            self.store.add(self.session_id, "hangup", t, {"t": t})

    # -- what each kind of job says for itself ------------------------------------------------

    def _handles(self) -> list[tuple[Any, str]]:
        """Files to wait on besides the job's end, each with its tag for `_readable`."""
        return []

    def _readable(self, tag: str) -> None:
        """A file of `_handles` has something (also called once when the doctor leaves)."""
        return None  # nothing, unless the kind of job says otherwise

    def _read_counts(self) -> None:
        """Anything the job leaves to be read besides messages (the probe's counters)."""
        return None  # nothing, unless the kind of job says otherwise

    @abstractmethod
    def _job_ended(self) -> bool: ...

    @abstractmethod
    def _time_is_up(self) -> None:
        """--max-seconds has passed."""

    def _escalate(self) -> None:
        """Called each turn: a stop under way may need a harder signal."""
        return None  # nothing, unless the kind of job says otherwise

    def _wrap_up(self) -> int | None:
        """The job ended: what is left to read; its return code if the doctor can know it."""
        return None

    @abstractmethod
    def _finish(self, ended: bool, returncode: int | None) -> JobExit:
        """How the run ended: the job ended (its return code when the doctor can know
        it), or the doctor left it running."""

    def _tick(self) -> None:
        self._read_host_and_gpus()
        self._commit()

    @abstractmethod
    def stop(self, reason: EndedBy = "max-seconds") -> None:
        """Ask the job to stop (one the doctor launched), or leave it (one it watches)."""

    def request_profile(self, steps: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot profile (can_profile)")

    def close(self) -> None:
        """Release what following the job took (sockets, samplers, folders)."""
        return None  # nothing, unless the kind of job says otherwise

    # -- shared readings ----------------------------------------------------------------------

    def _drain_probe(self, server: ProbeServer) -> None:
        """The probes' messages waiting on `server`, into the timeline and the store."""
        assert self.session_id is not None
        t = time.monotonic_ns()
        for message, raw in server.drain():
            rollup = self.timeline.ingest_probe(message, apart=True)
            text = raw.decode()
            self.store.add_raw(self.session_id, "probe", t, text)
            self.compactor.knows(t, text, message, rollup)

    def _keep_traces(self, found: list[tuple[int, RankTimeline]], folder: str) -> None:
        """Profiler captures read as GPU timelines (jobs/captures.py), into the timeline
        and the store; a trace in the doctor's `folder` (gone when it ends) is kept
        beside the store first, and the timeline names that copy."""
        assert self.session_id is not None
        for pid, analysed in found:
            capture = (self.timeline.facts.get(pid, {}).get("profile") or {}).get("capture", 0)
            name = f"session-{self.session_id}-pid-{pid}-capture-{capture}.json.gz"
            if Path(analysed.path).parent == Path(folder):  # ours: kept by the store
                kept = keep(Path(analysed.path), Path(self.store.path).parent / "traces", name)
                analysed = dataclasses.replace(analysed, path=str(kept) if kept else "")
            self.timeline.gpu_timelines[pid] = analysed
            record = {"pid": pid, "timeline": analysed.to_dict()}
            self.store.add(self.session_id, "gpu_timeline", time.monotonic_ns(), record)

    def _read_probe_pages(self, folder: str) -> None:
        """The probes' exact step counts (their counter pages), recorded when they move."""
        assert self.session_id is not None
        for pid, page in read_pages(folder).items():
            self.timeline.ingest_page(pid, page.steps)
            if self._pages_recorded.get(pid) != page.steps:
                self._pages_recorded[pid] = page.steps
                record = {"pid": pid, "steps": page.steps, "rows_sent": page.rows_sent}
                self.store.add(self.session_id, "page", time.monotonic_ns(), record)

    def _read_host_and_gpus(self) -> tuple[HostSample, list[GpuSample]]:
        """One host and one GPU reading, into the timeline and the store; returned."""
        assert self.session_id is not None and self.host is not None
        host = self.host.read()
        self.timeline.host.append(host)
        self.store.add(self.session_id, "host", host.t_mono_ns, encode(host))
        gpus = self.names.fill(self.nvml.read())
        if gpus:
            self.timeline.gpus.extend(gpus)
            self.store.add(self.session_id, "gpu", gpus[0].t_mono_ns, [encode(g) for g in gpus])
        return host, gpus


def ask_for_profile(control_path: str, steps: int) -> None:
    """Ask a probe for torch.profiler over its next `steps` steps (thread-safe): written
    whole into the control file it looks at (probe/profile.py)."""
    tmp = control_path + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(steps))
    os.replace(tmp, control_path)


def open_pidfd(pid: int) -> int | None:
    """A file descriptor that becomes readable when the process ends (any process, not
    only a child: Linux >= 5.3), or None where there is none."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


__all__ = ["GpuProcessNames", "JobSource", "OnTick", "Recorder", "ask_for_profile", "open_pidfd"]
