"""Step boundaries from hook events (the probe's StepClock), on hand-made sequences."""

from __future__ import annotations

from typing import Any

from gpudoctor.probe import protocol
from gpudoctor.probe.clock import (
    FULL_STEPS,
    SAMPLE_EVERY,
    SAMPLE_MAX_GAP_NS,
    SAMPLE_MIN_GAP_NS,
    StepClock,
)

MODEL, TEACHER = 101, 102  # root modules
ADAM, SGD = 1, 2  # optimizers


def steps(clock: StepClock) -> list[dict[str, int]]:
    clock.finish()
    rows = clock.take(1 << 30)  # a counted step's row is its first fields (as sent)
    full = [
        row if len(row) > protocol.COUNTED_FIELDS else row + protocol.COUNTED_REST for row in rows
    ]
    return [dict(zip(protocol.STEP_FIELDS, row, strict=True)) for row in full]


def training_loop(clock: StepClock, n: int, accumulate: int = 1, t: int = 0) -> int:
    """loader wait 2, forward 3, backward 4, optimizer 1 (time units) per micro-step."""
    for _ in range(n):
        for _ in range(accumulate):
            clock.loader_batch(t, t + 2, 32)
            clock.forward_start(t + 2, MODEL)
            clock.forward_end(t + 2, t + 5)
            clock.backward_done(t + 5, t + 9)
            t += 9
        clock.optimizer_start()
        clock.optimizer_done(ADAM, t, t + 1)
        t += 1
    return t


def test_optimizer_steps_are_counted_once_each() -> None:
    clock = StepClock()
    training_loop(clock, 10)
    out = steps(clock)
    assert len(out) == 10
    assert [s["index"] for s in out] == list(range(10))
    steady = out[1:]
    assert all(s["wall_ns"] == 10 for s in steady)
    assert all(
        (s["loader_ns"], s["forward_ns"], s["backward_ns"], s["optimizer_ns"]) == (2, 3, 4, 1)
        for s in steady
    )
    assert all(s["batch_size"] == 32 for s in out)


def test_a_step_is_emitted_as_soon_as_the_cycle_is_known() -> None:
    clock = StepClock()
    training_loop(clock, 1)
    assert clock.index == 0 and clock.ends_seen == 1  # one optimizer seen: cycle unknown
    training_loop(clock, 1, t=10)
    assert clock.index == 2 and clock.ends_seen == 2  # the repeat closed both


def test_gradient_accumulation_is_one_step_per_optimizer_step() -> None:
    clock = StepClock()
    training_loop(clock, 5, accumulate=4)
    out = steps(clock)
    assert len(out) == 5
    assert out[-1]["forwards"] == 4
    assert out[-1]["wall_ns"] == 4 * 9 + 1
    # a step's samples are all its micro-batches (samples/s would be a quarter of the
    # job's otherwise), the first step's too (its micro-steps held back, then merged)
    assert [s["batch_size"] for s in out] == [4 * 32] * 5
    assert out[-1]["loader_ns"] == 4 * 2


def test_an_evaluation_loaders_batches_between_steps_are_evaluations() -> None:
    """Every 3 steps an evaluation over its own DataLoader (gradients off): its batches'
    wait is evaluation time, not the next step's data wait, and its samples are not the
    step's. Hugging Face's no_trainer scripts and Trainer's eval_steps run so."""
    clock = StepClock()
    t = 0
    for i in range(9):
        t = training_loop(clock, 1, accumulate=2, t=t)
        if i % 3 == 2:
            for _ in range(5):  # 5 evaluation batches of 100, 50 time units each
                clock.loader_batch(t, t + 50, 100)
                clock.evaluated(t + 50, t + 53)
                t += 53
    out = steps(clock)
    assert len(out) == 9
    assert all(s["batch_size"] == 64 and s["loader_ns"] == 4 for s in out)
    # the evaluation is not the wall of the step after it (a training step's time)
    assert [s["wall_ns"] for s in out[1:]] == [2 * 9 + 1] * 8
    assert clock.eval_ns == 3 * 5 * 53 and clock.eval_forwards == 15
    # the last one ran after the last step: not in the steps' span (the ledger's)
    assert clock.ledger(None)["evaluation_after"] == 5 * 53  # type: ignore[index]


