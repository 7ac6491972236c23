"""Whether a remedy that changes the job's numerics (mixed precision, TF32, compile,
intra-op threads) left its loss where it was: the mean loss over the same steps of each
run (the probe's `losses`, counted from each run's first backward), the treatment's
against the baseline's.

The tolerance is LOSS_TOLERANCE of the baseline's mean loss, widened by the spread
between the baseline's own runs (a job that is not seeded sees other data each run, and
no remedy can be held to less than the job's own run-to-run difference). No published
anchor gives a number: mixed-precision training is expected to track the float32 loss
curve (Micikevicius et al., "Mixed Precision Training", ICLR 2018, figures 2-4), and 2%
over the same steps is our margin for "tracks it"; a non-finite loss is never within.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpudoctor.i18n import _

LOSS_TOLERANCE = 0.02
# fewer common steps than this and the check says nothing
MIN_STEPS = 10


class HasLosses(Protocol):
    @property
    def losses(self) -> tuple[float, ...]: ...


@dataclass(frozen=True)
class LossCheck:
    steps: int  # the steps of every run compared (each run's first `steps` losses)
    baseline: float  # mean loss over them, the baseline's runs together
    treatment: float
    difference: float  # |treatment - baseline| / |baseline|
    tolerance: float  # LOSS_TOLERANCE plus the spread between the baseline's runs

    @property
    def within(self) -> bool:
        return math.isfinite(self.treatment) and self.difference <= self.tolerance

    @classmethod
    def of(cls, baseline: Sequence[HasLosses], treatment: Sequence[HasLosses]) -> LossCheck | None:
        """None when a run recorded no loss (a job with no backward, a probe without the
        tap) or the runs share fewer than MIN_STEPS steps."""
        runs = [*baseline, *treatment]
        if not baseline or not treatment or any(not r.losses for r in runs):
            return None
        n = min(len(r.losses) for r in runs)
        if n < MIN_STEPS:
            return None
        base = [statistics.fmean(r.losses[:n]) for r in baseline]
        treat = statistics.fmean(statistics.fmean(r.losses[:n]) for r in treatment)
        ref = statistics.fmean(base)
        scale = abs(ref) or 1.0
        difference = abs(treat - ref) / scale if math.isfinite(treat) else math.inf
        spread = (max(base) - min(base)) / scale if math.isfinite(ref) else math.inf
        return cls(n, ref, treat, difference, LOSS_TOLERANCE + spread)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LossCheck:
        """As `as_dict` wrote it (a recorded trial): what it wrote as null is not finite."""

        def number(key: str, otherwise: float) -> float:
            value = d.get(key)
            return float(value) if isinstance(value, int | float) else otherwise

        return cls(
            int(d["steps"]), number("baseline_mean", math.nan), number("treatment_mean", math.nan),
            number("difference", math.inf), number("tolerance", math.inf),
        )  # fmt: skip

    def words(self) -> str:
        words = (
            _(
                "mean loss over the first {steps} steps: {baseline:.4g} as it was, "
                "{treatment:.4g} with it ({difference:.1%} apart, within the tolerance of "
                "{tolerance:.1%})"
            )
            if self.within
            else _(
                "mean loss over the first {steps} steps: {baseline:.4g} as it was, "
                "{treatment:.4g} with it ({difference:.1%} apart, outside the tolerance of "
                "{tolerance:.1%})"
            )
        )
        return words.format(
            steps=self.steps, baseline=self.baseline, treatment=self.treatment,
            difference=self.difference, tolerance=self.tolerance,
        )  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "baseline_mean": round(self.baseline, 6),
            "treatment_mean": round(self.treatment, 6) if math.isfinite(self.treatment) else None,
            "difference": round(self.difference, 4) if math.isfinite(self.difference) else None,
            "tolerance": round(self.tolerance, 4) if math.isfinite(self.tolerance) else None,
            "within": self.within,
        }
