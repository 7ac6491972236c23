"""Watching a job the doctor did not start (`gpudoctor watch --pid PID`).

No code goes into the job: the doctor reads it from outside (NVML per-process GPU
memory and utilisation, psutil for its process tree, py-spy samples of its main
thread) and never signals it. Leaving always leaves it running.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import re
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psutil

from gpudoctor import run_folders
from gpudoctor.i18n import _
from gpudoctor.jobs.captures import CAPTURE_WAIT_S, Captures
from gpudoctor.jobs.inject import (
    InjectError,
    check_route,
    ended_before,
    inject,
    main_thread_importing,
    running,
    settings_for,
)
from gpudoctor.jobs.source import Recorder, ask_for_profile
from gpudoctor.model import EndedBy, GpuSample, HostSample, JobExit, StackChunk
from gpudoctor.processes import owner_uid
from gpudoctor.sources.host import HostReader, multiprocessing_server
from gpudoctor.sources.nvml import NvmlReader
from gpudoctor.sources.probe_server import ProbeServer
from gpudoctor.sources.rendezvous import launcher_at
from gpudoctor.sources.stacks import AttachError, StackSampler, find_py_spy
from gpudoctor.store import Store, encode

# Recent torch names its DataLoader workers' processes so (prctl PR_SET_NAME): they no
# longer carry the main program's name.
WORKER_NAME = "pt_data_worker"
# How long a doctor leaving waits for an injected probe's last message.
LEAVE_WAIT_S = 2.0
# A job still importing torch when the probe comes: tried again, once a second, this long.
TORCH_WAIT_S = 15.0
# A job inside an import (its start, a lazy import) is waited for this long: looked at
# from outside every IMPORT_RETRY_S (py-spy's non-blocking read, no pause), and paused
# only when it seems past it (each pause ~0.12 s: bench/RESULTS.md); the boot script
# looks again at the pause. Under a loaded machine `import torch` alone took over 15 s.
IMPORT_WAIT_S = 60.0
IMPORT_RETRY_S = 0.5
_PYTHON_EXE = re.compile(r"^(python|pypy)[\d.]*[dmu]*$")


@dataclass(frozen=True)
class Target:
    pid: int
    command: list[str]
    cwd: str | None
    python: bool  # the process runs a Python interpreter (py-spy can sample it)


def find_target(pid: int) -> Target:
    """The process to watch, or AttachError saying why it cannot be watched."""
    if pid <= 0 or not psutil.pid_exists(pid):
        raise AttachError(_("no process with pid {pid}").format(pid=pid))
    if pid == os.getpid():
        raise AttachError(_("pid {pid} is gpudoctor itself").format(pid=pid))
    try:
        proc = psutil.Process(pid)
        owner = proc.uids().real
        name = proc.name()
    except psutil.NoSuchProcess:
        raise AttachError(_("no process with pid {pid}").format(pid=pid)) from None
    except psutil.AccessDenied:
        raise AttachError(_not_yours(pid, None)) from None
    if os.geteuid() != 0 and owner != os.geteuid():
        raise AttachError(_not_yours(pid, owner))
    try:
        command = proc.cmdline() or [name]
    except psutil.AccessDenied:
        command = [name]
    except psutil.NoSuchProcess:
        raise AttachError(_("no process with pid {pid}").format(pid=pid)) from None
    try:
        exe = proc.exe()
    except psutil.Error:  # hidden from its own user too when the job is not dumpable
        exe = command[0]
    cwd: str | None = None
    with contextlib.suppress(psutil.Error):
        cwd = proc.cwd()
    return Target(pid, command, cwd, _is_python(proc, exe))


def _not_yours(pid: int, owner: int | None) -> str:
    who = _("another user")
    if owner is not None:
        try:
            who = _("user {name}").format(name=pwd.getpwuid(owner).pw_name)
        except KeyError:
            who = f"uid {owner}"
    return _(
        "pid {pid} belongs to {who}: watching it needs their permission; run gpudoctor as "
        "that user, or as root (sudo gpudoctor watch ...)"
    ).format(pid=pid, who=who)


def _is_python(proc: psutil.Process, exe: str) -> bool:
    if _PYTHON_EXE.match(os.path.basename(exe)):
        return True
    try:
        return any("libpython" in m.path for m in proc.memory_maps(grouped=True))
    except (psutil.Error, OSError):
        return False


def foreign_gpu_pids(
    gpus: Iterable[GpuSample], exists: Callable[[int], bool] = psutil.pid_exists
) -> list[int]:
    """NVML's GPU processes that this system's /proc does not have, when none of them
    is here: the doctor is in a container with its own PID namespace (NVML reports the
    host's pids), so GPU memory cannot be matched to the watched process."""
    pids = sorted({p.pid for g in gpus for p in g.processes})
    if not pids or any(exists(pid) for pid in pids):
        return []
    return pids


def container_message(pids: list[int], pid: int) -> str:
    shown = ", ".join(str(p) for p in pids[:4]) + (", ..." if len(pids) > 4 else "")
    return _(
        "NVML lists GPU processes (pids {shown}) that this system's /proc does not have: "
        "gpudoctor runs in a container with its own PID namespace, so GPU use cannot be "
        "matched to pid {pid}; run the container with the host's PID namespace "
        "(docker run --pid=host ...)"
    ).format(shown=shown, pid=pid)


class WatchedJob(Recorder):
    """One watched job: host, GPU and stack samples into the timeline and the store,
    until the job ends or the doctor leaves (`detach`, --max-seconds)."""

    can_stop = False  # the job is not ours to stop
    first_tick_s = 0.0  # at once: the readings are all there is to show

    def __init__(
        self,
        target: Target,
        store: Store,
        interval_s: float = 1.0,
        max_seconds: float | None = None,
        nvml: NvmlReader | None = None,
        py_spy: str | None = None,
        inject: str | None = None,
        all_ranks: bool = False,
        stacks: dict[str, Any] | None = None,
    ) -> None:
        """`stacks`: the stack sampler's settings, where not its own (StackSampler)."""
        super().__init__(target.command, store, interval_s, max_seconds, nvml)
        self.target = target
        self.timeline.watched_pid = target.pid
        self.sampler = (
            StackSampler(py_spy, target.pid, **(stacks or {})) if py_spy and target.python else None
        )
        self._facts: dict[str, Any] = {}
        # --inject: the probe loaded into the job by this route (jobs/inject.py), its
        # messages and pages read from a folder of the doctor's as a launch's are
        self.route = inject
        self.all_ranks = all_ranks
        self.probe: ProbeFolder | None = ProbeFolder(target) if inject else None
        self.can_profile = inject is not None
        # asked for later (the TUI's i): done by the loop at its next tick; what became
        # of it, in the person's words, for the TUI to say once ("" until then)
        self._inject_asked = False
        self.inject_outcome = ""
        # profiler captures (p) read as GPU timelines and kept, as a launch's are
        self.captures = Captures()

    @property
    def job_pid(self) -> int | None:
        return self.target.pid

    def stop(self, reason: EndedBy = "max-seconds") -> None:
        self.detach()  # never a signal to a job the doctor did not start

    def start(self) -> None:
        pid = self.target.pid
        if self.probe is not None and self.route is not None:
            self.probe.inject(self.target, self.route, self.all_ranks)
        self.host = HostReader(pid)
        self.host.step_pids = {pid}  # its children are its workers
        cwd = self.target.cwd or os.getcwd()
        self.session_id = self.store.create_session(self.timeline, cwd, pid)
        try:  # the watched process's own start: its "up" counts from there
            started = psutil.Process(pid).create_time()
        except (psutil.Error, OSError):
            started = None
        self._record_facts({"stack_sampling": self.sampler is not None, "started_unix": started})
        if self.sampler is not None:
            self.sampler.start()

    # -- the loop's parts (source.Recorder.run) -----------------------------------------------

    def _handles(self) -> list[tuple[Any, str]]:
        return [(self.probe.server, "probe")] if self.probe is not None else []

    def _readable(self, tag: str) -> None:
        if self.probe is not None:
            self._drain_probe(self.probe.server)

    def _read_counts(self) -> None:
        if self.probe is not None:
            self._read_probe_pages(self.probe.folder)

    def request_profile(self, steps: int) -> None:
        if self.probe is None:
            raise NotImplementedError("watching from outside: no probe to ask (can_profile)")
        ask_for_profile(self.probe.control, steps)

    def _job_ended(self) -> bool:
        return not _alive(self.target.pid)

    def _time_is_up(self) -> None:
        self.detach()

    @property
    def torchrun_ranks(self) -> list[int]:
        """The local ranks of the torchrun job the target belongs to ([] for none)."""
        try:
            return injection_pids(self.target.pid, all_ranks=True)
        except AttachError:
            return []

    @property
    def can_inject(self) -> bool:
        """The probe may still be loaded into the job (a Python process, none in it yet)."""
        return self.probe is None and self.target.python and not self._inject_asked

    def planned_route(self) -> str | None:
        """The route a load would take now (jobs/inject.py); None where there is none
        (the load says why)."""
        try:
            return check_route(self.target.pid)
        except (InjectError, OSError):
            return None

    def request_inject(self) -> None:
        """Load the probe at the loop's next tick (thread-safe); `inject_outcome` says
        what became of it."""
        self._inject_asked = True

    def _inject_now(self) -> None:
        try:
            route = check_route(self.target.pid)
            probe = ProbeFolder(self.target)
        except (InjectError, OSError) as exc:
            self.inject_outcome = str(exc)
            return
        try:  # the TUI's i: a torchrun job's every rank, as --all-ranks would
            probe.inject(self.target, route, all_ranks=bool(self.torchrun_ranks))
        except AttachError as exc:
            probe.close()
            self.inject_outcome = str(exc)
            return
        self.route, self.probe, self.can_profile = route, probe, True
        self._handles_changed = True  # the loop waits on the probe's socket from now
        self.inject_outcome = "attached"

    def _tick(self) -> None:
        assert self.session_id is not None and self.host is not None
        if self._inject_asked and self.probe is None and not self.inject_outcome:
            self._inject_now()
        host, gpus = self._read_host_and_gpus()
        if self.sampler is not None:
            self._keep(self.sampler.poll())
        if self.probe is not None:
            self.host.step_pids = {self.target.pid, *self.timeline.steps}
            self._drain_probe(self.probe.server)
            self._read_probe_pages(self.probe.folder)
            self._keep_traces(self.captures.poll(self.timeline.facts), self.probe.folder)
        self._record_facts(outside_facts(self.target.pid, host, gpus))
        self._commit()

    def _keep(self, chunk: StackChunk | None) -> None:
        """A finished chunk of py-spy's samples (and its lines, named) into the timeline
        and the store."""
        assert self.session_id is not None and self.sampler is not None
        if chunk is None:
            return
        self.timeline.stacks.append(chunk)
        self.store.add(self.session_id, "stacks", chunk.t_end_mono_ns, encode(chunk))
        lines = self.sampler.hotspots
        if lines is not None:
            self.timeline.hotspots.append(lines)
            self.store.add(self.session_id, "hotspots", lines.t_end_mono_ns, encode(lines))

    def _record_facts(self, facts: dict[str, Any]) -> None:
        """Facts seen from outside, recorded when they change."""
        changed = {k: v for k, v in facts.items() if self._facts.get(k) != v}
        if not changed:
            return
        assert self.session_id is not None
        self._facts.update(changed)
        self.timeline.facts.setdefault(self.target.pid, {}).update(changed)
        record = {"pid": self.target.pid, "facts": changed}
        self.store.add(self.session_id, "watch", time.monotonic_ns(), record)

    def _finish(self, ended: bool, returncode: int | None) -> JobExit:
        # A process that is not the doctor's child: its exit code cannot be known.
        job_exit = JobExit(exit_code=None, ended_by="exit" if ended else "detached")
        if self.sampler is not None:  # the samples since the last whole chunk
            self._keep(self.sampler.finish())
        probe = self.probe
        if probe is not None:  # the probe sends its last rows and removes itself
            if not ended:
                probe.ask_to_leave(lambda: self._drain_probe(probe.server))
            self._drain_probe(probe.server)
            self._read_probe_pages(probe.folder)
            found = self.captures.finish(self.timeline.facts, CAPTURE_WAIT_S)
            self._keep_traces(found, probe.folder)
        self.timeline.end_mono_ns = time.monotonic_ns()
        self.timeline.exit = job_exit
        return job_exit

    def turn(self) -> JobExit | None:
        """One turn for a caller that follows many jobs in one thread (the exporter,
        app/exporter.py) instead of `run`'s loop: a tick, or, the job gone, its end."""
        assert self.session_id is not None
        if self._job_ended():
            return self._finish(ended=True, returncode=None)
        self._tick()
        return None

    def leave(self) -> JobExit:
        """The caller of `turn` leaves: the job goes on."""
        return self._finish(ended=False, returncode=None)

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()
        if self.probe is not None:
            self.probe.close()


class ProbeFolder:
    """The doctor's folder for an injected probe: its socket, its counter pages, the
    control file (a capture asked for) and the `detach` file (the doctor leaves)."""

    def __init__(self, target: Target) -> None:
        owner = owner_uid(target.pid)
        # root injecting into a user's job: the folder and the socket are made theirs
        # (inject), in a folder they can reach
        self.owner = owner if os.geteuid() == 0 and owner not in (None, 0) else None
        reachable_by = target.pid if self.owner is not None else None
        self.folder = run_folders.make("run", reachable_by=reachable_by)
        self.server = ProbeServer(os.path.join(self.folder, "probe.sock"))
        self.control = os.path.join(self.folder, "control")
        self.pids: list[int] = []  # the processes the probe went into

    def inject(self, target: Target, route: str, all_ranks: bool = False) -> None:
        """The probe into the job (into each of its local ranks with `all_ranks`: a
        torchrun job's); AttachError, in one line, when it is not there."""
        if self.owner is not None:  # the job must reach the folder, the socket
            if not run_folders.reachable(os.path.dirname(self.folder), target.pid):
                raise AttachError(_unreachable(self.owner, self.folder))
            for path in (self.folder, self.server.path):
                os.chown(path, self.owner, -1)
        settings = settings_for(self.folder, self.server.path, self.control)
        pids = injection_pids(target.pid, all_ranks, wait_s=TORCH_WAIT_S if all_ranks else 0.0)
        for pid in pids:
            said = self._inject_one(pid, settings, route)
            if said != "attached":
                raise AttachError(_refusal(pid, said))
        self.pids = pids

    def _inject_one(self, pid: int, settings: dict[str, object], route: str) -> str:
        """What the probe said in `pid`; a job still loading torch, or inside an
        import, is tried again."""
        py_spy = find_py_spy()
        start = time.monotonic()
        tries_left = 2  # an attempt gdb gave up without a reason (InjectError.again)
        while True:
            waited = time.monotonic() - start
            if waited < IMPORT_WAIT_S and main_thread_importing(py_spy, pid):
                time.sleep(IMPORT_RETRY_S)  # no pause while it imports
                continue
            if not running(pid):
                raise AttachError(ended_before(pid))
            try:
                said = inject(pid, self.folder, settings, route)
            except InjectError as exc:
                if not exc.again or tries_left == 0:
                    raise AttachError(str(exc)) from None
                tries_left -= 1
                time.sleep(IMPORT_RETRY_S)
                continue
            waited = time.monotonic() - start
            if said == "importing" and waited < IMPORT_WAIT_S:
                # not now (an import, a collection): again after a pause that varies, so
                # that a job whose loop has a period of its own is not met in step
                time.sleep(IMPORT_RETRY_S * random.uniform(0.5, 1.5))
            elif said == "no-torch" and waited < TORCH_WAIT_S and loading_torch(pid):
                time.sleep(1.0)
            else:
                return said

    def ask_to_leave(self, drain: Callable[[], None], wait_s: float = LEAVE_WAIT_S) -> None:
        """Ask the probe to remove itself, and wait (a little) for its last message."""
        with contextlib.suppress(OSError):
            open(os.path.join(self.folder, "detach"), "w").close()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            drain()
            if self.server.saw_detached:
                return
            time.sleep(0.05)

    def close(self) -> None:
        self.server.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def injection_pids(pid: int, all_ranks: bool, wait_s: float = 0.0) -> list[int]:
    """Where the probe goes for `watch --pid PID --inject [--all-ranks]`: the process, or
    every local rank of the torchrun job it is the launcher or a rank of (a launcher
    that has not started its ranks yet is waited for, up to `wait_s`)."""
    launcher = None
    if is_launcher(pid):
        launcher = pid
    else:
        with contextlib.suppress(psutil.Error):
            parent = psutil.Process(pid).ppid()
            launcher = parent if is_launcher(parent) else None
    deadline = time.monotonic() + wait_s
    while launcher is not None and not ranks_of(launcher) and time.monotonic() < deadline:
        time.sleep(0.2)
    if launcher is None:
        if all_ranks:
            raise AttachError(
                _(
                    "pid {pid} is not part of a torchrun job: --all-ranks needs its launcher "
                    "or one of its ranks"
                ).format(pid=pid)
            )
        return [pid]
    ranks = ranks_of(launcher)
    if all_ranks and ranks:
        return ranks
    if all_ranks:
        raise AttachError(
            _("torchrun (pid {pid}) has not started its ranks yet: try again in a moment").format(
                pid=launcher
            )
        )
    if pid == launcher:
        raise AttachError(
            _(
                "pid {pid} is torchrun's launcher, which trains nothing: --all-ranks injects "
                "into its {n} ranks, or give one rank's pid"
            ).format(pid=pid, n=len(ranks))
        )
    return [pid]


def is_launcher(pid: int) -> bool:
    try:
        return launcher_at(psutil.Process(pid).cmdline()) is not None
    except psutil.Error:
        return False


def ranks_of(pid: int) -> list[int]:
    """The local ranks of the torchrun job `pid` is the launcher of (its children running
    Python), in pid order; [] when `pid` is no launcher or has none yet."""
    if not is_launcher(pid):
        return []
    try:
        children = psutil.Process(pid).children()
    except psutil.Error:
        return []
    ranks = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            if _PYTHON_EXE.match(os.path.basename(child.exe())):
                ranks.append(child.pid)
    return sorted(ranks)


def loading_torch(pid: int) -> bool:
    """torch's library is mapped: the job is importing it (or has, and not its optim yet)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "libtorch" in f.read()
    except OSError:
        return False


def _unreachable(owner: int, folder: str) -> str:
    try:
        user = pwd.getpwuid(owner).pw_name
    except KeyError:
        user = str(owner)
    return _(
        "user {user} cannot reach the doctor's folder {folder} (a folder above it is closed "
        "to them, and so are /run/user, /dev/shm and /var/tmp): set TMPDIR to a folder "
        "they may enter; nothing was injected"
    ).format(user=user, folder=folder)


def _refusal(pid: int, said: str) -> str:
    """What the probe said when it did not attach, in the person's words."""
    if said == "launched":
        return _(
            "pid {pid} runs under gpudoctor run already: its own doctor measures it "
            "(gpudoctor attach shows that session)"
        ).format(pid=pid)
    if said == "busy":
        return _("another gpudoctor has its probe in pid {pid} now").format(pid=pid)
    if said == "importing":
        return _(
            "pid {pid} was inside an import each time it was paused for {seconds:.0f} s: "
            "nothing was injected (try again once it is past its imports)"
        ).format(pid=pid, seconds=IMPORT_WAIT_S)
    if said == "no-torch":
        return _(
            "pid {pid} has not loaded torch: nothing for the probe to measure (watch it "
            "without --inject)"
        ).format(pid=pid)
    return _("the probe could not start in pid {pid}: {why}").format(pid=pid, why=said[:200])


def outside_facts(pid: int, host: HostSample | None, gpus: list[GpuSample]) -> dict[str, Any]:
    """What can be told about the job without its code: its worker processes (the
    children running the same program as it: DataLoader workers), as one loader per
    batch of workers started together (loader_sizes), and its device."""
    facts: dict[str, Any] = {}
    if host is not None:
        main = next((p for p in host.job if p.pid == pid), None)
        if main is not None:
            # forked by the job, or by its fork server (CPython 3.14's DataLoader workers)
            servers = {
                p.pid: multiprocessing_server(p.pid, pid)
                for p in host.job
                if p.ppid == pid and not p.name.startswith(WORKER_NAME)  # a worker serves none
            }
            forkers = {pid, *(s for s, kind in servers.items() if kind == "fork")}
            workers = [
                p
                for p in host.job
                if p.ppid in forkers
                and servers.get(p.pid) is None
                and (p.name == main.name or p.name.startswith(WORKER_NAME))
            ]
            sizes = loader_sizes([_started(p.pid) for p in workers])
            facts["dataloaders"] = [
                {"num_workers": n, "seen_from": "processes"} for n in sizes or [0]
            ]
    on_gpu = any(p.pid == pid for g in gpus for p in g.processes)
    facts["device"] = "cuda" if on_gpu else "cpu"
    return facts


# A DataLoader starts its workers one after another as it is first iterated, a fork
# each (ms apart; tens of ms for a process of tens of GB, whose page tables a fork
# copies); two loaders' workers (timm's train and validation loaders, each with
# persistent workers) start at least a training epoch apart. Workers started further
# apart than this are taken to be two loaders': the 2 workers of each read as
# num_workers=4 (issue 39). Epochs shorter than this read as one loader.
LOADER_GAP_S = 0.25


def loader_sizes(started: list[float | None]) -> list[int]:
    """The DataLoaders' worker counts, oldest loader first, from when their workers
    started (psutil's create_time; None: a worker that has just ended, left out)."""
    sizes: list[int] = []
    last = None
    for t in sorted(t for t in started if t is not None):
        if last is None or t - last > LOADER_GAP_S:
            sizes.append(0)
        sizes[-1] += 1
        last = t
    return sizes


def _started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
