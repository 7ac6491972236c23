"""gpu-throttled: the GPU slows its clocks for heat or power."""

from __future__ import annotations

from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding

# DESIGN.md section 4: thermal or power slowdown in more than 10% of samples.
THROTTLE_REASONS = frozenset(
    {"sw-power-cap", "hw-slowdown", "sw-thermal", "hw-thermal", "hw-power-brake"}
)
SAMPLE_FRACTION = 0.10
MIN_SAMPLES = 5

ID = "gpu-throttled"


def evaluate(w: Window) -> Finding | None:
    samples = [g for g in w.job_gpu_samples() if g.clock_event_reasons is not None]
    if len(samples) < MIN_SAMPLES:
        return None
    hit = [g for g in samples if THROTTLE_REASONS.intersection(g.clock_event_reasons or ())]
    share = len(hit) / len(samples)
    if share <= SAMPLE_FRACTION:
        return None
    reasons = sorted(
        {r for g in hit for r in (g.clock_event_reasons or ()) if r in THROTTLE_REASONS}
    )
    return Finding(
        id=ID,
        severity="medium",
        title=_("The GPU is throttling its clocks"),
        evidence=_(
            "clock slowdown ({reasons}) in {share:.0%} of samples: check cooling and power caps."
        ).format(reasons=", ".join(reasons), share=share),
        remedies=(),
    )
