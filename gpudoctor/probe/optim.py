"""The optimizer hooks: where most jobs' steps end, and the optimizer's share of a step.

torch wraps each optimizer class's `step` once, at its first instance
(`Optimizer.profile_hook_step`, which runs the global step hooks). The probe wraps that
wrapper in turn: a plain function with its name, signature and attributes
(functools.wraps), that passes straight through while torch compiles or traces. It
uses none of torch's hook tables: an entry there, even an empty hook, changes the
frames Dynamo compiles for a compiled `optimizer.step()`.

Which optimizer's step ends a step is the clock's business (clock.py: the optimizer
cycle). On a step that is only counted, the wrapper records the time when the cycle's
closer steps, and nothing else (see clock.py, sampling).
"""

from __future__ import annotations

import functools
import time
import weakref
from typing import Any

from .agent import Agent
from .invisible import drop_own_frame, unseen
from .page import STEPS

now = time.monotonic_ns


class OptimizerHooks:
    name = "optimizer"

    def __init__(self, agent: Agent, torch: Any) -> None:
        from torch.optim import optimizer as opt

        self.agent = agent
        self.torch = torch
        self.enabled = True
        # the closer of the optimizer cycle (a weak reference: the probe keeps no
        # optimizer alive), and the others seen since it last stepped (counted steps)
        self.closer_ref: Any = None
        self.closer_key: int | None = None
        self.others: dict[int, int] = {}
        self.refs: dict[int, Any] = {}
        self.names: list[str] = []
        self.clock = agent.clock
        self.clock.sampling = True  # the per-step hooks can be taken out (see clock.py)
        self.owner = opt.Optimizer
        self.original = opt.Optimizer.__dict__["profile_hook_step"]
        self.handles: list[Any] = []
        self.started: tuple[int, bool, int] | None = None  # a step under way (injected)
        if agent.injected:
            # a running process: its optimizers' steps are wrapped already, and an LR
            # scheduler has bound each one's to its instance; torch's global step hooks
            # see them all (injected.py)
            self.handles = [
                opt.register_optimizer_step_pre_hook(self._pre),
                opt.register_optimizer_step_post_hook(self._post),
            ]
            return
        hook = self.original.__func__

        @functools.wraps(hook)
        def profile_hook_step(func: Any) -> Any:
            hooked = hook(func)
            try:
                return self.wrap(hooked)
            except Exception as exc:
                agent.error("optimizer-wrap", exc, self)
                return hooked

        opt.Optimizer.profile_hook_step = staticmethod(profile_hook_step)

    def wrap(self, hooked: Any) -> Any:
        """An optimizer class's step, timed in detail, or only counted (`counted`)."""
        agent = self.agent
        clock = self.clock
        # Dynamo traces this wrapper when it compiles an optimizer step (it is a plain
        # function on the class): a check it folds to True comes first. Eagerly,
        # is_dynamo_compiling() is a bare `return False` (is_compiling() calls another).
        compiler = self.torch.compiler
        is_compiling = getattr(compiler, "is_dynamo_compiling", None) or compiler.is_compiling

        @functools.wraps(hooked)
        def step(*args: Any, **kwargs: Any) -> Any:
            if is_compiling() or not agent.active or not self.enabled or not args:
                try:
                    return hooked(*args, **kwargs)
                except BaseException as exc:
                    drop_own_frame(exc)
                    raise
            detail = agent.detail
            if detail:
                t0 = now()
                clock.optimizer_start()
            try:
                result = hooked(*args, **kwargs)
            except BaseException as exc:
                if detail:
                    clock.nested_at_opt_start = -1  # no step ended in there
                drop_own_frame(exc)
                raise
            try:
                if detail:
                    self.detailed(args[0], t0)
                    return result
                self.counted(args[0])
            except Exception as exc:
                clock.nested_at_opt_start = -1  # never left inside an optimizer's step
                agent.error("optimizer", exc, self)
            return result

        return unseen(step)

    def counted(self, optimizer: Any) -> None:
        """An optimizer stepped on a step only counted: the closer's step appends its end
        time; another optimizer's only matters when it steps twice before the closer
        does (the cycle changed: see `cycle_changed`)."""
        agent = self.agent
        agent.optimizer_steps += 1
        closer = self.closer_ref
        if closer is not None and closer() is optimizer:
            t = now()
            agent.counted_ends.append(t)
            agent.page.values[STEPS] += 1  # looked up: the page maps later
            if self.others:
                self.others.clear()
            agent.countdown -= 1
            if agent.countdown <= 0 or t >= agent.deadline:
                agent.end_counting()
                self.clock.housekeeping(t, now())  # the probe's switch, not input
        else:
            self.cycle_changed(optimizer)

    # -- torch's global step hooks (an injected probe) ---------------------------------------

    def _pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.started = None
        try:
            compiler = self.torch.compiler
            if compiler.is_compiling() or not self.agent.active or not self.enabled:
                return
            detail = self.agent.detail
            t0 = now() if detail else 0
            if detail:
                self.clock.optimizer_start()
            self.started = (id(optimizer), detail, t0)
        except Exception as exc:
            self.agent.error("optimizer", exc, self)

    def _post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        started, self.started = self.started, None
        if started is None or started[0] != id(optimizer) or not self.enabled:
            return
        try:
            if started[1]:
                self.detailed(optimizer, started[2])
            else:
                self.counted(optimizer)
        except Exception as exc:
            self.clock.nested_at_opt_start = -1
            self.agent.error("optimizer", exc, self)

    def cycle_changed(self, optimizer: Any) -> None:
        """On a counted step, another optimizer than the closer stepped. When it steps a
        second time before the closer does, the cycle has changed: counting ends, the
        clock hears of the steps it missed, and this one is measured in detail."""
        key = id(optimizer)
        if key not in self.others:
            self.others[key] = now()
            return
        missed, self.others = self.others, {}
        self.agent.end_counting()
        for other, t in missed.items():
            self.clock.optimizer_done(other, t, t)
        self.agent.optimizer_steps -= 1  # counted again as measured in detail
        self.detailed(optimizer, now())

    def detailed(self, optimizer: Any, t0: int) -> None:
        agent = self.agent
        clock = self.clock
        t1 = now()
        key = id(optimizer)
        agent.optimizer_steps += 1
        self.refs[key] = weakref.ref(optimizer)
        clock.optimizer_done(key, t0, t1)
        if len(self.names) < 4 and type(optimizer).__name__ not in self.names:
            self.names.append(type(optimizer).__name__)
            agent.fact("optimizer", self.names[0])
            agent.fact("optimizers", list(self.names))
        if clock.closer is not None and clock.closer != self.closer_key:
            self.closer_key = clock.closer
            self.closer_ref = self.refs.get(clock.closer)
        if len(self.refs) > 16:  # keep only the optimizers of the cycle under way
            keep = set(clock.cycle) | {clock.closer}
            self.refs = {k: v for k, v in self.refs.items() if k in keep}
        if key == clock.closer:  # a step ended here
            agent.discover()
            profiling = agent.profiling
            if profiling.control or profiling.pending or profiling.running:
                profiling.step_ended(agent, t1, clock.index)
            flops = agent.flops
            if flops.wanted or flops.running:
                try:
                    flops.step_ended(agent, clock.index)
                except Exception as exc:
                    flops.abandon()
                    agent.error("flops", exc)
            agent.countdown, agent.deadline = clock.plan_next(t1)
            busy = profiling.running or flops.running or agent.leave_asked_ns  # (injected.py)
            if agent.countdown > 0 and not busy:
                agent.measure_next_step(False)
        agent.note_steps()
        if agent.flusher is None:
            agent.touch()
        clock.housekeeping(t1, now())  # the probe's own work here is not the job's input

    def facts(self) -> dict[str, Any]:
        return {}

    def after_fork(self) -> None:
        self.closer_ref = None
        self.closer_key = None
        self.others = {}
        self.refs = {}

    def disable(self) -> None:
        """Off for good: classes wrapped from now on get torch's step as it is; those
        wrapped already pass straight through."""
        self.enabled = False
        self.closer_ref = None
        self.clock.nested_at_opt_start = -1
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        if not self.agent.injected:
            self.owner.profile_hook_step = self.original