def test_an_evaluation_is_its_whole_loop_less_its_saves_and_the_last_one_is_after() -> None:
    """An evaluation runs from the step before it to the next step's first forward: the
    loop around its forwards (metrics, `.item()`) is its time, a save in there is the
    checkpoints', the next step's batch is that step's data wait; the step after it
    keeps its own time. One after the last step, with the final
    save, is outside the steps' span (the ledger's `..._after`); steps counted since an
    evaluation (sampling) and the saves before them are not after."""
    clock = StepClock()
    t = training_loop(clock, 3)
    for _ in range(4):  # 4 batches: wait 5, forward 3, then 7 of the loop's own
        clock.loader_batch(t, t + 5, 16)
        clock.evaluated(t + 5, t + 8)
        t += 15
    clock.saved(t - 7, t - 4)  # a save inside it, after its last forward
    t = training_loop(clock, 2, t=t)
    # to the next step's first forward, less that step's batch (2) and the save (3)
    assert clock.eval_ns == 4 * 15 - 3
    rows = steps(clock)
    assert [r["wall_ns"] for r in rows[1:]] == [10, 10, 10 + 3, 10]  # the save's 3 only
    ledger = clock.ledger(None)
    assert ledger is not None and ledger["evaluation_after"] == ledger["checkpoint_after"] == 0
    # a save between two forwards is not the evaluation's
    clock.loader_batch(t, t + 5, 16)
    clock.evaluated(t + 5, t + 8)
    clock.saved(t + 8, t + 20)
    clock.evaluated(t + 21, t + 24)
    assert clock.eval_ns == 4 * 15 - 3 + 24 - 12
    ledger = clock.ledger(None)
    assert ledger is not None
    assert (ledger["evaluation_after"], ledger["checkpoint_after"]) == (12, 12)
    assert ledger["checkpoint"] == 3 + 12
    # steps counted after it (their ends from the optimizer hook): not after them
    assert clock.ledger(t + 100) == {
        **ledger,
        "last_step_end": t + 100,
        "evaluation_after": 0,
        "checkpoint_after": 0,
    }
    # a save after the last counted step is after, one before it is not
    clock.saved(t + 30, t + 32)
    clock.saved(t + 40, t + 45)
    clock.counted([t + 35])
    ledger = clock.ledger(None)
    assert ledger is not None and ledger["checkpoint_after"] == 5


def test_an_evaluation_after_a_step_emitted_late_is_not_taken_from_its_wall() -> None:
    """A step the clock emits only later (its optimizer cycle not yet known: one step,
    then an evaluation, then the end) keeps its wall: the evaluation is after it (its
    call alone here: the step was still open when it ran)."""
    clock = StepClock()
    t = training_loop(clock, 1)  # 10 units, ADAM's cycle not closed
    clock.evaluated(t + 2, t + 5)
    (row,) = steps(clock)  # emitted at the end, ending at the optimizer's step
    assert row["wall_ns"] == 10 and clock.eval_ns == 3
    ledger = clock.ledger(None)
    assert ledger is not None and ledger["evaluation_after"] == 3


def test_a_no_grad_call_inside_a_training_step_is_only_its_call_and_batch() -> None:
    """A call of the trained model with gradients off after the step's forward (a metric
    on the training batch): its batch and its call are evaluation's, not the time since
    the step before."""
    clock = StepClock()
    t = training_loop(clock, 2)
    clock.loader_batch(t, t + 2, 32)
    clock.forward_start(t + 2, MODEL)
    clock.forward_end(t + 2, t + 5)
    clock.loader_batch(t + 5, t + 6, 32)
    clock.evaluated(t + 6, t + 8)
    clock.backward_done(t + 8, t + 12)
    clock.evaluated(t + 13, t + 14)  # after the backward: not from the call before
    clock.optimizer_done(ADAM, t + 14, t + 15)
    assert clock.eval_ns == 3 + 1


