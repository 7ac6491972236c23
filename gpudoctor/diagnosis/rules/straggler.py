"""straggler: one rank's steps are slower than the others'."""

from __future__ import annotations

import statistics

from gpudoctor.diagnosis.window import WARMUP_STEPS, Window
from gpudoctor.model import Finding

# DESIGN.md section 4: one rank above 1.2x the median rank's step time (no external
# anchor; collectives make every rank wait for the slowest).
RATIO = 1.2
MIN_STEPS = 5

ID = "straggler"


def evaluate(w: Window) -> Finding | None:
    medians: dict[int, float] = {}
    for pid, steps in w.steps_by_pid.items():
        steady = (
            steps[WARMUP_STEPS:] if len(steps) >= 2 * WARMUP_STEPS else steps[len(steps) // 2 :]
        )
        if len(steady) >= MIN_STEPS:
            # a rank's own compute: collectives make every rank's wall time the slowest's
            detailed = [s for s in steady if s.detail] or steady
            medians[pid] = statistics.median(
                s.wall_ns - s.loader_ns if s.loader_ns else s.wall_ns for s in detailed
            )
    if len(medians) < 2:
        return None
    middle = statistics.median(medians.values())
    pid, slowest = max(medians.items(), key=lambda item: item[1])
    if middle <= 0 or slowest <= RATIO * middle:
        return None
    rank = w.facts_by_pid.get(pid, {}).get("rank", "?")
    return Finding(
        id=ID,
        severity="medium",
        title="One rank is slower than the others",
        evidence=(
            f"rank {rank} (pid {pid}) takes {slowest / 1e6:.1f} ms per step against a median "
            f"of {middle / 1e6:.1f} ms across {len(medians)} ranks ({slowest / middle:.2f}x)."
        ),
        remedies=(),
    )
