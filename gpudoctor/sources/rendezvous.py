"""The other nodes of a multi-node torchrun job: each node's doctor sees only its own
ranks, so the doctors meet in the job's own rendezvous store (the TCPStore torchrun
serves on the c10d endpoint, or on the master address with the static backend) and
leave there, under keys of their own (gpudoctor/RUN_ID/...), a summary of their ranks
for the others to read: rank, host, pid and step timings; no command line, no output.

The store is spoken to by a helper process (rendezvous_helper.py): it imports torch for
torch.distributed.TCPStore, whose C++ side writes its connection errors to stderr and
could block; the doctor's own process and terminal stay out of both. The doctor writes
its summaries to the helper's stdin without waiting (dropped when the pipe is full) and
a thread reads what the helper prints."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import IO, Any

# torchrun's defaults (torch/distributed/run.py): the c10d endpoint's port, the static
# backend's master address and port
C10D_PORT = 29400
MASTER_ADDR = "127.0.0.1"
MASTER_PORT = 29500
LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


@dataclass(frozen=True)
class Rendezvous:
    host: str
    port: int
    run_id: str
    nnodes: str


def of_command(argv: list[str]) -> Rendezvous | None:
    """The job's rendezvous store when `argv` starts a torchrun job of more than one node
    (None for one node, --standalone, a launcher it does not know, or bad options)."""
    at = launcher_at(argv)
    if at is None:
        return None
    opts = _options(argv[at + 1 :])
    if "standalone" in opts:
        return None
    nnodes = opts.get("nnodes", "1")
    if max((_int(n) or 1) for n in nnodes.split(":")) <= 1:
        return None
    backend = opts.get("rdzv_backend", "static")
    run_id = opts.get("rdzv_id", "none")
    if backend == "c10d":
        endpoint = opts.get("rdzv_endpoint", "")
        host, _, port = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", "")
        number = _int(port) if port else C10D_PORT
        if not host or number is None:
            return None
        return Rendezvous(host.strip("[]"), number, run_id, nnodes)
    if backend == "static":
        number = _int(opts.get("master_port", str(MASTER_PORT)))
        if number is None:
            return None
        return Rendezvous(opts.get("master_addr", MASTER_ADDR), number, run_id, nnodes)
    return None  # etcd and others: not spoken to


def launcher_at(argv: list[str]) -> int | None:
    """Where torchrun (or `python -m torch.distributed.run`) is in `argv`, or None."""
    for i, word in enumerate(argv[:4]):
        name = os.path.basename(word)
        if name == "torchrun":
            return i
        if word == "-m" and i + 1 < len(argv) and argv[i + 1] in LAUNCHERS:
            return i + 1
    return None


def _options(args: list[str]) -> dict[str, str]:
    """torchrun's options before the script: --name value, --name=value, -_ alike."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        word = args[i]
        if not word.startswith("-"):
            break  # the training script: its own options follow
        name, eq, value = word.lstrip("-").partition("=")
        key = name.replace("-", "_")
        if key == "standalone" or key in ("no_python", "module", "m", "run_path"):
            out[key] = "1"
            i += 1
            continue
        if eq:
            out[key] = value
            i += 1
        else:
            out[key] = args[i + 1] if i + 1 < len(args) else ""
            i += 2
    return out


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


class RankExchange:
    """This node's doctor's end of the exchange (a helper process)."""

    def __init__(self, rendezvous: Rendezvous, node: str, host: str) -> None:
        self.rendezvous = rendezvous
        self.node = node
        self.host = host
        self._lock = threading.Lock()
        self._nodes: dict[str, dict[str, Any]] = {}
        self.connected = False
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "gpudoctor.sources.rendezvous_helper",
                rendezvous.host, str(rendezvous.port), f"gpudoctor/{rendezvous.run_id}/", node,
            ],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True,  # the terminal's signals are the doctor's to handle
        )  # fmt: skip
        assert self.proc.stdin is not None and self.proc.stdout is not None
        fd = self.proc.stdin.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        self._reader = threading.Thread(
            target=self._read, args=(self.proc.stdout,), name="gpudoctor-ranks", daemon=True
        )
        self._reader.start()

    def publish(self, ranks: list[dict[str, Any]]) -> None:
        """Hand this node's rank summaries to the helper; never waits."""
        line = json.dumps({"node": self.node, "host": self.host, "ranks": ranks}) + "\n"
        stdin = self.proc.stdin
        if stdin is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(BlockingIOError, BrokenPipeError, OSError, ValueError):
            os.write(stdin.fileno(), line.encode())

    def received(self) -> dict[str, dict[str, Any]]:
        """The other nodes' latest: node -> {"host", "ranks"}."""
        with self._lock:
            return dict(self._nodes)

    def _read(self, stdout: IO[bytes]) -> None:
        for raw in stdout:
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            nodes = message.get("nodes")
            with self._lock:
                self.connected = bool(message.get("connected", self.connected))
                if isinstance(nodes, dict):
                    self._nodes = {
                        k: v for k, v in nodes.items() if k != self.node and isinstance(v, dict)
                    }

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=1)
