"""The A/B trial: the job as it is (baseline) and with the remedy applied (treatment),
each under the doctor for the same number of steady-state steps, alternated when
repeated; then the speedup in samples a second with a 95% interval.

The interval is a circular block bootstrap over the steps with blocks a quarter of a
run long: they keep the slow-fast rhythm of a loader's workers together and carry the
slow drift inside a run (a noisy machine's other load), which stands in for the noise
between runs; repeats (`--repeat`) add that noise itself.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.diagnosis.rules.noisy_neighbour import busiest, contended
from gpudoctor.diagnosis.window import WARMUP_STEPS, Window
from gpudoctor.i18n import _
from gpudoctor.model import HostSample
from gpudoctor.prescribe.loss import LossCheck
from gpudoctor.prescribe.predict import Prediction
from gpudoctor.prescribe.rerun import Change
from gpudoctor.redact import redact_argv, redact_text
from gpudoctor.timeline import Timeline

BOOTSTRAP_ROUNDS = 2000
MIN_BLOCK_STEPS = 20
# Steps left out at the start of each run, on top of diagnosis's warm-up: a loader's
# workers start with their prefetch queues full, which makes the first steps of a
# treatment with workers look faster than it will stay.
TRIAL_WARMUP_STEPS = 20
# Steps that ran while other processes took the cores the job waited for (the host
# sample after the step says so: noisy-neighbour's test) are left out of the comparison
# when each side keeps at least this share of its steps, and this many in all.
MIN_QUIET_SHARE = 1 / 3
MIN_QUIET_STEPS = 2 * MIN_BLOCK_STEPS
METHOD = (
    "circular block bootstrap over the steady steps (blocks of a quarter run, runs "
    "resampled), 2000 rounds, widened by the spread between runs when repeated (a "
    "Student-t quantile, Welch-Satterthwaite degrees of freedom); steps while other "
    "processes took the job's cores left out when enough quiet ones remain; the first "
    "25 steps of each run are warm-up; after more runs than asked (a look that could not "
    "decide), the verdict rests on the 99% interval"
)


@dataclass(frozen=True)
class Arm:
    """One run's steady steps, as the trial measures them."""

    session_id: int | None
    argv: tuple[str, ...]
    walls_s: tuple[float, ...]  # each steady step's wall time
    batch_size: float | None  # samples a step (Window.samples_per_step)
    data_wait_fraction: float | None
    exit_code: int | None
    ended_by: str | None
    total_steps: int
    # per steady step: other processes took the cores the job waited for
    busy: tuple[bool, ...] = ()
    others: str = ""  # who they were, as words
    # the loss each backward was given, from the run's first (when the probe recorded
    # it: trials and `fix` ask for it), for remedies that change numerics (loss.py)
    losses: tuple[float, ...] = ()

    @property
    def samples_per_s(self) -> float | None:
        if not self.walls_s:
            return None
        rate = len(self.walls_s) / sum(self.walls_s)
        return rate * self.batch_size if self.batch_size else rate

    @property
    def step_median_ms(self) -> float | None:
        return statistics.median(self.walls_s) * 1000 if self.walls_s else None

    def quiet(self) -> Arm:
        """This run without its busy steps."""
        if not any(self.busy):
            return self
        walls = tuple(w for w, b in zip(self.walls_s, self.busy, strict=True) if not b)
        return dataclasses.replace(self, walls_s=walls, busy=(False,) * len(walls))

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
    records = timeline.main_steps()
    skip = warmup_steps if len(records) > 2 * warmup_steps else 0
    upto = skip + WARMUP_STEPS + steps if steps is not None else None
    # past the trial's warm-up, the diagnosis's too (the window cuts it only from a
    # run's first steps)
    chosen = tuple(records[skip + WARMUP_STEPS if skip else 0 : upto])
    facts = timeline.merged_facts()
    w = Window(steps=chosen, facts=facts)
    steady = w.steady_steps
    exit_ = timeline.exit
    hosts = list(timeline.host)
    times = [h.t_mono_ns for h in hosts]
    after = [_sample_after(hosts, times, s.t_end_mono_ns) for s in steady]
    busy = tuple(h is not None and contended(h) for h in after)
    crowded = [h for h, b in zip(after, busy, strict=True) if b and h is not None]
    return Arm(
        session_id=session_id,
        argv=tuple(timeline.command),
        walls_s=tuple(s.wall_ns / 1e9 for s in steady),
        batch_size=w.samples_per_step,
        data_wait_fraction=w.data_wait_fraction if steady else None,
        exit_code=exit_.exit_code if exit_ else None,
        ended_by=exit_.ended_by if exit_ else None,
        total_steps=timeline.total_steps(),
        busy=busy,
        others=busiest(list(dict.fromkeys(crowded))) if crowded else "",
        losses=tuple(float(v) for v in facts.get("losses") or () if isinstance(v, int | float)),
    )


