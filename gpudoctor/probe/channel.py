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
        self.dropped_messages = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)

    def send(self, message: dict[str, Any]) -> bool:
        if self.dead:
            return False
        try:
            payload = json.dumps(message, separators=(",", ":"), default=repr).encode()
            self._sock.sendto(payload, self.path)
            return True
        except BlockingIOError:  # the doctor's queue is full: drop, never wait
            self.dropped_messages += 1
            return False
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTCONN):
                self.dead = True
            else:
                self.dropped_messages += 1
            return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
