"""The probe's agent: what the hook groups share.

It owns the channel to the doctor, the step clock, the counter page, the facts, the
errors and limits, the flush thread, and what a forked child starts with. The hooks
themselves live in one small class per group (models.py, loader.py, autograd.py,
optim.py, cuda.py, args.py), attached once torch is imported (or, for argparse, at
start-up), each with its own state.

Promises (each has a test): it never blocks the job (a daemon thread sends batches
with non-blocking datagrams; buffers are bounded, overflow is dropped and counted); it
never changes the job's results (hooks observe and return what they were given); if
the doctor dies, the sends fail and the probe goes dormant; its own failures are
swallowed, reported once, and switch the failing group off.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from . import ENV_DOCTOR_PID, ENV_DOCTOR_START, ENV_OVERRIDES, ENV_SOCKET, protocol
from .channel import FULL, SENT, Channel
from .clock import END_NAMES, StepClock
from .flops import FlopCount
from .page import LAST_END, ROWS_DROPPED, ROWS_SENT, STEPS, CounterPage
from .profile import Profiling

# Twice a second: the doctor reads once a second. At 0.25 s a fast loop's doctor took in
# twice the messages, each with its fixed cost (a wake-up, a store insert, a rollup
# merged): 0.75-1.03% of a core against 0.66-0.75% (bench/RESULTS.md, 2026-12-07).
FLUSH_INTERVAL_S = 0.5

OOM_CLASS_NAMES = ("OutOfMemoryError",)
OOM_MESSAGES = (
    "CUDA out of memory",
    "HIP out of memory",
    "XPU out of memory",
    "MPS backend out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input",
    "DefaultCPUAllocator: can't allocate memory",
    "DefaultCPUAllocator: not enough memory",
)

now = time.monotonic_ns


def is_oom(exc: BaseException) -> bool:
    """Out-of-memory: by class first, then by the allocators' messages."""
    if isinstance(exc, MemoryError):
        return True
    if any(cls.__name__ in OOM_CLASS_NAMES for cls in type(exc).__mro__):
        return True
    text = str(exc)
    return any(pattern in text for pattern in OOM_MESSAGES)


class Group(Protocol):
    """A group of hooks: installed once, switched off for good after a failure of its
    own, and asked for its facts at each flush (from the flush thread)."""

    name: str

    def disable(self) -> None: ...

    def facts(self) -> dict[str, Any]: ...


