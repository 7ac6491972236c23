"""Who else takes the CPU: how long the job's threads were runnable but waited for a
core (the kernel's run-queue delay, /proc/PID/task/TID/schedstat, see the kernel's
Documentation/scheduler/sched-stats.rst), and the busiest processes outside the job
(utime + stime from /proc/PID/stat, proc(5))."""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Iterable

import psutil

from gpudoctor.model import OtherProcess

# Threads read for the run-queue delay, at most, per tick: a torch process has one
# intra-op thread per core, so a 96-core server's job may have hundreds; the busiest
# are the main processes and the loader workers, read first.
MAX_THREADS = 512
# The busiest other processes kept in a sample, and how often the machine's processes
# are scanned for them (every process's stat file: ~10 us each).
TOP_OTHERS = 3
SCAN_EVERY_S = 5.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def schedstat(pid: int, tid: int | str) -> tuple[int, int] | None:
    """A thread's time on a core and its time waiting for one (ns, all told), or None
    where the kernel does not say."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
            fields = f.read().split()
        return int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


class Owed:
    """A wait of `seconds` for some processes, lengthened by the longest time one of
    their main threads has since waited for a core (runnable, no core free: a busy
    machine, a cgroup the rest starves), up to `most` seconds in all: a starved process
    gets its time all the same. Processes may join as they appear (`see`)."""

    def __init__(self, seconds: float, most: float, pids: Iterable[int]) -> None:
        self.start = time.monotonic()
        self.seconds, self.most = seconds, most
        self._from: dict[int, int] = {}  # pid -> its run-queue delay when first seen
        self._waited_ns = 0
        self.see(pids)

    def see(self, pids: Iterable[int]) -> None:
        for pid in pids:
            read = schedstat(pid, pid) if pid not in self._from else None
            if read is not None:
                self._from[pid] = read[1]

    def deadline(self) -> float:
        """When the wait ends (time.monotonic()), as of now."""
        for pid, since in self._from.items():
            read = schedstat(pid, pid)
            if read is not None:
                self._waited_ns = max(self._waited_ns, read[1] - since)
        return self.start + min(self.seconds + self._waited_ns / 1e9, self.most)

    def left(self) -> float:
        return self.deadline() - time.monotonic()


class RunDelay:
    """Between two readings (None before the second, or where schedstat is absent): the
    fraction of the job's runnable time its threads spent waiting for a core, and the
    fraction of the time the main processes' main threads were blocked (neither on a
    core nor waiting for one: asleep, on a lock, a queue, I/O)."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[int, int]] = {}
        self._last_t: int | None = None

    def read(
        self, pids: Iterable[int], mains: Collection[int] = ()
    ) -> tuple[float | None, float | None]:
        now = time.monotonic_ns()
        seen: dict[int, tuple[int, int]] = {}
        ran = waited = 0
        main_busy: list[int] = []
        for pid in pids:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            if str(pid) in tids:  # the main thread first: kept when the cap cuts
                tids.remove(str(pid))
                tids.insert(0, str(pid))
            for tid in tids:
                if len(seen) >= MAX_THREADS:
                    break
                read = schedstat(pid, tid)
                if read is None:
                    continue
                on_cpu, delay = read
                key = int(tid)
                seen[key] = (on_cpu, delay)
                last = self._last.get(key)
                if last is None:
                    continue
                d_cpu, d_delay = max(on_cpu - last[0], 0), max(delay - last[1], 0)
                ran += d_cpu
                waited += d_delay
                if key == pid and pid in mains:
                    main_busy.append(d_cpu + d_delay)
        last_t, self._last_t = self._last_t, now
        self._last = seen
        if last_t is None:
            return None, None
        delay_fraction = waited / (ran + waited) if ran + waited > 0 else None
        span = now - last_t
        blocked = (
            1.0 - min(sum(main_busy) / len(main_busy) / span, 1.0)
            if main_busy and span > 0
            else None
        )
        return delay_fraction, blocked


class OtherProcesses:
    """The processes outside the job that used the most CPU since the last scan."""

    def __init__(self) -> None:
        self._last: dict[int, int] = {}  # pid -> utime + stime (ticks)
        self._last_t: float | None = None
        self._top: tuple[OtherProcess, ...] = ()

    def top(self, exclude: Collection[int], parent: int | None = None) -> tuple[OtherProcess, ...]:
        """The busiest others, rescanned at most every SCAN_EVERY_S (the first call only
        primes the counters); `exclude`: the job's tree and the doctor, and `parent`'s
        children (the doctor's helpers: py-spy)."""
        now = time.monotonic()
        if self._last_t is not None and now - self._last_t < SCAN_EVERY_S:
            return self._top
        ticks, parents = _cpu_ticks()
        exclude = set(exclude) | {pid for pid, pp in parents.items() if pp == parent}
        if self._last_t is not None:
            dt = max(now - self._last_t, 1e-3)
            used = sorted(
                (
                    ((t - self._last.get(pid, t)) / CLOCK_TICKS / dt, pid)
                    for pid, t in ticks.items()
                    if pid not in exclude and pid in self._last
                ),
                reverse=True,
            )
            self._top = tuple(
                p
                for p in (
                    _describe(pid, cores) for cores, pid in used[:TOP_OTHERS] if cores >= 0.05
                )
                if p is not None
            )
        self._last, self._last_t = ticks, now
        return self._top


def _cpu_ticks() -> tuple[dict[int, int], dict[int, int]]:
    """Every process's CPU time so far (clock ticks), and its parent."""
    out: dict[int, int] = {}
    parents: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out, parents
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
            fields = data[data.rindex(b")") + 2 :].split()
            out[int(name)] = int(fields[11]) + int(fields[12])  # utime, stime
            parents[int(name)] = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
    return out, parents


def _describe(pid: int, cores: float) -> OtherProcess | None:
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            name = p.name()
            user = p.username()
            cmdline = " ".join(p.cmdline())[:200]
    except psutil.Error:
        return None
    return OtherProcess(
        pid=pid, name=name, user=user, command=cmdline or name, cpu_cores=round(cores, 3)
    )
