"""not-compiled: many short module calls per forward, and the model is not compiled."""

from __future__ import annotations

from gpudoctor.diagnosis.rules.input_bound import MEDIUM_FRACTION
from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding

# Heuristic, no published anchor: below ~50 us of forward time per leaf module the
# step is dominated by per-op overhead (a CUDA launch costs ~5-10 us), which is what
# torch.compile fuses away. Only a rerun can tell: this rule says so and stays low.
MAX_US_PER_LEAF = 50.0
MIN_LEAF_MODULES = 20
MIN_STEPS = 5

ID = "not-compiled"
# Rests on the step measures: estimated in watch mode (stack samples).
STEP_SIGNALS = True


def evaluate(w: Window) -> Finding | None:
    f = w.facts
    version = str(f.get("torch_version", "0"))
    if not version[:1].isdigit() or int(version.split(".")[0]) < 2 or f.get("compiled"):
        return None
    leaves = int(f.get("leaf_modules") or 0)
    r = w.rollup
    if r is not None and not w.steps:  # no row kept: the rolled-up run's detailed steps
        measured, forwards, forward_ns = r.detailed, r.forwards, r.forward_ns
    else:
        steps = w.detailed_steps
        measured, forwards = len(steps), sum(s.forwards for s in steps)
        forward_ns = sum(s.forward_ns for s in steps)
    if leaves < MIN_LEAF_MODULES or measured < MIN_STEPS or not forwards:
        return None
    if w.data_wait_fraction > MEDIUM_FRACTION:
        return None  # input is the bottleneck: compiling would not show
    us_per_leaf = forward_ns / forwards / leaves / 1e3
    if us_per_leaf > MAX_US_PER_LEAF:
        return None
    return Finding(
        id=ID,
        severity="low",
        title=_("Many small operations: torch.compile may fuse them"),
        evidence=_(
            "{leaves} leaf modules take {us:.0f} us each per forward on average, short enough "
            "for per-operation overhead to dominate; the model is not compiled (a heuristic: "
            "a rerun with torch.compile measures it)."
        ).format(leaves=leaves, us=us_per_leaf),
        remedies=("torch-compile",),
    )
