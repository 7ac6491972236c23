"""cudnn-benchmark-off: convolutions on CUDA with fixed input shapes, autotuning off."""

from __future__ import annotations

from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding

# Guide [cudnn]: torch.backends.cudnn.benchmark = True. It pays when shapes repeat;
# with varying shapes it re-tunes for each new one, so require a single input shape.
MAX_DISTINCT_SHAPES = 1

ID = "cudnn-benchmark-off"


def evaluate(w: Window) -> Finding | None:
    f = w.facts
    if w.device_type != "cuda" or not f.get("conv_layers") or f.get("cudnn_benchmark"):
        return None
    shapes = f.get("input_shapes") or []
    if not shapes or len(shapes) > MAX_DISTINCT_SHAPES:
        return None
    return Finding(
        id=ID,
        severity="low",
        title=_("cuDNN autotuning is off"),
        evidence=_(
            "{layers} convolution layers on CUDA, one input shape {shape}, "
            "torch.backends.cudnn.benchmark is False."
        ).format(layers=f.get("conv_layers"), shape=tuple(shapes[0])),
        remedies=("cudnn-benchmark",),
    )
