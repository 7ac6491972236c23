"""`fix`: the whole doctor's visit in one command. Run the job as it is; diagnose;
take the applicable remedy with the largest predicted gain (prescribe/predict.py) that
can be applied without editing the script (its flag, the probe's overrides); trial it
against the configuration kept so far (runs alternated, as `trial` does); keep it only
when the interval's lower bound is above 1; diagnose the kept configuration again;
repeat until no applicable remedy is left or the time budget would be overrun.

The remedies that need an edit are collected as words (what to change, by hand).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gpudoctor.app.progress import Progress
from gpudoctor.app.run import conclude
from gpudoctor.app.trial import (
    Sides,
    arm_order,
    check_baseline,
    cores_of,
    facts_of,
    rate_words,
    run_arm,
    settle,
)
from gpudoctor.diagnosis.engine import diagnose
from gpudoctor.i18n import _
from gpudoctor.jobs import LaunchedJob
from gpudoctor.model import Finding
from gpudoctor.prescribe.edits import loader_diff, script_of
from gpudoctor.prescribe.predict import Prediction, predict
from gpudoctor.prescribe.rerun import NotApplicable, Treatment, plan
from gpudoctor.prescribe.trial import EXTRA_PAIRS, Arm, Comparison
from gpudoctor.prescribe.visit import FixResult, FixStep
from gpudoctor.redact import redact_argv
from gpudoctor.report.render import (
    judged_words,
    numerics_words,
    side_words,
    verdict_words,
    via_words,
)
from gpudoctor.store import Store
from gpudoctor.timeline import Timeline


@dataclass(frozen=True)
class FixRequest:
    command: tuple[str, ...]
    budget_s: float = 600.0
    steps: int = 100  # steady steps measured in each run
    repeat: int = 2  # runs a side in each trial
    lang: str = "en"
    extra_pairs: int = EXTRA_PAIRS  # at most, in each trial (app/trial.py's settle)


def fix(
    request: FixRequest, store: Store, progress: Progress, output: IO[Any] | None = None
) -> FixResult:
    """The visit. BaselineFailed when the job fails as it is; LaunchError when it cannot
    start."""
    started = time.monotonic()
    argv = list(request.command)
    runs: list[float] = []  # each run's duration, for the budget

    def run(label: str, t: Treatment) -> tuple[LaunchedJob, Arm]:
        spent = (time.monotonic() - started) / request.budget_s  # the bar: the budget
        progress(f"{side_words(label)}: {' '.join(redact_argv(list(t.argv)))}", spent)
        t0 = time.monotonic()
        job, arm = run_arm(t.argv, t.env, request.steps, store, output=output)
        conclude(job, store, request.lang)
        runs.append(time.monotonic() - t0)
        progress(
            "  " + _("{steps} steps, {rate}").format(steps=len(arm.walls_s), rate=rate_words(arm))
        )
        return job, arm

    def runs_take(n: int) -> float:
        """Seconds `n` more runs take, at the mean run's length so far."""
        return n * sum(runs) / len(runs)

    def affordable(seconds: float) -> bool:
        return time.monotonic() - started + seconds <= request.budget_s

    def pair_affordable() -> bool:
        """Time left in the budget for another pair of runs (app/trial.py's settle)."""
        if affordable(runs_take(2)):
            return True
        progress("  " + _("the budget leaves no time for another pair of runs"))
        return False

    current = Treatment(tuple(argv))
    first_job, first_arm = run("baseline", current)
    check_baseline(first_arm, _("nothing to fix"))
    facts = facts_of(first_job.timeline)  # the script's options and loaders as they ran
    cores = cores_of(first_job.timeline)
    base_arms: list[Arm] = [first_arm]
    # every run of the job as it was (the first, and the baseline runs of trials until a
    # remedy is kept: the same list until then), for the whole visit's interval; one
    # run alone has no spread between runs and made it 0.5x-7x wide
    first_arms = base_arms
    timeline = first_job.timeline
    kept: list[str] = []
    tried: set[str] = set()
    edits: dict[str, str] = {}
    refused: dict[str, str] = {}  # remedies a rerun cannot apply, and why
    steps: list[FixStep] = []
    stopped_by = "no remedy left"
    while True:
        candidates = _candidates(timeline, argv, facts, cores, kept, tried, edits, refused)
        if not candidates:
            break
        prediction, remedy, finding, treatment = candidates[0]
        needed = runs_take(2 * request.repeat - 1)
        if not affordable(needed):
            stopped_by = "budget"
            progress(
                _("the budget leaves no time to try {remedy} (about {seconds:.0f} s)").format(
                    remedy=remedy, seconds=needed
                )
            )
            break
        tried.add(remedy)
        new = [c for c in treatment.applied if c.remedy == remedy]
        for change in new:
            why = f" ({change.why})" if change.why else ""
            progress(
                _("trying {remedy} via {via}: {change}").format(
                    remedy=remedy, via=via_words(change.via), change=change.change
                )
                + why
            )
        progress(
            "  "
            + _("predicted: {span} ({basis})").format(
                span=prediction.words(), basis=prediction.basis
            )
        )
        sides = Sides(run, pair_affordable, current, treatment, base_arms)
        comparison, _extra = settle(
            sides.run(arm_order(request.repeat)),
            request.repeat,
            request.extra_pairs,
            sides.another_pair,
            progress,
        )
        treat_arms, last = sides.treat_arms, sides.last
        step = FixStep(remedy, finding.id, tuple(new), prediction, comparison)
        steps.append(step)
        lo, hi = comparison.ci95
        if step.changes_numerics:
            progress(f"  {numerics_words(step)}")
        progress(
            "  "
            + _("measured {speedup:.2f}x [{low:.2f}, {high:.2f}], {verdict}: {kept}").format(
                speedup=comparison.speedup,
                low=lo,
                high=hi,
                verdict=verdict_words(comparison.verdict),
                kept=_("kept") if step.kept else _("not kept"),
            )
        )
        if comparison.judged:
            progress(
                "  " + judged_words(comparison.looks, *comparison.judged, comparison.judged_why)
            )
        if step.kept and last is not None:
            kept.append(remedy)
            current = treatment
            base_arms = treat_arms
            timeline = last.timeline
    if not steps and stopped_by == "no remedy left":  # say why nothing was tried
        progress(why_nothing_tried(first_job.timeline, edits, refused))
    overall = Comparison.of(first_arms, base_arms) if kept else None
    diff = None
    loader_settings = current.overrides.get("dataloader")
    script = script_of(argv, Path.cwd())
    if loader_settings and script is not None:
        diff = loader_diff(script, loader_settings, shown_as=_shown(script))
    return FixResult(
        first_command=tuple(argv),
        final=current,
        steps=tuple(steps),
        overall=overall,
        edits=tuple(edits.values()),
        stopped_by=stopped_by,
        final_diff=diff,
        elapsed_s=time.monotonic() - started,
    )


