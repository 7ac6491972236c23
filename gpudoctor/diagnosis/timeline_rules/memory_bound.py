"""memory-bound: memory copies and sets take a large share of the GPU's time."""

from __future__ import annotations

from gpudoctor.diagnosis.gpu_timeline import RankTimeline
from gpudoctor.i18n import _
from gpudoctor.model import Finding

# DESIGN.md section 4: memcpy and memset over 30% of the span (a starting point).
SHARE_PCT = 30.0
HIGH_PCT = 60.0

ID = "memory-bound"


def evaluate(t: RankTimeline) -> Finding | None:
    share = t.pct(t.memory_us)
    if share is None or share <= SHARE_PCT:
        return None
    return Finding(
        id=ID,
        severity="high" if share > HIGH_PCT else "medium",
        title=_("Memory copies take much of the GPU's time"),
        evidence=_(
            "Memory copies and sets run {share:.0f}% of the time ({pageable} copies from "
            "pageable host memory)."
        ).format(share=share, pageable=t.pageable_copies),
        remedies=("pin-memory", "non-blocking", "preprocess-offline"),
        estimated_gain=round(share / 100, 3),
    )
