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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from gpudoctor.diagnosis.window import WARMUP_STEPS, Window
from gpudoctor.model import StepRecord
from gpudoctor.session import LaunchError, Session
from gpudoctor.store import Store
from gpudoctor.timeline import Timeline

DEFAULT_STEPS = 200
BOOTSTRAP_ROUNDS = 2000
MIN_BLOCK_STEPS = 20
# Steps left out at the start of each run, on top of diagnosis's warm-up: a loader's
# workers start with their prefetch queues full, which makes the first steps of a
# treatment with workers look faster than it will stay.
TRIAL_WARMUP_STEPS = 20
ARM_TIMEOUT_S = 600.0


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
    chosen = tuple(records)[skip:upto]
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


def verdict(point: float, ci: tuple[float, float], treatment: Sequence[Arm]) -> str:
    if any(a.failed or not a.walls_s for a in treatment):
        return "crashed"
    if ci[0] > 1.0:
        return "faster"
    if ci[1] < 1.0:
        return "slower"
    return "no better than noise"


# -- running one arm ----------------------------------------------------------------------------


def run_arm(
    argv: Sequence[str],
    env: dict[str, str],
    steps: int,
    store: Store,
    max_seconds: float = ARM_TIMEOUT_S,
    on_tick: Callable[[Timeline], None] | None = None,
    output: IO[Any] | None = None,
    stop_if: Callable[[Timeline], bool] | None = None,
    warmup_steps: int = TRIAL_WARMUP_STEPS,
) -> tuple[Session, Arm]:
    """One run under the doctor (headless), stopped once it has `steps` steady steps
    (warm-up excluded), when `stop_if` says so, or when it ends by itself. LaunchError
    when it cannot start."""
    session = Session(list(argv), store, interval_s=0.5, extra_env=env, output=output)
    session.start()
    wanted = warmup_steps + WARMUP_STEPS + steps
    started = time.monotonic()

    def tick(timeline: Timeline) -> None:
        if stop_if is not None and stop_if(timeline):
            session.stop("signal")
        elif timeline.total_steps() >= wanted:
            session.stop("steps")
        elif time.monotonic() - started > max_seconds:
            session.stop("max-seconds")
        if on_tick is not None:
            on_tick(timeline)

    try:
        session.run(tick)
    finally:
        session.close()
    return session, arm_of(session.timeline, session.session_id, steps, warmup_steps)


__all__ = ["Arm", "LaunchError", "arm_of", "run_arm", "speedup", "verdict"]
