"""Step boundaries from the events the hooks report (pure bookkeeping, no torch).

A step ends at the strongest kind of end event the job has shown so far:

- an optimizer's `step()` (END_OPTIMIZER). Jobs step one optimizer or several (a GAN's
  discriminator and generator, an encoder and a decoder), and may train one model after
  another: the optimizers that step in one iteration form a cycle, learnt from the
  order they step in. When an optimizer steps a second time before the cycle closed,
  the step ended at the optimizer step before it, and that one is the cycle's closer;
  from then on each step ends at the closer's `step()`. A new cycle (the next model in
  a sequence) is learnt the same way.
- else the end of `backward()` (END_BACKWARD), held back until an optimizer step shows
  up (then they were micro-steps of gradient accumulation, merged into it) or until
  PROVISIONAL_STEPS passed without one (a hand-written update: they were steps);
- else a DataLoader batch (END_LOADER: the next batch starts the next step) or a root
  module's forward (END_FORWARD: a step calls each root once, so the next call of a
  root already called starts the next step; a teacher and a student, or an encoder and
  a decoder, make one step), for inference. Such steps are held back too, until a
  backward shows up (then the job trains, and they were an evaluation before its first
  step: nanoGPT's loss estimate, Lightning's sanity check; they are no steps, and their
  time is evaluation's) or until PRE_TRAIN_ROWS of them or PRE_TRAIN_HOLD_NS passed
  without one (inference: they were steps). Those that called a model with gradients
  on, or in training mode (an evaluation calls `model.eval()` first: nanoGPT, Lightning,
  Trainer, timm, pytorch/examples), were the first step's own, from the first such one
  on (`training_row`): a policy's rollout of an episode (pytorch/examples' REINFORCE:
  a forward an action with gradients, one backward an episode; Lightning's PPO: the
  first rollout under `no_grad`, then the first update), a decoder called once a token.
  A job that has made an optimizer (`optimizer_made`) trains: its rows from the first
  such one on are never taken for inference's steps, however many or long; past the
  bounds they are folded into one row, as they will be merged into the first step
  (cleanrl's ppo_continuous_action.py: a rollout of 2,048 calls, then the update, read
  as 2,049 inference steps more than its 960).

What runs inside an optimizer's step (a closure's forwards and backwards: L-BFGS) never
ends a step. A root module called with gradients off once the job trains, where that
module was called with them on before, is evaluation (`evaluated`): its time is not the
step's forward, nor data wait. An evaluation between two steps runs from the end of the
step before it to the next step's first forward, less that step's batches and the saves
in it: its loader, its loop, its metrics are its own, and no step's wall holds it (a
step's time is training's; the wall-time ledger has the evaluation apart). Host work
between steps that is the step's bookkeeping, not input (`housekeeping`: zero_grad,
clipping, a `no_grad` block such as a hand-written update, a scheduler's step, a save,
a host sync such as `.item()`) is taken out of the time outside the model. In a job
with no optimizer, the update written by hand outside a `no_grad` block
(`p.data.add_(p.grad, ...)`) reads each parameter's gradient: from the backward's end
to the last gradient read before the next forward (`grad_read`) is the update, not
input either.

A step's samples are those of every DataLoader batch it took (gradient accumulation's
micro-batches together). The batches fetched for an evaluation call (an evaluation
loader run between two steps) are the evaluation's: their wait is evaluation time, not
the step's data wait, and their samples are not the step's.

Everything between two step ends belongs to the later step.

Sampling: once a job's steps end at its optimizers and the first FULL_STEPS are behind
it, only one step in SAMPLE_EVERY, or one every SAMPLE_MIN_GAP_NS on shorter steps (and at
least one every SAMPLE_MAX_GAP_NS), is measured in detail (data wait, forward/backward/
optimizer split, batch size); the others are only counted and timed at the closer's
step, which is all that runs for them. Each row says which kind it is (`detail`). An
evaluation's first forward on a counted step ends the counting there (probe/models.py),
so that the evaluation is timed whole. This keeps the probe inside its budget on short
steps (DESIGN.md section 7: <= 20 us per step; bench/RESULTS.md has the measurements).
"""

from __future__ import annotations

from collections import deque
from typing import Any

