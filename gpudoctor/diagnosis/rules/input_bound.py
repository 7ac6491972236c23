"""input-bound: the step waits for its input (DataLoader, or hand-written input code)."""

from __future__ import annotations

from gpudoctor.diagnosis.hotspots import Hotspot, state_words
from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _, pgettext
from gpudoctor.model import Finding, Severity
from gpudoctor.units import ms_text

# PyTorch profiler TensorBoard plugin (tb_plugin, removed): DataLoader time above 5% of
# the step is worth a recommendation. The medium and high bands have no published
# anchor; they are this project's, and the A/B rerun decides.
LOW_FRACTION = 0.05
MEDIUM_FRACTION = 0.20
HIGH_FRACTION = 0.40
MIN_STEPS = 5
# Host time outside the model is idle waiting, not input code, when the main thread was
# blocked (neither on a core nor waiting for one: asleep, on a lock, a queue, I/O, the
# network; the kernel's schedstat) for at least half of that share of the time. The
# model's own part keeps the main thread on a core, so the blocked time is the outside
# part's. No anchor: a bound from the arithmetic.
IDLE_SHARE_OF_OUTSIDE = 0.5

# A line of the main thread is named in the evidence from this share of the step (the
# report lists every line from diagnosis/hotspots.MIN_SHARE): below it, it is not where
# a person looks first. No anchor: this project's.
MAIN_LINE_SHARE = 0.10

# Storage is implicated when, in a third of the steady samples, the job reads from
# storage at this rate, or iowait passes this share (slow-storage's READ_MB_S, and a
# tenth of its SageMaker iowait threshold: a hint to offer the remedies, not a finding).
READ_MB_S = 1.0
IOWAIT_PCT = 5.0
STORAGE_SHARE = 1 / 3  # of the steady samples, and at least two

ID = "input-bound"
# Rests on the step measures: estimated in watch mode (stack samples).
STEP_SIGNALS = True


def severity_of(fraction: float) -> Severity | None:
    if fraction > HIGH_FRACTION:
        return "high"
    if fraction > MEDIUM_FRACTION:
        return "medium"
    if fraction > LOW_FRACTION:
        return "low"
    return None


def is_input_bound(w: Window) -> bool:
    return w.has_steps(MIN_STEPS) and w.data_wait_fraction > LOW_FRACTION


def evaluate(w: Window) -> Finding | None:
    if not w.has_steps(MIN_STEPS):
        return None
    fraction = w.data_wait_fraction
    severity = severity_of(fraction)
    if severity is None:
        return None
    wait_ms = fraction * w.step_median_ms
    loaders = w.facts.get("dataloaders") or []
    if w.uses_dataloader:
        where = _("waits for the DataLoader")
        loader = loaders[0] if loaders else {}
        workers = loader.get("num_workers")
        detail = (
            f"num_workers={workers}" if workers is not None else _("DataLoader settings unknown")
        )
        if workers is not None and w.estimated:
            detail = _(
                "{workers} worker processes (num_workers={workers}, seen from outside)"
            ).format(workers=workers)
        remedies = _dataloader_remedies(w, loader)
    elif _idle_outside(w, fraction):
        where = _(
            "is host time outside the model, and the process is mostly idle then: it waits "
            "(sleeping, on a lock, a queue, storage or the network), it does not compute input"
        )
        detail = _("no DataLoader in use")
        # overlapping the waits (a loader's workers, or reading ahead) is what helps;
        # precomputing does not
        remedies = ("more-workers", *_storage_remedies(w, ("local-ssd",)))
    else:
        where = _("is host time outside the model (hand-written input code, no DataLoader)")
        detail = _("no DataLoader in use")
        remedies = ("preprocess-offline", "more-workers", *_storage_remedies(w))
    busy = _cores_busy(w) + _named_lines(w)
    if w.estimated:  # watch mode: py-spy's samples of the main thread, no step timings
        rate = (
            _("; about {step} a step ({rate:.1f} steps/s)").format(
                step=ms_text(w.step_median_ms), rate=w.steps_per_s
            )
            if w.steps_per_s
            else ""
        )
        evidence = _(
            "{share:.0%} of the main thread's time {where} (py-spy, {samples} samples)"
            "{rate}; {detail}{busy}."
        ).format(
            share=fraction, where=where, samples=w.stack_total, rate=rate, detail=detail, busy=busy
        )
    else:
        evidence = _(
            "{share:.0%} of each step {where}: about {wait} of a {step} median step; "
            "{detail}{busy}."
        ).format(
            share=fraction, where=where, wait=ms_text(wait_ms), step=ms_text(w.step_median_ms),
            detail=detail, busy=busy,
        )  # fmt: skip
    return Finding(
        id=ID,
        severity=severity,
        title=_("Training waits for input data"),
        evidence=evidence,
        remedies=remedies,
        estimated_gain=round(fraction, 3),
    )


