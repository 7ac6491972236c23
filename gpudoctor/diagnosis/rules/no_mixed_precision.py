"""no-mixed-precision: float32 math on a GPU with tensor cores, autocast never on."""

from __future__ import annotations

from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding

# Tensor cores for fp16 arrive with compute capability 7.0 (Volta); the profiler
# plugin recommended AMP whenever it saw none on such a GPU.
MIN_CAPABILITY = (7, 0)
# TF32 arrives with compute capability 8.0 (Ampere: NVIDIA A100 Tensor Core GPU
# Architecture whitepaper): float32 matmuls on tensor cores, no change of dtype.
TF32_CAPABILITY = (8, 0)
MIN_FORWARDS = 20

ID = "no-mixed-precision"


def evaluate(w: Window) -> Finding | None:
    f = w.facts
    if w.device_type != "cuda" or f.get("param_dtype") != "float32":
        return None
    if int(f.get("forwards", 0)) < MIN_FORWARDS or f.get("autocast_seen"):
        return None
    capability = tuple(f.get("cuda_capability") or ())
    if not capability:
        capability = next((g.compute_capability for g in w.gpus if g.compute_capability), ())
    if not capability or capability < MIN_CAPABILITY:
        return None
    name = f.get("cuda_device_name") or next((g.name for g in w.gpus), "this GPU")
    return Finding(
        id=ID,
        severity="medium",
        title=_("Mixed precision is off"),
        evidence=_(
            "{forwards} forward passes in float32 with autocast never active on {gpu} (compute "
            "capability {major}.{minor}, tensor cores)."
        ).format(forwards=f.get("forwards"), gpu=name, major=capability[0], minor=capability[1]),
        remedies=("amp", "tf32-matmul") if _tf32_helps(f, capability) else ("amp",),
    )


def _tf32_helps(facts: dict[str, object], capability: tuple[int, ...]) -> bool:
    """TF32 is there to switch on: an Ampere or later GPU, and the job's float32
    matmuls do not use it yet (as the probe saw torch's switch on a counted step)."""
    counted = facts.get("flops")
    on = isinstance(counted, dict) and bool(counted.get("tf32_matmul"))
    return capability >= TF32_CAPABILITY and not on
