"""memory-pressure: the CUDA allocator is near the device's limit, or retrying."""

from __future__ import annotations

from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding

# Profiler plugin: memory above 90% of the device. Composer's memory monitor: allocator
# retries (cudaMalloc failed, caches flushed, tried again) in two straight readings.
PEAK_RESERVED_FRACTION = 0.90
RETRY_STREAK = 2

ID = "memory-pressure"


def evaluate(w: Window) -> Finding | None:
    total = w.facts.get("cuda_total_bytes")
    if not w.gauges or not total:
        return None
    peak = max(int(g.get("peak_reserved", 0)) for g in w.gauges) / int(total)
    retries = [int(g.get("alloc_retries", 0)) for g in w.gauges]
    streak = best = 0
    for before, after in zip(retries, retries[1:], strict=False):
        streak = streak + 1 if after > before else 0
        best = max(best, streak)
    if peak <= PEAK_RESERVED_FRACTION and best < RETRY_STREAK:
        return None
    return Finding(
        id=ID,
        severity="high" if best >= RETRY_STREAK else "medium",
        title=_("GPU memory is nearly full"),
        evidence=_(
            "peak reserved {peak:.0%} of {total:.1f} GiB; allocator retries {retries} (rising "
            "in {streak} straight readings)."
        ).format(peak=peak, total=int(total) / 2**30, retries=retries[-1], streak=best),
        remedies=("amp", "grad-accum", "smaller-batch"),
    )
