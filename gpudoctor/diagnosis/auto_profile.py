"""When the doctor captures a few steps with torch.profiler by itself (DESIGN.md section
10): the job runs on a GPU that is idle much of the time and no host-side finding says
why (not input, host syncs, a busy machine, the other ranks). Then only the GPU's own
timeline can (diagnosis/gpu_timeline.py). Once a run, never while a capture is under
way or after one was made (by `p`, `--profile-steps`, or this), never when the job
runs torch.profiler itself (its profiler's own steps would be ours), and off with
`--no-auto-profile`.
"""

from __future__ import annotations

from gpudoctor.diagnosis.engine import diagnose
from gpudoctor.diagnosis.rules import low_gpu_util
from gpudoctor.diagnosis.window import Window

STEPS = 5  # captured: as `p` takes 20 for a table, the timeline needs only a few
MIN_STEPS = 50  # past the warm-up, steady
# host-side findings that explain an idle GPU already: the capture would add nothing
EXPLAINED_BY = (
    "input-bound", "slow-storage", "cpu-saturated", "host-sync", "noisy-neighbour",
    "comm-bound", "straggler", "out-of-memory", "low-goodput",
)  # fmt: skip


def should_capture(w: Window) -> str | None:
    """Why to capture now (the words for the report's note), or None."""
    if w.facts.get("profile") or w.facts.get("profile_status") or w.facts.get("job_profiler"):
        return None
    if not str(w.facts.get("device", "")).startswith("cuda") or len(w.steady_steps) < MIN_STEPS:
        return None
    found = diagnose(w)
    idle = next((f for f in found if f.id == low_gpu_util.ID), None)
    if idle is None or any(f.id in EXPLAINED_BY and f.severity != "info" for f in found):
        return None
    return idle.evidence
