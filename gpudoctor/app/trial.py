"""`trial` and `compare`: the job as it is (baseline) and with a remedy applied
(treatment), each a run under the doctor for the same steady steps, alternated when
repeated (B T T B ...); or two recorded runs. The statistics are prescribe/trial.py's."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from gpudoctor.app.errors import NotPossible
from gpudoctor.app.progress import Progress
from gpudoctor.app.run import conclude
from gpudoctor.app.sessions import load
from gpudoctor.diagnosis.engine import diagnose
from gpudoctor.diagnosis.remedies import CATALOGUE
from gpudoctor.diagnosis.window import CORES_HELD, WARMUP_STEPS
from gpudoctor.i18n import _
from gpudoctor.jobs import LaunchedJob
from gpudoctor.prescribe.predict import Prediction, predict
from gpudoctor.prescribe.rerun import NotApplicable, Treatment, plan
from gpudoctor.prescribe.trial import (
    EXTRA_PAIRS,
    TRIAL_WARMUP_STEPS,
    Arm,
    Comparison,
    TrialResult,
    arm_of,
    pair_order,
    undecided,
)
from gpudoctor.probe import ENV_OVERRIDES
from gpudoctor.redact import redact_argv
from gpudoctor.report.render import side_words, via_words
from gpudoctor.store import Store
from gpudoctor.timeline import Timeline

ARM_TIMEOUT_S = 600.0
MIN_BASELINE_STEPS = 5


@dataclass(frozen=True)
class TrialRequest:
    command: tuple[str, ...]
    remedies: tuple[str, ...] = ()  # none: the top finding's first remedy
    steps: int = 100  # steady steps measured in each run
    repeat: int = 2  # runs a side
    lang: str = "en"
    extra_pairs: int = EXTRA_PAIRS  # at most, while the interval holds 1 (settle)


class BaselineFailed(NotPossible):
    """The job failed as it is: there is nothing to compare (`exit_code`: its own)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def check_remedies(remedies: Sequence[str]) -> None:
    unknown = [r for r in remedies if r not in CATALOGUE]
    if unknown:
        raise NotPossible(
            _("unknown remedy {remedy!r} (see gpudoctor remedies; known: {known})").format(
                remedy=unknown[0], known=", ".join(sorted(CATALOGUE))
            )
        )


def trial(
    request: TrialRequest, store: Store, progress: Progress, output: IO[Any] | None = None
) -> TrialResult:
    """The A/B trial. NotPossible when no remedy can be tried (an unknown one, none
    found, one that cannot be applied without editing the script); BaselineFailed when
    the job fails as it is; LaunchError when it cannot start."""
    check_remedies(request.remedies)
    command = list(request.command)
    arms: dict[str, list[Arm]] = {"baseline": [], "treatment": []}

    def run(side: str, t: Treatment) -> tuple[LaunchedJob, Arm]:
        argv = list(t.argv)
        progress(
            _("{side} run {n}: {command}").format(
                side=side_words(side), n=len(arms[side]) + 1, command=" ".join(redact_argv(argv))
            )
        )
        job, arm = run_arm(argv, t.env, request.steps, store, output=output)
        conclude(job, store, request.lang)
        busy = sum(arm.busy)
        crowded = (
            _("; other processes took its cores during {busy} of them").format(busy=busy)
            if busy
            else ""
        )
        progress(
            "  "
            + _("{steps} steps, {rate}, data wait {wait}{crowded}").format(
                steps=len(arm.walls_s),
                rate=rate_words(arm),
                wait=percent(arm.data_wait_fraction),
                crowded=crowded,
            )
        )
        return job, arm

    baseline = Treatment(tuple(command))
    first, first_arm = run("baseline", baseline)
    arms["baseline"].append(first_arm)
    check_baseline(first_arm, _("nothing to compare"))
    treatment = treatment_of(first.timeline, request, progress)
    for change in treatment.applied:
        why = f" ({change.why})" if change.why else ""
        progress(
            _("{remedy} via {via}: {change}").format(
                remedy=change.remedy, via=via_words(change.via), change=change.change
            )
            + why
        )
    predicted = prediction_of(first.timeline, treatment)
    if predicted is not None and predicted.known:
        progress(
            _("predicted {span}: {basis}").format(span=predicted.words(), basis=predicted.basis)
        )
    # a trial has no budget: every pair `settle` asks for is run
    sides = Sides(run, lambda: True, baseline, treatment, arms["baseline"], arms["treatment"])
    comparison, extra = settle(
        sides.run(arm_order(request.repeat)),
        request.repeat,
        request.extra_pairs,
        sides.run,
        progress,
    )
    result = TrialResult(
        comparison=comparison,
        applied=tuple(treatment.applied),
        baseline_command=tuple(command),
        treatment_command=tuple(treatment.argv),
        treatment_env=treatment.env,
        treatment_shown=treatment.shown(),
        steps_per_run=request.steps,
        repeat=request.repeat,
        extra_pairs=extra,
        predicted=predicted,
        session=sides.last.session_id if sides.last is not None else None,
    )
    last = sides.last
    if last is not None and last.session_id is not None:
        store.add(last.session_id, "trial", time.monotonic_ns(), result.to_dict())
        store.commit()
    return result