class Agent:
    def __init__(self, socket_path: str, doctor: int | None = None, injected: bool = False) -> None:
        self.socket_path = socket_path
        self.active = True
        # loaded into a running process by `gpudoctor watch --inject` (injected.py): it
        # removes itself when its doctor leaves or is gone, where a launched one stays
        # dormant (the job was started with it)
        self.injected = injected
        self.overrides = {} if injected else read_overrides()
        self.profiling = Profiling()
        self.flops = FlopCount()
        self.torch: Any = None
        self.lock = threading.Lock()
        self.clock = StepClock()
        self.channel = (
            Channel(socket_path, doctor)
            if injected
            else Channel(socket_path, doctor_pid(), _env_int(ENV_DOCTOR_START))
        )
        self.page = CounterPage(os.path.dirname(socket_path))
        self.groups: list[Group] = []
        # The hooks a counted step does without (see clock.py, sampling): each part is
        # (on, off), registered by the group that owns it; kept across a fork.
        self.detail = True
        self.detail_parts: list[tuple[Callable[[], None], Callable[[], None]]] = []
        # the models group's look for new root modules (cheap when nothing is new)
        self.discover: Callable[[], None] = lambda: None
        # the ids of the parameters of the optimizers seen stepping (the optimizer group's;
        # empty while none has stepped, or without that group)
        self.stepped_parameters: Callable[[], set[int]] = set
        # after each backward of a job that has not stepped an optimizer (housekeeping.py)
        self.after_backward: Callable[[], None] = lambda: None
        # what the overrides asked of each root module as the model hooks find it
        # (numerics.py: autocast, compile)
        self.root_callbacks: list[Callable[[Any], None]] = []
        # an injected agent: asked at each flush whether to leave (injected.py); True
        # when it has removed itself
        self.leaving: Callable[[], bool] | None = None
        self.leave_asked_ns = 0  # when the doctor asked it to leave (injected.py)
        self._fresh()

    def _fresh(self) -> None:
        self.facts: dict[str, Any] = {}
        self.changed_facts: set[str] = set()  # sent at the next flush (only those)
        self.reported_errors: set[str] = set()
        self.unsent_errors: list[str] = []
        self.limits: list[str] = []
        self.flusher: threading.Thread | None = None
        self.seq = 0
        self.ended = False
        # counted steps (sampling): their ends, how many more to count, and by when
        self.counted_ends: list[int] = []
        self.countdown = 0
        self.deadline = 0
        self.optimizer_steps = 0
        self.backwards = 0

    # -- bookkeeping shared by the groups ----------------------------------------------------

    def fact(self, key: str, value: Any) -> None:
        if self.facts.get(key) != value:
            self.facts[key] = value
            self.changed_facts.add(key)

    def error(self, where: str, exc: BaseException, group: Group | None = None) -> None:
        """A failure of ours: swallowed, reported once per place; the group it came from
        is switched off (it does less from now on, the job goes on)."""
        off = ""
        if group is not None:
            off = f" ({group.name} hooks switched off)"
            try:
                group.disable()
            except Exception as inner:
                off = f" ({group.name} hooks: switching them off failed too: {inner})"
        if where not in self.reported_errors:
            self.reported_errors.add(where)
            self.unsent_errors.append(f"{where}: {type(exc).__name__}: {exc}{off}"[:300])
            self.touch()

    def limit(self, text: str) -> None:
        """Something the probe does not measure, or measures less well, and why."""
        if text not in self.limits:
            self.limits.append(text)
            self.fact("limits", list(self.limits))

    def measure_next_step(self, detail: bool) -> None:
        """Switch the per-step hooks on for a step measured in detail, off for a counted
        one: off, they are not there at all (the originals are back in place), so a
        counted step runs only the optimizer's step wrapper and the root modules' call
        patch, each returning at once. Switching is a few attribute assignments:
        registering hooks anew costs tens of microseconds."""
        if detail == self.detail:
            return
        self.detail = detail
        for on, off in self.detail_parts:
            try:
                on() if detail else off()
            except Exception as exc:
                self.error("sampling", exc)

    def end_counting(self) -> None:
        """The counted steps are over: hand their ends to the clock, measure the next."""
        ends, self.counted_ends = self.counted_ends, []
        self.clock.counted(ends)
        self.measure_next_step(True)

    def note_steps(self) -> None:
        """Mirror the clock's count in the counter page (on steps measured in detail)."""
        values = self.page.values
        values[STEPS] = self.clock.ends_seen + len(self.counted_ends)
        if self.clock.last_end is not None:
            values[LAST_END] = self.clock.last_end

    def touch(self) -> None:
        """First activity starts the flush thread and maps the counter page (processes
        that never train send nothing)."""
        if self.flusher is None and self.active:
            self.page.open()
            self.flusher = threading.Thread(
                target=self._flush_loop, name="gpudoctor-probe", daemon=True
            )
            self.flusher.start()

    # -- sending ----------------------------------------------------------------------------

    def _flush_loop(self) -> None:
        while self.active:
            time.sleep(FLUSH_INTERVAL_S)
            if self.injected and self.leaving is not None and self.leaving():
                return  # removed (injected.py): nothing of the probe's runs any more
            self.flush()
            if self.channel.dead:
                self.go_dormant()

    def go_dormant(self) -> None:
        """The doctor is gone: the per-step hooks come out (the originals back in place)
        and the others return at once from now on."""
        self.active = False
        self.measure_next_step(False)

    def flush(self, end: dict[str, Any] | None = None) -> None:
        if not self.lock.acquire(timeout=1.0):
            return
        try:
            self._flush_locked(end)
        except Exception as exc:
            self.error("flush", exc)
        finally:
            self.lock.release()

    def _flush_locked(self, end: dict[str, Any] | None) -> None:
        if self.channel.dead:
            return
        self.page.reopen_if_gone()
        for group in list(self.groups):  # each on its own: whatever breaks, the rest goes
            try:
                for key, value in group.facts().items():
                    self.fact(key, value)
            except Exception as exc:
                self.error(f"{group.name}-facts", exc)
        self.fact("optimizer_steps", self.optimizer_steps)
        self.fact("step_mode", END_NAMES[self.clock.level])
        ends = self.counted_ends  # the training thread may swap it for a new list
        ledger = self.clock.ledger(ends[-1] if ends else None)
        if ledger is not None:
            self.fact("ledger_ns", ledger)
        values = self.page.values
        # Rows go a message at a time, taken as they go: when the doctor's queue is full
        # (it is stalled), one message's rows go back and the rest never moved, so a
        # long stall costs each flush one message, not the whole buffer.
        batches = max(1, -(-self.clock.buffered // protocol.MAX_STEPS_PER_MESSAGE))
        for n in range(batches):
            try:
                chunk = self.clock.take(protocol.MAX_STEPS_PER_MESSAGE)
            except Exception as exc:
                chunk = []
                self.error("take", exc)
            message: dict[str, Any] = {"v": protocol.VERSION, "pid": os.getpid(), "seq": self.seq}
            if chunk:  # a step only counted and timed: its first three fields
                message["steps"] = protocol.sent_rows(chunk)
            if n == batches - 1:
                if self.changed_facts:
                    changed, self.changed_facts = self.changed_facts, set()
                    message["facts"] = {k: self.facts[k] for k in changed if k in self.facts}
                gauges = self.cuda_gauges()
                if gauges:
                    message["gauges"] = gauges
                if self.unsent_errors:
                    message["errors"], self.unsent_errors = self.unsent_errors, []
                if end is not None:
                    message["end"] = end
            if len(message) == 3:
                continue  # nothing to say
            # the cumulative counts: the doctor sees every gap, whatever was lost on the way
            dropped = int(self.clock.dropped) + self.channel.dropped_rows
            message["counts"] = {
                "steps": int(values[STEPS]),
                "rows": self.channel.rows_sent + len(chunk),
                "dropped": dropped,
            }
            if dropped:
                message["dropped"] = dropped
            status = self.channel.send(message, rows=len(chunk))
            if status == SENT:
                self.seq += 1
                continue
            if status == FULL:
                # the doctor is stalled or busy: the rows wait in the bounded buffer for
                # the next flush; facts and errors go again (sent only when they change)
                self.channel.dropped_rows += self.clock.give_back(chunk)
                self.changed_facts.update(message.get("facts", ()))
                self.unsent_errors[:0] = message.get("errors", [])
            break
        values[ROWS_SENT] = self.channel.rows_sent
        values[ROWS_DROPPED] = int(self.clock.dropped) + self.channel.dropped_rows

    def cuda_gauges(self) -> dict[str, Any]:
        """The CUDA caching allocator's gauges, on a job that uses CUDA."""
        torch = self.torch
        if torch is None or not self.facts.get("cuda_initialized"):
            return {}
        try:
            if not torch.cuda.is_initialized():
                return {}
            # the device the model is on (`model.to("cuda:1")` without set_device), else
            # the current one
            device = str(self.facts.get("device") or "")
            on_model = device.startswith("cuda:") and device[5:].isdigit()
            dev = int(device[5:]) if on_model else torch.cuda.current_device()
            stats = torch.cuda.memory_stats(dev)
            if self.facts.get("cuda_device_index") != dev:
                props = torch.cuda.get_device_properties(dev)
                self.fact("cuda_device_index", dev)
                self.fact("cuda_total_bytes", int(props.total_memory))
                self.fact("cuda_capability", [int(props.major), int(props.minor)])
                self.fact("cuda_device_name", str(props.name))
                uuid = getattr(props, "uuid", None)  # which NVML GPU it is (devices.py)
                if uuid is not None:
                    self.fact("cuda_device_uuid", str(uuid))
            return {
                "t": now(),
                "allocated": int(stats.get("allocated_bytes.all.current", 0)),
                "reserved": int(stats.get("reserved_bytes.all.current", 0)),
                "peak_reserved": int(stats.get("reserved_bytes.all.peak", 0)),
                "alloc_retries": int(stats.get("num_alloc_retries", 0)),
                "ooms": int(stats.get("num_ooms", 0)),
            }
        except Exception as exc:
            self.error("cuda-memory", exc)
            return {}

    # -- the end -------------------------------------------------------------------------

    def at_exit(self) -> None:
        if self.ended:
            return
        self.ended = True
        # A SIGINT now (a doctor stopping a job that is already ending, a Ctrl-C held
        # down) would raise KeyboardInterrupt inside the last flush: a traceback of the
        # probe's in the job's stderr, and its last steps never sent. The job is ending
        # anyway: SIGINT is ignored until the flush is done, then its handler put back.
        held = _hold_sigint()
        try:
            self._send_the_end()
        except BaseException:
            pass  # interpreter shutdown: nothing left to report to
        finally:
            self.channel.close()
            _release_sigint(held)

    def _send_the_end(self) -> None:
        """The last steps, and how the process ended (its exception, if it died of one)."""
        try:
            if self.counted_ends:
                self.end_counting()
            self.clock.finish()
            self.note_steps()
        except Exception as exc:
            self.error("finish", exc)
        end: dict[str, Any] = {"t": now()}
        died_of = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if died_of is not None:
            end["exception_type"] = type(died_of).__name__
            end["exception_message"] = str(died_of)[:500]
            end["oom"] = is_oom(died_of)
        if self.flusher is not None or died_of is not None:
            self.flush(end)

    def after_fork_in_child(self) -> None:
        """A forked child (a DataLoader worker, a process of a sweep) starts with nothing
        to send and a counter page of its own."""
        self._fresh()
        self.clock.reset()
        self.flops.after_fork()
        self.page.after_fork()
        self.channel.reopen()
        for group in self.groups:
            reset = getattr(group, "after_fork", None)
            if reset is not None:
                try:
                    reset()
                except Exception as exc:
                    self.error(f"{group.name}-fork", exc, group)
        self.detail = False  # so that measure_next_step re-attaches every part
        self.measure_next_step(True)


AGENT: Agent | None = None


def doctor_pid() -> int | None:
    """The doctor's process (to tell a missing socket from a doctor that has gone)."""
    return _env_int(ENV_DOCTOR_PID)


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _hold_sigint() -> Any:
    """SIGINT ignored from now; the handler it had (to put back), or None where it
    cannot be done: not the main thread, or a handler not set from Python."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        held = signal.getsignal(signal.SIGINT)
        if held is None:
            return None
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return held
    except (ValueError, OSError):
        return None


def _release_sigint(held: Any) -> None:
    if held is not None:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signal.SIGINT, held)


def read_overrides() -> dict[str, Any]:
    """The in-process remedies asked for (a trial's treatment); {} when none or unreadable."""
    text = os.environ.get(ENV_OVERRIDES)
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def start() -> None:
    global AGENT
    path = os.environ.get(ENV_SOCKET)
    if not path or AGENT is not None:
        return
    agent = Agent(path)
    AGENT = agent
    from . import boot

    boot.install(agent)
    atexit.register(agent.at_exit)
    os.register_at_fork(after_in_child=agent.after_fork_in_child)