def test_two_optimizers_of_one_iteration_make_one_step() -> None:
    """A GAN: the discriminator steps, then the generator; the generator closes."""
    clock = StepClock()
    t = 0
    for _ in range(6):
        clock.loader_batch(t, t + 1, 64)
        clock.forward_start(t + 1, MODEL)
        clock.forward_end(t + 1, t + 2)
        clock.backward_done(t + 2, t + 4)
        clock.optimizer_done(ADAM, t + 4, t + 5)
        clock.forward_start(t + 5, TEACHER)
        clock.forward_end(t + 5, t + 7)
        clock.backward_done(t + 7, t + 9)
        clock.optimizer_done(SGD, t + 9, t + 10)
        t += 10
    out = steps(clock)
    assert len(out) == 6
    assert clock.closer == SGD
    assert all(s["wall_ns"] == 10 and s["optimizer_ns"] == 2 for s in out[1:])
    assert all(s["batch_size"] == 64 for s in out)


def test_models_trained_one_after_another_are_all_counted() -> None:
    clock = StepClock()
    t = 0
    for key, n in ((ADAM, 30), (SGD, 25)):
        for _ in range(n):
            clock.forward_start(t, MODEL)
            clock.forward_end(t, t + 3)
            clock.backward_done(t + 3, t + 6)
            clock.optimizer_done(key, t + 6, t + 7)
            t += 7
    out = steps(clock)
    assert len(out) == 55
    assert [s["index"] for s in out] == list(range(55))
    assert clock.closer == SGD


def test_a_closure_optimizer_counts_its_forward_and_backward_apart() -> None:
    """L-BFGS: step(closure) runs forward and backward inside the optimizer's step."""
    clock = StepClock()
    t = 0
    for _ in range(5):
        clock.optimizer_start()
        for _ in range(3):  # the closure, three times
            clock.forward_start(t + 1, MODEL)
            clock.forward_end(t + 1, t + 3)
            clock.backward_done(t + 3, t + 6)
            t += 6
        clock.optimizer_done(ADAM, t - 18, t + 2)
        t += 2
    out = steps(clock)
    assert len(out) == 5
    last = out[-1]
    assert (last["forward_ns"], last["backward_ns"], last["optimizer_ns"]) == (6, 9, 5)


def test_hand_written_sgd_falls_back_to_backward() -> None:
    clock = StepClock()
    t = 0
    for _ in range(8):
        clock.forward_start(t + 3, MODEL)  # 3 units of input code before the model
        clock.forward_end(t + 3, t + 5)
        clock.backward_done(t + 5, t + 8)
        t += 10  # 2 units of hand-written parameter update
    out = steps(clock)
    assert len(out) == 8
    assert out[-1]["outside_ns"] == 5  # 2 after the backward + 3 before the forward
    assert out[-1]["wall_ns"] == 10


def test_an_evaluation_after_a_hand_written_update_ends_the_step_before_it() -> None:
    """A step that ends at its backward (pytorch/examples' word_language_model: the
    update on `p.data`, an evaluation after each epoch): the evaluation's first forward
    ends it, as a training forward would, and runs from the update's end (its last
    gradient read) on; a final one is after the last step."""
    clock = StepClock()
    t = 0
    for _epoch in range(2):
        for _ in range(70):  # more than PROVISIONAL_STEPS: they are steps
            clock.forward_start(t + 3, MODEL)
            clock.forward_end(t + 3, t + 5)
            clock.backward_done(t + 5, t + 8)
            clock.grad_read(t + 9)  # the update reads the gradients until t + 9
            t += 10
        for _ in range(3):  # the evaluation: 3 forwards of 2 units, 4 apart
            clock.evaluated(t + 2, t + 4)
            t += 4
    # each from the update's end (1 before its step's end + 10) to its last forward's
    # end, 13; the first one on to the next step's first forward, 3 more
    assert clock.eval_ns == 13 + 3 + 13
    ledger = clock.ledger(None)
    assert ledger is not None and ledger["evaluation_after"] == 13
    out = steps(clock)
    assert len(out) == 140 and ledger["last_step_end"] == out[-1]["t_end_mono_ns"]
    # the step after the first evaluation: its own time, less the 1 after the update
    # (the evaluation's from then on) and its 3 of input code, which came after the
    # evaluation's last forward (taken for the evaluation's tail)
    assert out[70]["wall_ns"] == 10 - 1 - 3 and out[69]["wall_ns"] == 10


