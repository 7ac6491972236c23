"""out-of-memory: the job died of an out-of-memory error."""

from __future__ import annotations

from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding
from gpudoctor.units import clip

ID = "out-of-memory"


def evaluate(w: Window) -> Finding | None:
    oom_end = next((e for e in w.ends.values() if e.get("oom")), None)
    died_of_oom = w.exit is not None and w.exit.ended_by == "oom"
    if oom_end is None and not died_of_oom:
        return None
    message = (oom_end or {}).get("exception_message") or (
        w.exit.exception_message if w.exit else None
    )
    kind = (oom_end or {}).get("exception_type") or (w.exit.exception_type if w.exit else None)
    first_line = clip((message or "").strip().splitlines()[0], 160) if message else ""
    return Finding(
        id=ID,
        severity="high",
        title=_("The job ran out of memory"),
        evidence=(
            _("The job died of {error} after {steps} steps: {message}")
            if first_line
            else _("The job died of {error} after {steps} steps.")
        ).format(
            error=kind or _("an out-of-memory error"), steps=w.total_steps, message=first_line
        ),
        remedies=("smaller-batch", "amp", "grad-accum"),
    )
