"""gpu-waits-on-host: the GPU idle with nothing queued for long stretches (longer than the
host takes to launch an operator: those are launch-bound's): the host is busy elsewhere,
or waits itself."""

from __future__ import annotations

from gpudoctor.diagnosis.gpu_timeline import LAUNCH_GAP_US, RankTimeline
from gpudoctor.i18n import _
from gpudoctor.model import Finding
from gpudoctor.units import ms_text

# DESIGN.md section 4: host wait over 20% of the span (a starting point), in gaps of
# gpu_timeline.LAUNCH_GAP_US or longer. High from half.
HOST_WAIT_PCT = 20.0
HIGH_PCT = 50.0

ID = "gpu-waits-on-host"


def evaluate(t: RankTimeline) -> Finding | None:
    wait = t.pct(t.long_host_wait_us)
    if wait is None or wait <= HOST_WAIT_PCT:
        return None
    remedies: list[str] = []
    held = ""
    if t.sync_calls:
        name, count, total = t.sync_calls[0]
        held = _("; the host waited in {name} {count} times ({total})").format(
            name=name, count=count, total=ms_text(total * 1e-3)
        )
        remedies.append("defer-sync")
    if t.pageable_copies:
        remedies += ["pin-memory", "non-blocking"]
    remedies += [r for r in ("more-workers", "preprocess-offline") if r not in remedies]
    return Finding(
        id=ID,
        severity="high" if wait > HIGH_PCT else "medium",
        title=_("The GPU waits for the host"),
        evidence=_(
            "For {wait:.0f}% of the time the GPU had nothing queued, in gaps of {gap} or "
            "more: the host launched its next kernel only after the last one had "
            "finished{held}."
        ).format(wait=wait, held=held, gap=ms_text(LAUNCH_GAP_US * 1e-3)),
        remedies=tuple(remedies),
        estimated_gain=round(wait / 100, 3),
    )
