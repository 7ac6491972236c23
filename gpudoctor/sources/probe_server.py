"""Receives the probe's datagrams. Anything that is not a well-formed probe message is
counted and dropped: the doctor never fails on what arrives on its socket."""

from __future__ import annotations

import contextlib
import json
import os
import socket
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

    def drain(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            try:
                data = self._sock.recv(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return out
            message = parse(data)
            if message is None:
                self.bad_messages += 1
            else:
                out.append(message)

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
    width = len(protocol.STEP_FIELDS)
    if not isinstance(steps, list) or not all(
        isinstance(s, list) and len(s) == width and all(isinstance(v, int) for v in s)
        for s in steps
    ):
        return None
    for key in ("facts", "gauges", "end"):
        if key in message and not isinstance(message[key], dict):
            return None
    if "errors" in message and not isinstance(message["errors"], list):
        return None
    return message
