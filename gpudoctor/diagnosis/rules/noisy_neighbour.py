"""noisy-neighbour: other processes take the CPU the job is waiting for, or share its GPU.

The CPU side is measured, not guessed from load: the kernel counts how long each of the
job's threads was ready to run but waited for a core (run-queue delay). A job can make
that wait itself (more threads than cores); it is a neighbour's doing only while other
processes keep cores busy at the same time."""

from __future__ import annotations

from gpudoctor.diagnosis.window import Window, percentile
from gpudoctor.i18n import _, ngettext
from gpudoctor.model import Finding, GpuProcess, HostSample, OtherProcess

# DESIGN.md section 4: the job waits for a core for more than 20% of its runnable time.
# (No external anchor: it is the share of the job's CPU-side time others take.)
RUN_DELAY_FRACTION = 0.20
# Others count as the cause only while they keep at least half a core busy: below that,
# the job's own threads (more of them than cores) explain its wait.
OTHERS_MIN_CORES = 0.5
# DESIGN.md section 4: a process outside the job using more than 10% of its GPU's SMs.
FOREIGN_SM_UTIL_PCT = 10
# in at least half of the steady samples, and at least this many of them
MIN_SAMPLES = 3

ID = "noisy-neighbour"


def contended(h: HostSample) -> bool:
    """The job waited for cores while other processes kept them busy (this sample)."""
    return (
        h.job_run_delay_fraction is not None
        and h.others_cpu_cores is not None
        and h.job_run_delay_fraction > RUN_DELAY_FRACTION
        and h.others_cpu_cores >= OTHERS_MIN_CORES
    )


def evaluate(w: Window) -> Finding | None:
    return _cpu(w) or _gpu(w)


def _cpu(w: Window) -> Finding | None:
    hosts = [h for h in w.steady_host if h.job_run_delay_fraction is not None]
    hit = [h for h in hosts if contended(h)]
    if len(hit) < MIN_SAMPLES or 2 * len(hit) < len(hosts):
        return None
    delay = percentile([h.job_run_delay_fraction or 0.0 for h in hit], 50)
    others = percentile([h.others_cpu_cores or 0.0 for h in hit], 50)
    cores = len(hit[-1].cpu_pct_per_core)
    who = busiest(hit)
    steal = percentile([h.steal_pct or 0.0 for h in hit], 50)
    named = _(": {who}").format(who=who) if who else ""
    # niced neighbours give up their share of the CPU, not the wait: a waking job still
    # waits for the one running on its core (seen: 24% of its runnable time beside a
    # `nice -n 19` burner on 2 cores); said, so that nobody reads the finding as wrong
    niced = percentile([h.others_niced_cpu_cores or 0.0 for h in hit], 50)
    niced_words = (
        _(
            " ({niced:.1f} of those cores niced: niced work still keeps a waking job waiting)"
        ).format(niced=niced)
        if niced >= OTHERS_MIN_CORES
        else ""
    )
    vm = (
        _(" (of which the hypervisor's steal: {steal:.0f}% of the CPU)").format(steal=steal)
        if steal >= 5
        else ""
    )
    # The job's own threads add to the queue when they outnumber the cores it has (those
    # it may use, less those others hold): torch's intra-op threads then wait on each
    # other at every op (seen: a 1-ms step at 168 ms; 2 threads beside one busy process
    # on 2 cores, 27-56 ms steps against 3.6 ms on one thread). Fewer threads is the
    # job's own share of the remedy.
    own = w.own_threads_oversubscribe()
    own_words = _(" The job adds to it: {own}.").format(own=own) if own else ""
    return Finding(
        id=ID,
        severity="high" if delay > 0.5 else "medium",
        title=_("Other processes take the CPU this job waits for"),
        evidence=_(
            "The job's threads waited for a core {delay:.0%} of the time they were ready to "
            "run (median of {hit} of {samples} samples), while other processes kept "
            "{others:.1f} of the machine's {cores} cores busy{vm}{niced}{named}. Run it where the "
            "cores are free, pin it and them to separate cores (taskset), or ask their owner."
        ).format(
            delay=delay,
            hit=len(hit),
            samples=len(hosts),
            others=others,
            cores=cores,
            vm=vm,
            niced=niced_words,
            named=named,
        )
        + own_words,
        remedies=("fewer-threads",) if own else (),
        estimated_gain=round(delay, 3),
    )


def busiest(hosts: list[HostSample], limit: int = 3) -> str:
    """The others seen most often at the top, as words: 'python3 (pid 8261, root) 1.0 core'."""
    best: dict[int, OtherProcess] = {}
    for h in hosts:
        for o in h.others:
            if o.pid not in best or o.cpu_cores > best[o.pid].cpu_cores:
                best[o.pid] = o
    top = sorted(best.values(), key=lambda o: -o.cpu_cores)[:limit]
    return ", ".join(
        f"{o.name} (pid {o.pid}{', ' + o.user if o.user else ''}) "
        + ngettext(
            "{cores:.1f} core", "{cores:.1f} cores", 1 if round(o.cpu_cores, 1) == 1 else 2
        ).format(cores=o.cpu_cores)
        for o in top
    )


def _gpu(w: Window) -> Finding | None:
    mine = w.job_pids
    samples = [g for g in w.job_gpu_samples() if any(p.pid in mine for p in g.processes)]
    if len(samples) < MIN_SAMPLES:
        return None
    busy: dict[int, GpuProcess] = {}
    hit = 0
    for g in samples:
        foreign = [
            p for p in g.processes
            if p.pid not in mine and (p.sm_util_pct or 0) > FOREIGN_SM_UTIL_PCT
        ]  # fmt: skip
        hit += bool(foreign)
        for p in foreign:
            if p.pid not in busy or (p.sm_util_pct or 0) > (busy[p.pid].sm_util_pct or 0):
                busy[p.pid] = p
    if hit < MIN_SAMPLES or 2 * hit < len(samples):
        return None
    names = ", ".join(
        f"pid {p.pid}{' (' + p.user + ')' if p.user else ''}"
        f"{' ' + _program(p.command) if p.command else ''}"
        + _(" up to {pct}% of the SMs").format(pct=p.sm_util_pct)
        for p in sorted(busy.values(), key=lambda p: -(p.sm_util_pct or 0))[:3]
    )
    gpus = sorted({g.index for g in samples})
    return Finding(
        id=ID,
        severity="high",
        title=_("Other processes share this job's GPU"),
        evidence=_(
            "In {hit} of {samples} samples another process computed on GPU {gpus} beside the "
            "job: {names}. Give the job a GPU of its own (CUDA_VISIBLE_DEVICES) or move them."
        ).format(hit=hit, samples=len(samples), gpus=", ".join(map(str, gpus)), names=names),
        remedies=(),
    )


def _program(command: str) -> str:
    """The program's name only: another user's arguments may hold what is theirs."""
    first = command.split()[0] if command.split() else command
    return first.rsplit("/", 1)[-1]
