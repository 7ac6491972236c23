"""grad-in-inference: forwards build autograd graphs that no backward ever uses."""

from __future__ import annotations

from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding

# DESIGN.md section 4: after 20 forwards with grad enabled and no backward at all.
MIN_FORWARDS = 20

ID = "grad-in-inference"


def evaluate(w: Window) -> Finding | None:
    f = w.facts
    forwards = int(f.get("forwards", 0))
    with_grad = int(f.get("forwards_with_grad", 0))
    if forwards < MIN_FORWARDS or with_grad < MIN_FORWARDS or int(f.get("backwards", 0)) > 0:
        return None
    return Finding(
        id=ID,
        severity="medium",
        title=_("Inference runs with gradients enabled"),
        evidence=_(
            "{with_grad} of {forwards} forward passes ran with autograd on and no backward "
            "ever ran: each one keeps activations for a backward that never comes."
        ).format(with_grad=with_grad, forwards=forwards),
        remedies=("no-grad",),
    )
