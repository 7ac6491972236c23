"""low-gpu-util: the job's GPU is mostly idle while the job runs."""

from __future__ import annotations

from gpudoctor.diagnosis.window import Window, percentile
from gpudoctor.i18n import _
from gpudoctor.model import Finding

# Guide [common]: "low GPU utilisation: GPU-Util < 50%"; [monitor]: healthy is > 80%.
# p95 so that a few busy samples do not hide a mostly idle GPU.
P95_UTIL_PCT = 50.0
MIN_SAMPLES = 5

ID = "low-gpu-util"


def p95_util(w: Window) -> float | None:
    values = [float(g.util_gpu_pct) for g in w.job_gpu_samples() if g.util_gpu_pct is not None]
    if len(values) < MIN_SAMPLES:
        return None
    return percentile(values, 95)


def evaluate(w: Window) -> Finding | None:
    p95 = p95_util(w)
    if p95 is None or p95 >= P95_UTIL_PCT:
        return None
    values = [float(g.util_gpu_pct or 0) for g in w.job_gpu_samples()]
    return Finding(
        id=ID,
        severity="high" if p95 < 20 else "medium",
        title=_("The GPU is mostly idle"),
        evidence=_(
            "GPU-Util p95 {p95:.0f}% (median {median:.0f}%) over {samples} samples after "
            "warm-up; healthy is above 80%."
        ).format(p95=p95, median=percentile(values, 50), samples=len(values)),
        remedies=(),
    )