def test_tensor_code_without_modules_steps_per_backward() -> None:
    clock = StepClock()
    for i in range(6):
        clock.backward_done(i * 10 + 7, i * 10 + 9)
    out = steps(clock)
    assert len(out) == 6
    assert [s["wall_ns"] for s in out[1:]] == [10] * 5


def test_inference_with_a_dataloader_steps_per_batch() -> None:
    clock = StepClock()
    t = 0
    for _ in range(7):
        clock.loader_batch(t, t + 4, 16)
        clock.forward_start(t + 4, MODEL)
        clock.forward_end(t + 4, t + 6)
        clock.forward_start(t + 6, MODEL)  # test-time augmentation: the model twice
        clock.forward_end(t + 6, t + 9)
        t += 10
    out = steps(clock)
    assert len(out) == 7
    assert out[-1]["loader_ns"] == 4 and out[-1]["forward_ns"] == 5
    assert out[-1]["forwards"] == 2


def test_forward_only_loop_steps_per_call_of_the_same_root() -> None:
    clock = StepClock()
    for i in range(5):
        clock.forward_start(i * 10, MODEL)
        clock.forward_end(i * 10, i * 10 + 4)
        clock.forward_start(i * 10 + 4, TEACHER)  # a second model in the same step
        clock.forward_end(i * 10 + 4, i * 10 + 6)
    out = steps(clock)
    assert len(out) == 5
    assert out[-1]["outside_ns"] == 4 and out[-1]["forwards"] == 2


def test_two_roots_before_the_first_backward_do_not_split_the_first_step() -> None:
    """An encoder and a decoder called one after the other, then backward, then two
    optimizers: the first iteration is one step like the others."""
    clock = StepClock()
    t = 0
    for _ in range(4):
        clock.forward_start(t, MODEL)
        clock.forward_end(t, t + 2)
        clock.forward_start(t + 2, TEACHER)
        clock.forward_end(t + 2, t + 4)
        clock.backward_done(t + 4, t + 7)
        clock.optimizer_done(ADAM, t + 7, t + 8)
        clock.optimizer_done(SGD, t + 8, t + 9)
        t += 9
    assert len(steps(clock)) == 4


def test_buffer_is_bounded_and_counts_drops() -> None:
    from gpudoctor.probe import clock as clock_module

    clock = StepClock()
    limit = clock_module.MAX_BUFFERED_STEPS
    training_loop(clock, limit + 50)
    clock.finish()
    assert clock.buffered == len(clock.out) == limit
    assert clock.dropped == 50


def sampled_loop(clock: StepClock, n: int, step_ns: int = 1_000_000) -> None:
    """As the probe drives the clock once sampling is on: a step measured in detail sees
    every event; the ends of the counted ones are collected and handed over together."""
    clock.sampling = True
    t = 0
    countdown, deadline, ends = 0, 0, []
    for _ in range(n):
        if countdown <= 0:
            clock.loader_batch(t, t + 2, 32)
            clock.forward_start(t + 2, MODEL)
            clock.forward_end(t + 2, t + 5)
            clock.backward_done(t + 5, t + 9)
            clock.optimizer_done(ADAM, t + 9, t + step_ns)
            if clock.closer == ADAM:
                countdown, deadline = clock.plan_next(t + step_ns)
        else:
            ends.append(t + step_ns)
            countdown -= 1
            if countdown <= 0 or t + step_ns >= deadline:
                clock.counted(ends)
                countdown, ends = 0, []
        t += step_ns
    clock.counted(ends)


