"""The batch-size finder: the guide's loop (double the batch until it runs out of
memory, then back off), made safe: every try is a fresh child process under the
doctor, out-of-memory is recognised by the probe (by class, then by the allocators'
messages), a size only "fits" with a safety margin below the memory limit, sizes stop
at a cap, and the search stops doubling once throughput stops growing.

The search itself (`search`) is pure: it asks `try_size` for each size, so the tests can
drive it with real runs and its order is plain to read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from gpudoctor.i18n import _

# A size fits only when its peak memory stays below this share of the limit (GPU
# memory, or --max-memory): the next batch with longer sequences or a fragmented
# allocator needs the room. This project's choice (no published anchor).
SAFETY_MARGIN = 0.10
DEFAULT_CAP = 4096
# Doubling stops when a doubled batch adds less than this much throughput, twice.
PLATEAU_GAIN = 1.05
# Bisection stops when the gap between a fitting and a failing size is this small.
BISECT_RESOLUTION = 0.125


@dataclass(frozen=True)
class Try:
    batch_size: int
    fits: bool
    reason: str  # "fits" | "oom" | "over memory cap" | "over safety margin" | "crashed ..."
    samples_per_s: float | None
    peak_bytes: int | None

    def as_dict(self) -> dict[str, object]:
        return {
            "batch_size": self.batch_size,
            "fits": self.fits,
            "reason": self.reason,
            "samples_per_s": round(self.samples_per_s, 2) if self.samples_per_s else None,
            "peak_bytes": self.peak_bytes,
        }


@dataclass(frozen=True)
class Found:
    tries: tuple[Try, ...]
    largest: int | None  # the largest size that fits
    fastest: int | None  # the size with the most samples/s among those that fit
    stopped_by: str  # why the doubling stopped

    def as_dict(self) -> dict[str, object]:
        return {
            "largest_fitting": self.largest,
            "fastest": self.fastest,
            "stopped_by": self.stopped_by,
            "tries": [t.as_dict() for t in self.tries],
        }


CRASHED = re.compile(r"crashed \(exit code (-?\d+)\)")


def reason_words(reason: str) -> str:
    """A try's result (Try.reason, a value of the report) in the person's language."""
    crashed = CRASHED.fullmatch(reason)
    if crashed:
        return _("crashed (exit code {code})").format(code=crashed.group(1))
    return {
        "fits": _("fits"),
        "oom": _("oom"),
        "over memory cap": _("over memory cap"),
        "over safety margin": _("over safety margin"),
    }.get(reason, reason)


def search(start: int, try_size: Callable[[int], Try], cap: int = DEFAULT_CAP) -> Found:
    """Double from `start` until a size fails, the cap, or a throughput plateau; then
    bisect between the largest that fits and the smallest that fails."""
    tries: list[Try] = []

    def attempt(size: int) -> Try:
        t = try_size(size)
        tries.append(t)
        return t

    first = attempt(max(1, min(start, cap)))
    if not first.fits:
        # the current size does not fit: halve until one does
        size = first.batch_size
        while size > 1 and not tries[-1].fits:
            size = max(1, size // 2)
            attempt(size)
        good = [t for t in tries if t.fits]
        if not good:
            return Found(
                tuple(tries), None, None, _("even batch size {size} does not fit").format(size=size)
            )
        bad_above = min(t.batch_size for t in tries if not t.fits)
        _bisect(max(t.batch_size for t in good), bad_above, attempt)
        return _found(tries, _("the current batch size does not fit"))
    stalls = 0
    stopped_by = ""
    while True:
        last = tries[-1]
        if last.batch_size >= cap:
            stopped_by = _("the cap ({cap})").format(cap=cap)
            break
        nxt = attempt(min(cap, last.batch_size * 2))
        if not nxt.fits:
            stopped_by = _("{reason} at batch size {size}").format(
                reason=reason_words(nxt.reason), size=nxt.batch_size
            )
            _bisect(last.batch_size, nxt.batch_size, attempt)
            break
        gain = (nxt.samples_per_s or 0) / (last.samples_per_s or 1)
        stalls = stalls + 1 if gain < PLATEAU_GAIN else 0
        if stalls >= 2:
            stopped_by = _("throughput stopped growing")
            break
    return _found(tries, stopped_by)


def _bisect(good: int, bad: int, attempt: Callable[[int], Try]) -> None:
    while bad - good > max(1, int(good * BISECT_RESOLUTION)):
        mid = (good + bad) // 2
        if attempt(mid).fits:
            good = mid
        else:
            bad = mid


def _found(tries: list[Try], stopped_by: str) -> Found:
    fitting = [t for t in tries if t.fits]
    largest = max((t.batch_size for t in fitting), default=None)
    fastest = max(fitting, key=lambda t: t.samples_per_s or 0.0).batch_size if fitting else None
    return Found(tuple(tries), largest, fastest, stopped_by)


def parse_size(text: str) -> int:
    """'4GiB', '512M', '2g', '1073741824' -> bytes (binary units)."""
    units = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    number, unit = (t[:-1], t[-1]) if t and t[-1] in units and t[-1] != "" else (t, "")
    try:
        value = float(number)
    except ValueError:
        raise ValueError(_("not a size: {text!r} (like 4GiB or 512M)").format(text=text)) from None
    if value <= 0:
        raise ValueError(_("must be positive: {text!r}").format(text=text))
    return int(value * units[unit])
