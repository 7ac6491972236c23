"""What `gpudoctor fix` found (app/fix.py runs the visit): each remedy tried, with what
was predicted and what the trial measured, the configuration kept, the whole visit's
speedup, and the edits left to make by hand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudoctor.prescribe.predict import Prediction
from gpudoctor.prescribe.rerun import Change, Treatment
from gpudoctor.prescribe.trial import Comparison
from gpudoctor.redact import redact_argv


@dataclass(frozen=True)
class FixStep:
    """One remedy tried: what changed, what was predicted, what was measured, kept."""

    remedy: str
    finding: str | None
    changes: tuple[Change, ...]
    predicted: Prediction
    comparison: Comparison

    @property
    def changes_numerics(self) -> bool:
        return any(ch.changes_numerics for ch in self.changes)

    @property
    def loss_kept(self) -> bool:
        """The loss stayed within tolerance, or the change leaves numerics alone."""
        loss = self.comparison.loss
        return not self.changes_numerics or (loss is not None and loss.within)

    @property
    def kept(self) -> bool:
        c = self.comparison
        return c.ci95[0] > 1.0 and c.verdict == "faster" and self.loss_kept

    def as_dict(self) -> dict[str, Any]:
        c = self.comparison
        return {
            "remedy": self.remedy,
            "finding": self.finding,
            "changes": [ch.as_dict() for ch in self.changes],
            "predicted": self.predicted.as_dict(),
            "measured": round(c.speedup, 4),
            "ci95": [round(c.ci95[0], 4), round(c.ci95[1], 4)],
            "verdict": c.verdict,
            "judged": c.judged_as_dict(),
            "machine_busy": c.crowding.as_dict() if c.crowding else None,
            "changes_numerics": self.changes_numerics,
            "loss": c.loss.as_dict() if c.loss else None,
            "kept": self.kept,
        }


@dataclass(frozen=True)
class FixResult:
    first_command: tuple[str, ...]
    final: Treatment  # the configuration kept (the first command when nothing helped)
    steps: tuple[FixStep, ...]
    overall: Comparison | None  # the final configuration against the first baseline
    edits: tuple[str, ...]  # what to change by hand, as words
    stopped_by: str  # "no remedy left" | "budget"
    # the kept in-process overrides as an edit of the script (prescribe/edits.py), when
    # that edit is local and clear
    final_diff: str | None = None
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        overall = self.overall
        return {
            "steps": [s.as_dict() for s in self.steps],
            "first_command": list(redact_argv(self.first_command)),
            "final_command": list(redact_argv(self.final.argv)),
            "final_env": dict(self.final.env),
            "final_shown": self.final.shown(),
            "kept": [ch.as_dict() for ch in self.final.applied],
            "speedup": round(overall.speedup, 4) if overall else 1.0,
            "ci95": [round(overall.ci95[0], 4), round(overall.ci95[1], 4)] if overall else None,
            "edits": list(self.edits),
            "stopped_by": self.stopped_by,
            "final_diff": self.final_diff,
            "elapsed_s": round(self.elapsed_s, 1),
        }