END_FORWARD = 1
END_LOADER = 2
END_BACKWARD = 3
END_OPTIMIZER = 4
END_NAMES = ("", "forward", "dataloader", "backward", "optimizer")

# Bounded: when the doctor cannot keep up, drop and count. Rows that could not be sent
# wait here too: 20,000 rows (about 3 MB) hold a doctor stopped for 28 s at 700 steps/s.
MAX_BUFFERED_STEPS = 20000
# See the module's docstring: backward() steps held back until an optimizer shows up.
PROVISIONAL_STEPS = 64
# See the module's docstring: forward or loader steps held back until a backward shows up.
# nanoGPT's first loss estimate is 2 x 200 forwards; a held row is about 150 bytes.
PRE_TRAIN_ROWS = 2048
PRE_TRAIN_HOLD_NS = 30_000_000_000
# Sampling (see the module's docstring). Every step is measured in detail until then.
FULL_STEPS = 20
SAMPLE_EVERY = 32
SAMPLE_MAX_GAP_NS = 500_000_000
# On short steps, at most one detailed step every SAMPLE_MIN_GAP_NS: a detailed step and
# the few after it cost ~125 us more than counted ones on a 0.24 ms step (bench/RESULTS.md,
# 2026-12-05), 3.9 us a step at one in 32, 1.25% of the time at 25 ms. 40 a second still
# give the rules hundreds of detailed steps in the windows they read (10 s and more).
SAMPLE_MIN_GAP_NS = 25_000_000

# The saves since a step's end kept to tell those after the last step (the ledger's).
MAX_RECENT_SAVES = 64

# A step that is only counted and timed: no split, no batch size (-1: unknown).
NO_PARTS = (0, 0, 0, 0, 0, 0, -1, 0, 0)
# The additive parts of a step, in row order after index, end and wall.
PARTS = ("loader", "outside", "forward", "backward", "optimizer", "forwards")


