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
import sys
import time
import weakref
from typing import Any

from .agent import Agent
from .invisible import drop_own_frame, unseen
from .page import STEPS
from .running import running_objects

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
        agent.stepped_parameters = self.stepped_parameters
        self.clock = agent.clock
        self.clock.sampling = True  # the per-step hooks can be taken out (see clock.py)
        self.owner = opt.Optimizer
        self.original = opt.Optimizer.__dict__["profile_hook_step"]
        # an injected probe (injected.py): the classes torch wrapped already, each with
        # its step before the probe came, and the cells of LR schedulers' per-instance
        # wrappers that held those steps
        self.adopted: list[tuple[type, Any, Any]] = []
        self.cells: list[tuple[Any, Any]] = []
        hook = self.original.__func__

        @functools.wraps(hook)
        def profile_hook_step(func: Any) -> Any:
            # torch wraps a class's step at its first instance: the job made an optimizer
            self.clock.optimizer_made = True
            hooked = hook(func)
            try:
                return self.wrap(hooked)
            except Exception as exc:
                agent.error("optimizer-wrap", exc, self)
                return hooked

        opt.Optimizer.profile_hook_step = staticmethod(profile_hook_step)
        if agent.injected:
            self.adopt_running(opt.Optimizer)
        self.scaler_step = self.wrap_scaler()

    def wrap(self, hooked: Any) -> Any:
        """An optimizer class's step, timed. On a counted step it runs as little as can
        be, written out here rather than called, since on a short step every line shows:
        the closer's step appends its end time; another optimizer's only matters when it
        steps twice before the closer does (the cycle changed: see `cycle_changed`)."""
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
                agent.optimizer_steps += 1
                closer = self.closer_ref
                if closer is not None and closer() is args[0]:
                    t = now()
                    agent.counted_ends.append(t)
                    agent.page.values[STEPS] += 1  # looked up: the page maps later
                    if self.others:
                        self.others.clear()
                    agent.countdown -= 1
                    if agent.countdown <= 0 or t >= agent.deadline:
                        agent.end_counting()
                        clock.housekeeping(t, now())  # the probe's switch, not input
                else:
                    self.cycle_changed(args[0])
            except Exception as exc:
                clock.nested_at_opt_start = -1  # never left inside an optimizer's step
                agent.error("optimizer", exc, self)
            return result

        return unseen(step)

    def wrap_scaler(self) -> Any:
        """AMP's GradScaler skips the optimizer's step when the gradients are not finite
        (fp16's first steps while the scale comes down, an overflow now and then): the
        job's step ended there all the same. Its loop counts it (Trainer's and
        Lightning's global step do), so the clock hears of an optimizer step that took
        no time (the step wrapper around nothing). `GradScaler.step` is wrapped on its
        class (torch.cuda.amp's and torch.cpu.amp's inherit it); the original is its
        `__wrapped__`. None where torch has no GradScaler."""
        try:
            from torch.amp.grad_scaler import GradScaler
        except ImportError:
            return None
        original = GradScaler.__dict__.get("step")
        if original is None:
            return None
        agent = self.agent
        skipped = self.wrap(lambda *args, **kwargs: None)

        @functools.wraps(original)
        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            before = agent.optimizer_steps
            try:
                result = original(scaler, optimizer, *args, **kwargs)
            except BaseException as exc:
                drop_own_frame(exc)
                raise
            if agent.optimizer_steps == before and agent.active and self.enabled:
                skipped(optimizer)
            return result

        GradScaler.step = unseen(step)
        return (GradScaler, original, step)

    def adopt_running(self, base: type) -> None:
        """In a process joined late, the optimizer classes torch has wrapped already
        (their first instance was made) get the probe's wrapper over theirs; an LR
        scheduler made before the probe holds the class's step in a wrapper of its own
        on the instance (torch's lr_scheduler `patch_track_step_called`): the cell that
        holds it holds the probe's wrapper instead. Nothing goes in torch's hook tables
        (their handles' ids would move)."""
        wrapped: dict[int, Any] = {}
        classes, seen = [base], {base}
        while classes:
            cls = classes.pop()
            subclasses: list[type] = cls.__subclasses__()
            for sub in subclasses:
                if sub not in seen:
                    seen.add(sub)
                    classes.append(sub)
            step = cls.__dict__.get("step")
            if step is None or not getattr(step, "hooked", False) or id(step) in wrapped:
                continue
            ours = self.wrap(step)
            self.clock.optimizer_made = True
            setattr(cls, "step", ours)  # noqa: B010 - the class's own attribute
            self.adopted.append((cls, step, ours))
            wrapped[id(step)] = ours
        for optimizer in running_objects(base, sys._getframe(1)):
            bound = vars(optimizer).get("step")
            if not getattr(bound, "_wrapped_by_lr_sched", False):
                continue
            for cell in getattr(bound, "__closure__", None) or ():
                try:
                    held = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                if id(held) in wrapped:
                    cell.cell_contents = wrapped[id(held)]
                    self.cells.append((cell, held))

    def stepped_parameters(self) -> set[int]:
        """The ids of the parameters of the optimizers seen stepping."""
        optimizers = [ref() for ref in list(self.refs.values())]
        return {
            id(p)
            for o in optimizers if o is not None
            for group in o.param_groups
            for p in group["params"]
        }  # fmt: skip

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
        self.owner.profile_hook_step = self.original
        for cls, step, ours in self.adopted:
            if cls.__dict__.get("step") is ours:
                setattr(cls, "step", step)  # noqa: B010
        for cell, held in self.cells:
            cell.cell_contents = held
        if self.scaler_step is not None:
            cls, original, ours = self.scaler_step
            if cls.__dict__.get("step") is ours:
                cls.step = original
        self.adopted.clear()
        self.cells.clear()
