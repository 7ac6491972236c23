"""The step's bookkeeping between two steps, timed so that it is not taken for input:
`zero_grad` (an optimizer's or a module's), gradient clipping, a `no_grad` block (a
hand-written parameter update, a loss estimate), an LR scheduler's step, `torch.save`.
The clock takes their time out of the time outside the model (clock.py,
`housekeeping`); DESIGN.md section 3: the update, logging and `.item()` after backward
are never data wait.

On steps measured in detail only. The methods are DetailPatches (invisible.py), in place
all along and handing a step that is only counted the original at once; the two
functions of `torch.nn.utils` are module attributes of torch, like
`torch.autograd.backward` (autograd.py), wrappers with the originals' names and
signatures that pass straight through on other steps. A call
inside another one (clipping inside a `no_grad` block) is part of the outer one.

A job that has stepped no optimizer by its first backward may update its parameters by
hand, outside any `no_grad` block (`p.data.add_(p.grad, alpha=-lr)`: pytorch/examples'
word_language_model and regression): for it, reading a tensor's `.grad` is told to the
clock (`grad_read`), through a data descriptor on torch.Tensor that hands every access
on to torch's own (`GradRead`, ~0.3 us a read). It is there from that backward until
the job steps an optimizer, or until the steps are only counted; a job with an
optimizer never has it (its optimizer reads every gradient on every step).
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

from .agent import Agent
from .invisible import (
    TRAINING_THREAD,
    ClassPatch,
    DetailPatch,
    drop_own_frame,
    tracing_checks,
    unseen,
)

now = time.monotonic_ns


class GradRead:
    """`torch.Tensor.grad` while it is watched: torch's own descriptor does the work;
    each read from an instance is told to `on_read`. The class's own attribute is
    torch's (`torch.Tensor.grad` is the getset descriptor it always was)."""

    __slots__ = ("base", "on_read")

    def __init__(self, base: Any, on_read: Any) -> None:
        self.base = base
        self.on_read = on_read

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self.base
        value = self.base.__get__(obj, objtype)
        self.on_read()
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        self.base.__set__(obj, value)

    def __delete__(self, obj: Any) -> None:
        self.base.__delete__(obj)