def _candidates(
    timeline: Timeline,
    argv: Sequence[str],
    facts: dict[str, Any],
    cores: int,
    kept: list[str],
    tried: set[str],
    edits: dict[str, str],
    refused: dict[str, str],
) -> list[tuple[Prediction, str, Finding, Treatment]]:
    """The remedies the current configuration's findings offer that can be applied on a
    rerun, best predicted first; those that need an edit go to `edits` (a remedy that
    cannot be applied yet, prefetch before the loader has workers, is asked again in the
    next round)."""
    w = timeline.window()
    out: list[tuple[Prediction, str, Finding, Treatment]] = []
    for finding in diagnose(w):
        for remedy in finding.remedies:
            if remedy in tried or remedy in kept:
                continue
            try:
                treatment = plan([*kept, remedy], list(argv), facts, cores)
            except NotApplicable as exc:
                if "by hand" in str(exc):  # an edit (not: "already runs 2 workers")
                    edits.setdefault(remedy, str(exc))
                else:
                    refused.setdefault(remedy, str(exc))
                continue
            out.append((predict(remedy, finding, w, cores), remedy, finding, treatment))
    out.sort(key=lambda c: -c[0].point)
    return out


def why_nothing_tried(timeline: Timeline, edits: dict[str, str], refused: dict[str, str]) -> str:
    """Why `fix` tried no remedy: the first run found nothing to act on, or each remedy
    its findings offer cannot be applied on a rerun (said one by one)."""
    findings = [f for f in diagnose(timeline.window()) if f.remedies]
    if not findings:
        return _("nothing tried: the first run found nothing a remedy could act on")
    reasons = [f"{remedy}: {why}" for remedy, why in {**refused, **edits}.items()]
    return _("nothing tried: no remedy of {findings} can be applied on a rerun ({why})").format(
        findings=", ".join(f.id for f in findings),
        why="; ".join(reasons) or _("none offered"),
    )


def _shown(script: Path) -> str:
    """The script's path as the diff names it: relative to here when it is below."""
    try:
        return str(script.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(script)
