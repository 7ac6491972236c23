"""pageable-copies: batches reach the GPU from unpinned memory or blocking copies."""

from __future__ import annotations

from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding

# DESIGN.md section 4: any (guide [dataloader] and [transfer]: pin_memory=True and
# .to(device, non_blocking=True)).
COPIES_PER_STEP = 0.0
MIN_STEPS = 5

ID = "pageable-copies"


def evaluate(w: Window) -> Finding | None:
    if not w.has_steps(MIN_STEPS) or w.pageable_copies_per_step <= COPIES_PER_STEP:
        return None
    loaders = w.facts.get("dataloaders") or [{}]
    pinned = loaders[0].get("pin_memory")
    remedies = ("non-blocking",) if pinned else ("pin-memory", "non-blocking")
    return Finding(
        id=ID,
        severity="low",
        title=_("Host-to-GPU copies are synchronous"),
        evidence=_(
            "{copies:.1f} host-to-device copies per step come from pageable memory or run "
            "without non_blocking=True (pin_memory={pinned})."
        ).format(copies=w.pageable_copies_per_step, pinned=pinned),
        remedies=remedies,
    )
