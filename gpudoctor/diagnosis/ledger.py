"""The wall-time ledger (issue 39; DESIGN.md section 3): where a run's wall time went,
in parts that add up to it. Pure: from the probe's `ledger_ns` fact (the first step's
start, the last step's end, evaluation and checkpoints, on the monotonic clock the
doctor shares with the job) and the session's start and end.

- start-up: from the launch to the first step (imports, the model's build, compiling,
  an evaluation before the first step is evaluation's, not start-up's);
- training: from the first step's start to the last one's end, less the evaluation and
  the checkpoints that ran between steps;
- evaluation, checkpoints: as the probe timed them (before, between and after the
  steps: a final evaluation, the last save);
- other host work: the rest (after the last step: teardown, writing results; and what
  the probe could not time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Ledger:
    wall_s: float
    startup_s: float
    training_s: float
    evaluation_s: float
    checkpoint_s: float
    other_host_s: float

    @property
    def after_startup_s(self) -> float:
        return max(0.0, self.wall_s - self.startup_s)

    @property
    def goodput(self) -> float | None:
        """Training's share of the wall time after start-up (None: none after it)."""
        after = self.after_startup_s
        return self.training_s / after if after > 0 else None

    def to_dict(self) -> dict[str, float]:
        return {
            "wall_s": round(self.wall_s, 3),
            "startup_s": round(self.startup_s, 3),
            "training_s": round(self.training_s, 3),
            "evaluation_s": round(self.evaluation_s, 3),
            "checkpoint_s": round(self.checkpoint_s, 3),
            "other_host_s": round(self.other_host_s, 3),
        }


def ledger(facts: dict[str, Any], start_mono_ns: int, end_mono_ns: int) -> Ledger | None:
    """The ledger of a run from its start to `end_mono_ns`, or None before its first
    step (or when the probe sent no ledger: an older probe, a watch)."""
    parts = facts.get("ledger_ns")
    if not isinstance(parts, dict) or end_mono_ns <= start_mono_ns:
        return None
    try:
        first = int(parts["first_step_start"])
        last = int(parts["last_step_end"])
        evaluation = max(0, int(parts.get("evaluation", 0)))
        before = min(evaluation, max(0, int(parts.get("evaluation_before", 0))))
        checkpoint = max(0, int(parts.get("checkpoint", 0)))
        # after the last step's end: not in the steps' span (older probes: none said)
        after = min(evaluation - before, max(0, int(parts.get("evaluation_after", 0))))
        after += min(checkpoint, max(0, int(parts.get("checkpoint_after", 0))))
    except (KeyError, TypeError, ValueError):
        return None
    wall = end_mono_ns - start_mono_ns
    first = min(max(first, start_mono_ns), end_mono_ns)
    last = min(max(last, first), end_mono_ns)
    startup = max(0, first - start_mono_ns - before)
    span = last - first
    inside = min(span, evaluation - before + checkpoint - after)
    training = span - inside
    rest = max(0, wall - startup - training - evaluation - checkpoint)
    # what the probe timed may exceed the wall time by its own rounding: the ledger adds up
    over = startup + training + evaluation + checkpoint + rest - wall
    if over > 0:
        training = max(0, training - over)
    return Ledger(
        wall_s=wall / 1e9,
        startup_s=startup / 1e9,
        training_s=training / 1e9,
        evaluation_s=evaluation / 1e9,
        checkpoint_s=checkpoint / 1e9,
        other_host_s=rest / 1e9,
    )
