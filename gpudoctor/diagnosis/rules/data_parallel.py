"""data-parallel: nn.DataParallel in use."""

from __future__ import annotations

from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding

# Profiler plugin and the PyTorch docs: DataParallel is single-process multi-thread and
# slower than DistributedDataParallel even on one machine. Any use counts.
ID = "data-parallel"


def evaluate(w: Window) -> Finding | None:
    if not w.facts.get("data_parallel"):
        return None
    return Finding(
        id=ID,
        severity="medium",
        title=_("nn.DataParallel is in use"),
        evidence=_(
            "The model is wrapped in torch.nn.DataParallel (one process, replicas re-copied "
            "every step, the GIL shared); DistributedDataParallel is the recommended way."
        ),
        remedies=("ddp",),
    )
