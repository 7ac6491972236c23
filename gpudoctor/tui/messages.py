"""App-wide messages, named for what happened."""

from __future__ import annotations

from textual.message import Message

from gpudoctor.model import JobExit
from gpudoctor.snapshot import Snapshot


class SnapshotReady(Message):
    """A new snapshot of the run (the newest replaces any not yet handled)."""

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotReady)


class PanelResized(Message):
    """A panel of the main screen changed size (the findings grew or shrank, the GPU
    panel's layout changed): the panels beside it are fitted again to the room left."""


class JobExited(Message):
    """The session loop is over: the job ended, or the doctor left it running."""

    def __init__(self, job_exit: JobExit, snapshot: Snapshot) -> None:
        super().__init__()
        self.job_exit = job_exit
        self.snapshot = snapshot


class SessionFailed(Message):
    """The doctor's own session loop failed (the job is left running)."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error