@dataclass
class Sides:
    """One trial's runs, baseline and treatment, in an order (`trial`'s, and each of
    `fix`'s trials: the configuration kept so far against the one tried)."""

    run_one: Callable[[str, Treatment], tuple[LaunchedJob, Arm]]
    affordable: Callable[[], bool]  # time left for another pair
    baseline: Treatment
    treatment: Treatment
    base_arms: list[Arm]
    treat_arms: list[Arm] = field(default_factory=list)
    last: LaunchedJob | None = None  # the last treatment run
    looks: int = 0  # the times these runs were compared (each after more of them ran)

    def run(self, order: list[str]) -> Comparison:
        for side in order:
            if side == "treatment":
                self.last, arm = self.run_one("treatment", self.treatment)
                self.treat_arms.append(arm)
            else:
                _job, arm = self.run_one("baseline", self.baseline)
                self.base_arms.append(arm)
        self.looks += 1
        return Comparison.of(self.base_arms, self.treat_arms, self.looks)

    def another_pair(self, order: list[str]) -> Comparison | None:
        return self.run(order) if self.affordable() else None


def check_baseline(base: Arm, then: str) -> None:
    """BaselineFailed when the job as it is crashed or ran too few steps to measure."""
    if base.failed or len(base.walls_s) < MIN_BASELINE_STEPS:
        if base.failed:
            why = _("exit code {code}").format(code=base.exit_code)
        elif base.total_steps >= MIN_BASELINE_STEPS + WARMUP_STEPS:
            # counted by the job's counter page, yet their times (the probe's messages)
            # did not arrive: not a short run, and not to be called one
            why = _("{steps} steps counted, but the times of only {timed} arrived").format(
                steps=base.total_steps, timed=len(base.walls_s)
            )
        else:
            why = _("only {steps} steps (warm-up is {warmup})").format(
                steps=base.total_steps, warmup=WARMUP_STEPS
            )
        raise BaselineFailed(
            _("the baseline run failed ({why}): {then}").format(why=why, then=then),
            base.exit_code if base.failed and base.exit_code else 1,
        )


def facts_of(timeline: Timeline) -> dict[str, Any]:
    """The run's facts for planning a rerun: the probe's, and the cores other processes
    held meanwhile (fewer-threads leaves them out of the job's share)."""
    return {**timeline.merged_facts(), CORES_HELD: timeline.window().cores_held_by_others}


def cores_of(timeline: Timeline) -> int:
    """The cores the job may use, as the last host reading saw them."""
    return timeline.host[-1].cores_allowed if timeline.host else (os.cpu_count() or 1)


def arm_order(repeat: int) -> list[str]:
    """The runs after the first baseline: T, then T B / B T alternating (B T T B ...)."""
    order = ["treatment"]
    for r in range(1, repeat):
        order += pair_order(r)
    return order


def settle(
    comparison: Comparison,
    repeat: int,
    extra_pairs: int,
    run_pair: Callable[[list[str]], Comparison | None],
    progress: Progress,
) -> tuple[Comparison, int]:
    """Another pair of runs while the runs read a change that the interval cannot tell
    from noise (prescribe/trial.py's `undecided`), up to `extra_pairs`; `run_pair` runs
    the sides in the order given and compares again (None: no time left for it)."""
    done = 0
    while done < extra_pairs and (
        undecided(comparison.speedup, comparison.decided_on) or comparison.too_few_runs
    ):
        lo, hi = comparison.decided_on
        progress(
            _(
                "the runs read {speedup:.2f}x but their interval [{low:.2f}, {high:.2f}] holds 1: "
                "one more run a side ({n} of at most {most})"
            ).format(speedup=comparison.speedup, low=lo, high=hi, n=done + 1, most=extra_pairs)
        )
        again = run_pair(pair_order(repeat + done))
        if again is None:
            break
        comparison = again
        done += 1
    return comparison, done