def _dataloader_remedies(w: Window, loader: dict[str, object]) -> tuple[str, ...]:
    order = ["more-workers", "pin-memory", "prefetch", "persistent-workers"]
    workers = int(loader.get("num_workers") or 0)  # type: ignore[call-overload]
    if w.steady_host and workers >= w.steady_host[-1].cores_allowed:
        order.remove("more-workers")  # a worker per core already: more cannot help
    if loader.get("pin_memory") or w.device_type != "cuda":
        order.remove("pin-memory")
    if not loader.get("num_workers"):  # prefetching and keeping workers need workers
        order.remove("prefetch")
        order.remove("persistent-workers")
    elif loader.get("persistent_workers"):
        order.remove("persistent-workers")
    return (*order, "preprocess-offline", *_storage_remedies(w))


def _storage_remedies(
    w: Window, remedies: tuple[str, ...] = ("memmap", "local-ssd")
) -> tuple[str, ...]:
    """The storage remedies, when storage is implicated: the job's processes read from
    it (the kernel's read_bytes, which page-cache hits do not move) at READ_MB_S or
    more, or sleep on the disk, or iowait is high, in STORAGE_SHARE of the steady
    samples (a module loaded late is one burst, not a data source). A job that reads
    nothing from disk is not told to move its data."""
    hosts = w.steady_host
    touching = sum(
        1
        for h in hosts
        if sum(p.read_bytes_per_s or 0.0 for p in h.job) / 1e6 >= READ_MB_S
        or any(p.status == "disk-sleep" for p in h.job)
        or (h.iowait_pct or 0.0) > IOWAIT_PCT
    )
    return remedies if hosts and touching >= max(2, STORAGE_SHARE * len(hosts)) else ()


def _idle_outside(w: Window, fraction: float) -> bool:
    """The main thread was idle through most of the time outside the model: py-spy's
    samples of its stacks say so where they were taken; else the main thread was blocked
    (median over the steady samples) through most of that time."""
    spots = w.hotspots
    if spots is not None:
        outside = spots.outside_busy + spots.outside_idle
        return outside > 0 and spots.outside_idle >= IDLE_SHARE_OF_OUTSIDE * outside
    blocked = sorted(
        h.main_blocked_fraction for h in w.steady_host if h.main_blocked_fraction is not None
    )
    # a distributed job's main thread also blocks inside the model's part (a CPU
    # collective waiting for the other ranks): its blocked time is not the outside part's
    if len(blocked) < 3 or w.estimated or w.facts.get("rank") is not None:
        return False
    return blocked[len(blocked) // 2] >= IDLE_SHARE_OF_OUTSIDE * fraction


def _named_lines(w: Window) -> str:
    """The lines of the user's code the time goes to (py-spy's samples), up to two of
    the main thread's and two of the workers'. While workers run, the main thread's
    waits on the DataLoader are waits for them: their lines are the workers'."""
    spots = w.hotspots
    if spots is None:
        return ""
    workers = spots.of("workers")[:2]
    main = [
        h
        for h in spots.of("main")
        if h.share >= MAIN_LINE_SHARE and not (workers and h.kind == "loader")
    ][:2]
    parts = []
    if main:
        said = pgettext("code lines", " and ").join(
            _("{share:.0%} {state} at {line}").format(
                share=h.share, state=state_words(h.state), line=_line(h)
            )
            for h in main
        )
        parts.append(_("the main thread spends {said}").format(said=said))
    if workers:
        said = pgettext("code lines", " and ").join(
            (
                _("{share:.0%} waiting in {line}")
                if h.state == "idle"
                else _("{share:.0%} in {line}")
            ).format(share=h.share, line=_line(h))
            for h in workers
        )
        parts.append(_("the workers spend {said} of their time").format(said=said))
    return _("; ") + _("; ").join(parts) if parts else ""


def _line(h: Hotspot) -> str:
    return f"{h.place} `{h.code}`" if h.code else f"{h.place} ({h.function})"


def _cores_busy(w: Window) -> str:
    hosts = w.steady_host
    if not hosts:
        return ""
    used = sorted(h.job_cpu_cores for h in hosts)[len(hosts) // 2]
    allowed = hosts[-1].cores_allowed
    return _("; the job keeps {used:.1f} of {allowed} cores busy").format(
        used=used, allowed=allowed
    )
