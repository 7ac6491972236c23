"""Which lines of the user's own code the job's time goes to, read from outside with
py-spy (issue 20): the main thread's time outside the model (waiting for data, input
code, sleeping) and the DataLoader workers' time (a decode, a resize, a tokenizer).

Each chunk, two py-spy runs sample the job side by side, non-blocking, following its
child processes: one takes every thread whatever its state (`--idle`), the other only
threads that are on a CPU. A line's share of the time is its share in the first; the
part of it that was busy is its share in the second; the rest was idle (sleeping,
waiting on a lock, a queue, a socket or the disk). Together they sample at 20 Hz, the
rate DESIGN.md section 7 allows (py-spy at 100 Hz non-blocking cost the job +5.6%).

A sample is put on the innermost frame in the user's code: torch, the standard library,
site-packages and the doctor's own probe are folded into the caller that called them.
In a worker, only the frames below torch's worker loop count (above it is the fork
point of the main program, not the worker's work); a worker waiting for its next index
has no user frame and counts as waiting.

Parsing is pure (tests feed it py-spy's real output); `HotspotSampler` owns the py-spy
processes and never waits on them.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import gpudoctor
from gpudoctor import run_folders
from gpudoctor.model import HotspotChunk, HotspotLine
from gpudoctor.sources.stacks import (
    _FRAME,
    _THREAD,
    _library,
    _spawn,
    classify,
    record_argv,
    stop_now,
    stop_when_due,
)

RATE_HZ = 10  # each of the two runs: 20 Hz together (DESIGN.md section 7: 20 Hz or less)
CHUNK_S = 10.0
# After the first chunks (a report soon after the start has lines to name), one chunk
# a minute: a week-long run's doctor spends a sixth of the time sampling.
FIRST_CHUNKS = 3
GAP_S = 50.0
MAX_TEXT = 120  # characters of a source line kept

_WORKER_LOOP = "/torch/utils/data/_utils/worker.py"
_OWN = str(Path(gpudoctor.__file__).resolve().parent) + os.sep

Key = tuple[str, str, int, str, str]  # where, file, line, function, class


def user_code(filename: str) -> bool:
    """A frame of the user's own code: not the standard library, an installed package,
    a frozen module or the doctor itself."""
    return not _library(filename) and not filename.startswith(_OWN)


def parse(text: str, main_pid: int) -> dict[Key, int]:
    """Samples by (where, file, line, function, class) in py-spy's `--format raw
    --threads --subprocesses --full-filenames` output: the main process's main thread
    ("main") and the main threads of its DataLoader workers ("workers"). A sample with
    no user frame has file "" (the worker waiting for work, or library code alone)."""
    out: dict[Key, int] = {}
    for row in text.splitlines():
        stack, _, count_text = row.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        key = _key(stack.split(";"), main_pid)
        if key is not None:
            out[key] = out.get(key, 0) + int(count_text)
    return out


def _key(parts: list[str], main_pid: int) -> Key | None:
    pid = main_pid
    i = 0
    while i < len(parts) and parts[i].startswith("process "):
        head = parts[i][len("process ") :].split(":", 1)[0]
        if head.isdigit():
            pid = int(head)
        i += 1
    if i >= len(parts):
        return None
    thread = _THREAD.match(parts[i])
    if thread is None:
        return None
    tid = int(thread["tid"])
    if tid != pid and thread["name"] != "MainThread":
        return None  # a helper thread (pin-memory, queue feeder, a logger's)
    frames: list[tuple[str, str, int]] = []
    for part in parts[i + 1 :]:
        m = _FRAME.match(part)
        if m is not None:
            frames.append((m["name"], m["file"], int(m["line"])))
    if pid == main_pid:
        where = "main"
        cls = classify([(name, file) for name, file, _ in frames])
    else:
        loop = [k for k, (_, file, _) in enumerate(frames) if file.endswith(_WORKER_LOOP)]
        if not loop:
            return None  # a child that is not a DataLoader worker (a compile worker ...)
        frames = frames[loop[-1] + 1 :]
        where, cls = "workers", "worker"
    for name, file, line in reversed(frames):
        if user_code(file):
            return (where, file, line, name, cls)
    return (where, "", 0, "", cls)


def chunk_of(
    all_text: str,
    busy_text: str,
    pid: int,
    t_start: int,
    t_end: int,
    rate_hz: float = RATE_HZ,
    busy_rate_hz: float = RATE_HZ,
    source: Any = None,
) -> HotspotChunk | None:
    """One chunk from the two runs' outputs (None when the main thread has no sample).
    `source(file, line)` gives a line's text (linecache's by default)."""
    every, busy = parse(all_text, pid), parse(busy_text, pid)
    main_total = sum(n for k, n in every.items() if k[0] == "main")
    if not main_total:
        return None
    workers_total = sum(n for k, n in every.items() if k[0] == "workers")
    read = source or _source_line
    lines: list[HotspotLine] = []
    for key in sorted(set(every) | set(busy)):
        where, file, line, function, cls = key
        text = read(file, line) if file else ""
        lines.append((where, file, line, function, cls, every.get(key, 0), busy.get(key, 0), text))
    return HotspotChunk(
        t_start_mono_ns=t_start,
        t_end_mono_ns=t_end,
        pid=pid,
        rate_hz=rate_hz,
        busy_rate_hz=busy_rate_hz,
        main_total=main_total,
        workers_total=workers_total,
        lines=tuple(lines),
    )


def _source_line(file: str, line: int) -> str:
    """The line's text, or "" where it cannot be read (a name py-spy read while the
    process changed it, with a null byte in it, made linecache raise: the doctor died)."""
    try:
        text = linecache.getline(file, line).strip()
    except (ValueError, OSError):
        return ""
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


# -- the sampler -------------------------------------------------------------------------------


class HotspotSampler:
    """py-spy's two runs over the job in chunks, once `begin()` is called (the job is in
    its steady steps): `poll()` returns a finished chunk, if any, and starts the next
    when it is due. Never blocks: the py-spy processes are polled, not waited on."""

    def __init__(
        self,
        py_spy: str,
        rate_hz: int = RATE_HZ,
        chunk_s: float = CHUNK_S,
        first_chunks: int = FIRST_CHUNKS,
        gap_s: float = GAP_S,
    ) -> None:
        self.py_spy = py_spy
        self.rate_hz = rate_hz
        self.chunk_s = chunk_s
        self.first_chunks = first_chunks
        self.gap_s = gap_s
        self.pid: int | None = None
        self._dir: str | None = None
        self._runs: list[subprocess.Popen[bytes]] = []
        self._t_start = 0
        self._n = 0
        self._next = 0.0  # time.monotonic() when the next chunk is due

    @property
    def started(self) -> bool:
        return self.pid is not None

    def begin(self, pid: int) -> None:
        """Sample this process (and its workers) from now on."""
        if self.pid is None:
            self.pid = pid
            self._dir = run_folders.make("stacks")
            self._next = time.monotonic()

    def _path(self, name: str) -> str:
        assert self._dir is not None
        return os.path.join(self._dir, f"{name}-{self._n}")

    def _start(self) -> None:
        assert self.pid is not None
        self._n += 1
        self._t_start = time.monotonic_ns()
        self._runs = []
        for name, idle in (("all", True), ("busy", False)):
            argv = record_argv(
                self.py_spy, self.pid, self.rate_hz, self.chunk_s, self._path(name), idle, True
            )
            self._runs.append(_spawn(argv, None, yielding=True))

    def poll(self) -> HotspotChunk | None:
        """The chunk that just finished, or None; starts the next one when due."""
        if self.pid is None:
            return None
        chunk = None
        if self._runs:
            stop_when_due(self._runs, self._t_start, self.chunk_s)
            if any(run.poll() is None for run in self._runs):
                return None
            chunk = self._collect()
            self._runs = []
            self._next = time.monotonic() + (self.gap_s if self._n >= self.first_chunks else 0)
        if time.monotonic() >= self._next:
            self._start()
        return chunk

    def finish(self) -> HotspotChunk | None:
        """The chunk under way as the run ends: py-spy stops by itself when the job has
        exited, or on SIGINT, writing what it sampled; collected rather than lost (a run
        shorter than a chunk had no lines named). Waits at most STOP_WAIT_S for each."""
        if not self._runs or not stop_now(self._runs):
            return None
        chunk = self._collect()
        self._runs = []
        return chunk

    def _collect(self) -> HotspotChunk | None:
        assert self.pid is not None
        t_end = time.monotonic_ns()
        texts = []
        for name in ("all", "busy"):
            try:
                texts.append(Path(self._path(name)).read_text(encoding="utf-8", errors="replace"))
            except OSError:
                texts.append("")
            with contextlib.suppress(OSError):
                os.unlink(self._path(name))
        # Without the busy run's samples every line would read as idle: a chunk needs
        # both runs to have finished well (the job ending midway fails them).
        if any(run.returncode != 0 for run in self._runs):
            return None
        return chunk_of(texts[0], texts[1], self.pid, self._t_start, t_end, self.rate_hz)

    def close(self) -> None:
        for run in self._runs:
            if run.poll() is None:
                run.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    run.wait(timeout=2)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
