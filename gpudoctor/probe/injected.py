"""The probe loaded into a process that is already running (`gpudoctor watch --inject`).

The doctor has the job's main thread run `attach(settings)` between two of its bytecodes
(a pending call, scheduled by a debugger for that moment, or `sys.remote_exec` on
CPython 3.14: the doctor's jobs/inject.py). It installs the torch hook groups as a
launch does once torch is imported, with what a process past its set-up needs instead:

- the optimizers already made are seen through a wrapper on each optimizer class torch
  has wrapped, and on the cell of each LR scheduler's per-instance wrapper of `step`
  (found in the training thread's frames): no torch hook table is touched; optimizers
  made later the same way;
- the models already made are looked for at the next step's end (no forward is under
  way there) in the training thread's frames: their locals, and one level of the
  attributes of what they hold (a trainer's `self.model`); models made later through
  torch's registration tables, as at a launch;
- the DataLoader iterators already running are measured from their next batch (the
  patch is on the iterators' class), their loaders' settings read from them then;
- CUDA already initialised: the copy and sync hooks go in at once.

It removes itself, every hook, wrapper, patch and thread it installed, when its doctor
asks (a `detach` file in the doctor's folder: it sends what it has first), when the
doctor is gone (its process or its socket), or on the doctor's SIGKILL (the same, at
the next flush, half a second later). What stays is inert: this package's
modules (a second attach reuses them rather than loading them twice) and one at-fork
function that does nothing while no doctor is attached.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from typing import Any

from . import agent as agent_module
from .agent import Agent

# What the probe cannot know in a process it joined late (sent as limits).
LIMITS = ("attached to a running process: models are found at the first step after the attach",)
# Asked to leave, the agent waits this long for the training thread to hand over the
# steps it only counted (they end at its next step): then its last rows go with them.
HANDOVER_NS = 600_000_000
_FORK_HOOK: list[bool] = []


def attach(settings: dict[str, Any]) -> str:
    """Install the probe for the doctor `settings` name: "attached", or why not:
    "launched" (the job was started under `gpudoctor run`: that probe is its doctor's),
    "busy" (another doctor is attached now), "no-torch" (nothing to measure yet)."""
    current = agent_module.AGENT
    if current is not None and not current.injected:
        return "launched"
    if current is not None and current.active:
        return "busy"
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "optim"):
        return "no-torch"
    socket_path = str(settings["socket"])
    folder = os.path.dirname(socket_path)
    doctor = settings.get("doctor_pid")
    agent = Agent(socket_path, doctor if isinstance(doctor, int) else None, injected=True)
    agent.profiling.pending = 0
    agent.profiling.trace = None
    agent.profiling.control = settings.get("control")
    agent.profiling.trace_dir = settings.get("trace_dir") or folder
    detach_path = os.path.join(folder, "detach")
    agent.leaving = lambda: _leave_if_asked(agent, detach_path)
    agent_module.AGENT = agent
    from .boot import install_torch

    try:
        install_torch(agent, torch)
        for text in LIMITS:
            agent.limit(text)
        agent.fact("attached", {"t_ns": time.monotonic_ns(), "route": settings.get("route")})
        atexit.register(agent.at_exit)
        if not _FORK_HOOK:
            _FORK_HOOK.append(True)
            os.register_at_fork(after_in_child=_after_fork_in_child)
        agent.touch()  # the flush thread now: it tells the doctor, and watches for it
    except BaseException:
        remove(agent)
        raise
    return "attached"


def _after_fork_in_child() -> None:
    agent = agent_module.AGENT
    if agent is not None and agent.injected and agent.active:
        agent.after_fork_in_child()


def _leave_if_asked(agent: Agent, detach_path: str) -> bool:
    """At each flush of an injected agent: leave when the doctor asks (its last rows sent
    first), or when it is gone."""
    asked = os.path.exists(detach_path)
    gone = agent.channel.dead or not _doctor_alive(agent)
    if not asked and not gone:
        return False
    if agent.profiling.running:
        return False  # a capture under way ends in the training thread, a few steps on
    if asked and not gone and agent.counted_ends:
        # the steps only counted go to the clock in the training thread, at its next step
        # once counting is due to end: asked for now, waited for a little
        t = time.monotonic_ns()
        if not agent.leave_asked_ns:
            agent.leave_asked_ns = t
            agent.deadline = 0
        if t - agent.leave_asked_ns < HANDOVER_NS:
            return False
    if asked and not gone:
        with contextlib.suppress(Exception):  # the counter page is the training thread's
            agent.fact("probe_left", True)  # the doctor waits for this one
            agent.flush()
    remove(agent)
    return True


def _doctor_alive(agent: Agent) -> bool:
    if not os.path.exists(agent.socket_path):
        return False
    pid = agent.channel.doctor_pid
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # alive, another user's
    return True


def remove(agent: Agent) -> None:
    """Everything the agent installed comes out; the originals are back in place. Safe
    from any thread: each patch is one attribute put back, and a call already inside a
    wrapper finishes with the original it holds."""
    agent.active = False
    for group in list(agent.groups):
        with contextlib.suppress(Exception):
            group.disable()
    agent.groups.clear()
    agent.detail_parts.clear()
    agent.discover = lambda: None
    agent.after_backward = lambda: None
    agent.root_callbacks.clear()
    atexit.unregister(agent.at_exit)
    agent.channel.close()
    agent.page.close()
    if agent_module.AGENT is agent:
        agent_module.AGENT = None
    flusher = agent.flusher
    if flusher is not None and flusher is not threading.current_thread():
        flusher.join(timeout=1.0)
