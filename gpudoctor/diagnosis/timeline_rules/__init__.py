"""Findings from the GPU's own timeline (a profiler trace, diagnosis/gpu_timeline.py):
one rule per module, each `evaluate(t: RankTimeline) -> Finding | None`. Their ids are
DESIGN.md section 4's timeline ids, and `host-sync` and `pageable-copies` where they mean
what the live rules mean. Thresholds are DESIGN.md's starting points; the trials decide.
"""

from __future__ import annotations

from gpudoctor.diagnosis.gpu_timeline import RankTimeline
from gpudoctor.diagnosis.timeline_rules import (
    exposed_communication,
    fp32_matmul,
    gpu_waits_on_host,
    host_sync,
    launch_bound,
    memory_bound,
    pageable_copies,
)
from gpudoctor.model import Finding

RULES = (
    launch_bound,
    gpu_waits_on_host,
    exposed_communication,
    fp32_matmul,
    memory_bound,
    host_sync,
    pageable_copies,
)


def diagnose(t: RankTimeline) -> list[Finding]:
    found = [f for rule in RULES if (f := rule.evaluate(t)) is not None]
    return sorted(found, key=Finding.rank_key)
