"""The lines of the user's code that the time outside the model goes to (issue 20),
from py-spy's chunks (sources/hotspots.py): pure, so the report, the rules and the
TUI read the same lines from the same chunks.

A line's share is of the time sampled: for the main thread, of its whole time (so of
the step time, which the main thread spends); for the workers, of all the workers'
time together. Each line is split into the part spent on a CPU (busy) and the rest
(idle: sleeping, waiting on a lock, a queue, a socket or the disk); each part that is
big enough is a line of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpudoctor.i18n import _
from gpudoctor.model import HotspotChunk

# Lines below this share are not named: at 10 Hz over a minute's sampling, 3% is about
# 18 samples, above the sampling noise of a line (sqrt(18) ~ 4, a quarter of it).
MIN_SHARE = 0.03
MAX_LINES = 5  # per where (main, workers)
# Fewer main-thread samples than this (4 s at 10 Hz) say too little to name lines.
MIN_SAMPLES = 40
# The main thread inside the model: its time there is the model's, not the input's.
IN_MODEL = ("forward", "backward", "optimizer")


def state_words(state: str) -> str:
    """A line's state ("busy" | "idle") in the person's language."""
    return _("idle") if state == "idle" else _("busy")


def where_words(where: str) -> str:
    """Whose time a line's share is ("main" | "workers") in the person's language."""
    return _("main thread") if where == "main" else _("workers")


def whose_words(where: str, state: str) -> str:
    """Whose time a line's share is, and its state: `of the main thread, idle`."""
    words = _("of the main thread, {state}") if where == "main" else _("of the workers, {state}")
    return words.format(state=state_words(state))


@dataclass(frozen=True)
class Hotspot:
    file: str
    line: int
    function: str
    share: float  # of the main thread's time, or of the workers' time together
    where: str  # "main" | "workers"
    state: str  # "busy" | "idle"
    code: str  # the source line ("" when it could not be read)
    kind: str  # main: "loader" (waiting for the DataLoader), "input", "other"; "worker"

    @property
    def place(self) -> str:
        """`train.py:42` (the file's name: the full path is in the report)."""
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}"


@dataclass(frozen=True)
class Hotspots:
    lines: tuple[Hotspot, ...]
    main_samples: int
    outside_busy: float  # the main thread's time outside the model, on a CPU
    outside_idle: float  # ... and not on a CPU

    def of(self, where: str) -> tuple[Hotspot, ...]:
        return tuple(h for h in self.lines if h.where == where)


def hotspots(chunks: Iterable[HotspotChunk]) -> Hotspots | None:
    """The named lines over these chunks, or None when there are too few samples."""
    chunks = list(chunks)
    main_s = sum(c.main_total / c.rate_hz for c in chunks if c.rate_hz)
    workers_s = sum(c.workers_total / c.rate_hz for c in chunks if c.rate_hz)
    main_samples = sum(c.main_total for c in chunks)
    if main_samples < MIN_SAMPLES or not main_s:
        return None
    every: dict[tuple[str, str, int], float] = {}
    busy: dict[tuple[str, str, int], float] = {}
    info: dict[tuple[str, str, int], tuple[str, str, str, float]] = {}
    for c in chunks:
        for where, file, line, function, kind, n_all, n_busy, code in c.lines:
            if where == "main" and kind in IN_MODEL:
                continue
            key = (where, file, line)
            seconds = n_all / c.rate_hz if c.rate_hz else 0.0
            every[key] = every.get(key, 0.0) + seconds
            busy[key] = busy.get(key, 0.0) + (n_busy / c.busy_rate_hz if c.busy_rate_hz else 0.0)
            known = info.get(key)
            if known is None or seconds > known[3]:  # the line's commonest kind
                info[key] = (function, kind, code, seconds)
    out: list[Hotspot] = []
    outside_busy = outside_idle = 0.0
    for key, seconds in every.items():
        where, file, line = key
        total = main_s if where == "main" else workers_s
        if not total:
            continue
        on_cpu = min(seconds, busy[key])
        if where == "main":
            outside_busy += on_cpu / total
            outside_idle += (seconds - on_cpu) / total
        if not file:  # no line of the user's (a worker waiting for work, collating)
            continue
        function, kind, code, _ = info[key]
        for state, part in (("busy", on_cpu), ("idle", seconds - on_cpu)):
            share = part / total
            if share >= MIN_SHARE:
                out.append(Hotspot(file, line, function, share, where, state, code, kind))
    kept: list[Hotspot] = []
    for where in ("main", "workers"):
        kept += sorted((h for h in out if h.where == where), key=lambda h: -h.share)[:MAX_LINES]
    return Hotspots(
        lines=tuple(kept),
        main_samples=main_samples,
        outside_busy=outside_busy,
        outside_idle=outside_idle,
    )
