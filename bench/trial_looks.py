"""How often a trial of a change that does nothing reads "faster", when extra pairs are
run after a look that could not decide (app/trial.py's settle): each look judged on the
95% interval (as before 2026-12-03), against the verdict after the first look resting
on the 99% interval (prescribe/trial.py's JUDGED_LEVEL).

    python bench/trial_looks.py [--trials 400] [--spread 0.15] [--steps 100] [--gain 1.0]

Simulated, in process, through the trial's own code (Comparison.of, settle): both sides
draw their runs from one distribution, each run's speed off by a factor exp(N(0,
SPREAD)) (a noisy machine: runs of one job differ by about this much), each step's
time lognormal around it (sigma 0.1); B T T B, then up to EXTRA_PAIRS more pairs while
the runs read a change of 10% or more that the deciding interval holds 1 for. A correct
95% interval reads "faster" for a change that does nothing about 2.5% of the time.
With --gain G the treatment's steps are G times faster: how often a real gain is found
(what the stricter verdict costs).
"""

from __future__ import annotations

import argparse
import math
import random

import gpudoctor.app.trial as trials
from gpudoctor.prescribe.trial import EXTRA_PAIRS, Arm, Comparison


def run_arm(rng: random.Random, spread: float, steps: int, gain: float = 1.0) -> Arm:
    speed = math.exp(rng.gauss(0, spread)) / gain
    walls = tuple(0.010 * speed * math.exp(rng.gauss(0, 0.1)) for _ in range(steps))
    return Arm(None, (), walls, 32.0, None, 130, "steps", steps)


def one(
    rng: random.Random, spread: float, steps: int, judged: bool, gain: float
) -> tuple[str, int]:
    base = [run_arm(rng, spread, steps) for _ in range(2)]
    treat = [run_arm(rng, spread, steps, gain) for _ in range(2)]
    looks = [1]

    def run_pair(order: list[str]) -> Comparison:
        for side in order:
            if side == "treatment":
                treat.append(run_arm(rng, spread, steps, gain))
            else:
                base.append(run_arm(rng, spread, steps))
        looks[0] += 1
        return Comparison.of(base, treat, looks[0] if judged else 1)

    c, extra = trials.settle(Comparison.of(base, treat), 2, EXTRA_PAIRS, run_pair, lambda *a: None)
    return c.verdict, extra


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=400)
    p.add_argument("--spread", type=float, default=0.15)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--gain", type=float, default=1.0, help="the treatment's real speedup")
    args = p.parse_args()
    what = "does nothing" if args.gain == 1.0 else f"speeds steps up {args.gain}x"
    print(f"{args.trials} trials of a change that {what}; runs differ by "
          f"exp(N(0, {args.spread})), {args.steps} steps a run, up to {EXTRA_PAIRS} extra pairs")  # fmt: skip
    for judged in (False, True):
        rng = random.Random(1)  # the same runs for both rules
        verdicts = [
            one(rng, args.spread, args.steps, judged, args.gain) for _ in range(args.trials)
        ]
        faster = sum(v == "faster" for v, _ in verdicts)
        extra = sum(e > 0 for _, e in verdicts)
        rate = faster / args.trials
        half = 1.96 * math.sqrt(rate * (1 - rate) / args.trials)
        rule = "99% after the first look" if judged else "95% at every look   "
        print(f"  {rule}: faster {faster}/{args.trials} = {rate:.1%} (+-{half:.1%}); "
              f"extra pairs run in {extra}")  # fmt: skip


if __name__ == "__main__":
    main()
