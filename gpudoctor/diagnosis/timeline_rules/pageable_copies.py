"""pageable-copies, read from the timeline: host-to-device copies from pageable memory
(`Memcpy HtoD (Pageable -> Device)`), as the live rule means it."""

from __future__ import annotations

from gpudoctor.diagnosis.gpu_timeline import RankTimeline
from gpudoctor.i18n import _
from gpudoctor.model import Finding

ID = "pageable-copies"


def evaluate(t: RankTimeline) -> Finding | None:
    if not t.pageable_copies:
        return None
    per_step = _(" ({n:.1f} a step)").format(n=t.pageable_copies / t.steps) if t.steps else ""
    return Finding(
        id=ID,
        severity="low",
        title=_("Copies to the GPU come from pageable memory"),
        evidence=_(
            "{n} host-to-device copies from pageable memory{per_step}: each is staged "
            "through a pinned buffer and cannot overlap with compute."
        ).format(n=t.pageable_copies, per_step=per_step),
        remedies=("pin-memory", "non-blocking"),
    )