def _sample_after(hosts: list[HostSample], times: list[int], t_ns: int) -> HostSample | None:
    """The host sample whose interval holds the moment `t_ns` (the first at or after it;
    `times`: the samples' times, in order)."""
    i = bisect.bisect_left(times, t_ns)
    return hosts[i] if i < len(hosts) else None


def speedup(
    baseline: Sequence[Arm], treatment: Sequence[Arm], seed: int = 0, level: float = 0.95
) -> tuple[float, tuple[float, float]]:
    """Treatment samples/s over baseline samples/s (arms pooled), with an interval at
    `level` (0.95 or 0.99): a circular block bootstrap of each side's steps (and of the
    runs, when repeated), widened on the log scale by the spread between the runs of
    each side when there are two or more (a noisy machine's runs differ by more than
    their steps do)."""
    point, (ci,) = speedups(baseline, treatment, seed, (level,))
    return point, ci


def speedups(
    baseline: Sequence[Arm],
    treatment: Sequence[Arm],
    seed: int = 0,
    levels: tuple[float, ...] = (0.95,),
) -> tuple[float, list[tuple[float, float]]]:
    """speedup() at each of `levels`, from one bootstrap (each level's interval the
    same as speedup() gives at that level alone)."""
    for level in levels:
        if level not in (0.95, 0.99):  # the levels whose quantiles are tabled below
            raise ValueError(f"an interval at {level}: only 0.95 and 0.99")
    rng = random.Random(seed)
    point = _rate(baseline) and _rate(treatment) / _rate(baseline)
    ratios = []
    for _round in range(BOOTSTRAP_ROUNDS):
        b = _rate(_resample(baseline, rng))
        t = _rate(_resample(treatment, rng))
        if b and t:
            ratios.append(t / b)
    ratios.sort()
    parts = [_between_runs(baseline), _between_runs(treatment)]
    between = sum(v for v, _ in parts)
    out = []
    for level in levels:
        z, t_quantile = (Z95, t975) if level == 0.95 else (Z99, t995)
        tail = (1 - level) / 2
        low = ratios[int(tail * (len(ratios) - 1))]
        high = ratios[int((1 - tail) * (len(ratios) - 1))]
        if between and point:
            boot_sd = (math.log(high) - math.log(low)) / (2 * z)
            sd2 = boot_sd**2 + between
            # Welch-Satterthwaite: the bootstrap's term has many degrees of freedom,
            # each side's between-run term as many as its runs less one
            df = sd2**2 / sum(v**2 / (n - 1) for v, n in parts if v)
            sd = math.sqrt(sd2)
            q = t_quantile(df)
            low = min(low, math.exp(math.log(point) - q * sd))
            high = max(high, math.exp(math.log(point) + q * sd))
        out.append((low, high))
    return point, out


Z95 = 1.96
# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom: NIST/SEMATECH
# e-Handbook of Statistical Methods, section 1.3.6.7.2 (table of the t distribution).
T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


# ...and the 0.995 quantile (two-sided 99%), the same table's column
T995 = (
    63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169,
    3.106, 3.055, 3.012, 2.977, 2.947, 2.921, 2.898, 2.878, 2.861, 2.845,
    2.831, 2.819, 2.807, 2.797, 2.787, 2.779, 2.771, 2.763, 2.756, 2.750,
)  # fmt: skip
Z99 = 2.576


def t975(df: float) -> float:
    """The 0.975 quantile of Student's t at `df` degrees of freedom, rounded down (the
    wider interval) to a whole number; the normal's beyond the table (120: 1.980)."""
    return _t(T975, df, 2.000, Z95)


def t995(df: float) -> float:
    """The 0.995 quantile, as t975 does it (60: 2.660; 120: 2.617)."""
    return _t(T995, df, 2.660, Z99)


def _t(table: tuple[float, ...], df: float, to_120: float, normal: float) -> float:
    whole = int(df)
    if whole < 1:
        return table[0]
    if whole <= len(table):
        return table[whole - 1]
    return to_120 if whole < 120 else normal


