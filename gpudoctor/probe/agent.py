"""The probe's hooks and their owner.

Promises (each has a test): it never blocks the job (a daemon thread sends batches
with non-blocking datagrams; buffers are bounded, overflow is dropped and counted); it
never changes the job's results (hooks observe and return what they were given); if
the doctor dies, the sends fail and the probe goes dormant; its own failures are
swallowed and reported once.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from . import ENV_OVERRIDES, ENV_SOCKET, protocol
from .channel import Channel
from .profile import Profiling
from .steps import StepClock

FLUSH_INTERVAL_S = 0.25
# Global module hooks cost ~3 us per module call: they only find the root modules
# (the first few steps), then give way to hooks on those roots alone.
DISCOVERY_STEPS = 3
DISCOVERY_MAX_CALLS = 5000
MAX_DISTINCT_SHAPES = 8

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


class Probe:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.active = True
        self.overrides = read_overrides()
        self.profiling = Profiling()
        self.torch: Any = None
        self.lock = threading.Lock()
        # The hooks a counted step does without (see steps.py, sampling): each part is
        # (attach, detach), registered by the hooks that own it; kept across a fork.
        self.detail = True
        self.detail_parts: list[tuple[Callable[[], None], Callable[[], None]]] = []
        self._fresh()

    def _fresh(self) -> None:
        self.channel = Channel(self.socket_path)
        self.clock = StepClock()
        self.facts: dict[str, Any] = {}
        self.facts_dirty = False
        self.reported_errors: set[str] = set()
        self.unsent_errors: list[str] = []
        self.flusher: threading.Thread | None = None
        self.seq = 0
        self.ended = False
        # counters read by the flush thread
        self.forwards_total = 0
        self.forwards_grad = 0
        self.autocast_seen = False
        self.backwards = 0
        self.optimizer_steps = 0
        self.shapes: set[tuple[int, ...]] = set()
        self.last_shape: Any = None
        self.loader_batches: dict[int, int] = {}
        # forward bookkeeping
        self.roots: dict[int, Any] = {}
        self.depth = 0
        self.root_depth = 0
        self.fwd_t0 = 0
        self.opt_t0 = 0
        self.lead_optimizer: int | None = None
        # sampling: the ends of the steps only counted, how many more to count, and by when
        self.counted_ends: list[int] = []
        self.countdown = 0
        self.deadline = 0
        self.global_hooks: list[Any] = []
        self.discovery_calls = 0
        self.device_type = "cpu"
        self.device_index: int | None = None
        self.in_sync = False

    # -- bookkeeping shared by the hooks --------------------------------------------

    def fact(self, key: str, value: Any) -> None:
        if self.facts.get(key) != value:
            self.facts[key] = value
            self.facts_dirty = True

    def error(self, where: str, exc: BaseException) -> None:
        """A failure of ours: swallowed, reported once per place."""
        if where not in self.reported_errors:
            self.reported_errors.add(where)
            self.unsent_errors.append(f"{where}: {type(exc).__name__}: {exc}"[:300])
            self.touch()

    def fact_list_add(self, key: str, item: Any) -> list[Any]:
        items = list(self.facts.get(key, []))
        if item not in items:
            items.append(item)
        return items

    def go_discovered(self) -> None:
        """The roots are known: drop the global module hooks, keep the roots' own."""
        for handle in self.global_hooks:
            with contextlib.suppress(Exception):
                handle.remove()
        self.global_hooks = []
        self.depth = 0
        self.clock.sampling = True

    def end_counting(self) -> None:
        """The counted steps are over: hand their ends to the clock, measure the next."""
        ends, self.counted_ends = self.counted_ends, []
        self.optimizer_steps += len(ends)
        self.clock.counted(ends)
        self.measure_next_step(True)

    def measure_next_step(self, detail: bool) -> None:
        """Switch the per-step hooks on for a step measured in detail, off for a counted
        one: off, they are not there at all (the originals are back in place), so a
        counted step runs only the optimizer's post-step hook. Switching is a few dict
        and attribute assignments: registering hooks anew costs tens of microseconds."""
        if detail == self.detail:
            return
        self.detail = detail
        for attach, detach in self.detail_parts:
            try:
                attach() if detail else detach()
            except Exception as exc:
                self.error("sampling", exc)

    def touch(self) -> None:
        """First activity starts the flush thread (processes that never train send nothing)."""
        if self.flusher is None and self.active:
            self.flusher = threading.Thread(
                target=self._flush_loop, name="gpudoctor-probe", daemon=True
            )
            self.flusher.start()

    # -- sending --------------------------------------------------------------------

    def _flush_loop(self) -> None:
        while self.active:
            time.sleep(FLUSH_INTERVAL_S)
            self.flush()
            if self.channel.dead:
                self.go_dormant()

    def go_dormant(self) -> None:
        """The doctor is gone: every hook returns at once from now on."""
        self.active = False
        self.go_discovered()
        self.lead_optimizer = None  # a counted step's hook checks nothing else
        self.measure_next_step(True)  # the hooks back in place, each returning at once

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
        # each part on its own: whatever breaks, the rest (and the errors) still go out
        try:
            self._refresh_facts()
        except Exception as exc:
            self.error("facts", exc)
        try:
            steps = self.clock.take()
        except Exception as exc:
            steps = []
            self.error("take", exc)
        gauges = self._gauges()
        try:
            dropped = int(self.clock.dropped) + self.channel.dropped_messages
        except Exception as exc:
            dropped = self.channel.dropped_messages
            self.error("dropped", exc)
        chunks = [
            steps[i : i + protocol.MAX_STEPS_PER_MESSAGE]
            for i in range(0, len(steps), protocol.MAX_STEPS_PER_MESSAGE)
        ] or [[]]
        for n, chunk in enumerate(chunks):
            last = n == len(chunks) - 1
            message: dict[str, Any] = {"v": protocol.VERSION, "pid": os.getpid(), "seq": self.seq}
            if chunk:
                message["steps"] = chunk
            if last:
                if self.facts_dirty:
                    message["facts"] = dict(self.facts)
                    self.facts_dirty = False
                if gauges:
                    message["gauges"] = gauges
                if self.unsent_errors:
                    message["errors"], self.unsent_errors = self.unsent_errors, []
                if dropped:
                    message["dropped"] = dropped
                if end is not None:
                    message["end"] = end
            if len(message) > 3 or chunk:
                self.seq += 1
                self.channel.send(message)

    def _refresh_facts(self) -> None:
        torch = self.torch
        self.fact("forwards", self.forwards_total)
        self.fact("forwards_with_grad", self.forwards_grad)
        self.fact("autocast_seen", self.autocast_seen)
        self.fact("backwards", self.backwards)
        self.fact("optimizer_steps", self.optimizer_steps)
        self.fact("input_shapes", sorted(list(s) for s in self.shapes))
        self.fact(
            "step_mode", ("", "forward", "dataloader", "backward", "optimizer")[self.clock.rank]
        )
        if self.loader_batches:
            self.fact("dataloader_batches", {str(k): v for k, v in self.loader_batches.items()})
        if torch is not None:
            try:
                self.fact("cudnn_benchmark", bool(torch.backends.cudnn.benchmark))
            except Exception as exc:
                self.error("cudnn", exc)

    def _gauges(self) -> dict[str, Any]:
        torch = self.torch
        if torch is None or self.device_type != "cuda":
            return {}
        try:
            if not torch.cuda.is_initialized():
                return {}
            dev = self.device_index or 0
            stats = torch.cuda.memory_stats(dev)
            if "cuda_total_bytes" not in self.facts:
                props = torch.cuda.get_device_properties(dev)
                self.fact("cuda_total_bytes", int(props.total_memory))
                self.fact("cuda_capability", [int(props.major), int(props.minor)])
                self.fact("cuda_device_name", str(props.name))
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

    # -- the end ----------------------------------------------------------------------

    def at_exit(self) -> None:
        if self.ended:
            return
        self.ended = True
        try:
            try:
                if self.counted_ends:
                    self.end_counting()
                self.clock.finish()
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
        except Exception:
            pass  # interpreter shutdown: nothing left to report to
        self.channel.close()

    def after_fork_in_child(self) -> None:
        """A forked child (a DataLoader worker, say) starts with nothing to send."""
        self._fresh()
        self.measure_next_step(True)


PROBE: Probe | None = None


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


def arm() -> None:
    global PROBE
    path = os.environ.get(ENV_SOCKET)
    if not path or PROBE is not None:
        return
    probe = Probe(path)
    PROBE = probe
    from . import hooks

    hooks.install_boot(probe)
    atexit.register(probe.at_exit)
    os.register_at_fork(after_in_child=probe.after_fork_in_child)
