"""Host readings through psutil: CPU per core, iowait, load, memory, swap, disk and
network rates, and the job's process tree (main process, DataLoader workers)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from gpudoctor.model import HostSample, OtherProcess, ProcSample
from gpudoctor.sources.contention import OtherProcesses, RunDelay

# Others are looked for by name once they take a quarter of a core (below that, no
# neighbour slows a job by the 20% noisy-neighbour asks for: DESIGN.md section 4).
NAME_OTHERS_CORES = 0.25


def cores_allowed(pid: int | None = None) -> int:
    """Cores the job may use: its CPU affinity, capped by a cgroup v2 CPU quota."""
    try:
        cores = (
            len(psutil.Process(pid).cpu_affinity() or []) if pid else len(os.sched_getaffinity(0))
        )
    except (psutil.Error, AttributeError, OSError):
        cores = psutil.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cores = min(cores, max(1, round(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


class HostReader:
    def __init__(self, job_pid: int | None = None) -> None:
        self.job_pid = job_pid
        self.step_pids: set[int] = set()
        self._procs: dict[int, psutil.Process] = {}
        self._servers: dict[int, int | None] = {}  # multiprocessing's, in the job's tree
        # the job's tree as last scanned, and the newest pid on the machine then
        self._tree: list[int] = []
        self._newest_pid: int | None = None
        self._proc_io: dict[int, tuple[float, int, int]] = {}
        self._last_t = time.monotonic()
        self._disk = psutil.disk_io_counters()
        self._net = psutil.net_io_counters()
        self._cores_allowed = cores_allowed(job_pid)
        self._me = psutil.Process()
        self._me.cpu_percent()
        self._run_delay = RunDelay()
        self._others = OtherProcesses()
        psutil.cpu_percent(percpu=True)  # first call primes the counters
        psutil.cpu_times_percent()

    def read(self) -> HostSample:
        now = time.monotonic()
        dt = max(now - self._last_t, 1e-3)
        self._last_t = now
        per_core = tuple(psutil.cpu_percent(percpu=True))
        times = psutil.cpu_times_percent()
        iowait = getattr(times, "iowait", None)
        vm = psutil.virtual_memory()
        sw = psutil.swap_memory()
        disk = psutil.disk_io_counters()
        net = psutil.net_io_counters()
        d_read = d_write = n_rx = n_tx = 0.0
        if disk is not None and self._disk is not None:
            d_read = (disk.read_bytes - self._disk.read_bytes) / dt
            d_write = (disk.write_bytes - self._disk.write_bytes) / dt
        if net is not None and self._net is not None:
            n_rx = (net.bytes_recv - self._net.bytes_recv) / dt
            n_tx = (net.bytes_sent - self._net.bytes_sent) / dt
        self._disk, self._net = disk, net
        job = self._job_tree(now, dt)
        others_cores = self._others_cores(per_core, job)
        niced = self._others_niced(getattr(times, "nice", None), len(per_core), others_cores)
        steal = getattr(times, "steal", None)
        delay, blocked = (
            self._run_delay.read((p.pid for p in job), {p.pid for p in job if p.role == "main"})
            if self.job_pid is not None
            else (None, None)
        )
        return HostSample(
            t_mono_ns=time.monotonic_ns(),
            cpu_pct_per_core=per_core,
            iowait_pct=float(iowait) if iowait is not None else None,
            load_1m=os.getloadavg()[0],
            mem_used_bytes=int(vm.total - vm.available),
            mem_total_bytes=int(vm.total),
            swap_used_bytes=int(sw.used),
            swap_total_bytes=int(sw.total),
            disk_read_bytes_per_s=max(d_read, 0.0),
            disk_write_bytes_per_s=max(d_write, 0.0),
            net_rx_bytes_per_s=max(n_rx, 0.0),
            net_tx_bytes_per_s=max(n_tx, 0.0),
            cores_allowed=self._cores_allowed,
            job=job,
            others_cpu_cores=others_cores,
            job_run_delay_fraction=delay,
            main_blocked_fraction=blocked,
            steal_pct=float(steal) if steal is not None else None,
            others=self._busiest_others(others_cores, job),
            others_niced_cpu_cores=niced,
        )

    def _others_cores(self, per_core: tuple[float, ...], job: tuple[ProcSample, ...]) -> float:
        """Cores busy with anything but the job and the doctor: the machine's busy time
        (which counts a hypervisor's steal) less theirs."""
        try:
            mine = self._me.cpu_percent() / 100.0
        except psutil.Error:
            mine = 0.0
        busy = sum(per_core) / 100.0
        return round(max(busy - sum(p.cpu_pct for p in job) / 100.0 - mine, 0.0), 3)

    def _others_niced(self, nice_pct: float | None, cores: int, others: float) -> float | None:
        """Of the others' cores, those niced processes ran: the machine's niced time
        (its `nice` column), when neither the job nor the doctor is niced itself (their
        time would be in it too: not told apart, None)."""
        if nice_pct is None or self.job_pid is None:
            return None
        try:
            if self._me.nice() > 0 or self._proc(self.job_pid).nice() > 0:
                return None
        except psutil.Error:
            return None
        return round(min(others, nice_pct / 100.0 * cores), 3)

    def _busiest_others(
        self, cores: float, job: tuple[ProcSample, ...]
    ) -> tuple[OtherProcess, ...]:
        if cores < NAME_OTHERS_CORES:
            return ()
        return self._others.top({p.pid for p in job} | {self._me.pid}, parent=self._me.pid)

    def _job_tree(self, now: float, dt: float) -> tuple[ProcSample, ...]:
        if self.job_pid is None:
            return ()
        out = []
        for pid in self._tree_pids():
            try:
                first = pid not in self._procs
                p = self._proc(pid)
                with p.oneshot():
                    cpu = self._first_cpu(p, dt) if first else p.cpu_percent()
                    ppid = p.ppid()
                    name = p.name()
                    rss = p.memory_info().rss
                    status = p.status()
                    threads = p.num_threads()
                    read_rate, write_rate = self._io_rate(p, now)
                if first:
                    self._note_server(p, ppid)
            except psutil.Error:
                continue
            out.append(
                ProcSample(
                    pid=p.pid,
                    ppid=ppid,
                    name=name,
                    role=self._role(p.pid, ppid),
                    cpu_pct=cpu,
                    rss_bytes=rss,
                    read_bytes_per_s=read_rate,
                    write_bytes_per_s=write_rate,
                    status=status,
                    num_threads=threads,
                )
            )
        out = _rooted(out, self.job_pid)
        alive = {s.pid for s in out}
        if len(alive) < len(self._tree):  # a member ended: the next read walks again
            self._tree = [pid for pid in self._tree if pid in alive]
            self._newest_pid = None
        for pid in list(self._procs):
            if pid not in alive:
                del self._procs[pid]
                self._proc_io.pop(pid, None)
                self._servers.pop(pid, None)
        return tuple(out)

    def _note_server(self, p: psutil.Process, ppid: int) -> None:
        """A new process of the job's tree that is one of multiprocessing's servers
        (`_servers`: a fork server's parent, whose workers it forks; None for the
        resource tracker), told once."""
        kind = multiprocessing_server(p.pid, ppid)
        if kind is not None:
            self._servers[p.pid] = ppid if kind == "fork" else None

    def _tree_pids(self) -> list[int]:
        """The job and its descendants, walked down from the job through each process's
        children (`descendants`); the walk is repeated only when a process was created
        since the last one (a tree grows only by new processes) or a member ended (a
        walk that raced an exit may have missed a sibling: proc(5)). Members that ended
        or were reparented (their parent ended) are dropped as they are read."""
        newest = newest_pid()
        if self._tree and newest is not None and newest == self._newest_pid:
            return self._tree
        self._newest_pid = newest  # read before the walk: a process made during it walks again
        assert self.job_pid is not None
        self._tree = descendants(self.job_pid)
        return self._tree

    def _first_cpu(self, p: psutil.Process, interval: float) -> float:
        """A process's CPU at its first reading (psutil's rate needs two): the time it
        used since it started, over the interval when it started within it (a DataLoader
        worker of this epoch), else over its life. Read as 0, a new worker's CPU was
        counted as other processes' (a trial of a DDP job took its own workers for
        neighbours in 193 of 200 steps)."""
        try:
            times = p.cpu_times()
            used = times.user + times.system
            age = max(1e-3, time.time() - p.create_time())
        except psutil.Error:
            return 0.0
        return 100.0 * used / (interval if age <= interval else age)

    def _proc(self, pid: int) -> psutil.Process:
        p = self._procs.get(pid)
        if p is None:
            p = psutil.Process(pid)
            p.cpu_percent()  # primes it: the first reading of a process is 0
            self._procs[pid] = p
        return p

    def _io_rate(self, p: psutil.Process, now: float) -> tuple[float | None, float | None]:
        try:
            io = p.io_counters()
        except (psutil.AccessDenied, AttributeError):
            return None, None
        last = self._proc_io.get(p.pid)
        self._proc_io[p.pid] = (now, io.read_bytes, io.write_bytes)
        if last is None:
            return None, None
        dt = max(now - last[0], 1e-3)
        return (io.read_bytes - last[1]) / dt, (io.write_bytes - last[2]) / dt

    def _role(self, pid: int, ppid: int) -> str:
        if pid in self.step_pids or (not self.step_pids and pid == self.job_pid):
            return "main"
        if pid in self._servers:  # multiprocessing's own: no worker
            return "child"
        if ppid in self.step_pids or self._servers.get(ppid) in self.step_pids:
            return "worker"  # forked by the training process, or by its fork server
        return "child"


# The command lines Python's multiprocessing gives its own servers (Lib/multiprocessing/
# forkserver.py and resource_tracker.py: `python -c "from multiprocessing.forkserver
# import main; main(...)"`). CPython 3.14 starts a DataLoader's workers by forkserver on
# Linux (its default start method there): the job's children are then the fork server
# and the resource tracker, and the workers are the fork server's children, each with
# the server's command line.
FORK_SERVER = "from multiprocessing.forkserver import main"
RESOURCE_TRACKER = "from multiprocessing.resource_tracker import main"


def multiprocessing_server(pid: int, ppid: int) -> str | None:
    """Whether `pid` (whose parent is `ppid`) is one of multiprocessing's servers, not a
    worker nor a job: "fork" for the fork server (a process forked from it has its
    command line too, and the server for a parent: read only then), "tracker" for the
    resource tracker, None for any other process or one that cannot be read (another
    user's, hidepid)."""
    try:
        line = " ".join(psutil.Process(pid).cmdline())
        if RESOURCE_TRACKER in line:
            return "tracker"
        if FORK_SERVER in line and FORK_SERVER not in " ".join(psutil.Process(ppid).cmdline()):
            return "fork"
    except psutil.Error:
        pass
    return None


def newest_pid() -> int | None:
    """The most recently created pid in this pid namespace (the last field of
    /proc/loadavg, see proc(5)); None where there is no such file."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def _children_files() -> bool:
    """Whether this kernel lists a task's children in /proc/PID/task/TID/children
    (CONFIG_PROC_CHILDREN, on in Debian's, Ubuntu's and RHEL's kernels)."""
    return os.path.exists(f"/proc/self/task/{os.getpid()}/children")


CHILDREN_FILES = _children_files()


def descendants(root: int) -> list[int]:
    """`root` and its descendants, root first; [] when it has ended. Read from each
    member's threads' children files: ~0.1 ms for a job with its DataLoader workers,
    whatever the machine runs, where psutil's children() reads every process's stat
    file (0.8 ms with 70 processes on the machine, 12 ms with 1,070: bench/host_tree.py);
    psutil's where the kernel has no such files."""
    if not CHILDREN_FILES:
        try:
            return [root, *(c.pid for c in psutil.Process(root).children(recursive=True))]
        except psutil.Error:
            return []
    if not os.path.isdir(f"/proc/{root}/task"):
        return []
    out = [root]
    seen = {root}
    i = 0
    while i < len(out):  # breadth first: each member's children appended once
        pid = out[i]
        i += 1
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:  # ended meanwhile
            continue
        for tid in tids:  # a child is listed under the thread that made it
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    found = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            out.extend(c for c in found if c not in seen)  # (a pid reused mid-walk)
            seen.update(found)
    return out


def _rooted(procs: list[ProcSample], root: int) -> list[ProcSample]:
    """The processes that still descend from the root: a process whose parent ended is
    reparented (to init or a subreaper) and leaves the job's tree."""
    members = {p.pid for p in procs}
    while True:
        kept = [p for p in procs if p.pid == root or (p.ppid in members and p.ppid != p.pid)]
        if len(kept) == len(procs):
            return kept
        procs, members = kept, {p.pid for p in kept}