def test_sampled_steps_are_all_counted_and_one_in_n_is_detailed() -> None:
    clock = StepClock()
    sampled_loop(clock, 200)  # 1 ms steps: one in SAMPLE_EVERY
    out = steps(clock)
    assert [s["index"] for s in out] == list(range(200))
    assert all(s["wall_ns"] == 1_000_000 for s in out[1:])
    detailed = [s["index"] for s in out if s["detail"]]
    after = list(range(FULL_STEPS - 1 + SAMPLE_EVERY, 200, SAMPLE_EVERY))
    assert detailed == list(range(FULL_STEPS)) + after
    for s in out[1:]:
        parts = (s["loader_ns"], s["forward_ns"], s["backward_ns"], s["batch_size"])
        assert parts == ((2, 3, 4, 32) if s["detail"] else (0, 0, 0, -1))
        # what the probe leaves out of a counted step's row (protocol.COUNTED_FIELDS)
        rest = tuple(s.values())[protocol.COUNTED_FIELDS :]
        assert (rest == protocol.COUNTED_REST) == (not s["detail"])


def test_short_steps_are_detailed_one_every_min_gap() -> None:
    """On 100 us steps one in SAMPLE_EVERY would be 300 a second: one every
    SAMPLE_MIN_GAP_NS instead (what a detailed step costs shows less)."""
    clock = StepClock()
    sampled_loop(clock, 3000, step_ns=100_000)
    out = steps(clock)
    assert [s["index"] for s in out] == list(range(3000))
    ends = [s["t_end_mono_ns"] for s in out if s["detail"]][FULL_STEPS + 1 :]
    gaps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    assert len(gaps) > 5
    # the first plan after the full steps knows no step time yet: one in SAMPLE_EVERY
    assert all(SAMPLE_MIN_GAP_NS <= g <= SAMPLE_MIN_GAP_NS + 200_000 for g in gaps[1:])


def test_slow_steps_are_detailed_at_least_every_half_second() -> None:
    clock = StepClock()
    sampled_loop(clock, 60, step_ns=300_000_000)
    out = steps(clock)
    ends = [s["t_end_mono_ns"] for s in out if s["detail"]]
    gaps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    # the next detailed step starts with the first step after the deadline
    assert max(gaps) <= SAMPLE_MAX_GAP_NS + 2 * 300_000_000
    assert len(ends) < len(out)  # and still not every step


def test_without_sampling_every_step_is_detailed() -> None:
    clock = StepClock()
    training_loop(clock, 100)
    assert all(s["detail"] == 1 for s in steps(clock))


def test_a_reset_clock_starts_from_nothing() -> None:
    """A forked child's clock: nothing of its parent's steps, cycle or buffer."""
    clock = StepClock()
    training_loop(clock, 30)
    clock.reset()
    assert (clock.index, clock.ends_seen, len(clock.take(1 << 30)), clock.closer) == (0, 0, 0, None)
    training_loop(clock, 3)
    assert len(steps(clock)) == 3


def test_forwards_before_the_first_backward_are_evaluation_not_steps() -> None:
    """nanoGPT estimates the loss (forwards under no_grad) before its first step; a
    Lightning sanity check runs validation batches first: neither is a step."""
    clock = StepClock()
    t = 0
    for _ in range(30):  # the evaluation: the model called 30 times, no backward
        clock.forward_start(t, MODEL)
        clock.forward_end(t, t + 2)
        t += 3
    assert clock.ends_seen == 0  # nothing said before it is known to be a step
    training_loop(clock, 10, t=t)
    out = steps(clock)
    assert len(out) == 10
    assert [s["index"] for s in out] == list(range(10))
    assert clock.eval_forwards == 30 and clock.eval_ns == 2 + 29 * 3
    assert out[0]["forwards"] == 1


