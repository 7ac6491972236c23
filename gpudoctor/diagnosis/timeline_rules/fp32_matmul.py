"""fp32-matmul: matrix multiplies and convolutions in float32 on the GPU's SIMT cores,
on a GPU that has tensor cores."""

from __future__ import annotations

from gpudoctor.diagnosis.gpu_timeline import RankTimeline
from gpudoctor.i18n import _
from gpudoctor.model import Finding, Severity

# DESIGN.md section 4: such kernels over 20% of the kernel time (a starting point);
# tensor cores from compute capability 7.0 (Volta). How much it matters is their share
# of the whole span (a GPU idle most of the time gains little from faster kernels):
# medium from 20% of it, high from half.
SHARE_PCT = 20.0
MEDIUM_SPAN_PCT = 20.0
HIGH_SPAN_PCT = 50.0
TENSOR_CORES_FROM = 7

ID = "fp32-matmul"


def evaluate(t: RankTimeline) -> Finding | None:
    if not t.kernel_us or (t.compute_major is not None and t.compute_major < TENSOR_CORES_FROM):
        return None
    share = 100.0 * t.matmul_fp32_us / t.kernel_us
    if share <= SHARE_PCT:
        return None
    of_span = t.pct(t.matmul_fp32_us) or 0.0
    severity: Severity = (
        "high" if of_span > HIGH_SPAN_PCT else "medium" if of_span > MEDIUM_SPAN_PCT else "low"
    )
    return Finding(
        id=ID,
        severity=severity,
        title=_("Matrix multiplies run in float32 without tensor cores"),
        evidence=_(
            "{share:.0f}% of the kernel time is GEMM or convolution kernels in float32 "
            "(SIMT kernels, no tensor cores){device}: {of_span:.0f}% of the time."
        ).format(
            share=share,
            of_span=of_span,
            device=_(" on {device}").format(device=t.device) if t.device else "",
        ),  # fmt: skip
        remedies=("amp", "tf32-matmul"),
        estimated_gain=round(of_span / 100, 3),
    )
