"""Non-blocking datagram sender: never waits, never raises.

`send` says what became of a message: SENT; FULL, the doctor's queue is full (it is
stalled, stopped or starved of CPU) or its socket is missing for now (removed by
someone, about to be made again): the probe keeps the rows and tries again at its next
flush; DEAD, the doctor is gone (nobody listens on the socket, or its folder and its
process are gone): the probe goes dormant.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
from typing import Any

from .protocol import start_ticks

SENT, FULL, DEAD = "sent", "full", "dead"


class Channel:
    def __init__(
        self, path: str, doctor_pid: int | None = None, doctor_start: int | None = None
    ) -> None:
        self.path = path
        self.doctor_pid = doctor_pid
        self.doctor_start = doctor_start  # its start in ticks since boot (/proc/PID/stat)
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

    def send(self, message: dict[str, Any], rows: int = 0) -> str:
        if self.dead:
            return DEAD
        try:
            payload = json.dumps(message, separators=(",", ":"), default=repr).encode()
            self._sock.sendto(payload, self.path)
            self.rows_sent += rows
            return SENT
        except (BlockingIOError, InterruptedError):  # the doctor's queue is full: never wait
            return FULL
        except OSError as exc:
            if exc.errno == errno.ENOENT and self._doctor_alive():
                return FULL  # the socket was removed; the doctor makes it again
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTCONN):
                self.dead = True
                return DEAD
            return FULL  # anything else (ENOBUFS, ...): as full, tried again later

    def _doctor_alive(self) -> bool:
        """The socket is missing: is the doctor still there to make it again? Its pid
        says, where known: a folder removed under a live doctor (a cleaner of /tmp) is
        made again by it."""
        if self.doctor_pid is None:
            # the doctor removes its folder when it has finished
            return os.path.isdir(os.path.dirname(self.path))
        try:
            os.kill(self.doctor_pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True  # alive, owned by someone else
        # the same process, not a later one given its pid (its folder gone with it)
        now = start_ticks(self.doctor_pid)
        return self.doctor_start is None or now is None or now == self.doctor_start

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
