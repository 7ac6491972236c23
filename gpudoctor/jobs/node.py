"""The training jobs on this node, found without being told (`gpudoctor exporter`).

A training process is a Python process with torch's library mapped that is none of
torch's helpers: not a DataLoader worker (torch names them pt_data_worker), not a
torchrun launcher (its ranks are the jobs), not a torch.compile worker, not
multiprocessing's fork server or resource tracker. Each is named
by identifiers a cluster joins on, never by free text: its `rank` (torchrun's RANK),
`user`, the Slurm job (`hpc_job`, DCGM's name for it) and the Kubernetes `pod`,
`namespace` and `container` where they can be read (the process's environment needs its
owner or root; the container from its cgroup path).
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field

import psutil

from gpudoctor.jobs.watched import WORKER_NAME, is_launcher, loading_torch
from gpudoctor.probe import ENV_SOCKET
from gpudoctor.sources.host import multiprocessing_server

_PYTHON = re.compile(r"^(python|pypy)[\d.]*$")
# A label value that is an identifier: what does not match is left out (DCGM's exporter
# and Prometheus' own guidance: labels identify, they do not describe).
_IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
# The environment's identifiers, label by variable (Slurm's; Kubernetes' downward API
# as its documentation's examples name them)
FROM_ENVIRONMENT = {
    "rank": ("RANK",),
    "hpc_job": ("SLURM_JOB_ID",),
    "pod": ("POD_NAME", "MY_POD_NAME", "K8S_POD_NAME"),
    "namespace": ("POD_NAMESPACE", "MY_POD_NAMESPACE", "K8S_POD_NAMESPACE"),
}
# the container's id in a cgroup path: Kubernetes' kubepods, docker's, containerd's
_CONTAINER = re.compile(r"(?:kubepods|docker|containerd|cri-containerd)[^\n]*?([0-9a-f]{64})")
LABELS = ("rank", "user", "hpc_job", "pod", "namespace", "container")


@dataclass(frozen=True)
class NodeJob:
    pid: int
    started_s: float  # with the pid, which process (a pid is reused once it has ended)
    labels: dict[str, str] = field(default_factory=dict)  # LABELS' values, "" unknown
    launched: bool = False  # under `gpudoctor run`: its probe's variable in its environment

    @property
    def key(self) -> tuple[int, float]:
        return self.pid, self.started_s


@dataclass
class Census:
    """One look at the node: its training jobs, and how many Python processes could not
    be read (another user's, the exporter not running as root)."""

    jobs: list[NodeJob]
    unreadable: int = 0


def training_jobs(known: dict[tuple[int, float], NodeJob] | None = None) -> Census:
    """The node's training processes now. `known`: the ones found before (kept as they
    were: a process's identity does not change), so a look costs a maps read only for
    a new Python process or one that had not loaded torch yet."""
    known = known or {}
    me = os.getpid()
    mine = {me, *(p.pid for p in _descendants(me))}
    found, unreadable = [], 0
    for proc in psutil.process_iter(["pid", "name", "create_time"]):
        pid, name = proc.info["pid"], proc.info["name"] or ""
        if pid in mine or not _PYTHON.match(name) or name.startswith(WORKER_NAME):
            continue
        key = (pid, proc.info["create_time"] or 0.0)
        if key in known:
            found.append(known[key])
            continue
        if not _readable(pid):
            unreadable += 1
            continue
        if not loading_torch(pid) or _helper(proc) or is_launcher(pid):
            continue
        found.append(NodeJob(pid, key[1], identity(proc), _launched(proc)))
    return Census(found, unreadable)


def _readable(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as f:
            f.read(1)
        return True
    except OSError:
        return False


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _helper(proc: psutil.Process) -> bool:
    """One of torch's or Python's own processes, not a job: a torch.compile worker, or
    multiprocessing's fork server or resource tracker (a job's DataLoader starts them on
    CPython 3.14, the fork server with the job's script and torch loaded)."""
    try:
        if "compile_worker" in " ".join(proc.cmdline()):
            return True
        return multiprocessing_server(proc.pid, proc.ppid()) is not None
    except psutil.Error:
        return True


def _launched(proc: psutil.Process) -> bool:
    try:
        return ENV_SOCKET in proc.environ()
    except psutil.Error:
        return False


def identity(proc: psutil.Process) -> dict[str, str]:
    """The labels that identify the process's job (LABELS), "" where unknown."""
    labels = dict.fromkeys(LABELS, "")
    with contextlib.suppress(psutil.Error, KeyError):
        labels["user"] = _identifier(proc.username())
    try:
        env = proc.environ()
    except psutil.Error:
        env = {}
    for label, names in FROM_ENVIRONMENT.items():
        value = next((env[n] for n in names if env.get(n)), "")
        labels[label] = _identifier(value)
    with contextlib.suppress(OSError), open(f"/proc/{proc.pid}/cgroup") as f:
        match = _CONTAINER.search(f.read())
        if match:
            labels["container"] = match.group(1)[:12]  # as docker and crictl show it
    return labels


def _identifier(value: str) -> str:
    return value if _IDENTIFIER.match(value) else ""
