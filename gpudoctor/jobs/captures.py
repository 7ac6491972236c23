"""The probe's profiler captures read as GPU timelines (diagnosis/gpu_timeline.py): each
capture's trace, written into the doctor's run folder (probe/profile.py), is read and
analysed on a thread of its own, so that the doctor's loop never waits on a big trace.

The trace is then kept beside the session store (`traces/`, owner-only), for Perfetto or
`gpudoctor trace`: the run folder goes when the doctor ends. The folder is capped at
KEEP_BYTES: the oldest traces go first, and a trace bigger than the cap is not kept.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from gpudoctor.diagnosis.gpu_timeline import RankTimeline, analyse
from gpudoctor.sources import kineto

KEEP_BYTES = 512 << 20


# At a job's end, a capture's trace still being read is waited for this long.
CAPTURE_WAIT_S = 30.0


def keep(trace: Path, folder: Path, name: str) -> Path | None:
    """The trace moved into `folder` as `name`, the folder kept under KEEP_BYTES."""
    try:
        size = trace.stat().st_size
        if size > KEEP_BYTES:
            return None
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        kept = sorted(folder.glob("*.json.gz"), key=lambda f: f.stat().st_mtime)
        total = sum(f.stat().st_size for f in kept)
        while kept and total + size > KEEP_BYTES:
            old = kept.pop(0)
            total -= old.stat().st_size
            old.unlink()
        target = folder / name
        shutil.move(str(trace), target)
        with contextlib.suppress(OSError):
            os.chmod(target, 0o600)
        return target
    except OSError:
        return None


def _read(path: str) -> RankTimeline | None:
    try:
        return analyse(kineto.read(Path(path)))
    except (kineto.TraceError, OSError):
        return None  # the capture's table is in the report still; its timeline is not


class Captures:
    def __init__(self) -> None:
        self._seen: set[tuple[int, Any, str]] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[tuple[int, Future[RankTimeline | None]]] = []

    def poll(self, facts: dict[int, dict[str, Any]]) -> list[tuple[int, RankTimeline]]:
        """New captures (from the processes' "profile" facts) started; those analysed
        since the last poll returned, with the process they came from."""
        for pid, f in facts.items():
            profile = f.get("profile")
            if not isinstance(profile, dict) or not isinstance(profile.get("trace"), str):
                continue
            key = (pid, profile.get("capture"), profile["trace"])
            if key in self._seen:
                continue
            self._seen.add(key)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="gpudoctor-trace")
            self._pending.append((pid, self._pool.submit(_read, profile["trace"])))
        done, waiting = [], []
        for pid, future in self._pending:
            if not future.done():
                waiting.append((pid, future))
            elif (result := future.result()) is not None:
                done.append((pid, result))
        self._pending = waiting
        return done

    def finish(
        self, facts: dict[int, dict[str, Any]], timeout_s: float
    ) -> list[tuple[int, RankTimeline]]:
        """At the job's end: the captures still being read, waited for up to timeout_s
        (the run folder that holds them goes when the doctor closes)."""
        found = self.poll(facts)  # those read since the last poll are among them
        wait([f for _, f in self._pending], timeout=timeout_s)
        found += self.poll(facts)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        return found
