"""What a watched process's main thread is doing, read from outside it with py-spy.

Watch mode injects no code, so there are no step timings: instead py-spy samples the
main thread's Python stack (non-blocking, 20 Hz: DESIGN.md section 7 measured py-spy at
100 Hz costing the job +15% blocking and +5.6% non-blocking) in chunks of a few seconds,
and each sample is classed by the frames it is in (DataLoader, other input waits,
forward, backward, optimizer, other). Twice a chunk, a `py-spy dump --locals` reads the
training loop's integer counters (`step`, `i`, ...); two readings give a step rate.

The parsing functions are pure (tests feed them py-spy's real output); `StackSampler`
owns the py-spy processes and never waits on them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sysconfig
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpudoctor import run_folders
from gpudoctor.i18n import _
from gpudoctor.model import COUNTER_NAMES, EPOCH_KEY, EPOCH_NAMES, HotspotChunk, StackChunk

RATE_HZ = 20  # DESIGN.md section 7: non-blocking, at 20 Hz or less
# With the lines of the user's code named (sources/hotspots.py), a second run samples
# only the threads on a CPU beside this one: 15 + 5 Hz, the same 20 Hz in all.
LINES_RATE_HZ = 15
BUSY_RATE_HZ = 5
# A py-spy run costs ~20 ms of CPU to start whatever its length, and the counters'
# dump ~25 ms: the first chunk is short, so the first finding lands inside the 10 s
# budget (DESIGN.md section 7); the others are longer, which halves those fixed costs.
FIRST_CHUNK_S = 5.0
CHUNK_S = 10.0
DUMP_TRIES = 3  # tries of each reading of the loop counters, when one fails
# The chunk's last reading of the loop counters is started this long before its end: a
# poll comes each second, and a dump takes ~25 ms (so it is read before the chunk ends).
LAST_READ_LEAD_S = 1.5
# py-spy's --duration is a count of samples (rate x seconds), not a time: on a busy
# machine, where it falls behind, a 5 s chunk took over 8 s (74 of its 75 samples taken
# at 8 s), and a 20 s watch in a busy CI run counted one chunk. Chunks end on the
# doctor's clock instead: py-spy is sent SIGINT when its time is up (on which it writes
# what it sampled and exits, in ~0.1 s measured); --duration is only a backstop.
BACKSTOP = 3  # --duration is this many times the chunk's length
# As a watch ends, the chunk under way is stopped so and collected; a py-spy that has
# not stopped in this long is killed and its chunk lost.
STOP_WAIT_S = 2.0
CLASSES = ("loader", "input", "forward", "backward", "optimizer", "other")

# Frames that mark what a sample is in, first match wins (a DataLoader fetch can run
# model-free code; a forward never runs inside the loader).
_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # a module being imported is not a training step's work, wherever it is imported
    # from: the first optimizer step imports torch._dynamo (~1.2 s), which a chunk taken
    # as the job starts up counted as the optimizer's share
    ("other", ("<frozen importlib._bootstrap",)),
    ("loader", ("/torch/utils/data/",)),
    (
        "input",
        (
            "/queue.py",
            "/multiprocessing/queues.py",
            "/multiprocessing/connection.py",
            "/PIL/",
            "/numpy/lib/npyio.py",
            "/numpy/lib/_npyio_impl.py",
            "/h5py/",
            "/pyarrow/",
            "/torchvision/io/",
        ),
    ),
    ("backward", ("/torch/autograd/", "/torch/_tensor.py")),
    ("optimizer", ("/torch/optim/",)),
    ("forward", ("/torch/nn/modules/module.py",)),
)
# `torch/_tensor.py` also holds `.item()` and the like: only its backward is backward.
_TENSOR_BACKWARD = "Tensor.backward"

_INT = re.compile(r"^-?\d+$")
_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>.*):(?P<line>\d+)\)$")
_THREAD = re.compile(r"^thread \((?P<tid>\d+)\)(?:: (?P<name>.*))?$")


class AttachError(Exception):
    """The process cannot be sampled; the message is one line with the fix."""


# -- pure parsing ----------------------------------------------------------------------------


def classify(frames: list[tuple[str, str]]) -> str:
    """The class of one stack sample: frames as (function, filename), in any order."""
    for cls, marks in _MARKERS:
        for name, filename in frames:
            path = filename.replace("\\", "/")
            if any(m in path for m in marks):
                if path.endswith("/torch/_tensor.py") and name != _TENSOR_BACKWARD:
                    continue
                return cls
    return "other"


def parse_raw(text: str, main_tid: int) -> dict[str, int]:
    """Counts by class of the main thread's samples in py-spy's `--format raw --threads`
    output (one line per distinct stack: `thread (TID): NAME;frame;frame... COUNT`)."""
    counts = dict.fromkeys(CLASSES, 0)
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        parts = stack.split(";")
        process = main_tid
        while parts and parts[0].startswith("process "):  # --subprocesses: the process
            head = parts.pop(0)[len("process ") :].split(":", 1)[0]
            process = int(head) if head.isdigit() else -1
        if not parts or (process != main_tid and main_tid > 0):
            continue  # a child process (a DataLoader worker): not the main thread
        thread = _THREAD.match(parts[0])
        if thread is None:
            continue
        is_main = int(thread["tid"]) == main_tid or (
            thread["name"] == "MainThread" and main_tid <= 0
        )
        if not is_main:
            continue
        frames = []
        for part in parts[1:]:
            m = _FRAME.match(part)
            if m is not None:
                frames.append((m["name"], m["file"]))
        counts[classify(frames)] += int(count_text)
    return counts


def parse_counters(dump: Any, main_tid: int) -> dict[str, int]:
    """The training loop's integer counters in a `py-spy dump --json --locals` of the
    process: locals named like loop counters, in frames of the job's own code (not
    the standard library or site-packages), keyed "function:name"; with each, the epoch
    its frame or the nearest calling frame holds (EPOCH_NAMES), keyed "function:name@epoch"."""
    out: dict[str, int] = {}
    if not isinstance(dump, list):
        return out
    for thread in dump:
        if not isinstance(thread, dict):
            continue
        if int(thread.get("os_thread_id") or 0) != main_tid and thread.get("thread_name") != (
            "MainThread"
        ):
            continue
        # innermost frame first: a counter's epoch is its own frame's, else the nearest
        # caller's that has one
        waiting: list[str] = []  # counters of inner frames with no epoch yet
        for frame in thread.get("frames") or []:
            filename = str(frame.get("filename", ""))
            if _library(filename):
                continue
            epoch = None
            for local in frame.get("locals") or []:
                name = local.get("name")
                text = str(local.get("repr", ""))
                if not _INT.match(text):
                    continue
                if name in COUNTER_NAMES:
                    key = f"{frame.get('name')}:{name}"
                    out[key] = int(text)
                    waiting.append(key)
                elif name in EPOCH_NAMES and epoch is None:
                    epoch = int(text)
            if epoch is not None:
                for key in waiting:
                    out[key + EPOCH_KEY] = epoch
                waiting = []
        break
    return out


def _library(filename: str) -> bool:
    path = filename.replace("\\", "/")
    return (
        "/site-packages/" in path
        or "/dist-packages/" in path
        or "/lib/python3" in path
        or path.startswith("<")
    )


# -- finding and checking py-spy -------------------------------------------------------------


def find_py_spy() -> str | None:
    """py-spy on PATH, or beside this Python (a virtual environment not activated)."""
    scripts = sysconfig.get_path("scripts")
    search = os.environ.get("PATH", "")
    if scripts:
        search = search + os.pathsep + scripts if search else scripts
    return shutil.which("py-spy", path=search)


def check_access(py_spy: str, pid: int, tries: int = 3) -> None:
    """A `py-spy dump` of the process: raises AttachError with the fix when py-spy
    cannot read it (ptrace restrictions, another user's process, not Python). A
    non-blocking read can catch the interpreter mid-change ("Failed to get stack
    traces"): that is tried again."""
    text = ""
    for _try in range(tries):
        try:
            result = subprocess.run(
                [py_spy, "dump", "--pid", str(pid), "--nonblocking"],
                capture_output=True,
                text=True,
                timeout=20,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AttachError(_("py-spy could not be run ({why})").format(why=exc)) from None
        if result.returncode == 0:
            return
        text = result.stderr + result.stdout
        if "failed to get stack traces" not in text.lower():
            break
        time.sleep(0.2)
    raise AttachError(explain_failure(text, pid))


def explain_failure(text: str, pid: int) -> str:
    low = text.lower()
    if "permission denied" in low or "operation not permitted" in low:
        scope = ptrace_scope()
        if scope is not None and scope > 0:
            return _(
                "py-spy may not read pid {pid}: kernel.yama.ptrace_scope is {scope}, which "
                "forbids reading a process that is not your child; run "
                "`sudo sysctl kernel.yama.ptrace_scope=0`, or run gpudoctor with sudo"
            ).format(pid=pid, scope=scope)
        return _(
            "py-spy may not read pid {pid} (ptrace was refused: the process is not "
            "dumpable or belongs to another user); run gpudoctor as root (sudo), or in a "
            "container start it with --cap-add SYS_PTRACE"
        ).format(pid=pid)
    if "python version" in low or "python interpreter" in low or "not a python" in low:
        return _("pid {pid} is not a Python process that py-spy can read").format(pid=pid)
    first = next((line for line in text.splitlines() if line.strip()), _("no output"))
    return _("py-spy could not read pid {pid}: {first}").format(pid=pid, first=first.strip())


def ptrace_scope() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip())
    except (OSError, ValueError):
        return None


# -- the sampler -----------------------------------------------------------------------------


class _CounterReading:
    """One reading of the loop counters by a `py-spy dump --locals`, polled, never waited
    on: tried again (up to DUMP_TRIES) when a non-blocking dump caught the interpreter
    mid-change or found no counter (a job still starting up, not yet in its loop)."""

    def __init__(self, argv: list[str], path: str, main_tid: int) -> None:
        self.argv = argv
        self.path = path
        self.main_tid = main_tid
        self.counters: dict[str, int] = {}
        self.t_mono_ns: int | None = None
        self.tries = 0
        self._dump: subprocess.Popen[bytes] | None = None

    def poll(self) -> None:
        if self.counters or self.tries >= DUMP_TRIES:
            return
        dump = self._dump
        if dump is not None:
            if dump.poll() is None:
                return
            if dump.returncode == 0:
                self.counters = self._parse()
            if self.counters:
                return
        self.tries += 1
        with open(self.path, "wb") as out:
            self._dump = _spawn(self.argv, out)
        self.t_mono_ns = time.monotonic_ns()

    def finish(self) -> None:
        """At the chunk's end: a dump still running is stopped, one that ended is read."""
        dump = self._dump
        if dump is not None and not self.counters and dump.poll() == 0:
            self.counters = self._parse()
        self.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def close(self) -> None:
        if self._dump is not None and self._dump.poll() is None:
            self._dump.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._dump.wait(timeout=2)

    def _parse(self) -> dict[str, int]:
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(Path(self.path).read_text(encoding="utf-8"))
            return parse_counters(data, self.main_tid)
        return {}


class StackSampler:
    """Runs py-spy over one process in chunks; `poll()` returns a finished chunk, if any,
    and starts the next. Never blocks: py-spy's processes are polled, not waited on.

    The loop counters are read twice a chunk, as it starts and shortly before it ends,
    so one chunk gives a step rate (the first finding has one) and a job attached to
    while still starting up gets its rate from the first chunk's end."""

    def __init__(
        self,
        py_spy: str,
        pid: int,
        rate_hz: int = RATE_HZ,
        chunk_s: float = CHUNK_S,
        first_chunk_s: float = FIRST_CHUNK_S,
        lines: bool = True,
        rest_s: float = 0.0,
    ):
        self.py_spy = py_spy
        self.pid = pid
        # naming the lines: the workers sampled too, and a second run of busy threads
        self.lines = lines
        self.rate_hz = LINES_RATE_HZ if lines and rate_hz == RATE_HZ else rate_hz
        self.hotspots: HotspotChunk | None = None  # the last chunk's, when `lines`
        self._busy: subprocess.Popen[bytes] | None = None
        self.chunk_s = chunk_s
        self.first_chunk_s = first_chunk_s
        # between two chunks from the second on, nothing runs for this long (a node
        # agent's duty cycle)
        self.rest_s = rest_s
        self._resume_at = 0.0
        self.errors = 0
        self.last_error: str | None = None
        self._dir = run_folders.make("stacks")
        self._record: subprocess.Popen[bytes] | None = None
        self._t_start = 0
        self._seconds = first_chunk_s
        self._first: _CounterReading | None = None
        self._last: _CounterReading | None = None
        self._n = 0

    def _path(self, name: str) -> str:
        return os.path.join(self._dir, f"{name}-{self._n}")

    def _reading(self, name: str) -> _CounterReading:
        argv = [self.py_spy, "dump", "--pid", str(self.pid), "--nonblocking", "--full-filenames"]
        return _CounterReading([*argv, "--json", "--locals"], self._path(name), self.pid)

    def start(self) -> None:
        self._n += 1
        self._t_start = time.monotonic_ns()
        self._first = self._reading("dump")
        self._last = None
        seconds = self.first_chunk_s if self._n == 1 else self.chunk_s
        self._seconds = seconds
        if self.lines:
            busy = record_argv(
                self.py_spy, self.pid, BUSY_RATE_HZ, seconds, self._path("busy"), False, True
            )
            self._busy = _spawn(busy, None)
        record = record_argv(
            self.py_spy, self.pid, self.rate_hz, seconds, self._path("raw"), True, self.lines
        )
        self._record = _spawn(record, None)

    def poll(self) -> StackChunk | None:
        """The chunk that just finished (and the next one started), or None."""
        if self._record is None:
            if time.monotonic() >= self._resume_at:
                self.start()
            return None
        self._read_counters()
        stop_when_due([self._record, self._busy], self._t_start, self._seconds)
        if self._record.poll() is None or (self._busy is not None and self._busy.poll() is None):
            return None
        chunk = self._collect()
        # the next chunk after the rest; none after the first: its first reading pairs
        # with the first chunk's, for a step rate within a chunk's length of the start
        if self.rest_s > 0 and self._n >= 2:
            self._record = self._busy = None
            self._resume_at = time.monotonic() + self.rest_s
        else:
            self.start()
        return chunk

    def finish(self) -> StackChunk | None:
        """The chunk under way, cut short as the watch ends (the doctor leaves, its time
        is up, or the job ended): without this the seconds since the last whole chunk
        (up to CHUNK_S) were lost, most of a short watch. Waits at most STOP_WAIT_S for
        each py-spy; `close()` still follows."""
        if self._record is None:
            return None
        stop_now([self._record, self._busy])
        if self._record.poll() is None:
            return None
        return self._collect()

    def _read_counters(self) -> None:
        """The first reading from the poll after the chunk started (not as py-spy's
        record attaches); the last from the poll that leaves LAST_READ_LEAD_S to the
        chunk's end (the doctor polls once a second)."""
        assert self._first is not None
        self._first.poll()
        elapsed_s = (time.monotonic_ns() - self._t_start) / 1e9
        if self._last is None and elapsed_s >= self._seconds - LAST_READ_LEAD_S:
            self._last = self._reading("last")
        if self._last is not None:
            self._last.poll()

    def _collect(self) -> StackChunk | None:
        assert self._record is not None
        t_end = time.monotonic_ns()
        try:
            text = Path(self._path("raw")).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        first, last = self._first, self._last
        assert first is not None
        first.finish()
        if last is not None:
            last.finish()
        from gpudoctor.sources.hotspots import chunk_of  # it parses with this module's

        self.hotspots = None
        if self._busy is not None and self._busy.returncode == 0 and self._record.returncode == 0:
            with contextlib.suppress(OSError):
                busy = Path(self._path("busy")).read_text(encoding="utf-8", errors="replace")
                self.hotspots = chunk_of(
                    text, busy, self.pid, self._t_start, t_end, self.rate_hz, BUSY_RATE_HZ
                )
        for name in ("raw", "busy"):
            with contextlib.suppress(OSError):
                os.unlink(self._path(name))
        samples = parse_raw(text, self.pid)
        if self._record.returncode != 0 or not sum(samples.values()):
            self.errors += 1
            self.last_error = f"py-spy exited with {self._record.returncode}"
            return None
        return StackChunk(
            t_start_mono_ns=self._t_start,
            t_end_mono_ns=t_end,
            samples=samples,
            counters=first.counters,
            counters_t_mono_ns=first.t_mono_ns if first.counters else None,
            last_counters=last.counters if last is not None else {},
            last_counters_t_mono_ns=last.t_mono_ns if last is not None and last.counters else None,
        )

    def close(self) -> None:
        for reading in (self._first, self._last):
            if reading is not None:
                reading.close()
        for proc in (self._record, self._busy):
            if proc is not None and proc.poll() is None:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=2)
        shutil.rmtree(self._dir, ignore_errors=True)


def stop_when_due(
    runs: Sequence[subprocess.Popen[bytes] | None], t_start_ns: int, seconds: float
) -> None:
    """py-spy's runs still sampling `seconds` after `t_start_ns` (time.monotonic_ns) are
    told to stop (SIGINT: py-spy's Ctrl-C, on which it writes its samples and exits);
    not waited for. Told again at each poll until they have: that is harmless."""
    if time.monotonic_ns() - t_start_ns < seconds * 1e9:
        return
    for run in runs:
        if run is not None and run.poll() is None:
            with contextlib.suppress(OSError):
                run.send_signal(signal.SIGINT)


def stop_now(runs: Sequence[subprocess.Popen[bytes] | None]) -> bool:
    """py-spy's runs told to stop now and waited for, at most STOP_WAIT_S each: whether
    all of them have ended."""
    live = [run for run in runs if run is not None]
    stop_when_due(live, 0, 0.0)
    for run in live:
        with contextlib.suppress(subprocess.TimeoutExpired):
            run.wait(timeout=STOP_WAIT_S)
    return all(run.poll() is not None for run in live)


def record_argv(
    py_spy: str, pid: int, rate_hz: int, seconds: float, output: str, idle: bool, children: bool
) -> list[str]:
    """One `py-spy record` of the process, non-blocking, raw output with thread ids:
    every thread whatever its state (`idle`) or only those on a CPU, and its child
    processes too (`children`: DataLoader workers). It is meant to be stopped by
    `stop_when_due` after `seconds`; its own --duration is a backstop."""
    argv = [py_spy, "record", "--pid", str(pid), "--nonblocking", "--full-filenames"]
    argv += ["--rate", str(rate_hz), "--threads", "--format", "raw"]
    argv += ["--duration", str(max(1, round(seconds * BACKSTOP))), "--output", output]
    return argv + (["--idle"] if idle else []) + (["--subprocesses"] if children else [])


def _spawn(argv: list[str], stdout: Any, yielding: bool = False) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=stdout if stdout is not None else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C at the doctor's terminal is the doctor's to handle
        preexec_fn=_yield_cpu if yielding else None,
    )


def _yield_cpu() -> None:
    """In the py-spy child, before it runs: the lowest CPU priority, for the process and
    for its session's autogroup (a new session is a scheduling group of its own, which
    the process's nice alone does not lower). Raising either needs no privilege."""
    with contextlib.suppress(OSError):
        os.nice(19)
    with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as group:
        group.write("19")