def test_a_rollouts_forwards_with_gradients_before_the_first_backward_are_its_step() -> None:
    """A policy called once an action with gradients on, one backward an episode
    (pytorch/examples' REINFORCE): the first episode's forwards are the first step's,
    not an evaluation before it; forwards with gradients off before them still are."""
    clock = StepClock()
    t = 0
    for _ in range(30):  # an evaluation first: 30 calls with gradients off
        clock.forward_start(t, MODEL)
        clock.forward_end(t, t + 2)
        t += 3
    start = t
    for episode in range(4):
        for _ in range(18 + episode):  # an action: the policy's call, the environment's step
            clock.forward_start(t, MODEL)
            clock.training_row = clock.pre_train is not None  # as the model hook sets it
            clock.forward_end(t, t + 2)
            t += 5
        clock.backward_done(t, t + 4)
        clock.optimizer_start()
        clock.optimizer_done(ADAM, t + 4, t + 5)
        t += 5
    out = steps(clock)
    assert [s["index"] for s in out] == [0, 1, 2, 3]
    assert [s["forwards"] for s in out] == [18, 19, 20, 21]
    assert clock.eval_forwards == 30 and clock.eval_ns == 2 + 29 * 3
    # from the evaluation's end (its last call's, 1 before the episode) to the update's
    assert out[0]["t_end_mono_ns"] - out[0]["wall_ns"] == start - 1
    assert out[0]["wall_ns"] == 1 + 18 * 5 + 5


def test_a_rollout_longer_than_the_bound_in_a_job_with_an_optimizer_stays_held() -> None:
    """cleanrl's ppo_continuous_action.py: its optimizer made, then a rollout of 2,048
    calls under no_grad in training mode, then the update. More calls than PRE_TRAIN_ROWS
    before the first backward: in a job that has made an optimizer they are folded into
    one held row, the first step's, not released as inference's steps."""
    from gpudoctor.probe.clock import PRE_TRAIN_ROWS

    clock = StepClock()
    clock.optimizer_made = True
    t = 0
    rollout = PRE_TRAIN_ROWS + 500
    for _ in range(rollout):
        clock.forward_start(t, MODEL)
        clock.training_row = clock.pre_train is not None  # as the model hook sets it
        clock.forward_end(t, t + 2)
        t += 3
        assert clock.ends_seen == 0  # not one taken for a step
    assert len(clock.pre_train or []) <= PRE_TRAIN_ROWS + 1  # folded: bounded
    training_loop(clock, 5, t=t)
    out = steps(clock)
    assert [s["index"] for s in out] == list(range(5))
    assert out[0]["forwards"] == rollout + 1 and clock.eval_forwards == 0
    assert out[0]["t_end_mono_ns"] - out[0]["wall_ns"] == 0  # from the rollout's start


def test_without_an_optimizer_a_long_run_of_calls_in_training_mode_is_inference() -> None:
    """A script that forgot model.eval() and never trains: its calls, in training mode,
    are still steps once past the bound (no optimizer: nothing says it will train)."""
    from gpudoctor.probe.clock import PRE_TRAIN_ROWS

    clock = StepClock()
    for i in range(PRE_TRAIN_ROWS + 5):
        clock.forward_start(i * 10, MODEL)
        clock.training_row = True
        clock.forward_end(i * 10, i * 10 + 4)
    assert clock.ends_seen >= PRE_TRAIN_ROWS


def test_a_job_that_never_trains_steps_per_forward_after_all() -> None:
    clock = StepClock()
    for i in range(12):
        clock.forward_start(i * 10, MODEL)
        clock.forward_end(i * 10, i * 10 + 4)
    assert clock.ends_seen == 0
    assert len(steps(clock)) == 12  # at the end: inference, each forward a step


def test_a_long_inference_is_released_before_the_end() -> None:
    from gpudoctor.probe.clock import PRE_TRAIN_ROWS

    clock = StepClock()
    for i in range(PRE_TRAIN_ROWS + 5):
        clock.forward_start(i * 10, MODEL)
        clock.forward_end(i * 10, i * 10 + 4)
    assert clock.ends_seen >= PRE_TRAIN_ROWS


