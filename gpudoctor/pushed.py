"""A `run`'s series sent to the node's exporter, and the exporter's side that takes them.

A doctor that launched its job measures it from inside (exact step counts, the phase
split): richer than the exporter's view from outside. When an exporter listens on the
node (its socket, SOCKET_PATHS), the doctor sends it its series at most every
PUSH_EVERY_S, one datagram each time (never waiting: a full or absent socket drops it),
and the exporter serves those for that job instead of watching it from outside.

The exporter's socket takes datagrams from any user when it runs as root; the kernel
tells it who sent each (SO_PASSCRED), and it keeps only the series of jobs the sender
owns (or all, from root): a user cannot speak for another's job.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpudoctor.processes import owner_uid

if TYPE_CHECKING:  # prometheus_client only where an exporter listens: loaded then
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import Collector

ENV_SOCKET = "GPUDOCTOR_EXPORTER_SOCKET"
SYSTEM_SOCKET = "/run/gpudoctor-exporter.sock"  # a root exporter's
PUSH_EVERY_S = 5.0
MAX_DATAGRAM = 200_000  # a run's series for 64 ranks are ~60 KB
# A job's pushed series are served while they are this fresh, else it is watched again.
FRESH_S = 4 * PUSH_EVERY_S
# What a job's doctor serves that is not the job's: its machine (the exporter is one per
# node) and its GPUs (DCGM's on a cluster); kept out of the exporter's exposition.
NOT_THE_JOBS = ("gpudoctor_gpu_", "gpudoctor_others_")


def socket_paths() -> list[str]:
    """Where an exporter may listen, in the order looked at: $GPUDOCTOR_EXPORTER_SOCKET,
    a root exporter's, the user's own (in $XDG_RUNTIME_DIR)."""
    chosen = os.environ.get(ENV_SOCKET)
    if chosen:
        return [chosen]
    paths = [SYSTEM_SOCKET]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        paths.append(os.path.join(runtime, "gpudoctor-exporter.sock"))
    return paths


def receiving_path() -> str | None:
    """Where this exporter listens: $GPUDOCTOR_EXPORTER_SOCKET, else a root exporter's
    system path, else the user's runtime folder (None: no such folder)."""
    chosen = os.environ.get(ENV_SOCKET)
    if chosen:
        return chosen
    if os.geteuid() == 0:
        return SYSTEM_SOCKET
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(runtime, "gpudoctor-exporter.sock") if runtime else None


def listening_exporter() -> str | None:
    """The socket of an exporter listening on this node, if there is one. A socket file
    that nothing reads (left by an exporter that was killed, or stopped on a machine
    whose /run outlived it) is not one: the doctor would take a snapshot every tick and
    send its series every few seconds for nothing."""
    for path in socket_paths():
        with contextlib.suppress(OSError):
            if os.path.exists(path) and os.access(path, os.W_OK) and _read_by_someone(path):
                return path
    return None


def _read_by_someone(path: str) -> bool:
    """A datagram socket bound at `path` (connect refuses a file no socket is bound to)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


class Pusher:
    """Sends a collector's series to the exporter at `path`, at most every PUSH_EVERY_S."""

    def __init__(self, path: str, collector: Collector) -> None:
        from prometheus_client.registry import CollectorRegistry

        self.path = path
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        self.last = 0.0
        self.sent = 0

    def push(self) -> None:
        now = time.monotonic()
        if now - self.last < PUSH_EVERY_S:
            return
        self.last = now
        from prometheus_client import generate_latest

        try:
            data = generate_latest(self.registry)
            if len(data) <= MAX_DATAGRAM:
                self.sock.sendto(data, self.path)
                self.sent += 1
        except Exception:  # noqa: BLE001 - the exporter is extra: never the run's end
            pass


@dataclass
class PushedJob:
    families: list[Metric]
    t: float  # time.monotonic() when it came


@dataclass
class Receiver:
    """The exporter's socket: each refresh, `take()` reads what came."""

    path: str
    sock: socket.socket = field(init=False)
    jobs: dict[int, PushedJob] = field(default_factory=dict)  # by the job's pid
    refused: int = 0  # datagrams whose sender did not own the jobs they named

    def __post_init__(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(self.path)
        # a root exporter takes every user's doctor's series (checked by sender below)
        os.chmod(self.path, 0o666 if os.geteuid() == 0 else 0o600)
        self.sock.setblocking(False)

    def take(self) -> None:
        """Every datagram that came since the last look, kept by the job it is of."""
        creds = struct.calcsize("3i")
        while True:
            try:
                data, ancillary, _flags, _addr = self.sock.recvmsg(
                    MAX_DATAGRAM, socket.CMSG_SPACE(creds)
                )
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            uid = None
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    _pid, uid, _gid = struct.unpack("3i", payload[:creds])
            self._keep(data, uid)

    def _keep(self, data: bytes, uid: int | None) -> None:
        from prometheus_client.parser import text_string_to_metric_families

        try:
            families = list(text_string_to_metric_families(data.decode("utf-8")))
        except (ValueError, UnicodeDecodeError):
            return
        kept = [f for f in families if not f.name.startswith(NOT_THE_JOBS)]
        # this node's ranks only: a multi-node run's doctor serves the others' too (their
        # pids are another machine's)
        here = socket.gethostname()
        pids = {
            s.labels["pid"]
            for f in kept
            for s in f.samples
            if s.labels.get("pid") and s.labels.get("hostname") == here
        }
        now = time.monotonic()
        for text in pids:
            if not text.isdigit():
                continue
            pid = int(text)
            if uid is None or (uid != 0 and owner_uid(pid) != uid):
                self.refused += 1
                continue
            mine = [_only(f, text) for f in kept]
            self.jobs[pid] = PushedJob([f for f in mine if f.samples], now)

    def fresh(self) -> dict[int, PushedJob]:
        """The jobs whose doctor pushed lately."""
        now = time.monotonic()
        for pid in [p for p, j in self.jobs.items() if now - j.t > FRESH_S]:
            del self.jobs[pid]
        return dict(self.jobs)

    def close(self) -> None:
        self.sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def _only(family: Metric, pid: str) -> Metric:
    """`family` with the samples of job `pid` alone."""
    from prometheus_client.metrics_core import Metric

    out = Metric(family.name, family.documentation, family.type, family.unit)
    here = socket.gethostname()
    out.samples = [
        s for s in family.samples if s.labels.get("pid") == pid and s.labels.get("hostname") == here
    ]
    return out