def treatment_of(timeline: Timeline, request: TrialRequest, progress: Progress) -> Treatment:
    """How the treatment runs: the remedies asked for, else the top finding's first."""
    facts = facts_of(timeline)
    cores = cores_of(timeline)
    remedies = list(request.remedies)
    if not remedies:
        findings = [f for f in diagnose(timeline.window()) if f.remedies]
        if not findings:
            raise NotPossible(
                _("the baseline run has no finding with a remedy; name one with --apply REMEDY")
            )
        remedies = [findings[0].remedies[0]]
        progress(
            _("applying {remedy}, the first remedy of the top finding ({finding})").format(
                remedy=remedies[0], finding=findings[0].id
            )
        )
    try:
        return plan(remedies, list(request.command), facts, cores)
    except NotApplicable as exc:
        raise NotPossible(str(exc)) from None


def prediction_of(timeline: Timeline, treatment: Treatment) -> Prediction | None:
    """What the one remedy applied was predicted to buy (None for several at once)."""
    if len(treatment.applied) != 1:
        return None
    remedy = treatment.applied[0].remedy
    w = timeline.window()
    finding = next((f for f in diagnose(w) if remedy in f.remedies), None)
    return predict(remedy, finding, w, cores_of(timeline))


def compare(store: Store, baseline: str, treatment: str) -> TrialResult:
    """Two recorded runs compared as a trial compares its sides."""
    runs = []
    for name in (baseline, treatment):
        session_id, timeline = load(store, name)
        arm = arm_of(timeline, session_id)
        if len(arm.walls_s) < MIN_BASELINE_STEPS:
            raise NotPossible(_("session {id} has too few steps to compare").format(id=session_id))
        runs.append(arm)
    return TrialResult(
        comparison=Comparison.of([runs[0]], [runs[1]]),
        applied=(),
        baseline_command=runs[0].argv,
        treatment_command=runs[1].argv,
        treatment_shown=" ".join(runs[1].argv),
    )


# -- one run of a side ---------------------------------------------------------------------------


def run_arm(
    argv: Sequence[str],
    env: dict[str, str],
    steps: int,
    store: Store,
    max_seconds: float = ARM_TIMEOUT_S,
    output: IO[Any] | None = None,
    stop_if: Callable[[Timeline], bool] | None = None,
    warmup_steps: int = TRIAL_WARMUP_STEPS,
) -> tuple[LaunchedJob, Arm]:
    """One run under the doctor (headless), stopped once it has `steps` steady steps
    (warm-up excluded), when `stop_if` says so, or when it ends by itself. LaunchError
    when it cannot start."""
    env = with_loss_tap(env)
    job = LaunchedJob(list(argv), store, interval_s=0.5, extra_env=env, output=output)
    job.start()
    wanted = warmup_steps + WARMUP_STEPS + steps
    started = time.monotonic()

    def tick(timeline: Timeline) -> None:
        if stop_if is not None and stop_if(timeline):
            job.stop("signal")
        elif timeline.total_steps() >= wanted:
            job.stop("steps")
        elif time.monotonic() - started > max_seconds:
            job.stop("max-seconds")

    try:
        job.run(tick)
    finally:
        job.close()
    return job, arm_of(job.timeline, job.session_id, steps, warmup_steps)


def with_loss_tap(env: dict[str, str]) -> dict[str, str]:
    """The run's environment with the probe asked to record the loss (each side alike:
    a remedy that changes numerics is kept only if the loss stays; prescribe/loss.py)."""
    try:
        overrides = json.loads(env.get(ENV_OVERRIDES) or "{}")
    except ValueError:
        return env
    return {**env, ENV_OVERRIDES: json.dumps({**overrides, "record_loss": True})}


def rate_words(arm: Arm) -> str:
    sps = arm.samples_per_s
    unit = _("samples/s") if arm.batch_size else _("steps/s")
    return f"{sps:.1f} {unit}" if sps else _("no rate")


def percent(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "n/a"
