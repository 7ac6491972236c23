"""small-batch: the GPU idles, input is not the cause, and memory is left over."""

from __future__ import annotations

from gpudoctor.diagnosis.rules.input_bound import LOW_FRACTION
from gpudoctor.diagnosis.rules.low_gpu_util import P95_UTIL_PCT, p95_util
from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding

# DESIGN.md section 4: memory below 60% used leaves room for a larger batch (no
# external anchor; the batch-size finder measures).
MEMORY_USED_FRACTION = 0.60

ID = "small-batch"
# Rests on the step measures: estimated in watch mode (stack samples).
STEP_SIGNALS = True


def evaluate(w: Window) -> Finding | None:
    p95 = p95_util(w)
    if p95 is None or p95 >= P95_UTIL_PCT:
        return None
    if w.has_steps(5) and w.data_wait_fraction > LOW_FRACTION:
        return None
    fractions = [
        g.mem_used_bytes / g.mem_total_bytes
        for g in w.job_gpu_samples()
        if g.mem_used_bytes is not None and g.mem_total_bytes
    ]
    if not fractions:
        return None
    used = max(fractions)
    if used >= MEMORY_USED_FRACTION:
        return None
    batch = next((s.batch_size for s in w.steady_steps if s.batch_size), None)
    size = _("batch size {batch}, ").format(batch=batch) if batch else ""
    return Finding(
        id=ID,
        severity="medium",
        title=_("The batch is too small to keep the GPU busy"),
        evidence=_(
            "GPU-Util p95 {p95:.0f}% with {size}{used:.0%} of GPU memory used at most and "
            "{wait:.0%} of the step waiting for data."
        ).format(p95=p95, size=size, used=used, wait=w.data_wait_fraction),
        remedies=("larger-batch",),
    )
