"""cpu-saturated: input-bound and the job already uses every core it may use."""

from __future__ import annotations

from gpudoctor.diagnosis.rules.input_bound import is_input_bound
from gpudoctor.diagnosis.rules.noisy_neighbour import busiest
from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding, HostSample

# DESIGN.md section 4: the job's processes use more than 90% of the allowed cores.
# (No external anchor: more workers cannot help once the cores are full.)
SATURATED_FRACTION = 0.90
# Only once the loading already runs in worker processes: with none, the main process's
# compute threads (which spin while they wait, so they look busy) fill the cores, yet
# workers are exactly what helps; input-bound says so.
MIN_WORKERS = 1
MIN_SAMPLES = 3
# the cores' holders are named once others take a quarter of a core (as the host
# reader names them: sources/host.py)
NAMED_OTHERS_CORES = 0.25

ID = "cpu-saturated"
# Rests on the step measures: estimated in watch mode (stack samples).
STEP_SIGNALS = True


def evaluate(w: Window) -> Finding | None:
    if not is_input_bound(w) or not w.uses_dataloader:
        return None
    loaders = w.facts.get("dataloaders") or [{}]
    if int(loaders[0].get("num_workers") or 0) < MIN_WORKERS:
        return None
    hosts = w.steady_host
    if len(hosts) < MIN_SAMPLES:
        return None
    allowed = hosts[-1].cores_allowed
    shares = sorted(max(h.job_cpu_cores, _busy_cores(h)) for h in hosts)
    median_cores = shares[len(shares) // 2]
    if median_cores / allowed <= SATURATED_FRACTION:
        return None
    jobs = sorted(h.job_cpu_cores for h in hosts)[len(hosts) // 2]
    others = sorted(h.competing_cpu_cores or 0.0 for h in hosts)[len(hosts) // 2]
    by_whom = ""
    if others >= NAMED_OTHERS_CORES:
        who = busiest(list(hosts))
        by_whom = _(
            " The job itself uses {jobs:.1f} of them; other processes take {others:.1f}"
        ).format(jobs=jobs, others=others) + (_(": {who}.").format(who=who) if who else _("."))
    return Finding(
        id=ID,
        severity="high" if w.data_wait_fraction > 0.4 else "medium",
        title=_("The CPU cannot prepare batches any faster"),
        evidence=_(
            "{wait:.0%} of each step waits for data while the job keeps {cores:.1f} of "
            "{allowed} allowed cores busy (median): more workers cannot help, less work per "
            "sample can."
        ).format(wait=w.data_wait_fraction, cores=median_cores, allowed=allowed)
        + by_whom,
        remedies=(
            "preprocess-offline",
            "fewer-transforms",
            *(("fewer-threads",) if w.own_threads_oversubscribe() else ()),
        ),
        estimated_gain=round(w.data_wait_fraction, 3),
    )


def _busy_cores(h: HostSample) -> float:
    """The machine's busy cores less those niced processes ran: a niced background job
    fills the cores the job leaves, and yields them when the job wants them (beside one
    on this 2-core machine, dataloader_bound.py with one worker read 1.9 of 2 cores
    busy, yet two workers ran it 1.5x faster)."""
    return h.cpu_pct / 100 * len(h.cpu_pct_per_core) - (h.others_niced_cpu_cores or 0.0)
