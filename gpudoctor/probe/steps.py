"""Step boundaries from the events the hooks report (pure bookkeeping, no torch).

A step ends at the strongest kind of end event the job has shown so far: the lead
optimizer's `step()` (rank 4), else the end of `backward()` (rank 3), else the end of
a root module's forward (for inference, with or without a DataLoader). The end is
committed when the next step's first activity starts (a DataLoader batch or a root
forward), so that a job whose first optimizer step comes after its first backward
is not counted twice. Everything between two step ends belongs to the later step.
"""

from __future__ import annotations

from collections import deque

RANK_FORWARD = 1
RANK_LOADER = 2
RANK_BACKWARD = 3
RANK_OPTIMIZER = 4

MAX_BUFFERED_STEPS = 20000  # bounded: when the doctor cannot keep up, drop and count


class StepClock:
    __slots__ = (
        "rank",
        "index",
        "last_end",
        "pending_end",
        "outside_open",
        "loader",
        "outside",
        "forward",
        "backward",
        "optimizer",
        "forwards",
        "batch",
        "syncs",
        "pageable",
        "out",
        "dropped",
    )

    def __init__(self) -> None:
        self.rank = 0
        self.index = 0
        self.last_end: int | None = None
        self.pending_end: int | None = None
        self.outside_open = True
        self.out: deque[tuple[int, ...]] = deque()
        self.dropped = 0
        self._reset()

    def _reset(self) -> None:
        self.loader = 0
        self.outside = 0
        self.forward = 0
        self.backward = 0
        self.optimizer = 0
        self.forwards = 0
        self.batch = -1
        self.syncs = 0
        self.pageable = 0
        self.outside_open = True

    # -- step boundaries ---------------------------------------------------------------

    def _begin_activity(self, t: int) -> None:
        """The first activity of a step: commits a pending end, starts the clock."""
        if self.pending_end is not None:
            self._emit(self.pending_end)
            self.pending_end = None
        if self.last_end is None:
            self.last_end = t

    def _end_candidate(self, t: int, rank: int) -> None:
        if rank > self.rank:
            self.rank = rank
        if rank >= self.rank:
            self.pending_end = t

    def _emit(self, t_end: int) -> None:
        start = self.last_end if self.last_end is not None else t_end
        if len(self.out) < MAX_BUFFERED_STEPS:
            self.out.append(
                (
                    self.index,
                    t_end,
                    t_end - start,
                    self.loader,
                    self.outside,
                    self.forward,
                    self.backward,
                    self.optimizer,
                    self.forwards,
                    self.batch,
                    self.syncs,
                    self.pageable,
                )
            )
        else:
            self.dropped += 1
        self.index += 1
        self.last_end = t_end
        self._reset()

    def finish(self) -> None:
        """At exit: the step that ended but had no successor still counts."""
        if self.pending_end is not None:
            self._emit(self.pending_end)
            self.pending_end = None

    # -- events from the hooks ------------------------------------------------------

    def loader_batch(self, t0: int, t1: int, batch_size: int) -> None:
        if self.rank < RANK_LOADER:
            self.rank = RANK_LOADER
        self._begin_activity(t0)
        self.loader += t1 - t0
        if self.batch < 0:
            self.batch = batch_size

    def forward_start(self, t: int) -> None:
        self._begin_activity(t)
        if self.outside_open:
            if self.last_end is not None:
                self.outside = t - self.last_end
            self.outside_open = False

    def forward_end(self, t0: int, t1: int) -> None:
        self.forward += t1 - t0
        self.forwards += 1
        if self.rank <= RANK_LOADER:
            self._end_candidate(t1, self.rank if self.rank else RANK_FORWARD)

    def backward_done(self, t0: int, t1: int) -> None:
        if self.last_end is None:
            self.last_end = t0
        self.backward += t1 - t0
        self._end_candidate(t1, RANK_BACKWARD)

    def optimizer_done(self, t0: int, t1: int, lead: bool) -> None:
        if self.last_end is None:
            self.last_end = t0
        self.optimizer += t1 - t0
        if lead:
            self._end_candidate(t1, RANK_OPTIMIZER)

    def take(self) -> list[tuple[int, ...]]:
        """Called from the flush thread: deque pops are atomic, nothing is lost."""
        out = []
        pop = self.out.popleft
        while self.out:
            out.append(pop())
        return out
