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
    # a step's samples are all its batches': with gradient accumulation each forward
    # call sees only its share of them, and that share is what keeps the GPU busy
    seen = next(((s.batch_size, s.forwards) for s in w.steady_steps if s.batch_size), None)
    size = ""
    if seen is not None and seen[1] > 1:
        size = _("{samples} samples a step in {forwards} forward calls, ").format(
            samples=seen[0], forwards=seen[1]
        )
    elif seen is not None:
        size = _("batch size {batch}, ").format(batch=seen[0])
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
