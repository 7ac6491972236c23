"""torch.profiler over a few training steps, when asked (never otherwise: it costs
~230 us a step, DESIGN.md section 7).

Asked at launch (`gpudoctor run --profile-steps N`: env GPUDOCTOR_PROFILE_STEPS, after
the warm-up) or later (the TUI's `p`: the doctor writes N into the file named by
GPUDOCTOR_CONTROL, which the agent looks for at most twice a second, on a step measured
in detail). The result is the guide's `key_averages()` table, top operators by device
time (CPU time on a CPU job), sent as the fact "profile"; the Chrome trace is written to
the file GPUDOCTOR_PROFILE_TRACE names, else to capture-N.json.gz in the folder
GPUDOCTOR_PROFILE_TRACE_DIR names (the doctor's, which reads the GPU timeline from it).
Each captured step is marked in the trace as torch.profiler's own schedule marks it (a `ProfilerStep#N` range, N the job's step), so
that trace readers (Holistic Trace Analysis, Perfetto, `gpudoctor trace`) find the steps.
"""

from __future__ import annotations

import os
import time
from typing import Any

ENV_PROFILE_STEPS = "GPUDOCTOR_PROFILE_STEPS"
ENV_PROFILE_TRACE = "GPUDOCTOR_PROFILE_TRACE"
# where the doctor wants each capture's trace when the person named no file (its own
# run folder: it reads the GPU timeline from it, diagnosis/gpu_timeline.py)
ENV_PROFILE_TRACE_DIR = "GPUDOCTOR_PROFILE_TRACE_DIR"
ENV_CONTROL = "GPUDOCTOR_CONTROL"
START_AFTER_STEPS = 5  # warm-up, as the doctor's diagnosis counts it
CONTROL_EVERY_NS = 500_000_000
TOP_OPERATORS = 15


class Profiling:
    """The agent's profiling state; `step_ended()` is called at each lead optimizer step
    measured in detail (all steps while a capture runs)."""

    def __init__(self) -> None:
        self.pending = _int(os.environ.get(ENV_PROFILE_STEPS))
        self.trace = os.environ.get(ENV_PROFILE_TRACE) or None
        self.trace_dir = os.environ.get(ENV_PROFILE_TRACE_DIR) or None
        self.control = os.environ.get(ENV_CONTROL) or None
        self.next_check_ns = 0
        self.profiler: Any = None
        self.marker: Any = None  # the open ProfilerStep#N range
        self.left = 0
        self.captures = 0
        self.started_ns = 0  # when the capture began holding the job (its cost, reported)

    @property
    def running(self) -> bool:
        return self.profiler is not None

    def step_ended(self, agent: Any, t_ns: int, steps_done: int) -> None:
        if self.profiler is not None:
            self._close_marker()
            self.left -= 1
            if self.left <= 0:
                self._finish(agent)
            else:
                self._open_marker(agent, steps_done)
            return
        if self.control is not None and t_ns >= self.next_check_ns:
            self.next_check_ns = t_ns + CONTROL_EVERY_NS
            self._read_control()
        if self.pending and steps_done >= START_AFTER_STEPS:
            self._start(agent, self.pending, steps_done)
            self.pending = None

    def _read_control(self) -> None:
        assert self.control is not None
        try:
            with open(self.control) as f:
                text = f.read()
            os.unlink(self.control)
        except OSError:
            return
        self.pending = _int(text.strip()) or self.pending

    def _start(self, agent: Any, steps: int, steps_done: int) -> None:
        torch = agent.torch
        enabled = getattr(torch.autograd.profiler, "_is_profiler_enabled", False)
        if enabled:  # the job profiles itself: a second profiler would take its events
            agent.fact("profile_status", {"state": "skipped", "steps": steps})
            agent.fact("job_profiler", True)
            return
        self.started_ns = time.perf_counter_ns()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if str(agent.facts.get("device", "cpu")).startswith("cuda"):
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        profiler = torch.profiler.profile(activities=activities)
        profiler.__enter__()
        self.profiler = profiler
        self.left = steps
        self._open_marker(agent, steps_done)
        agent.fact("profile_status", {"state": "running", "steps": steps})

    def _open_marker(self, agent: Any, step: int) -> None:
        marker = agent.torch.profiler.record_function(f"ProfilerStep#{step}")
        marker.__enter__()
        self.marker = marker

    def _close_marker(self) -> None:
        marker, self.marker = self.marker, None
        if marker is not None:
            marker.__exit__(None, None, None)

    def _finish(self, agent: Any) -> None:
        self._close_marker()
        profiler, self.profiler = self.profiler, None
        profiler.__exit__(None, None, None)
        self.captures += 1
        table = summarize(profiler.key_averages())
        steps = agent.facts.get("profile_status", {}).get("steps")
        result = {"capture": self.captures, "steps": steps, **table}
        trace = self.trace
        if trace is None and self.trace_dir is not None:
            trace = os.path.join(self.trace_dir, f"capture-{self.captures}.json.gz")
        if trace:
            profiler.export_chrome_trace(trace)
            result["trace"] = trace
        # the whole time the capture held the training thread: the profiler's start, the
        # captured steps, the table and the trace's writing (the report sets it against
        # as many ordinary steps: what the capture cost the job)
        result["held_ms"] = round((time.perf_counter_ns() - self.started_ns) / 1e6, 1)
        agent.fact("profile", result)
        agent.fact("profile_status", {"state": "done", "steps": steps})


def summarize(averages: Any) -> dict[str, Any]:
    """Top operators of `key_averages()`: by self device time when any ran on a device,
    else by self CPU time (the guide's table, sorted as its examples are)."""
    rows: list[dict[str, Any]] = []
    for evt in averages:
        device_total = _num(evt, "device_time_total", "cuda_time_total")
        self_device = _num(evt, "self_device_time_total", "self_cuda_time_total")
        rows.append(
            {
                "name": str(evt.key),
                "calls": int(evt.count),
                "cpu_time_total_us": round(float(evt.cpu_time_total), 1),
                "self_cpu_time_total_us": round(float(evt.self_cpu_time_total), 1),
                "device_time_total_us": round(device_total, 1),
                "self_device_time_total_us": round(self_device, 1),
            }
        )
    on_device = any(r["self_device_time_total_us"] for r in rows)
    key = "self_device_time_total_us" if on_device else "self_cpu_time_total_us"
    rows.sort(key=lambda r: -float(r[key]))
    return {"sort": "device" if on_device else "cpu", "operators": rows[:TOP_OPERATORS]}


def _num(evt: Any, *names: str) -> float:
    for name in names:
        value = getattr(evt, name, None)
        if value is not None:
            return float(value)
    return 0.0


def _int(text: str | None) -> int | None:
    try:
        value = int(text) if text else None
    except ValueError:
        return None
    return value if value and value > 0 else None
