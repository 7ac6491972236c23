"""slow-storage: input-bound while the disk holds the loader back."""

from __future__ import annotations

from gpudoctor.diagnosis.rules.input_bound import is_input_bound
from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _, pgettext
from gpudoctor.model import Finding, HostSample

# SageMaker Debugger IOBottleneck rule: iowait above io_threshold=50% in more than
# threshold=50% of the data points.
IOWAIT_PCT = 50.0
SAMPLE_FRACTION = 0.5
# No published anchor: loader processes seen in uninterruptible disk sleep in at least
# this share of samples. This project's choice; the A/B rerun decides.
DISK_SLEEP_FRACTION = 0.3
# No published anchor either, and steadier than a state seen once a second: the job's
# loading processes (main, workers) read from storage itself (the kernel's read_bytes
# counter, which page-cache hits do not move) at READ_MB_S or more while none of them
# is busy on a core (a loader above LOADER_BUSY_PCT is held back by its own decoding),
# in more than SAMPLE_FRACTION of the samples. Both are this project's choice.
READ_MB_S = 1.0
LOADER_BUSY_PCT = 70.0
MIN_SAMPLES = 3

ID = "slow-storage"
# Rests on the step measures: estimated in watch mode (stack samples).
STEP_SIGNALS = True


def evaluate(w: Window) -> Finding | None:
    if not is_input_bound(w):
        return None
    hosts = [h for h in w.steady_host if h.iowait_pct is not None]
    if len(hosts) < MIN_SAMPLES:
        return None
    high_iowait = sum(1 for h in hosts if (h.iowait_pct or 0.0) > IOWAIT_PCT) / len(hosts)
    sleeping = sum(1 for h in hosts if any(p.status == "disk-sleep" for p in h.job)) / len(hosts)
    reading = sum(1 for h in hosts if _waits_on_reads(h)) / len(hosts)
    if (
        high_iowait <= SAMPLE_FRACTION
        and sleeping < DISK_SLEEP_FRACTION
        and reading <= SAMPLE_FRACTION
    ):
        return None
    read_mb = sorted(h.disk_read_bytes_per_s for h in hosts)[len(hosts) // 2] / 1e6
    signs = []
    if high_iowait > SAMPLE_FRACTION:
        signs.append(
            _("iowait above {pct:.0f}% in {share:.0%} of samples").format(
                pct=IOWAIT_PCT, share=high_iowait
            )
        )
    if sleeping >= DISK_SLEEP_FRACTION:
        signs.append(
            _("the job's processes in disk sleep in {share:.0%} of samples").format(share=sleeping)
        )
    if reading > SAMPLE_FRACTION:
        signs.append(
            _(
                "its loading processes reading from storage, none busy on a core, in "
                "{share:.0%} of samples"
            ).format(share=reading)
        )
    evidence = _(
        "{wait:.0%} of each step waits for data with {signs}, reading {mb:.1f} MB/s from disk."
    ).format(wait=w.data_wait_fraction, signs=pgettext("clauses", " and ").join(signs), mb=read_mb)
    return Finding(
        id=ID,
        severity="high" if w.data_wait_fraction > 0.4 else "medium",
        title=_("Storage is too slow for the input pipeline"),
        evidence=evidence,
        remedies=("local-ssd", "preprocess-offline", "memmap"),
        estimated_gain=round(w.data_wait_fraction, 3),
    )


def _waits_on_reads(h: HostSample) -> bool:
    loaders = [p for p in h.job if p.role in ("main", "worker")]
    read = sum(p.read_bytes_per_s or 0.0 for p in loaders)
    return read >= READ_MB_S * 1e6 and all(p.cpu_pct < LOADER_BUSY_PCT for p in loaders)
