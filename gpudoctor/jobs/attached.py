"""A session another doctor is recording, followed from its store: what `gpudoctor
attach` shows. The viewer only reads: any number may follow one session, and leaving
one (q) leaves the job and its recording as they are.
"""

from __future__ import annotations

import time

from gpudoctor.i18n import _
from gpudoctor.jobs.source import OnTick
from gpudoctor.model import EndedBy, JobExit
from gpudoctor.store import SessionRow, Store


class AttachedSession:
    """A JobSource over the records of a live session: new records applied each
    interval through the store's one replay path."""

    can_stop = False  # the viewer does not own the job: leaving is all it can do
    can_profile = False

    def __init__(self, store: Store, row: SessionRow, interval_s: float = 1.0) -> None:
        self.store = store
        self.row = row
        self.session_id: int | None = row.id
        self.interval_s = interval_s
        self.timeline, self._last_id = store.load_from(row.id)
        self._left = False
        # why the viewer stopped following, when not the job's end: "" while it follows,
        # "left" (the viewer left), "doctor-gone" (the recording doctor is gone)
        self.gone = ""

    @property
    def gone_words(self) -> str:
        return _("the recording doctor is gone") if self.gone == "doctor-gone" else _("left")

    @property
    def job_pid(self) -> int | None:
        return self.row.job_pid

    def run(self, on_tick: OnTick | None = None) -> JobExit:
        while True:
            self._last_id = self.store.follow(self.row.id, self.timeline, self._last_id)
            if on_tick is not None:
                on_tick(self.timeline)
            if self.timeline.exit is not None:
                return self.timeline.exit
            if self._left or not self._still_live():
                self.gone = "left" if self._left else "doctor-gone"
                return JobExit(exit_code=None, ended_by="detached")
            deadline = time.monotonic() + self.interval_s
            while time.monotonic() < deadline and not self._left:
                time.sleep(0.05)

    def _still_live(self) -> bool:
        return self.row.live

    def stop(self, reason: EndedBy = "max-seconds") -> None:
        self.detach()

    def detach(self) -> None:
        """Stop viewing (thread-safe): the loop ends at its next turn."""
        self._left = True

    def note_hangup(self) -> None:
        self.detach()  # a viewer's terminal went away: nothing to record, just leave

    def request_profile(self, steps: int) -> None:
        raise NotImplementedError("a viewer cannot ask for a profile (can_profile)")

    def close(self) -> None:
        return None
