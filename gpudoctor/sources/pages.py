"""Reads the probe's counter pages (gpudoctor/probe/protocol.py: PAGE_FIELDS): one small
file per stepping process in the run's folder, with its exact step count."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from gpudoctor.probe import protocol

_LAYOUT = struct.Struct("=" + "q" * len(protocol.PAGE_FIELDS))


@dataclass(frozen=True)
class PageCounts:
    pid: int
    steps: int
    last_end_ns: int
    rows_sent: int
    rows_dropped: int


def read_pages(folder: str) -> dict[int, PageCounts]:
    """Every well-formed page in `folder`, by pid; what cannot be read is left out."""
    out: dict[int, PageCounts] = {}
    try:
        names = [n for n in os.listdir(folder) if n.startswith(protocol.PAGE_PREFIX)]
    except OSError:
        return out
    for name in names:
        try:
            with open(os.path.join(folder, name), "rb") as f:
                data = f.read(_LAYOUT.size)
        except OSError:
            continue
        if len(data) < _LAYOUT.size:
            continue
        values = dict(zip(protocol.PAGE_FIELDS, _LAYOUT.unpack(data), strict=True))
        if values["magic"] != protocol.PAGE_MAGIC or values["version"] != protocol.PAGE_VERSION:
            continue
        pid = int(values["pid"])
        out[pid] = PageCounts(
            pid=pid,
            steps=int(values["steps"]),
            last_end_ns=int(values["last_end_ns"]),
            rows_sent=int(values["rows_sent"]),
            rows_dropped=int(values["rows_dropped"]),
        )
    return out
