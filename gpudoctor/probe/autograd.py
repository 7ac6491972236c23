"""The backward hook: how long `torch.autograd.backward` (what `loss.backward()` calls)
takes, on steps measured in detail; and, for jobs with no optimizer, where their steps
end. A module attribute of torch, so it is a wrapper with the original's name,
signature and docs (functools.wraps), put in place for a detailed step and taken out
after it. A backward called inside a backward (reentrant activation checkpointing) is
part of the outer one."""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

from .agent import Agent
from .invisible import TRAINING_THREAD, drop_own_frame, unseen

now = time.monotonic_ns


class BackwardHooks:
    name = "backward"

    def __init__(self, agent: Agent, torch: Any) -> None:
        self.agent = agent
        self.enabled = True
        self.depth = 0
        autograd = torch.autograd
        original = autograd.backward
        self.original = original
        clock = agent.clock
        get_ident = threading.get_ident
        thread = TRAINING_THREAD

        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            if self.depth or not agent.active or get_ident() != thread[0]:
                try:
                    return original(*args, **kwargs)
                except BaseException as exc:
                    drop_own_frame(exc)
                    raise
            self.depth = 1
            t0 = now()
            try:
                return original(*args, **kwargs)
            except BaseException as exc:
                drop_own_frame(exc)
                raise
            finally:
                self.depth = 0
                try:
                    clock.backward_done(t0, now())
                    agent.backwards += 1
                    if not agent.optimizer_steps:
                        agent.after_backward()
                    agent.discover()
                    agent.note_steps()
                    if agent.flusher is None:
                        agent.touch()
                except Exception as exc:
                    agent.error("backward", exc, self)

        self.wrapper = unseen(backward)
        self.autograd = autograd
        autograd.backward = self.wrapper
        agent.detail_parts.append((self.on, self.off))

    def on(self) -> None:
        if self.enabled and self.autograd.backward is self.original:
            self.autograd.backward = self.wrapper

    def off(self) -> None:
        if self.autograd.backward is self.wrapper:
            self.autograd.backward = self.original

    def facts(self) -> dict[str, Any]:
        return {"backwards": self.agent.backwards}

    def after_fork(self) -> None:
        self.depth = 0

    def disable(self) -> None:
        self.enabled = False
        self.off()
