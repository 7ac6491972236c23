"""Step boundaries from the events the hooks report (pure bookkeeping, no torch).

A step ends at the strongest kind of end event the job has shown so far: the lead
optimizer's `step()` (rank 4), else the end of `backward()` (rank 3), else the end of
a root module's forward (for inference, with or without a DataLoader). The end is
committed when the next step's first activity starts (a DataLoader batch or a root
forward), so that a job whose first optimizer step comes after its first backward
is not counted twice. Everything between two step ends belongs to the later step.

Sampling: once a job's steps end at its optimizer and the first FULL_STEPS are behind
it, only one step in SAMPLE_EVERY (and at least one every SAMPLE_MAX_GAP_NS) is measured
in detail (data wait, forward/backward/optimizer split, batch size); the others are only
counted and timed at the optimizer's step, which is all that runs for them. Each row says
which kind it is (`detail`). This keeps the probe inside its budget on short steps
(DESIGN.md section 7: <= 20 us per step; bench/RESULTS.md has the measurements).
"""

from __future__ import annotations

from collections import deque

RANK_FORWARD = 1
RANK_LOADER = 2
RANK_BACKWARD = 3
RANK_OPTIMIZER = 4

MAX_BUFFERED_STEPS = 20000  # bounded: when the doctor cannot keep up, drop and count
# Steps that end at backward() are held back until an optimizer step shows up (then
# they were micro-steps of gradient accumulation: merged into it) or this many have
# passed without one (a hand-written update: they were steps after all).
PROVISIONAL_STEPS = 64
# Sampling (see the module's docstring). Every step is measured in detail until then.
FULL_STEPS = 20
SAMPLE_EVERY = 32
SAMPLE_MAX_GAP_NS = 500_000_000


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
        "provisional",
        "detail",
        "next_detail",
        "sampling",
    )

    def __init__(self) -> None:
        self.rank = 0
        self.index = 0
        self.last_end: int | None = None
        self.pending_end: int | None = None
        self.outside_open = True
        self.out: deque[tuple[int, ...]] = deque()
        self.dropped = 0
        self.provisional: list[tuple[int, ...]] | None = []
        self.detail = 1  # the step being measured now is measured in detail
        self.next_detail = 1  # and the next one will be (decided at this one's end)
        self.sampling = False  # set by the probe once its per-step hooks can be detached
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

    def _emit(self, t_end: int) -> None:
        start = self.last_end if self.last_end is not None else t_end
        row = (
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
            self.detail,
        )
        held = self.provisional
        if held is not None and self.rank == RANK_BACKWARD:
            held.append(row)
            if len(held) > PROVISIONAL_STEPS:
                self._release()
        elif len(self.out) < MAX_BUFFERED_STEPS:
            self.out.append(row)
        else:
            self.dropped += 1
        self.index += 1
        self.last_end = t_end
        self.detail = self.next_detail
        self._reset()

    def _release(self) -> None:
        """The held-back backward() steps were steps after all."""
        held, self.provisional = self.provisional or [], None
        for row in held:
            if len(self.out) < MAX_BUFFERED_STEPS:
                self.out.append(row)
            else:
                self.dropped += 1

    def _merge_held(self) -> None:
        """The first optimizer step: the held-back backward() steps were its micro-steps."""
        held, self.provisional = self.provisional or [], None
        if not held:
            return
        self.index -= len(held)
        self.last_end = held[0][1] - held[0][2]
        self.loader += sum(r[3] for r in held)
        self.outside += sum(r[4] for r in held)
        self.forward += sum(r[5] for r in held)
        self.backward += sum(r[6] for r in held)
        self.optimizer += sum(r[7] for r in held)
        self.forwards += sum(r[8] for r in held)
        self.batch = held[0][9] if held[0][9] >= 0 else self.batch
        self.syncs += sum(r[10] for r in held)
        self.pageable += sum(r[11] for r in held)

    def finish(self) -> None:
        """At exit: the step that ended but had no successor still counts."""
        if self.pending_end is not None:
            self._emit(self.pending_end)
            self.pending_end = None
        self._release()

    # -- events from the hooks ------------------------------------------------------

    # The hooks below run in every step of the job: each writes out its own boundary
    # logic (committing a pending end, raising the rank) rather than calling a shared
    # helper, since a call costs more than the work.

    def loader_batch(self, t0: int, t1: int, batch_size: int) -> None:
        if self.rank < RANK_LOADER:
            self.rank = RANK_LOADER
        if self.pending_end is not None:
            self._emit(self.pending_end)
            self.pending_end = None
        if self.last_end is None:
            self.last_end = t0
        self.loader += t1 - t0
        if self.batch < 0:
            self.batch = batch_size

    def forward_start(self, t: int) -> None:
        if self.pending_end is not None:
            self._emit(self.pending_end)
            self.pending_end = None
        if self.last_end is None:
            self.last_end = t
        if self.outside_open:
            if self.last_end is not None:
                self.outside = t - self.last_end
            self.outside_open = False

    def forward_end(self, t0: int, t1: int) -> None:
        self.forward += t1 - t0
        self.forwards += 1
        if self.rank <= RANK_LOADER:  # inference: the forward's end may end the step
            if not self.rank:
                self.rank = RANK_FORWARD
            self.pending_end = t1

    def backward_done(self, t0: int, t1: int) -> None:
        if self.pending_end is not None:
            if self.rank >= RANK_BACKWARD:  # no model call since the step ended
                self._emit(self.pending_end)  # (tensor code with no nn.Module): a new step
            self.pending_end = None  # else the forward's end was not the step's end
        if self.last_end is None:
            self.last_end = t0
        self.backward += t1 - t0
        if self.rank <= RANK_BACKWARD:
            self.rank = RANK_BACKWARD
            self.pending_end = t1

    def optimizer_done(self, t0: int, t1: int, lead: bool) -> None:
        if self.last_end is None:
            self.last_end = t0
        self.optimizer += t1 - t0
        if lead:
            if self.provisional is not None:
                self._merge_held()
            self.rank = RANK_OPTIMIZER
            self.pending_end = t1

    def plan_next(self, t_end: int) -> tuple[int, int]:
        """At the end of a step measured in detail: how many steps to only count before
        the next detailed one, and the time by which it starts at the latest."""
        if not self.sampling or self.index + 1 < FULL_STEPS or self.provisional is not None:
            return 0, t_end
        self.next_detail = 0
        return SAMPLE_EVERY - 1, t_end + SAMPLE_MAX_GAP_NS

    def counted(self, ends: list[int]) -> None:
        """The ends of the steps that were only counted (the probe collects them in its
        optimizer hook, the cheapest place there is); the step after them is detailed."""
        for t in ends:
            if self.pending_end is not None:
                self._emit(self.pending_end)
            self.pending_end = t
        self.next_detail = 1

    def take(self) -> list[tuple[int, ...]]:
        """Called from the flush thread: deque pops are atomic, nothing is lost."""
        out = []
        pop = self.out.popleft
        while self.out:
            out.append(pop())
        return out
