"""low-goodput: the job's training steps take too little of its wall time after start-up
(the wall-time ledger, diagnosis/ledger.py): evaluation, checkpoints or other host work
between steps take the rest."""

from __future__ import annotations

from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding
from gpudoctor.units import seconds_text

# ML Goodput's framing (the share of wall time that trains); the 70% line has no
# published anchor: this project's, and the A/B rerun decides (DESIGN.md section 4).
GOODPUT_MEDIUM = 0.70
GOODPUT_HIGH = 0.40
# Too short a run after start-up says nothing of its rhythm (an evaluation every N steps
# needs several N): no anchor, this project's.
MIN_AFTER_STARTUP_S = 10.0
MIN_STEPS = 5
# A part below this share of the time after start-up is not named as a cause.
MIN_PART = 0.05

ID = "low-goodput"


def evaluate(w: Window) -> Finding | None:
    ledger = w.ledger
    if ledger is None or not w.has_steps(MIN_STEPS):
        return None
    after = ledger.after_startup_s
    goodput = ledger.goodput
    if goodput is None or after < MIN_AFTER_STARTUP_S or goodput >= GOODPUT_MEDIUM:
        return None
    evaluations = int(w.facts.get("evaluation_forwards") or 0)
    saves = int((w.facts.get("ledger_ns") or {}).get("checkpoints") or 0)
    parts = sorted(
        (
            (ledger.evaluation_s, "evaluate-less", _("evaluation {share:.0%} ({time}, {n} forwards)"), evaluations),
            (ledger.checkpoint_s, "checkpoint-less", _("checkpoints {share:.0%} ({time}, {n} saves)"), saves),
            (ledger.other_host_s, "", _("other host work {share:.0%} ({time})"), 0),
        ),
        key=lambda p: -p[0],
    )  # fmt: skip
    named = [p for p in parts if p[0] / after >= MIN_PART]
    said = "; ".join(
        words.format(share=seconds / after, time=seconds_text(seconds), n=n)
        for seconds, _id, words, n in named
    )
    evidence = _(
        "Training steps took {share:.0%} of the {after} after start-up ({startup}); "
        "the rest: {said}."
    ).format(
        share=goodput,
        after=seconds_text(after),
        startup=_("start-up {time}").format(time=seconds_text(ledger.startup_s)),
        said=said or _("time the probe could not place"),
    )
    return Finding(
        id=ID,
        severity="high" if goodput < GOODPUT_HIGH else "medium",
        title=_("Much of the run's time is not training"),
        evidence=evidence,
        remedies=tuple(remedy for _s, remedy, _w, _n in named if remedy),
        estimated_gain=round(named[0][0] / after, 3) if named else None,
    )
