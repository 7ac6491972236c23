"""launch-bound: kernels so short that the GPU finishes each before the host has
launched the next, and idles in between."""

from __future__ import annotations

from gpudoctor.diagnosis.gpu_timeline import RankTimeline
from gpudoctor.i18n import _
from gpudoctor.model import Finding
from gpudoctor.units import ms_text

# DESIGN.md section 4: the median kernel shorter than the median launch call, and the
# GPU idle over 20% of the span (starting points: the trial decides), counted here in the
# gaps the launching makes (shorter than gpu_timeline.LAUNCH_GAP_US): a GPU idle in long
# gaps waits for other host work (gpu-waits-on-host). High from half.
IDLE_PCT = 20.0
HIGH_IDLE_PCT = 50.0

ID = "launch-bound"


def evaluate(t: RankTimeline) -> Finding | None:
    idle = t.pct(t.short_gaps_us)
    kernel, launch = t.kernel_median_us, t.launch_median_us
    if idle is None or kernel is None or launch is None:
        return None
    if not (kernel < launch and idle > IDLE_PCT):
        return None
    per_step = _(" ({n:.0f} a step)").format(n=t.launches_per_step) if t.launches_per_step else ""
    return Finding(
        id=ID,
        severity="high" if idle > HIGH_IDLE_PCT else "medium",
        title=_("The GPU waits for kernel launches"),
        evidence=_(
            "{kernels} kernels{per_step}, median {kernel} against a median launch call of "
            "{launch} on the host: the GPU finishes each kernel before the next one is "
            "launched, and is idle {idle:.0f}% of the time in the short gaps between them "
            "(host wait {host:.0f}%, kernel wait {wait:.0f}% in all)."
        ).format(
            kernels=t.kernels,
            per_step=per_step,
            kernel=ms_text(kernel * 1e-3),
            launch=ms_text(launch * 1e-3),
            idle=idle,
            host=t.pct(t.host_wait_us) or 0,
            wait=t.pct(t.kernel_wait_us) or 0,
        ),  # fmt: skip
        remedies=("torch-compile", "cuda-graphs", "larger-batch"),
        estimated_gain=round(idle / 100, 3),
    )
