"""`tune batch-size`: each size a fresh run under the doctor, classified as it ends
(fits, out of memory, over the memory cap or the safety margin, crashed); the search
itself is prescribe/batch_size.py's."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import IO, Any

from gpudoctor.app.errors import NotPossible
from gpudoctor.app.progress import Progress
from gpudoctor.app.run import conclude
from gpudoctor.app.trial import run_arm
from gpudoctor.display import bar
from gpudoctor.i18n import _
from gpudoctor.prescribe import batch_size as finder
from gpudoctor.prescribe.how import script_flag
from gpudoctor.prescribe.rerun import with_batch_size
from gpudoctor.prescribe.trial import Arm
from gpudoctor.redact import redact_argv
from gpudoctor.store import Store
from gpudoctor.timeline import Timeline


@dataclass(frozen=True)
class TuneRequest:
    command: tuple[str, ...]
    max_memory: str | None = None  # a memory limit for the job (its RSS on a CPU job)
    cap: int = finder.DEFAULT_CAP
    steps: int = 15  # measured at each size, after the warm-up
    start: int | None = None  # the first size (default: the job's own)


class JobFails(NotPossible):
    """The job fails as it is (not for lack of memory): there is nothing to tune."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def tune_batch_size(
    request: TuneRequest, store: Store, progress: Progress, output: IO[Any] | None = None
) -> finder.Found:
    """The largest batch size that fits and the fastest. NotPossible for a bad
    --max-memory or a job whose batch size cannot be told; JobFails when the job fails
    as it is; LaunchError when it cannot start."""
    tuner = _Tuner(request, store, progress, output, memory_cap(request))
    first = tuner.try_size(request.start)
    if first.reason.startswith("crashed"):  # not a memory limit: the job itself fails
        raise JobFails(
            _("the job fails as it is: {why}").format(why=finder.reason_words(first.reason)), 1
        )
    tries = [first]

    def cached(size: int) -> finder.Try:
        for t in tries:
            if t.batch_size == size:
                return t
        t = tuner.try_size(size)
        tries.append(t)
        return t

    found = finder.search(first.batch_size, cached, cap=request.cap)
    if tuner.last_session is not None:  # on the last try's: `report last --format html`
        outcome = {"command": redact_argv(request.command), **found.as_dict()}
        outcome["sessions"] = tuner.sessions
        store.add(tuner.last_session, "tune", time.monotonic_ns(), outcome)
        store.commit()
    return found


def memory_cap(request: TuneRequest) -> int | None:
    """--max-memory in bytes (None: none given); NotPossible when it is not a size."""
    if request.max_memory is None:
        return None
    try:
        return finder.parse_size(request.max_memory)
    except ValueError as exc:
        raise NotPossible(f"--max-memory: {exc}") from None


class _Tuner:
    """Runs one size at a time; learns the job's facts (its flags, its loader) from the
    first run."""

    def __init__(
        self,
        request: TuneRequest,
        store: Store,
        progress: Progress,
        output: IO[Any] | None,
        cap_bytes: int | None,
    ) -> None:
        self.request = request
        self.store = store
        self.progress = progress
        self.output = output
        self.cap_bytes = cap_bytes
        self.facts: dict[str, Any] | None = None
        self.tries = 0
        self.sessions: dict[str, int] = {}  # each size's session (JSON: keys are text)
        self.last_session: int | None = None

    def try_size(self, size: int | None) -> finder.Try:
        """One run at `size` (None: the job as it is, which tells its own size)."""
        command = list(self.request.command)
        argv, env = command, {}
        if self.facts is not None and size is not None:
            sized = with_batch_size(command, self.facts, size)
            argv, env = list(sized.argv), sized.env
        self.tries += 1
        # at most: doublings from the job's size to the cap, then a few bisections
        start = size or 1
        most = max(self.tries, math.ceil(math.log2(max(2, self.request.cap / start))) + 4)
        self.progress(
            f"[{bar(self.tries / most, 12)}] "
            + _("try {n} (at most ~{most}): batch size {size} ...").format(
                n=self.tries, most=most, size=size if size is not None else _("as the job has it")
            ),
            self.tries / most,
        )
        over_cap = [False]

        def stop_if(timeline: Timeline) -> bool:
            # once over the cap, the try is over it (the stopped job's memory falls after)
            over = self.cap_bytes is not None and job_rss(timeline) > self.cap_bytes
            over_cap[0] = over_cap[0] or over
            return over_cap[0]

        job, arm = run_arm(
            argv, env, self.request.steps, self.store, output=self.output, stop_if=stop_if,
            warmup_steps=0,
        )  # fmt: skip
        conclude(job, self.store, "en")
        self.last_session = job.session_id
        if self.facts is None:
            self.facts = job.timeline.merged_facts()
        if size is None:
            size = job_batch_size(self.facts)
            if size is None:
                raise NotPossible(
                    _(
                        "cannot tell this job's batch size (no --batch-size flag, no "
                        "DataLoader): give the first size with --start N"
                    )
                )
        result = classify(job.timeline, arm, size, over_cap[0], self.cap_bytes)
        if job.session_id is not None:
            self.sessions[str(size)] = job.session_id
        speed = (
            _(", {rate:.1f} samples/s").format(rate=result.samples_per_s)
            if result.samples_per_s
            else ""
        )
        mem = (
            _(", peak {mib:.0f} MiB").format(mib=result.peak_bytes / 2**20)
            if result.peak_bytes
            else ""
        )
        self.progress(f"  {finder.reason_words(result.reason)}{speed}{mem}")
        return result


def classify(
    timeline: Timeline, arm: Arm, size: int, over_cap: bool, cap_bytes: int | None
) -> finder.Try:
    """What one size's run says: fits, or why not (out of memory, over the cap or the
    safety margin, crashed), with its throughput and its peak memory."""
    exit_ = timeline.exit
    assert exit_ is not None
    rate = arm.samples_per_s
    if rate is not None and arm.batch_size is None:
        rate *= size  # the probe saw no batch (no DataLoader): the size set is the batch
    gpu = [g for g in timeline.gpus if any(p.pid in timeline.steps for p in g.processes)]
    if gpu:
        peak = max(
            p.mem_used_bytes or 0 for g in gpu for p in g.processes if p.pid in timeline.steps
        )
        limit = gpu[-1].mem_total_bytes
    else:
        peak = max((sum(p.rss_bytes for p in h.job) for h in timeline.host), default=0)
        limit = cap_bytes
    if exit_.ended_by == "oom":
        return finder.Try(size, False, "oom", None, peak or None)
    if over_cap:
        return finder.Try(size, False, "over memory cap", None, peak or None)
    if arm.failed or len(arm.walls_s) < 2:
        return finder.Try(size, False, f"crashed (exit code {arm.exit_code})", None, peak or None)
    if limit and peak > (1 - finder.SAFETY_MARGIN) * limit:
        return finder.Try(size, False, "over safety margin", rate, peak)
    return finder.Try(size, True, "fits", rate, peak or None)


def job_rss(timeline: Timeline) -> int:
    return sum(p.rss_bytes for p in timeline.host[-1].job) if timeline.host else 0


def job_batch_size(facts: dict[str, Any]) -> int | None:
    """The job's own batch size: its --batch-size flag, else its DataLoader's."""
    found = script_flag("larger-batch", facts)
    if found is not None and isinstance(found[1], int) and found[1] > 0:
        return found[1]
    loaders = facts.get("dataloaders") or []
    size = loaders[0].get("batch_size") if loaders else None
    return size if isinstance(size, int) and size > 0 else None