def _between_runs(arms: Sequence[Arm]) -> tuple[float, int]:
    """Variance of the pooled log rate that comes from the runs differing (0 with one),
    and the number of runs."""
    rates = [_rate([a]) for a in arms if a.walls_s]
    if len(rates) < 2 or not all(rates):
        return 0.0, len(rates)
    logs = [math.log(r) for r in rates]
    return statistics.variance(logs) / len(logs), len(logs)


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
        # circular blocks (Politis & Romano 1992): a block may wrap from the run's end
        # to its start, so every step is drawn as often as any other. Blocks kept
        # inside the run drew its first and last steps less often, and a run slower at
        # its ends (a warm-up, a stop) had its interval pass beside its own point
        drawn: list[float] = []
        while len(drawn) < n:
            start = rng.randrange(n)
            drawn.extend(walls[start : start + block])
            drawn.extend(walls[: max(0, start + block - n)])
        out.append(_with_walls(a, tuple(drawn[:n])))
    return out


def _with_walls(a: Arm, walls: tuple[float, ...]) -> Arm:
    return dataclasses.replace(a, walls_s=walls, busy=())


# A trial whose runs read a change of at least UNDECIDED_SPEEDUP (either way) while its
# interval still holds 1 runs another pair of runs (one a side), up to EXTRA_PAIRS: with
# two runs a side, the between-run term's Student-t quantile at one or two degrees of
# freedom (12.7, 4.3: the table below) is what makes such an interval wide, and each
# pair adds a degree of freedom to both sides. 10% is the smallest change the trial
# coverage benchmark's cases read apart from noise (bench/RESULTS.md); no published anchor.
UNDECIDED_SPEEDUP = 1.10
EXTRA_PAIRS = 2
# Each extra pair is another look at the same question: judged on the 95% interval each
# time, a change that does nothing would read "faster" more often than the 1 in 40 that
# interval promises (its low end gets another chance to clear 1 by luck). After the
# first look, the verdict rests on the 99% interval: with up to EXTRA_PAIRS more looks,
# the chance of a false "faster" stays under 2.5% + 0.5% per extra look (Bonferroni's
# union bound: 3.5% with two), where judging each look at 95% allowed up to 7.5%.
# Runs made while other processes took the job's cores and too few quiet steps remained
# to compare alone are judged on it too: a neighbour's load comes and goes between runs,
# so two runs a side do not sample it (a change that does nothing read 2.03x
# [0.92, 4.50] at 95% beside two busy processes here, and "faster" once in CI).
JUDGED_LEVEL = 0.99
# ...and with fewer runs a side than this they claim no change at all: two runs a side
# beside two busy processes read a change that does nothing as anything from 0.36x to
# 2.03x here, and "faster" on the 99% interval once in CI (both baseline runs slowed by a
# spell of load, both treatment runs not): their spread says nothing about the load's.
MIN_BUSY_RUNS = 3


def undecided(speedup: float, ci: tuple[float, float]) -> bool:
    """The runs read a change the interval cannot tell from noise: worth another pair."""
    far = speedup >= UNDECIDED_SPEEDUP or speedup <= 1 / UNDECIDED_SPEEDUP
    return far and ci[0] <= 1.0 <= ci[1]


def pair_order(index: int) -> list[str]:
    """The sides of the runs after the first `2 * index` (the alternation B T T B B T ...
    carried on, so drift during the trial falls on both sides alike)."""
    return ["treatment", "baseline"] if index % 2 else ["baseline", "treatment"]


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
class Crowding:
    """Steps that ran while other processes took the cores the job waited for."""

    busy_steps: dict[str, int]
    steps: dict[str, int]
    left_out: bool  # the comparison is of the quiet steps only
    others: str  # who took the cores, as words

    def words(self) -> str:
        of_side = {
            "baseline": _("{busy} of the baseline's {steps}"),
            "treatment": _("{busy} of the treatment's {steps}"),
        }
        sides = _(" and ").join(
            of_side[side].format(busy=self.busy_steps[side], steps=self.steps[side])
            for side in ("baseline", "treatment")
            if self.busy_steps[side]
        )
        who = f" ({self.others})" if self.others else ""
        outcome = (
            _("those steps are left out")
            if self.left_out
            else _("too few quiet steps to leave them out: the result is for the machine as it was")
        )
        return _(
            "the machine was busy: other processes took the cores the job waited for during "
            "{sides} steps{who}; {outcome}"
        ).format(sides=sides, who=who, outcome=outcome)

    def as_dict(self) -> dict[str, Any]:
        return {
            "busy_steps": dict(self.busy_steps),
            "steps": dict(self.steps),
            "left_out": self.left_out,
            "others": self.others,
        }


