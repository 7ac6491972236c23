"""The A/B trial: the job as it is (baseline) and with the remedy applied (treatment),
each under the doctor for the same number of steady-state steps, alternated when
repeated; then the speedup in samples a second with a 95% interval.

The interval is a moving-block bootstrap over the steps with blocks a quarter of a
run long: they keep the slow-fast rhythm of a loader's workers together and carry the
slow drift inside a run (a noisy machine's other load), which stands in for the noise
between runs; repeats (`--repeat`) add that noise itself.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.diagnosis.window import WARMUP_STEPS, Window
from gpudoctor.model import StepRecord
from gpudoctor.prescribe.rerun import Change
from gpudoctor.redact import redact_argv, redact_text
from gpudoctor.timeline import Timeline

BOOTSTRAP_ROUNDS = 2000
MIN_BLOCK_STEPS = 20
# Steps left out at the start of each run, on top of diagnosis's warm-up: a loader's
# workers start with their prefetch queues full, which makes the first steps of a
# treatment with workers look faster than it will stay.
TRIAL_WARMUP_STEPS = 20
METHOD = (
    "moving-block bootstrap over the steady steps (blocks of a quarter run, runs "
    "resampled), 2000 rounds, widened by the spread between runs when repeated; the "
    "first 25 steps of each run are warm-up"
)


@dataclass(frozen=True)
class Arm:
    """One run's steady steps, as the trial measures them."""

    session_id: int | None
    argv: tuple[str, ...]
    walls_s: tuple[float, ...]  # each steady step's wall time
    batch_size: float | None  # mean over the steps measured in detail
    data_wait_fraction: float | None
    exit_code: int | None
    ended_by: str | None
    total_steps: int

    @property
    def samples_per_s(self) -> float | None:
        if not self.walls_s:
            return None
        rate = len(self.walls_s) / sum(self.walls_s)
        return rate * self.batch_size if self.batch_size else rate

    @property
    def step_median_ms(self) -> float | None:
        return statistics.median(self.walls_s) * 1000 if self.walls_s else None

    @property
    def failed(self) -> bool:
        """Ended before its steps on its own: crashed, or its own code was not 0."""
        return self.ended_by not in ("steps", "max-seconds") and (self.exit_code or 0) != 0

    def as_dict(self) -> dict[str, Any]:
        sps = self.samples_per_s
        return {
            "session": self.session_id,
            "samples_per_s": round(sps, 2) if sps else None,
            "unit": "samples" if self.batch_size else "steps",
            "step_median_ms": round(self.step_median_ms, 3) if self.step_median_ms else None,
            "data_wait_fraction": (
                round(self.data_wait_fraction, 4) if self.data_wait_fraction is not None else None
            ),
            "steps": len(self.walls_s),
            "exit_code": self.exit_code,
            "ended_by": self.ended_by,
        }


def arm_of(
    timeline: Timeline,
    session_id: int | None,
    steps: int | None = None,
    warmup_steps: int = TRIAL_WARMUP_STEPS,
) -> Arm:
    """The arm of a recorded run: its steps after warm-up (the first `steps` of them)."""
    records: Sequence[StepRecord] = timeline.main_steps()
    skip = warmup_steps if len(records) > 2 * warmup_steps else 0
    upto = skip + WARMUP_STEPS + steps if steps is not None else None
    # past the trial's warm-up, the diagnosis's too (the window cuts it only from a
    # run's first steps)
    chosen = tuple(records)[skip + WARMUP_STEPS if skip else 0 : upto]
    w = Window(steps=chosen, facts=timeline.merged_facts())
    steady = w.steady_steps
    batches = [s.batch_size for s in w.detailed_steps if s.batch_size]
    exit_ = timeline.exit
    return Arm(
        session_id=session_id,
        argv=tuple(timeline.command),
        walls_s=tuple(s.wall_ns / 1e9 for s in steady),
        batch_size=statistics.fmean(batches) if batches else None,
        data_wait_fraction=w.data_wait_fraction if steady else None,
        exit_code=exit_.exit_code if exit_ else None,
        ended_by=exit_.ended_by if exit_ else None,
        total_steps=timeline.total_steps(),
    )


