"""Receives the probe's datagrams. Anything that is not a well-formed probe message is
counted and dropped: the doctor never fails on what arrives on its socket."""

from __future__ import annotations

import contextlib
import json
import os
import socket
from itertools import chain
from typing import Any

from gpudoctor.probe import protocol

MAX_DATAGRAM = 1 << 20


class ProbeServer:
    def __init__(self, path: str) -> None:
        self.path = path
        self.bad_messages = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(path)
        self._sock.setblocking(False)
        # A deeper receive buffer: bursts queue here rather than being dropped.
        with contextlib.suppress(OSError):
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)

    def fileno(self) -> int:
        return self._sock.fileno()

    def drain(self) -> list[tuple[dict[str, Any], bytes]]:
        """The messages waiting, each with its raw text (stored as it came)."""
        out: list[tuple[dict[str, Any], bytes]] = []
        while True:
            try:
                data = self._sock.recv(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return out
            message = parse(data)
            if message is None:
                self.bad_messages += 1
            else:
                out.append((message, data))

    def close(self) -> None:
        self._sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def parse(data: bytes) -> dict[str, Any] | None:
    """A validated probe message, or None."""
    try:
        message = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(message, dict) or message.get("v") != protocol.VERSION:
        return None
    if not isinstance(message.get("pid"), int):
        return None
    steps = message.get("steps", [])
    widths = {len(protocol.STEP_FIELDS), protocol.STEP_FIELDS_V1_0}
    if type(steps) is not list:
        return None
    # shape and types checked in bulk: thousands of rows a second arrive here
    if set(map(type, steps)) - {list} or set(map(len, steps)) - widths:
        return None
    if set(map(type, chain.from_iterable(steps))) - {int}:
        return None
    for key in ("facts", "gauges", "end"):
        if key in message and not isinstance(message[key], dict):
            return None
    if "errors" in message and not isinstance(message["errors"], list):
        return None
    return message