@dataclass(frozen=True)
class Comparison:
    """Two sides, the speedup of the second over the first, its 95% interval, a verdict."""

    baseline: Side
    treatment: Side
    speedup: float
    ci95: tuple[float, float]
    verdict: str
    crowding: Crowding | None = None
    loss: LossCheck | None = None  # the loss with the treatment against without it
    # how many times these runs were compared (1, and one more for each extra pair run
    # after a look), and the interval the verdict rests on after the first (JUDGED_LEVEL)
    looks: int = 1
    judged: tuple[float, float] | None = None
    # busy throughout with fewer than MIN_BUSY_RUNS runs a side: no change claimed
    too_few_runs: bool = False

    @classmethod
    def of(cls, baseline: Sequence[Arm], treatment: Sequence[Arm], looks: int = 1) -> Comparison:
        loss = LossCheck.of(baseline, treatment)
        crowding = _crowding(baseline, treatment)
        if crowding is not None and crowding.left_out:
            baseline = [q for q in (a.quiet() for a in baseline) if q.walls_s]
            treatment = [q for q in (a.quiet() for a in treatment) if q.walls_s]
        # after the first look (or on a busy machine), the verdict's interval too, from
        # the same bootstrap
        crowded = crowding is not None and not crowding.left_out
        levels = (0.95, JUDGED_LEVEL) if looks > 1 or crowded else (0.95,)
        point, (ci, *judging) = speedups(baseline, treatment, levels=levels)
        judged = judging[0] if judging else None
        said = verdict(judged or ci, treatment)
        too_few = crowded and min(len(baseline), len(treatment)) < MIN_BUSY_RUNS
        if too_few and said in ("faster", "slower"):
            said = "no better than noise"
        return cls(
            Side(tuple(baseline)), Side(tuple(treatment)), point, ci,
            said, crowding, loss, looks, judged, too_few,
        )  # fmt: skip

    @property
    def judged_why(self) -> str:
        """Why the verdict rests on the wider interval: "looks" (compared more than once)
        or "busy" (other processes took the job's cores throughout)."""
        return "looks" if self.looks > 1 else "busy"

    def judged_as_dict(self) -> dict[str, Any] | None:
        """After more than one look or on a busy machine, the verdict's interval
        (JUDGED_LEVEL) and why; else None."""
        if self.judged is None:
            return None
        low, high = self.judged
        return {
            "level": JUDGED_LEVEL, "looks": self.looks, "ci": [round(low, 4), round(high, 4)],
            "why": self.judged_why,
        }  # fmt: skip

    @property
    def decided_on(self) -> tuple[float, float]:
        """The interval the verdict rests on: the 95% one at the first look on a quiet
        enough machine, else the wider one (JUDGED_LEVEL)."""
        return self.judged or self.ci95

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline.to_dict(),
            "treatment": self.treatment.to_dict(),
            "speedup": round(self.speedup, 4),
            "ci95": [round(self.ci95[0], 4), round(self.ci95[1], 4)],
            "verdict": self.verdict,
            "judged": self.judged_as_dict(),
            "machine_busy": (
                {**self.crowding.as_dict(), "too_few_runs": self.too_few_runs}
                if self.crowding
                else None
            ),
            "loss": self.loss.as_dict() if self.loss else None,
        }


def _crowding(baseline: Sequence[Arm], treatment: Sequence[Arm]) -> Crowding | None:
    """How many steps of each side ran on a busy machine, and whether enough quiet ones
    remain to compare those alone (None: the machine stayed quiet)."""
    sides = {"baseline": baseline, "treatment": treatment}
    busy = {k: sum(sum(a.busy) for a in arms) for k, arms in sides.items()}
    if not any(busy.values()):
        return None
    steps = {k: sum(len(a.walls_s) for a in arms) for k, arms in sides.items()}
    quiet = {k: steps[k] - busy[k] for k in sides}
    left_out = all(
        quiet[k] >= MIN_QUIET_STEPS and quiet[k] >= MIN_QUIET_SHARE * steps[k] for k in sides
    )
    others = next((a.others for arms in sides.values() for a in arms if a.others), "")
    return Crowding(busy, steps, left_out, others)


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
    extra_pairs: int = 0  # pairs run because the interval held 1 though the runs differed
    method: str = METHOD
    predicted: Prediction | None = None  # what the remedy was predicted to buy
    # the session the outcome is kept with (the last treatment run's, which a busy
    # machine may leave out of `runs` when every step of it ran while others took the cores)
    session: int | None = None

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
                "extra_pairs": self.extra_pairs,
                "method": self.method,
                "predicted": self.predicted.as_dict() if self.predicted else None,
                "session": self.session,
            }
        )
        return out


__all__ = [
    "Arm", "Comparison", "Side", "TrialResult", "arm_of", "speedup", "verdict",
]  # fmt: skip