class StepClock:
    """Turns hook events into step rows (protocol.STEP_FIELDS). Its counters are read
    by the probe's flush thread; `ends_seen` (steps ended, held or about to end) is what
    the probe mirrors in its shared counter page."""

    def __init__(self) -> None:
        # rows (tuples), and blocks of steps only counted (lists: see `counted`)
        self.out: deque[Any] = deque()
        # an optimizer exists (set by the optimizer hooks; a forked child has its
        # parent's, so a reset keeps it)
        self.optimizer_made = False
        self.reset()

    def reset(self) -> None:
        """A fresh clock (a forked child starts with nothing of its parent's)."""
        self.level = 0
        self.index = 0
        self.last_end: int | None = None
        self.pending_end: int | None = None
        self.step_roots: set[int] = set()
        self.out.clear()
        # rows in `out`: added by the training thread, taken (less those given back) by
        # the flush thread; each counter is written by one thread only
        self.added = 0
        self.removed = 0
        self.dropped = 0
        self.held: list[tuple[int, ...]] | None = []
        # steps that ended at a forward or a batch before any backward (see the docstring)
        self.pre_train: list[tuple[int, ...]] | None = []
        # for each of them, whether it called a model with gradients on or in training
        # mode (set by the model hook while no backward has run: `training_row`, the
        # row under way's)
        self.pre_train_training: list[bool] = []
        self.training_row = False
        # evaluation (see the docstring), over the whole run: time and forwards
        self.eval_ns = 0
        self.eval_forwards = 0
        self.eval_before_ns = 0  # of it, before the first step (in the start-up's time)
        # checkpoints (torch.save) over the whole run: time and count
        self.save_ns = 0
        self.saves = 0
        self.recent_saves: list[tuple[int, int]] = []  # since the step's end: start, time
        # the evaluation under way (`evaluated`): where its time so far ends (None: none),
        # and save_ns there
        self.eval_mark: int | None = None
        self.eval_save_mark = 0
        # when the first step that is surely one began (the wall-time ledger)
        self.first_start: int | None = None
        # the step's bookkeeping since its end, not yet taken out of the time outside
        self.housekeeping_ns = 0
        self.housekeeping_spans: list[tuple[int, int]] = []  # since then, outermost only
        # a job with no optimizer: when its update, written by hand, last read a gradient
        self.update_until = 0
        self.detail = 1  # the step being measured now is measured in detail
        self.next_detail = 1  # and the next one will be (decided at this one's end)
        self.sampling = False  # set by the probe once its per-step hooks can be detached
        self.planned: tuple[int, int] | None = None  # (index, time) of the last plan_next
        # the optimizer cycle
        self.cycle: list[int] = []
        self.closer: int | None = None
        self.last_opt_end = 0
        self.before_last_opt: tuple[int, ...] = ()
        self.nested_at_opt_start = -1  # -1: no optimizer step under way
        self._zero()

    def _zero(self) -> None:
        self.loader = 0
        self.outside = 0
        self.forward = 0
        self.backward = 0
        self.optimizer = 0
        self.forwards = 0
        self.batch = -1  # the samples of the step's batches (-1: none seen)
        # the DataLoader batches since the last root module's call, and their wait: an
        # evaluation's when that call is one (`evaluated`), the step's otherwise
        self.recent_loader = 0
        self.recent_batch = 0
        self.syncs = 0
        self.pageable = 0
        self.outside_open = True
        # a step ended: an evaluation after it is a new one, and after the last step
        self.eval_mark = None
        self.eval_trained = 0
        # evaluation since the step's end: not the next step's wall, and after the last
        # step the ledger's `evaluation_after`
        self.eval_step_ns = 0
        self.save_at_end = self.save_ns  # the checkpoints' time at the step's end
        if self.recent_saves:
            self.recent_saves = []

    @property
    def ends_seen(self) -> int:
        """Steps that ended so far, counting one whose end is known but not yet emitted
        (a pending end, or an optimizer cycle under way). Steps held back (see the
        docstring) are not counted until they are known to be steps: the doctor never
        takes a count back."""
        if self.level < END_BACKWARD and self.pre_train is not None:
            return self.index - len(self.pre_train)
        if self.level == END_BACKWARD and self.held is not None:
            return self.index - len(self.held)
        open_step = self.pending_end is not None or (self.level == END_OPTIMIZER and self.cycle)
        return self.index + (1 if open_step else 0)

    # -- rows -----------------------------------------------------------------------------

    def _parts(self) -> tuple[int, ...]:
        return (
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

    def _set_parts(self, parts: tuple[int, ...] | list[int]) -> None:
        (
            self.loader,
            self.outside,
            self.forward,
            self.backward,
            self.optimizer,
            self.forwards,
            self.batch,
            self.syncs,
            self.pageable,
        ) = parts

    def _emit(self, t_end: int, parts: tuple[int, ...], eval_ns: int = 0) -> None:
        """A row for the step that ended at t_end; `eval_ns` of evaluation ran in its
        time (the step under way's: `_emit_current`), not in its wall."""
        start = self.last_end if self.last_end is not None else t_end
        if not self.detail:  # only counted and timed: no split (the FLOP count's step)
            parts = NO_PARTS
        loader, outside, forward, backward, optimizer, forwards, batch, syncs, pageable = parts
        row = (
            self.index,
            t_end,
            t_end - start - eval_ns,
            loader,
            outside,
            forward,
            backward,
            optimizer,
            forwards,
            batch,
            syncs,
            pageable,
            self.detail,
        )
        held = self.held
        pre_train = self.pre_train
        if held is not None and self.level == END_BACKWARD:
            held.append(row)
            if len(held) > PROVISIONAL_STEPS:
                self._release()
        elif pre_train is not None and self.level < END_BACKWARD:
            pre_train.append(row)
            self.pre_train_training.append(self.training_row)
            self.training_row = False
            first = pre_train[0]
            if len(pre_train) > PRE_TRAIN_ROWS or t_end - first[1] + first[2] > PRE_TRAIN_HOLD_NS:
                if self.optimizer_made and True in self.pre_train_training:
                    self._fold_pre_train()
                else:
                    self._release_pre_train()
        else:
            self._out([row])
        self.index += 1
        self.last_end = t_end
        self.detail = self.next_detail
        self.step_roots = set()

    def _emit_current(self, t_end: int) -> None:
        self._emit(t_end, self._parts(), self.eval_step_ns)
        self._zero()

    def _release_pre_train(self) -> None:
        """The held-back forward or batch steps were steps after all: inference."""
        held, self.pre_train = self.pre_train or [], None
        self.pre_train_training = []
        self._out(held)

    def _fold_pre_train(self) -> None:
        """The held rows from the first made in training on, as one: a job that has an
        optimizer trains, and they will be its first step's (see the docstring)."""
        held = self.pre_train or []
        k = self.pre_train_training.index(True)
        mine = held[k:]
        if len(mine) < 2:
            return
        start, end = mine[0][1] - mine[0][2], mine[-1][1]
        samples = sum(r[9] for r in mine if r[9] >= 0)
        folded = (
            mine[0][0], end, end - start, *(sum(r[i] for r in mine) for i in range(3, 9)),
            samples if samples > 0 else -1, sum(r[10] for r in mine), sum(r[11] for r in mine),
            1,
        )  # fmt: skip
        held[k:] = [folded]
        self.pre_train_training[k:] = [True]
        self.index -= len(mine) - 1

    def _drop_pre_train(self) -> None:
        """The first backward: the held-back forward or batch steps were no steps. Up to
        the first that called a model with gradients on or in training mode, an
        evaluation before the first training step (their time is evaluation's); from
        there, the first step's own forwards (merged into it: _merge_rows, as micro-steps
        are)."""
        held, self.pre_train = self.pre_train or [], None
        training, self.pre_train_training = self.pre_train_training, []
        if not held:
            return
        self.index -= len(held)
        first = training.index(True) if True in training else len(held)
        evaluation, mine = held[:first], held[first:]
        wall = sum(r[2] for r in evaluation)
        self.eval_before_ns += wall
        self.eval_ns += wall
        self.eval_forwards += sum(r[8] for r in evaluation)
        if mine:
            self._merge_rows(mine)

    def _release(self) -> None:
        """The held-back backward() steps were steps after all."""
        held, self.held = self.held or [], None
        self._out(held)

    @property
    def buffered(self) -> int:
        """Rows waiting in `out` (the blocks' steps counted one by one)."""
        return self.added - self.removed

    def _out(self, rows: list[tuple[int, ...]]) -> None:
        if rows and self.first_start is None:
            self.first_start = rows[0][1] - rows[0][2]
        for row in rows:
            if self.buffered < MAX_BUFFERED_STEPS:
                self.out.append(row)
                self.added += 1
            else:
                self.dropped += 1

    def _merge_held(self) -> None:
        """The first optimizer step: the held-back backward() steps were its micro-steps."""
        held, self.held = self.held or [], None
        if not held:
            return
        self.index -= len(held)
        self._merge_rows(held)

    def _merge_rows(self, rows: list[tuple[int, ...]]) -> None:
        """Rows held back (not emitted) are the step under way's: it begins where the
        first of them began, and their parts and samples are added to its own."""
        self.last_end = rows[0][1] - rows[0][2]
        self.loader += sum(r[3] for r in rows)
        self.outside += sum(r[4] for r in rows)
        self.forward += sum(r[5] for r in rows)
        self.backward += sum(r[6] for r in rows)
        self.optimizer += sum(r[7] for r in rows)
        self.forwards += sum(r[8] for r in rows)
        samples = sum(r[9] for r in rows if r[9] >= 0) + max(0, self.batch)
        self.batch = samples if samples > 0 else -1
        self.syncs += sum(r[10] for r in rows)
        self.pageable += sum(r[11] for r in rows)

    def finish(self) -> None:
        """At exit: the step that ended but was not emitted yet still counts."""
        if self.pending_end is not None:
            self._emit_current(self.pending_end)
            self.pending_end = None
        elif self.level == END_OPTIMIZER and self.cycle:
            self._emit(self.last_opt_end, self.before_last_opt)
            self.cycle = []
        self._release()
        self._release_pre_train()

    # -- events from the hooks ------------------------------------------------------------

    # The hooks below run in every step measured in detail: each writes out its own
    # boundary logic (committing a pending end, raising the level) rather than calling a
    # shared helper, since a call costs more than the work.

    def loader_batch(self, t0: int, t1: int, batch_size: int) -> None:
        if self.level < END_LOADER:
            self.level = END_LOADER
        if self.pending_end is not None:
            self._emit_current(self.pending_end)
            self.pending_end = None
        if self.last_end is None:
            self.last_end = t0
        self.loader += t1 - t0
        self.recent_loader += t1 - t0
        if batch_size >= 0:  # a step's samples: all its batches (gradient accumulation's)
            self.batch = batch_size if self.batch < 0 else self.batch + batch_size
            self.recent_batch += batch_size

    def forward_start(self, t: int, root: int = 0) -> None:
        """A root module's call starts (`root`: which module)."""
        # A pending end is the step's end when a new step starts here: after a backward
        # (no optimizer), or at a root this step has called already. With a DataLoader
        # the next batch decides instead. Inside an optimizer's step (a closure) no step ends.
        if (
            self.nested_at_opt_start < 0
            and self.pending_end is not None
            and self.level != END_LOADER
        ):
            if self.level >= END_BACKWARD or root in self.step_roots:
                self._emit_current(self.pending_end)
            self.pending_end = None
        self.step_roots.add(root)
        if self.last_end is None:
            self.last_end = t
        if self.outside_open:
            if self.eval_mark is not None:  # an evaluation before it: its end is here
                self._evaluation_ends(t)
            begun = max(self.last_end, self.update_until)
            self.outside = max(0, t - begun - self.housekeeping_ns)
            self.housekeeping_ns = 0
            self.housekeeping_spans = []
            self.update_until = 0
            self.outside_open = False
        self.recent_loader = 0  # the batches fetched for this call: the step's
        self.recent_batch = 0

    def forward_end(self, t0: int, t1: int) -> None:
        self.forward += t1 - t0
        self.forwards += 1
        if self.level <= END_LOADER:  # inference: the forward's end may end the step
            if not self.level:
                self.level = END_FORWARD
            self.pending_end = t1

    def backward_done(self, t0: int, t1: int) -> None:
        if self.pre_train is not None and self.level < END_BACKWARD:
            self._drop_pre_train()
        if self.nested_at_opt_start >= 0:  # a closure's, inside an optimizer's step
            self.backward += t1 - t0
            return
        if self.pending_end is not None:
            if self.level >= END_BACKWARD:  # no model call since the step ended
                self._emit_current(self.pending_end)  # (tensor code with no nn.Module)
            self.pending_end = None  # else the forward's end was not the step's end
        if self.last_end is None:
            self.last_end = t0
        self.backward += t1 - t0
        if self.level <= END_BACKWARD:
            self.level = END_BACKWARD
            self.pending_end = t1

    def evaluated(self, t0: int, t1: int) -> None:
        """A root module ran an evaluation forward from t0 to t1 (see the docstring).
        An evaluation runs from the end of the step before it to the next step's first
        forward (`_evaluation_ends`); here, from there (or its previous forward's end) to
        this forward's end: its loader's waits, the loop around its forwards (metrics,
        `.item()`, `model.eval()`) are its time, less the checkpoints saved in there
        (theirs). It is not the next step's input time, nor data wait: the
        DataLoader batches fetched since the last root call were its input (an
        evaluation loader's), and their samples are not the step's either. On a step only
        counted (the probe did not switch to detail), the call alone is known."""
        if not self.detail:
            self.eval_ns += t1 - t0
            self.eval_forwards += 1
            return
        pending = self.pending_end
        if pending is not None and self.level >= END_BACKWARD and self.nested_at_opt_start < 0:
            # a step that ends at its backward (an update written by hand) ended before
            # it, as at the next training forward (`forward_start`)
            self._emit_current(pending)
            self.pending_end = None
        start = self.eval_mark
        trained = self.forward + self.backward
        saves = self.eval_save_mark
        if start is None or trained != self.eval_trained:
            last = self.last_end
            saves = self.save_at_end
            if self.outside_open and last is not None and last < t0:
                # its first forward: it began where the step before it ended (and its
                # update, written by hand, was over)
                start = min(max(last, self.update_until), t0)
            else:  # inside a training step: the call and the batches it took
                start = t0 - self.recent_loader
        saved = self.save_ns - saves
        self.eval_save_mark = self.save_ns
        span = max(0, t1 - start - saved)
        self.eval_ns += span
        self.eval_step_ns += span
        self.eval_forwards += 1
        self.eval_mark = t1
        self.eval_trained = trained
        self.housekeeping(start, t1)  # between two steps, it is not input's either
        if self.recent_loader or self.recent_batch:
            self.loader -= self.recent_loader
            if self.recent_batch:
                left = self.batch - self.recent_batch
                self.batch = left if left > 0 else -1
            self.recent_loader = 0
            self.recent_batch = 0

    def _evaluation_ends(self, t: int) -> None:
        """The step's first forward at t, after an evaluation: what ran since its last
        forward (its loop's tail: the last `.item()`, `model.train()`, logging) is the
        evaluation's too, less the DataLoader batches fetched since (the step's input)
        and the saves (the checkpoints')."""
        mark, self.eval_mark = self.eval_mark, None
        if mark is None or mark >= t:
            return
        saved = self.save_ns - self.eval_save_mark
        tail = t - mark - self.recent_loader - saved
        if tail > 0:
            self.eval_ns += tail
            self.eval_step_ns += tail
            self.housekeeping(mark, t - self.recent_loader)  # the saves' spans in it

    def housekeeping(self, t0: int, t1: int) -> None:
        """The step's bookkeeping ran from t0 to t1 (see the docstring): between two
        steps, it is not the time outside the model that input code takes."""
        if self.outside_open or (self.pending_end is not None and self.level >= END_BACKWARD):
            # one inside another (a `.item()` inside a `no_grad` block) is told first, as
            # it ends first: the outer one's time counts it already
            spans = self.housekeeping_spans
            inner = 0
            while spans and spans[-1][0] >= t0:
                s0, s1 = spans.pop()
                inner += s1 - s0
            spans.append((t0, t1))
            self.housekeeping_ns += t1 - t0 - inner

    def grad_read(self, t: int) -> None:
        """A gradient was read at t (a job with no optimizer: see the docstring). After
        a backward and before the next forward, it is the update's: the time outside the
        model begins after it, and the bookkeeping before it is inside it."""
        if self.pending_end is not None and self.level == END_BACKWARD:
            self.update_until = t
            self.housekeeping_ns = 0
            self.housekeeping_spans = []

    def saved(self, t0: int, t1: int) -> None:
        """A checkpoint (torch.save) from t0 to t1: the ledger's, and bookkeeping."""
        self.save_ns += t1 - t0
        self.saves += 1
        if len(self.recent_saves) < MAX_RECENT_SAVES:
            self.recent_saves.append((t0, t1 - t0))
        self.housekeeping(t0, t1)

    def ledger(self, last_end: int | None) -> dict[str, int] | None:
        """The wall-time ledger's parts the probe knows (ns, monotonic clock): the first
        step's start, the last step's end (`last_end`: counted steps end later than the
        clock has heard), evaluation and checkpoints. None before the first step."""
        if self.first_start is None:
            return None
        after = (last_end or 0) <= (self.last_end or 0)
        return {
            "first_step_start": self.first_start,
            "last_step_end": max(last_end or 0, self.last_end or 0),
            "evaluation": self.eval_ns,
            "evaluation_before": self.eval_before_ns,
            "checkpoint": self.save_ns,
            "checkpoints": self.saves,
            # of them, since the last step's end (a final evaluation, the last save): not
            # in the span of the steps (unless steps were counted since)
            "evaluation_after": self.eval_step_ns if after else 0,
            "checkpoint_after": self.save_ns - self.save_at_end if after else 0,
        }

    def optimizer_start(self) -> None:
        """An optimizer's step() begins: what its closure runs (L-BFGS: forward and
        backward) is the closure's, not the optimizer's."""
        self.nested_at_opt_start = self.forward + self.backward

    def optimizer_done(self, key: int, t0: int, t1: int) -> None:
        """An optimizer (`key`: which one) stepped from t0 to t1."""
        if self.last_end is None:
            self.last_end = t0
        start = self.nested_at_opt_start
        nested = self.forward + self.backward - start if start >= 0 else 0
        self.optimizer += max(0, t1 - t0 - nested)
        self.nested_at_opt_start = -1
        if self.level < END_OPTIMIZER:
            if self.held is not None:
                self._merge_held()
            self.pending_end = None  # a weaker end inside this step was not its end
            self.level = END_OPTIMIZER
        if key in self.cycle:  # the cycle closed at the optimizer step before this one
            self.closer = self.cycle[-1]
            done = self.before_last_opt
            now = self._parts()
            rest = [a - b for a, b in zip(now, done, strict=True)]
            # the samples since (-1, none seen, counts as 0 in a sum)
            since = max(0, now[6]) - max(0, done[6])
            rest[6] = since if since > 0 else -1
            self._emit(self.last_opt_end, done)
            self._set_parts(rest)
            self.cycle = []
        self.cycle.append(key)
        if key == self.closer:
            self._emit_current(t1)
            self.cycle = []
        else:
            self.last_opt_end = t1
            self.before_last_opt = self._parts()

    def plan_next(self, t_end: int) -> tuple[int, int]:
        """At the end of a step measured in detail: how many steps to only count before
        the next detailed one, and the time by which it starts at the latest."""
        if (
            not self.sampling
            or self.index < FULL_STEPS
            or self.held is not None
            or self.closer is None
            or self.cycle
        ):
            return 0, t_end
        self.next_detail = 0
        self.detail = 0
        every = SAMPLE_EVERY
        last = self.planned
        self.planned = (self.index, t_end)
        if last is not None and self.index > last[0] and t_end > last[1]:
            step_ns = (t_end - last[1]) // (self.index - last[0])  # since the last plan
            every = max(every, -(-SAMPLE_MIN_GAP_NS // max(1, step_ns)))
        return every - 1, t_end + SAMPLE_MAX_GAP_NS

    def counted(self, ends: list[int]) -> None:
        """The ends of the steps that were only counted (the probe collects them in its
        optimizer hook, the cheapest place there is); the step after them is detailed.
        They go out as one block, `[first index, the end before the first, ends]`, made
        into rows of COUNTED_FIELDS by the flush thread (`take`): a row each here cost
        the training thread more than all the probe's other work on a short step
        (bench/RESULTS.md, 2026-12-05). Nothing is held back while steps are counted
        (`plan_next`), and a counted step's parts are none."""
        if ends:
            kept = ends[: max(0, MAX_BUFFERED_STEPS - self.buffered)]  # the newest dropped
            if kept:
                self.out.append([self.index, self.last_end, kept])
                self.added += len(kept)
            self.dropped += len(ends) - len(kept)
            self.index += len(ends)
            self.last_end = ends[-1]
            self.step_roots = set()
            after = [save for save in self.recent_saves if save[0] >= ends[-1]]
            self._zero()
            self.recent_saves = after  # the saves after the last of them
            self.save_at_end -= sum(save[1] for save in after)
        self.housekeeping_ns = 0
        self.housekeeping_spans = []
        self.next_detail = 1
        self.detail = 1

    def take(self, limit: int) -> list[tuple[int, ...]]:
        """Up to `limit` rows, the oldest first; a counted step's as its first
        COUNTED_FIELDS (index, end, wall). Called from the flush thread: deque pops and
        appends at either end are atomic, and the training thread only appends on the
        right, so a block cut here goes back on the left whole."""
        rows: list[tuple[int, ...]] = []
        out = self.out
        pop = out.popleft
        while out and len(rows) < limit:
            item = pop()
            if type(item) is list:  # a block of counted steps (see `counted`)
                index, before, ends = item
                room = limit - len(rows)
                if len(ends) > room:
                    out.appendleft(_after(item, room))
                    ends = ends[:room]
                walls = map(int.__sub__, ends, [before, *ends[:-1]])
                rows.extend(zip(range(index, index + len(ends)), ends, walls, strict=True))
            else:
                rows.append(item)
        self.removed += len(rows)
        return rows

    def give_back(self, rows: list[tuple[int, ...]]) -> int:
        """Rows `take` gave that could not be sent (the doctor's queue was full) go back
        to the front of the buffer, in order, for the next flush; beyond the bound the
        oldest are dropped. How many were dropped (called from the flush thread)."""
        self.out.extendleft(reversed(rows))
        self.removed -= len(rows)
        over = self.added - self.removed - MAX_BUFFERED_STEPS
        dropped = 0
        out = self.out
        while over > 0 and out:
            item = out.popleft()
            if type(item) is list and len(item[2]) > over:  # the block's oldest only
                out.appendleft(_after(item, over))
                gone = over
            else:
                gone = len(item[2]) if type(item) is list else 1
            self.removed += gone
            over -= gone
            dropped += gone
        return dropped

    def state(self) -> dict[str, Any]:
        return {"level": END_NAMES[self.level], "steps": self.index}


def _after(block: list[Any], k: int) -> list[Any]:
    """A block of counted steps (StepClock.counted) without its first k."""
    index, _, ends = block
    return [index + k, ends[k - 1], ends[k:]]
