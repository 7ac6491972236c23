"""exposed-communication: communication kernels that no computation hides."""

from __future__ import annotations

from gpudoctor.diagnosis.gpu_timeline import RankTimeline
from gpudoctor.i18n import _
from gpudoctor.model import Finding

# DESIGN.md section 4: overlap below 50% and the exposed part over 10% of the span
# (starting points). High when the exposed part passes 30%.
OVERLAP_PCT = 50.0
EXPOSED_PCT = 10.0
HIGH_EXPOSED_PCT = 30.0

ID = "exposed-communication"


def evaluate(t: RankTimeline) -> Finding | None:
    overlap = t.comm_overlap_pct
    if overlap is None or overlap >= OVERLAP_PCT:
        return None
    exposed = t.pct(t.communication_us * (1 - overlap / 100))
    if exposed is None or exposed <= EXPOSED_PCT:
        return None
    return Finding(
        id=ID,
        severity="high" if exposed > HIGH_EXPOSED_PCT else "medium",
        title=_("Communication is not hidden behind computation"),
        evidence=_(
            "Communication kernels take {comm:.0f}% of the time and computation runs beside "
            "only {overlap:.0f}% of it: {exposed:.0f}% of the time the GPU only communicates."
        ).format(comm=t.pct(t.communication_us) or 0, overlap=overlap, exposed=exposed),
        remedies=("ddp-buckets", "grad-accum", "comm-hook-bf16"),
        estimated_gain=round(exposed / 100, 3),
    )