def speedup(
    baseline: Sequence[Arm], treatment: Sequence[Arm], seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """Treatment samples/s over baseline samples/s (arms pooled), with a 95% interval:
    a moving-block bootstrap of each side's steps (and of the runs, when repeated),
    widened on the log scale by the spread between the runs of each side when there are
    two or more (a noisy machine's runs differ by more than their steps do)."""
    rng = random.Random(seed)
    point = _rate(baseline) and _rate(treatment) / _rate(baseline)
    ratios = []
    for _ in range(BOOTSTRAP_ROUNDS):
        b = _rate(_resample(baseline, rng))
        t = _rate(_resample(treatment, rng))
        if b and t:
            ratios.append(t / b)
    ratios.sort()
    low = ratios[int(0.025 * (len(ratios) - 1))]
    high = ratios[int(0.975 * (len(ratios) - 1))]
    between = _between_runs(baseline) + _between_runs(treatment)
    if between and point:
        boot_sd = (math.log(high) - math.log(low)) / (2 * Z95)
        sd = math.sqrt(boot_sd**2 + between)
        low = min(low, math.exp(math.log(point) - Z95 * sd))
        high = max(high, math.exp(math.log(point) + Z95 * sd))
    return point, (low, high)


Z95 = 1.96


def _between_runs(arms: Sequence[Arm]) -> float:
    """Variance of the pooled log rate that comes from the runs differing (0 with one)."""
    rates = [_rate([a]) for a in arms if a.walls_s]
    if len(rates) < 2 or not all(rates):
        return 0.0
    logs = [math.log(r) for r in rates]
    return statistics.variance(logs) / len(logs)


def _rate(arms: Sequence[Arm]) -> float:
    walls = sum(sum(a.walls_s) for a in arms)
    samples = sum(len(a.walls_s) * (a.batch_size or 1.0) for a in arms)
    return samples / walls if walls else 0.0


def _resample(arms: Sequence[Arm], rng: random.Random) -> list[Arm]:
    picked = [arms[rng.randrange(len(arms))] for _ in arms] if len(arms) > 1 else list(arms)
    out = []
    for a in picked:
        walls = a.walls_s
        n = len(walls)
        block = min(max(MIN_BLOCK_STEPS, n // 4), n)
        drawn: list[float] = []
        while len(drawn) < n:
            start = rng.randrange(n - block + 1)
            drawn.extend(walls[start : start + block])
        out.append(_with_walls(a, tuple(drawn[:n])))
    return out


def _with_walls(a: Arm, walls: tuple[float, ...]) -> Arm:
    return Arm(
        a.session_id, a.argv, walls, a.batch_size, a.data_wait_fraction, a.exit_code,
        a.ended_by, a.total_steps,
    )  # fmt: skip


def verdict(ci: tuple[float, float], treatment: Sequence[Arm]) -> str:
    """Faster or slower only when the whole interval says so; crashed when a treatment
    run failed."""
    if any(a.failed or not a.walls_s for a in treatment):
        return "crashed"
    if ci[0] > 1.0:
        return "faster"
    if ci[1] < 1.0:
        return "slower"
    return "no better than noise"


# -- the results as values ---------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """One side of a comparison: its runs, pooled."""

    runs: tuple[Arm, ...]

    @property
    def samples_per_s(self) -> float:
        return _rate(self.runs)

    @property
    def data_wait_fraction(self) -> float | None:
        waits = [a.data_wait_fraction for a in self.runs if a.data_wait_fraction is not None]
        return sum(waits) / len(waits) if waits else None

    @property
    def unit(self) -> str:
        return "samples" if self.runs[0].batch_size else "steps"

    @property
    def step_median_ms(self) -> float | None:
        """The first run's median step (as its dict rounds it)."""
        median = self.runs[0].step_median_ms
        return round(median, 3) if median else None

    def to_dict(self) -> dict[str, Any]:
        first: dict[str, Any] = self.runs[0].as_dict()
        wait = self.data_wait_fraction
        first["samples_per_s"] = round(self.samples_per_s, 2)
        first["data_wait_fraction"] = round(wait, 4) if wait is not None else None
        first["runs"] = [a.as_dict() for a in self.runs]
        first["sessions"] = [a.session_id for a in self.runs]
        return first


@dataclass(frozen=True)
class Comparison:
    """Two sides, the speedup of the second over the first, its 95% interval, a verdict."""

    baseline: Side
    treatment: Side
    speedup: float
    ci95: tuple[float, float]
    verdict: str

    @classmethod
    def of(cls, baseline: Sequence[Arm], treatment: Sequence[Arm]) -> Comparison:
        point, ci = speedup(baseline, treatment)
        return cls(Side(tuple(baseline)), Side(tuple(treatment)), point, ci, verdict(ci, treatment))

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline.to_dict(),
            "treatment": self.treatment.to_dict(),
            "speedup": round(self.speedup, 4),
            "ci95": [round(self.ci95[0], 4), round(self.ci95[1], 4)],
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class TrialResult:
    """`gpudoctor trial`: the runs compared, and what was applied to the treatment."""

    comparison: Comparison
    applied: tuple[Change, ...]
    baseline_command: tuple[str, ...]
    treatment_command: tuple[str, ...]
    treatment_shown: str  # the treatment as a person would type it
    treatment_env: Mapping[str, str] = field(default_factory=dict)
    steps_per_run: int | None = None
    repeat: int | None = None
    method: str = METHOD

    def to_dict(self) -> dict[str, Any]:
        out = {
            **self.comparison.to_dict(),
            "applied": [c.as_dict() for c in self.applied],
            # for people: secrets masked (the sessions in the store keep the raw argv)
            "commands": {
                "baseline": redact_argv(self.baseline_command),
                "treatment": redact_argv(self.treatment_command),
            },
        }
        if self.steps_per_run is None:  # two recorded runs compared (`compare`)
            out["treatment_shown"] = redact_text(self.treatment_shown)
            return out
        out.update(
            {
                "treatment_env": {k: redact_text(v) for k, v in self.treatment_env.items()},
                "treatment_shown": redact_text(self.treatment_shown),
                "steps_per_run": self.steps_per_run,
                "repeat": self.repeat,
                "method": self.method,
            }
        )
        return out


__all__ = [
    "Arm", "Comparison", "Side", "TrialResult", "arm_of", "speedup", "verdict",
]  # fmt: skip
