"""A job's loop in a thread of its own, so that it outlives whatever shows it.

The TUI listens while it is open: a snapshot each tick, and the end. When the terminal
goes away (SIGHUP), the TUI closes and the loop goes on, headless, until the job ends;
the command line then concludes the run as usual.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from gpudoctor.app.sessions import failure_words, keep_failure
from gpudoctor.i18n import _
from gpudoctor.jobs import JobSource
from gpudoctor.metrics import RunCollector
from gpudoctor.model import JobExit
from gpudoctor.series import POINTS, RunSeries, run_series
from gpudoctor.snapshot import Diagnosed, Snapshot, take
from gpudoctor.terminal import TerminalView
from gpudoctor.timeline import Timeline

# the plots' refresh, at most: they show the run's history (the panels show the
# moment), and a refresh costs a core's 5-30 ms a plot (bench/RESULTS.md, TUI plots):
# every 5 s, the plots screen alone cost 1.2% of a core, over the TUI's 2% budget
PLOT_EVERY_S = 10.0
PLOT_EVERY_NS = int(PLOT_EVERY_S * 1e9)
# The findings are diagnosed again at most this often while the job runs (each tick
# otherwise): they rest on a window of the last minutes, so a second's readings move
# them little, and the findings panel's text, repainted whenever a number in it moved,
# was a quarter of the TUI's cost on a fast training loop (bench/RESULTS.md).
DIAGNOSE_EVERY_S = 5.0
DIAGNOSE_EVERY_NS = int(DIAGNOSE_EVERY_S * 1e9)


class Listener(Protocol):
    def on_snapshot(self, snapshot: Snapshot) -> None: ...

    def on_end(self, job_exit: JobExit | None, error: str | None, snapshot: Snapshot) -> None:
        """The loop ended: how the job ended, or the doctor's own failure (the job goes
        on); called from the loop's thread."""


class Follower:
    def __init__(
        self,
        source: JobSource,
        output: TerminalView | None = None,
        metrics: RunCollector | None = None,
    ) -> None:
        self.source = source
        self.output = output  # the job's output, as a terminal shows it
        self.metrics = metrics  # --metrics: handed each tick's snapshot
        self.job_exit: JobExit | None = None
        self.error: str | None = None  # the doctor's failure while following
        self._listener: Listener | None = None
        self._lock = threading.Lock()
        self._ended = False
        self._thread = threading.Thread(target=self._run, name="gpudoctor-loop")
        # the plots' stretch while a screen shows them (seconds; inf: the whole run;
        # None: no plots shown, none drawn), set from the app's thread
        self.plot_s: float | None = None
        self._series: RunSeries | None = None
        self._series_at: tuple[float | None, int] = (None, 0)  # its stretch, and when
        self._seen: dict[str, float] = {}  # when each finding was first seen
        self._diagnosed: tuple[Diagnosed, int] | None = None  # the last findings, and when

    def start(self) -> None:
        """Begin following (once; a second call does nothing)."""
        with self._lock:
            if self._thread.ident is None:
                self._thread.start()

    def listen(self, listener: Listener | None) -> None:
        """Snapshots to `listener` from now on (None: to nobody). One that comes after
        the end is told of the end at once."""
        with self._lock:
            self._listener = listener
            ended = self._ended
        if ended and listener is not None:
            listener.on_end(self.job_exit, self.error, self._snapshot(self.source.timeline))

    def join(self) -> None:
        self._thread.join()

    @property
    def ended(self) -> bool:
        return self._ended

    def _snapshot(self, timeline: Timeline) -> Snapshot:
        now = time.monotonic_ns()
        kept = self._diagnosed
        if kept is not None and (now - kept[1] >= DIAGNOSE_EVERY_NS or timeline.exit is not None):
            kept = None  # due again, or the job ended: its findings are diagnosed now
        snapshot = take(timeline, self.source.job_pid, self.output, None, kept and kept[0])
        if kept is None:
            self._diagnosed = (Diagnosed(snapshot.findings, snapshot.predictions), now)
        for f in snapshot.findings:
            self._seen.setdefault(f.id, round(snapshot.elapsed_s, 1))
        span = self.plot_s
        if span is None:
            self._series = None
            return snapshot
        return replace(snapshot, series=self._plotted(timeline, span, snapshot.t_mono_ns))

    def _plotted(self, timeline: Timeline, span: float, now: int) -> RunSeries:
        """The run over the stretch shown, drawn again once an interval of it has
        passed (an hour's run's 30 s for the whole of it: before that, the new readings
        would not move a point), at most every PLOT_EVERY_S, and once the job ends."""
        since = None if math.isinf(span) else now - int(span * 1e9)
        width_ns = max(PLOT_EVERY_NS, (now - (since or timeline.start_mono_ns)) // POINTS)
        drawn_span, drawn_at = self._series_at
        ended = timeline.end_mono_ns is not None
        if ended and self._series is not None and self._series.ended_at_s is None:
            drawn_at = 0  # the end's marker and last readings: drawn now
        if self._series is None or drawn_span != span or now - drawn_at >= width_ns:
            self._series = run_series(timeline, POINTS, since, None, seen=dict(self._seen))
            self._series_at = (span, now)
        return self._series

    def _run(self) -> None:
        try:
            self.job_exit = self.source.run(self._tick)
        except Exception as exc:  # noqa: BLE001 (the doctor's failure: the job goes on)
            # kept beside the store for a report, as a command's own fault is (cli)
            kept = keep_failure(exc, sys.argv[1:], Path(self.source.store.path))
            self.error = failure_words(exc)
            if kept is not None:
                self.error += _("; the details are in {file}: please report it").format(file=kept)
        with self._lock:
            self._ended = True
            listener = self._listener
        if listener is not None:
            listener.on_end(self.job_exit, self.error, self._snapshot(self.source.timeline))

    def _tick(self, timeline: Timeline) -> None:
        listener = self._listener
        if listener is None and self.metrics is None:
            return  # nobody looks (the terminal went away): no snapshot
        snapshot = self._snapshot(timeline)
        if self.metrics is not None:
            self.metrics.latest = snapshot
        if listener is not None:
            listener.on_snapshot(snapshot)
