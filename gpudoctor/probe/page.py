"""The probe's side of the counter page (protocol.PAGE_FIELDS): a memory-mapped file of
int64 counters that the hot paths write with a single store."""

from __future__ import annotations

import mmap
import os
from typing import Any

from . import protocol

STEPS = protocol.PAGE_FIELDS.index("steps")
LAST_END = protocol.PAGE_FIELDS.index("last_end_ns")
ROWS_SENT = protocol.PAGE_FIELDS.index("rows_sent")
ROWS_DROPPED = protocol.PAGE_FIELDS.index("rows_dropped")


class CounterPage:
    """`values` is a plain list until the page opens (no doctor folder, or before the
    first step), then a memoryview of the mapped file: the hot paths index it either way."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.values: Any = [0] * len(protocol.PAGE_FIELDS)
        self._map: mmap.mmap | None = None
        self._path: str | None = None

    def open(self) -> None:
        """Map this process's page (once; again after a fork). Never raises."""
        if self._map is not None:
            return
        path = os.path.join(self.folder, f"{protocol.PAGE_PREFIX}{os.getpid()}")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.ftruncate(fd, protocol.PAGE_BYTES)
                mapped = mmap.mmap(fd, protocol.PAGE_BYTES)
            finally:
                os.close(fd)
        except (OSError, ValueError):
            return  # no doctor folder any more: the counts stay in memory
        view = memoryview(mapped).cast("q")
        before = list(self.values)
        view[protocol.PAGE_FIELDS.index("version")] = protocol.PAGE_VERSION
        view[protocol.PAGE_FIELDS.index("pid")] = os.getpid()
        for i in range(STEPS, len(protocol.PAGE_FIELDS)):
            view[i] = before[i]
        view[0] = protocol.PAGE_MAGIC  # last: a reader trusts the page from here on
        self._map = mapped
        self._path = path
        self.values = view

    def reopen_if_gone(self) -> None:
        """The page's file removed while mapped (the doctor's folder cleaned away under it,
        and made again by the doctor): a new file with the counts so far, so that the
        counts stay exact if the job then dies by a signal. Never raises; the flush thread's,
        a stat a flush."""
        path = self._path
        if self._map is None or path is None:
            return
        try:
            os.stat(path)
            return
        except FileNotFoundError:
            pass
        except OSError:
            return
        if not os.path.isdir(self.folder):
            return  # not made again (yet): the counts stay in the old mapping
        self.values = list(self.values)  # the hot paths' writes land here meanwhile
        self._map = None
        self.open()

    def after_fork(self) -> None:
        """A forked child must not write into its parent's page: a fresh one of its own."""
        self._map = None  # the parent's mapping stays the parent's (not closed here)
        self._path = None
        self.values = [0] * len(protocol.PAGE_FIELDS)

    def close(self) -> None:
        """Unmapped (an injected probe leaving): the hot paths write a plain list again;
        the mapping goes when the last view of it does."""
        self.values = [0] * len(protocol.PAGE_FIELDS)
        self._map = None
        self._path = None
