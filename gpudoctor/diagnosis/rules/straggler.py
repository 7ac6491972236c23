"""straggler: one rank's own work is slower than the others', and they wait for it.

In DDP every rank's step takes as long as the slowest rank's, so step times cannot
name it: the comparison is of each rank's own work, its step less the time it waited
for the others in collectives (diagnosis/ranks.py).
"""

from __future__ import annotations

import statistics

from gpudoctor.diagnosis.ranks import RankMeasure
from gpudoctor.diagnosis.rules.noisy_neighbour import contended
from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding

# DESIGN.md section 4: one rank above 1.2x the median rank (no external anchor; NVIDIA's
# resiliency extension scores ranks the same way, own work against the others').
RATIO = 1.2
# What the others must lose waiting for it before it is worth a finding: 5% of a step.
MIN_WAIT_SHARE = 0.05

ID = "straggler"
PARTS = ("data", "host", "forward", "backward", "optimizer")


def evaluate(w: Window) -> Finding | None:
    ranks = w.ranks
    if len(ranks) < 2:
        return None
    slow = max(ranks, key=lambda r: r.own_ms)
    others = [r for r in ranks if r is not slow]
    middle = statistics.median(r.own_ms for r in others)  # what the others do a step
    waited = statistics.median(r.comm_wait_ms for r in others)
    step_ms = statistics.median(r.median_ms for r in ranks)
    if middle <= 0 or slow.own_ms <= RATIO * middle or waited < MIN_WAIT_SHARE * step_ms:
        return None
    part, extra = _where(slow, others)
    hosts = [h for h in w.steady_host if h.job_run_delay_fraction is not None]
    crowded = hosts and 2 * sum(contended(h) for h in hosts) >= len(hosts)
    crowd = (
        _(
            " Other processes took the cores the job waited for through most of this time "
            "(noisy-neighbour): a rank they crowd falls behind, whatever its own code."
        )
        if crowded
        else ""
    )
    # what-if: the job's step if the slow rank's own work were the median rank's
    faster = step_ms / max(1e-9, step_ms - (slow.own_ms - middle))
    return Finding(
        id=ID,
        severity="high" if waited >= 0.25 * step_ms else "medium",
        title=_("One rank is slower than the others, and they wait for it"),
        evidence=_(
            "rank {rank} does {own:.1f} ms of its own work a step against {middle:.1f} ms for "
            "the other {others} (median), {ratio:.2f}x, {extra:.1f} ms more in {part}; "
            "{waiters} {waited:.1f} ms a step for it ({share:.0%} of the step); the job would "
            "run about {faster:.2f}x as fast if it kept up."
        ).format(
            rank=_name(slow, len({r.host for r in ranks})),
            own=slow.own_ms,
            middle=middle,
            others=len(others),
            ratio=slow.own_ms / middle,
            extra=extra,
            part=_words(part, slow),
            waiters=_names(others),
            waited=waited,
            share=waited / step_ms,
            faster=faster,
        )
        + crowd,
        remedies=(),
        estimated_gain=round(1 - 1 / faster, 3),
    )


def _where(slow: RankMeasure, others: list[RankMeasure]) -> tuple[str, float]:
    """The part of the slow rank's own work furthest above the other ranks' median."""
    fastest_forward = min(r.parts_ms["forward"] for r in [slow, *others])
    mine = _own_parts(slow, fastest_forward)
    theirs = [_own_parts(r, fastest_forward) for r in others]
    deltas = {part: mine[part] - statistics.median(t[part] for t in theirs) for part in PARTS}
    part = max(deltas, key=lambda p: deltas[p])
    return part, deltas[part]


def _own_parts(r: RankMeasure, fastest_forward: float) -> dict[str, float]:
    """A rank's parts with its wait for the others taken out where it waited: its
    forward beyond the fastest rank's forward (FSDP's gathers), the rest in backward
    (DDP's all-reduce). Taken all from backward, an FSDP rank's wait in forward made
    its own backward look short, and the straggler's longer by as much."""
    in_forward = min(r.comm_wait_ms, max(0.0, r.parts_ms["forward"] - fastest_forward))
    return {
        **r.parts_ms,
        "forward": r.parts_ms["forward"] - in_forward,
        "backward": r.parts_ms["backward"] - (r.comm_wait_ms - in_forward),
    }


def _words(part: str, r: RankMeasure) -> str:
    if part == "data" and not r.uses_dataloader:  # no DataLoader: the probe cannot tell
        return _("host code before the forward (preparing its data, or other work)")
    return {
        "data": _("waiting for its data"),
        "host": _("host code"),
        "forward": _("forward compute"),
        "backward": _("backward compute"),
        "optimizer": _("the optimizer"),
    }[part]


def _name(r: RankMeasure, nodes: int = 1) -> str:
    where = _(" on {host}").format(host=r.host) if r.host and nodes > 1 else ""  # several nodes
    return f"{r.rank} (pid {r.pid}{where})" if r.rank is not None else f"pid {r.pid}{where}"


def _names(ranks: list[RankMeasure]) -> str:
    named = sorted(r.rank for r in ranks if r.rank is not None)
    if len(named) != len(ranks):
        return _("the other processes wait")
    if len(named) == 1:
        return _("rank {rank} waits").format(rank=named[0])
    return _("ranks {ranks} wait").format(ranks=", ".join(str(n) for n in named))
