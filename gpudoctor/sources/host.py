"""Host readings through psutil: CPU per core, iowait, load, memory, swap, disk and
network rates, and the job's process tree (main process, DataLoader workers)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from gpudoctor.model import HostSample, ProcSample


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
        self._proc_io: dict[int, tuple[float, int, int]] = {}
        self._last_t = time.monotonic()
        self._disk = psutil.disk_io_counters()
        self._net = psutil.net_io_counters()
        self._cores_allowed = cores_allowed(job_pid)
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
            job=self._job_tree(now),
        )

    def _job_tree(self, now: float) -> tuple[ProcSample, ...]:
        if self.job_pid is None:
            return ()
        try:
            root = self._proc(self.job_pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return ()
        alive = set()
        out = []
        for proc in tree:
            try:
                p = self._proc(proc.pid)
                with p.oneshot():
                    cpu = p.cpu_percent()
                    ppid = p.ppid()
                    name = p.name()
                    rss = p.memory_info().rss
                    status = p.status()
                    threads = p.num_threads()
                    read_rate, write_rate = self._io_rate(p, now)
            except psutil.Error:
                continue
            alive.add(p.pid)
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
        for pid in list(self._procs):
            if pid not in alive:
                del self._procs[pid]
                self._proc_io.pop(pid, None)
        return tuple(out)

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
        if ppid in self.step_pids:
            return "worker"
        return "child"
