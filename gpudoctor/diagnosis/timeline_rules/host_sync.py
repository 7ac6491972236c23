"""host-sync, read from the timeline: the host waits for the device (a stream or device
synchronize, a blocking copy) at least once a step, as the live rule means it."""

from __future__ import annotations

from gpudoctor.diagnosis.gpu_timeline import RankTimeline
from gpudoctor.i18n import _
from gpudoctor.model import Finding
from gpudoctor.units import ms_text

# The live rule's threshold (rules/host_sync.py): one sync a step is one stall a step.
SYNCS_PER_STEP = 1.0

ID = "host-sync"


def evaluate(t: RankTimeline) -> Finding | None:
    if not t.sync_calls or not t.steps:
        return None
    count = sum(c for _n, c, _t in t.sync_calls)
    per_step = count / t.steps
    if per_step < SYNCS_PER_STEP:
        return None
    name, n, total = t.sync_calls[0]
    return Finding(
        id=ID,
        severity="medium" if per_step >= 2 else "low",
        title=_("The host waits for the GPU inside every step"),
        evidence=_(
            "{per_step:.1f} host calls a step wait for the GPU; the most: {name}, {n} times "
            "({total})."
        ).format(per_step=per_step, name=name, n=n, total=ms_text(total * 1e-3)),
        remedies=("defer-sync",),
    )
