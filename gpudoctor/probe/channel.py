"""Non-blocking datagram sender: never waits, never raises, drops and counts when full."""

from __future__ import annotations

import contextlib
import errno
import json
import socket
from typing import Any


class Channel:
    def __init__(self, path: str) -> None:
        self.path = path
        self.dead = False  # the doctor is gone: the probe goes dormant
        self.dropped_rows = 0
        self.rows_sent = 0
        self._sock = self._open()

    @staticmethod
    def _open() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        return sock

    def reopen(self) -> None:
        """After a fork: a socket of the child's own, counts from zero."""
        with contextlib.suppress(OSError):
            self._sock.close()
        self._sock = self._open()
        self.dropped_rows = 0
        self.rows_sent = 0

    def send(self, message: dict[str, Any], rows: int = 0) -> bool:
        if self.dead:
            return False
        try:
            payload = json.dumps(message, separators=(",", ":"), default=repr).encode()
            self._sock.sendto(payload, self.path)
            self.rows_sent += rows
            return True
        except BlockingIOError:  # the doctor's queue is full: drop, never wait
            self.dropped_rows += rows
            return False
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTCONN):
                self.dead = True
            else:
                self.dropped_rows += rows
            return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
