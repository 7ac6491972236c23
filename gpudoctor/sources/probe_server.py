"""Receives the probe's datagrams. Anything that is not a well-formed probe message is
counted and dropped: the doctor never fails on what arrives on its socket."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from itertools import chain
from typing import Any

from gpudoctor import jsontext
from gpudoctor.probe import protocol

MAX_DATAGRAM = 1 << 20


class ProbeServer:
    def __init__(self, path: str) -> None:
        self.path = path
        self.bad_messages = 0
        self.remade: list[int] = []  # when its socket file was found gone and made again
        self.pending: list[tuple[dict[str, Any], bytes]] = []  # read from a socket replaced
        self.saw_detached = False  # an injected probe said it leaves (its last message)
        self._inode = 0
        self._sock = self._bind()

    def _bind(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(self.path)
        sock.setblocking(False)
        # A deeper receive buffer: bursts queue here rather than being dropped.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self._inode = os.stat(self.path).st_ino
        return sock

    def fileno(self) -> int:
        return self._sock.fileno()

    def still_bound(self) -> bool:
        """Whether the socket file is still this socket's. When someone removed it (a
        cleaner of temp folders, a stray rm; its folder with it), it is made again at
        once: the probes try again with the rows they kept. False when it was made
        again (the file descriptor changed: wait on the new one)."""
        try:
            if os.stat(self.path).st_ino == self._inode:
                return True
        except FileNotFoundError:
            pass
        except OSError:
            return True
        old = self._sock
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # someone else's file in its place: ours wins
        with contextlib.suppress(OSError):  # its folder gone too (a cleaner of /tmp):
            os.mkdir(os.path.dirname(self.path), 0o700)  # made again, owner-only
        try:
            self._sock = self._bind()
        except OSError:
            return True  # cannot be made again: nothing to wait on anew
        self.pending = self._drain(old)
        old.close()
        self.remade.append(time.monotonic_ns())
        return False

    def drain(self) -> list[tuple[dict[str, Any], bytes]]:
        """The messages waiting, each with its raw text (stored as it came)."""
        out, self.pending = self.pending, []
        return out + self._drain(self._sock)

    def _drain(self, sock: socket.socket) -> list[tuple[dict[str, Any], bytes]]:
        out: list[tuple[dict[str, Any], bytes]] = []
        while True:
            try:
                data = sock.recv(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return out
            message = parse(data)
            if message is None:
                self.bad_messages += 1
            else:
                if message.get("facts", {}).get("probe_left"):
                    self.saw_detached = True
                out.append((message, data))

    def close(self) -> None:
        self._sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def parse(data: bytes) -> dict[str, Any] | None:
    """A validated probe message, or None."""
    try:
        message = jsontext.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(message, dict) or message.get("v") != protocol.VERSION:
        return None
    if not isinstance(message.get("pid"), int):
        return None
    steps = message.get("steps", [])
    widths = {len(protocol.STEP_FIELDS), protocol.STEP_FIELDS_V1_0, protocol.COUNTED_FIELDS}
    if type(steps) is not list:
        return None
    # shape and types checked in bulk: thousands of rows a second arrive here
    if set(map(type, steps)) - {list} or set(map(len, steps)) - widths:
        return None
    if set(map(type, chain.from_iterable(steps))) - {int}:
        return None
    for key in ("facts", "gauges", "end", "counts"):
        if key in message and not isinstance(message[key], dict):
            return None
    if "errors" in message and not isinstance(message["errors"], list):
        return None
    return message
