"""The machine's processes worth a look: who holds the GPUs, and the Python processes
that could be training jobs. The rows of `gpudoctor`'s home screen and the user and
command of each GPU process on the GPU panel."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from gpudoctor.model import GpuSample

_PYTHON = re.compile(r"^(python|pypy)[\d.]*$")
MAX_ROWS = 50


@dataclass(frozen=True)
class ProcessRow:
    pid: int
    user: str
    command: str
    cpu_pct: float  # of one core
    rss_bytes: int
    gpu_mem_bytes: int | None  # summed over the GPUs it holds memory on
    python: bool
    started_s: float = 0.0  # when it started (epoch seconds): with the pid, which process

    @property
    def key(self) -> str:
        """The process itself, not its pid alone (a pid is reused once it has ended)."""
        return f"{self.pid}:{self.started_s:.2f}"


class ProcessLister:
    """Keeps psutil's process objects between readings, so CPU shares are real rates."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def describe(self, pids: Iterable[int]) -> dict[int, tuple[str, str]]:
        """User and command line of each pid that is still there."""
        out = {}
        for pid in pids:
            try:
                p = psutil.Process(pid)
                out[pid] = (_user(p), _command(p))
            except psutil.Error:
                continue
        return out

    def rows(self, gpus: Iterable[GpuSample]) -> list[ProcessRow]:
        """GPU processes first (most GPU memory first), then Python processes by CPU."""
        gpu_mem: dict[int, int] = {}
        for g in gpus:
            for gp in g.processes:
                gpu_mem[gp.pid] = gpu_mem.get(gp.pid, 0) + (gp.mem_used_bytes or 0)
        me = os.getpid()
        seen = set()
        rows = []
        for proc in psutil.process_iter(["pid", "name"]):
            pid = proc.info["pid"]
            python = bool(_PYTHON.match(proc.info["name"] or ""))
            if pid == me or not (python or pid in gpu_mem):
                continue
            seen.add(pid)
            p = self._procs.get(pid)
            try:
                if p is None:
                    p = self._procs[pid] = proc
                    p.cpu_percent()  # primes it: the first reading is 0
                with p.oneshot():
                    rows.append(
                        ProcessRow(
                            pid=pid,
                            user=_user(p),
                            command=_command(p),
                            cpu_pct=p.cpu_percent(),
                            rss_bytes=p.memory_info().rss,
                            gpu_mem_bytes=gpu_mem.get(pid),
                            python=python,
                            started_s=p.create_time(),
                        )
                    )
            except psutil.Error:
                continue
        for pid in list(self._procs):
            if pid not in seen:
                del self._procs[pid]
        rows.sort(key=lambda r: (r.gpu_mem_bytes is None, -(r.gpu_mem_bytes or 0), -r.cpu_pct))
        return rows[:MAX_ROWS]


def _user(p: psutil.Process) -> str:
    try:
        return str(p.username())
    except (psutil.Error, KeyError):
        return "?"


def _command(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline()) or p.name()
    except psutil.Error:
        return "?"


def owner_uid(pid: int) -> int | None:
    """The real user id of `pid`; None when it is gone or unreadable."""
    try:
        return int(psutil.Process(pid).uids().real)
    except psutil.Error:
        return None
