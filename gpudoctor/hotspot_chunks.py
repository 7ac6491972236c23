"""The line sampler's chunks over a run (sources/hotspots.py: py-spy's samples by the
line of the user's code), in bounded memory (stretches.py).

A real fast loop's chunk is ~7 kB as objects. `run` makes one a minute after its first
three and `watch` one every ten seconds, so a week's doctor held 65 MB of them under
`run`, and 140 MB under `watch` once the old deque's cap (21,600) was reached
(bench/hotspot_memory.py): more than all else it keeps for a week (issue 41's 80 MB).
A merged chunk holds its chunks' samples summed by line, so the whole run's named lines
and their shares (diagnosis/hotspots.py sums them by line) are the same; a replay
stopped inside a merged stretch leaves it out.
"""

from __future__ import annotations

from itertools import chain

from gpudoctor.model import HotspotChunk, HotspotLine
from gpudoctor.stretches import OLD_ROOM, RECENT, Stretches

__all__ = ["OLD_ROOM", "RECENT", "HotspotChunks", "fits", "merged"]


class HotspotChunks(Stretches[HotspotChunk]):
    def __init__(self, recent: int = RECENT, old_room: int = OLD_ROOM) -> None:
        super().__init__(fits, merged, recent, old_room)


def fits(a: HotspotChunk, b: HotspotChunk, span_ns: int) -> bool:
    """b may join a's stretch: the same process and rates, within the span."""
    return (
        a.pid == b.pid
        and a.rate_hz == b.rate_hz
        and a.busy_rate_hz == b.busy_rate_hz
        and b.t_end_mono_ns - a.t_start_mono_ns <= span_ns
    )


def merged(a: HotspotChunk, b: HotspotChunk) -> HotspotChunk:
    """Two chunks of one process and rate as one: b after a, their samples summed by
    line (where, file, line, function, kind and source text alike)."""
    counts: dict[tuple[str, str, int, str, str, str], list[int]] = {}
    for where, file, line, function, kind, n_all, n_busy, code in chain(a.lines, b.lines):
        n = counts.setdefault((where, file, line, function, kind, code), [0, 0])
        n[0] += n_all
        n[1] += n_busy
    lines: tuple[HotspotLine, ...] = tuple(
        (where, file, line, function, kind, n_all, n_busy, code)
        for (where, file, line, function, kind, code), (n_all, n_busy) in counts.items()
    )
    return HotspotChunk(
        t_start_mono_ns=a.t_start_mono_ns,
        t_end_mono_ns=b.t_end_mono_ns,
        pid=a.pid,
        rate_hz=a.rate_hz,
        busy_rate_hz=a.busy_rate_hz,
        main_total=a.main_total + b.main_total,
        workers_total=a.workers_total + b.workers_total,
        lines=lines,
    )
