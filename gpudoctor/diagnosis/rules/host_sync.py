"""host-sync: the host waits for the GPU inside every step (.item(), .cpu(), print)."""

from __future__ import annotations

from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding

# DESIGN.md section 4 / guide [transfer]: one device-to-host sync per step is already
# one pipeline stall per step.
SYNCS_PER_STEP = 1.0
MIN_STEPS = 5

ID = "host-sync"


def evaluate(w: Window) -> Finding | None:
    if not w.has_steps(MIN_STEPS) or w.syncs_per_step < SYNCS_PER_STEP:
        return None
    return Finding(
        id=ID,
        severity="medium" if w.syncs_per_step >= 2 else "low",
        title=_("The host waits for the GPU inside every step"),
        evidence=_(
            "{syncs:.1f} device-to-host syncs per step on CUDA tensors (.item(), .cpu(), "
            ".tolist(), printing), each one stalls the GPU queue."
        ).format(syncs=w.syncs_per_step),
        remedies=("defer-sync",),
    )