class HousekeepingHooks:
    name = "housekeeping"

    def __init__(self, agent: Agent, torch: Any) -> None:
        self.agent = agent
        self.enabled = True
        self.depth = 0
        self.started = 0
        clock = agent.clock
        busy = tracing_checks(torch)
        self.patches: list[ClassPatch] = []
        targets: list[tuple[type, str]] = [
            (torch.optim.Optimizer, "zero_grad"),
            (torch.nn.Module, "zero_grad"),
        ]
        scheduler = getattr(torch.optim.lr_scheduler, "LRScheduler", None)
        if isinstance(scheduler, type) and "step" in scheduler.__dict__:
            targets.append((scheduler, "step"))
        for owner, name in targets:
            patch = DetailPatch(
                owner, name, unseen(self._timed_method(owner, name)), self.wanted, busy, agent
            )
            self.patches.append(patch)
        grad_mode = torch.autograd.grad_mode
        for name, method in (("__enter__", self._enter), ("__exit__", self._exit)):
            self.patches.append(
                DetailPatch(grad_mode.no_grad, name, unseen(method), self.wanted, busy, agent)
            )
        self.functions: list[tuple[Any, str, Any, Any]] = []
        utils = torch.nn.utils
        for name in ("clip_grad_norm_", "clip_grad_value_"):
            original = getattr(utils, name, None)
            if callable(original):
                wrapper = self._timed_function(original, busy)
                self.functions.append((utils, name, original, wrapper))
                setattr(utils, name, wrapper)
        save = torch.save  # timed on every step: a checkpoint is the ledger's (clock.py)
        self.functions.append((torch, "save", save, self._timed_function(save, busy, True)))
        torch.save = self.functions[-1][3]
        self.clock = clock
        self.tensor = torch.Tensor
        base = torch._C.TensorBase.__dict__.get("grad")
        self.grad_read = GradRead(base, unseen(self._grad_read)) if base is not None else None
        agent.after_backward = self.watch_grads
        self.on()
        agent.detail_parts.append((self.nothing, self.unwatch_grads))

    def wanted(self, obj: Any) -> bool:
        agent = self.agent
        return self.enabled and agent.active and agent.detail

    # -- the wrappers ----------------------------------------------------------------------

    def _begin(self) -> int:
        self.depth += 1
        return now() if self.depth == 1 else 0

    def _end(self, t0: int) -> None:
        self.depth = max(0, self.depth - 1)
        if not self.depth and t0:
            try:
                self.clock.housekeeping(t0, now())
            except Exception as exc:
                self.agent.error("housekeeping", exc, self)

    def _timed_method(self, owner: type, name: str) -> Any:
        patches = self.patches
        index = len(patches)
        begin, end = self._begin, self._end

        def timed(obj: Any, *args: Any, **kwargs: Any) -> Any:
            call = patches[index].original(obj, type(obj))
            t0 = begin()
            try:
                return call(*args, **kwargs)
            except BaseException as exc:
                drop_own_frame(exc)
                raise
            finally:
                end(t0)

        timed.__name__ = name
        timed.__qualname__ = f"{owner.__name__}.{name}"
        return timed

    def _enter(self, ctx: Any) -> Any:
        t0 = self._begin()
        if self.depth == 1:
            self.started = t0
        try:
            return self.patches[-2].original(ctx, type(ctx))()
        except BaseException as exc:
            self.depth = max(0, self.depth - 1)
            drop_own_frame(exc)
            raise

    def _exit(self, ctx: Any, *exc_info: Any) -> Any:
        try:
            return self.patches[-1].original(ctx, type(ctx))(*exc_info)
        except BaseException as exc:
            drop_own_frame(exc)
            raise
        finally:
            t0, self.started = (self.started, 0) if self.depth == 1 else (0, self.started)
            self._end(t0)

    def _timed_function(self, original: Any, busy: Any, save: bool = False) -> Any:
        """`original` timed on steps measured in detail (`save`: on every step, and told
        to the clock as a checkpoint)."""
        agent = self.agent
        thread = TRAINING_THREAD
        get_ident = threading.get_ident
        begin, end = self._begin, self._end
        clock = agent.clock

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if (
                not ((agent.detail or save) and agent.active and self.enabled)
                or get_ident() != thread[0]
                or busy()
            ):
                try:
                    return original(*args, **kwargs)
                except BaseException as exc:
                    drop_own_frame(exc)
                    raise
            t0 = now() if save else begin()
            try:
                return original(*args, **kwargs)
            except BaseException as exc:
                drop_own_frame(exc)
                raise
            finally:
                if not save:
                    end(t0)
                else:
                    try:
                        clock.saved(t0, now())
                    except Exception as exc:
                        agent.error("checkpoint", exc, self)

        return unseen(wrapper)

    # -- a job with no optimizer: its gradients read ------------------------------------------

    def watch_grads(self) -> None:
        """After a backward of a job that has stepped no optimizer (autograd.py)."""
        watch = self.grad_read
        if (
            watch is None
            or not (self.enabled and self.agent.detail)
            or "grad" in self.tensor.__dict__  # ours already, or somebody else's
        ):
            return
        self.tensor.grad = watch

    def unwatch_grads(self) -> None:
        if self.grad_read is not None and self.tensor.__dict__.get("grad") is self.grad_read:
            del self.tensor.grad

    def _grad_read(self) -> None:
        agent = self.agent
        if agent.optimizer_steps or not self.enabled:
            self.unwatch_grads()  # an optimizer reads every gradient: not for it
        elif not self.depth and threading.get_ident() == TRAINING_THREAD[0] and agent.active:
            # (a read inside zero_grad or clipping is theirs, timed as theirs: zero_grad
            # may come after the next batch is built, and is not the update)
            self.clock.grad_read(now())

    # -- the group's life -------------------------------------------------------------------

    def nothing(self) -> None:
        """A detailed step begins: the patches are in place already (DetailPatch); the
        gradients are watched from the step's backward (watch_grads)."""

    def on(self) -> None:
        if self.enabled:
            for patch in self.patches:
                patch.install()

    def off(self) -> None:
        for patch in self.patches:
            patch.remove()
        self.unwatch_grads()

    def facts(self) -> dict[str, Any]:
        return {}

    def after_fork(self) -> None:
        self.depth = 0
        self.started = 0
        self.unwatch_grads()  # a DataLoader worker trains nothing

    def disable(self) -> None:
        self.enabled = False
        self.off()
        for owner, name, original, wrapper in self.functions:
            if getattr(owner, name, None) is wrapper:
                setattr(owner, name, original)