def test_a_closures_forwards_never_end_a_step_and_the_count_never_goes_back() -> None:
    """L-BFGS's first step runs its closure many times before any step has ended."""
    clock = StepClock()
    t = 0
    seen = []
    for _ in range(3):
        clock.optimizer_start()
        for _ in range(20):
            clock.forward_start(t, MODEL)
            clock.forward_end(t, t + 1)
            clock.backward_done(t + 1, t + 2)
            seen.append(clock.ends_seen)
            t += 3
        clock.optimizer_done(ADAM, t - 60, t)
        seen.append(clock.ends_seen)
        t += 1
    assert len(steps(clock)) == 3
    assert seen == sorted(seen) and max(seen) <= 3


def test_bookkeeping_between_steps_is_not_time_outside_the_model() -> None:
    """zero_grad, clipping, a no_grad update, an evaluation: host work between steps
    that is not input; what is left is."""
    clock = StepClock()
    t = 0
    for i in range(6):
        clock.forward_start(t + 5, MODEL)  # 5 units since the last step ended
        clock.forward_end(t + 5, t + 7)
        clock.backward_done(t + 7, t + 9)
        clock.optimizer_start()
        clock.optimizer_done(ADAM, t + 9, t + 10)
        clock.housekeeping(t + 10, t + 11)  # zero_grad after the step
        if i % 2:
            clock.evaluated(t + 11, t + 13)  # an evaluation forward after every other
        t += 10
    out = steps(clock)
    # (the first two steps: the optimizer cycle is learnt) 5 less 1 of bookkeeping; after
    # an evaluation none: it ran from the step's end to the next step's forward (the
    # last one to its forward's end: no step after it)
    assert [s["outside_ns"] for s in out[2:]] == [0, 4, 0, 4]
    assert clock.eval_ns == 5 + 5 + 3 and clock.eval_forwards == 3
    assert out[-1]["forward_ns"] == 2 and out[-1]["forwards"] == 1


def test_counted_steps_taken_in_pieces_come_out_as_taken_whole() -> None:
    """The counted steps wait as one block (clock.counted); the flush thread takes a
    message's worth at a time and cuts a block where the message is full."""
    whole, pieces = StepClock(), StepClock()
    sampled_loop(whole, 300)
    sampled_loop(pieces, 300)
    expected = steps(whole)
    pieces.finish()
    taken: list[tuple[int, ...]] = []
    while pieces.buffered:
        chunk = pieces.take(7)
        assert 0 < len(chunk) <= 7
        taken.extend(chunk)
    assert pieces.take(7) == []
    full = [r if len(r) > protocol.COUNTED_FIELDS else r + protocol.COUNTED_REST for r in taken]
    assert [dict(zip(protocol.STEP_FIELDS, r, strict=True)) for r in full] == expected
    assert [s["index"] for s in expected] == list(range(300))


def test_rows_given_back_are_taken_again_in_order() -> None:
    """A message that could not be sent (the doctor's queue full) puts its rows back."""
    clock = StepClock()
    sampled_loop(clock, 150)
    clock.finish()
    first = clock.take(40)  # across the detailed steps and into a block
    assert clock.give_back(first) == 0
    again = clock.take(1 << 30)
    assert again[:40] == first
    assert [r[0] for r in again] == list(range(150))
    assert clock.buffered == 0


def test_counted_steps_beyond_the_bound_are_dropped_and_counted(monkeypatch: Any) -> None:
    from gpudoctor.probe import clock as clock_module

    monkeypatch.setattr(clock_module, "MAX_BUFFERED_STEPS", 100)
    clock = StepClock()
    sampled_loop(clock, 250)
    clock.finish()
    assert clock.buffered == 100
    assert clock.dropped == 150
    rows = clock.take(1 << 30)
    assert [r[0] for r in rows] == list(range(100))  # the newest are the ones dropped
    # rows given back over the bound: the oldest go
    clock2 = StepClock()
    sampled_loop(clock2, 90)
    clock2.finish()
    taken = clock2.take(60)  # while these were out, 60 more steps were counted
    clock2.counted([10_000 + i for i in range(60)])
    assert clock2.buffered == 90
    assert clock2.give_back(taken) == 50
    left = clock2.take(1 << 30)
    assert len(left) == 100
    assert [r[0] for r in left] == list(range(50, 150))
