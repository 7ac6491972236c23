"""comm-bound: the ranks spend much of each step in collectives they all wait in.

A wait all ranks share leaves no rank waiting for another (diagnosis/ranks.py sees
none), but it makes backward long on every rank: the gradient all-reduce that does not
overlap with backward's compute. Backward's compute is about twice the forward's
(Kaplan et al. 2020, "Scaling Laws for Neural Language Models": training costs about
6N FLOPs a token, 2N forward and 4N backward), so what a rank's backward takes beyond
twice its forward, less its wait for the others, is the collectives' own time.
"""

from __future__ import annotations

import statistics

from gpudoctor.diagnosis.ranks import RankMeasure
from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding
from gpudoctor.units import ms_text

BACKWARD_PER_FORWARD = 2.0  # Kaplan et al. 2020 (above)
# DDP's first gradient bucket (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES, 1 MiB;
# the others bucket_cap_mb=25): a model whose gradients fit in it all-reduces once a
# step, a small message bound by its latency: fewer bytes (a bf16 hook) or other
# buckets cannot help it; fewer all-reduces (no_sync) can.
DDP_BUCKET_BYTES = 2**20
GRAD_BYTES_PER_PARAMETER = 4  # fp32 gradients, DDP's usual
# No published anchor: the share of the step the shared collectives take before the
# doctor calls the job communication-bound (high from HIGH_SHARE). This project's choice.
SHARE = 0.3
HIGH_SHARE = 0.5

ID = "comm-bound"


def shared_comm_ms(r: RankMeasure) -> float:
    """A rank's backward beyond its compute and its wait for others: collectives' time."""
    parts = r.parts_ms
    return max(0.0, parts["backward"] - r.comm_wait_ms - BACKWARD_PER_FORWARD * parts["forward"])


def evaluate(w: Window) -> Finding | None:
    ranks = w.ranks
    if len(ranks) < 2:
        return None
    comm = statistics.median(shared_comm_ms(r) for r in ranks)
    step = statistics.median(r.median_ms for r in ranks)
    if step <= 0 or comm < SHARE * step:
        return None
    share = comm / step
    parameters = int(w.facts.get("parameters") or 0)
    one_bucket = 0 < parameters * GRAD_BYTES_PER_PARAMETER <= DDP_BUCKET_BYTES
    remedies = ("ddp-no-sync",) if one_bucket else ("ddp-no-sync", "comm-hook-bf16", "ddp-buckets")
    latency = (
        _(
            " Its gradients ({kib:.0f} KiB) fit in DDP's first bucket (1 MiB): each step is "
            "one small all-reduce, bound by its latency, so fewer all-reduces help and fewer "
            "bytes do not."
        ).format(kib=parameters * GRAD_BYTES_PER_PARAMETER / 2**10)
        if one_bucket
        else ""
    )
    return Finding(
        id=ID,
        severity="high" if share >= HIGH_SHARE else "medium",
        title=_("The ranks spend much of each step communicating"),
        evidence=_(
            "about {comm} of a {step} step ({share:.0%}) goes to collectives all {ranks} "
            "ranks wait in together (backward beyond twice the forward's compute), not to "
            "computing."
        ).format(comm=ms_text(comm), step=ms_text(step), share=share, ranks=len(ranks))
        + latency,
        remedies=remedies,
        estimated_gain=round(share, 3),
    )
