"""The CUDA hooks: host syncs on CUDA tensors (`.item()`, `.cpu()`, printing, ...) and
host-to-device copies from pageable memory or without non_blocking, counted per step;
a sync between two steps is timed as the step's bookkeeping (clock.py).

Only a job that uses CUDA needs them: they are installed when CUDA initialises, so a
CPU job's tensors keep their own methods. Each method is a DetailPatch on torch.Tensor
(invisible.py): `torch.Tensor.item` is still the original to anyone who looks, and a
call on a CPU tensor, or while torch compiles or traces, gets the original too. So does
every call on a step that is only counted, at once: such a step's row has no parts
(clock.py), its syncs and copies included, and a model's forward may call `.to()` a few
hundred times a step (each access through the full checks cost ~1 us more than the
original, bench/RESULTS.md).

GPUDOCTOR_PROBE_TENSOR_HOOKS=always installs them at once whatever the device, and
=cpu also counts CPU tensors as if they were CUDA ones: the tests use them to run real
training code through these hooks on a machine with no GPU.
"""

from __future__ import annotations

import os
import time
from typing import Any

from .agent import Agent
from .invisible import ClassPatch, DetailPatch, drop_own_frame, tracing_checks, unseen

now = time.monotonic_ns
ENV_TENSOR_HOOKS = "GPUDOCTOR_PROBE_TENSOR_HOOKS"
SYNC_METHODS = ("item", "tolist", "cpu", "__bool__", "__float__", "__int__", "__repr__")
COPY_METHODS = ("to", "cuda")


class CudaHooks:
    name = "cuda"

    def __init__(self, agent: Agent, torch: Any) -> None:
        self.agent = agent
        self.torch = torch
        self.enabled = True
        self.in_sync = False
        self.patches: list[ClassPatch] = []
        self.busy = tracing_checks(torch)
        mode = os.environ.get(ENV_TENSOR_HOOKS)
        self.any_device = mode == "cpu"
        # a process joined late (injected.py) whose CUDA is up already: at once
        running = agent.injected and torch.cuda.is_initialized()
        if mode in ("always", "cpu") or running:
            self.install()
            return
        cuda = torch.cuda
        original = cuda._lazy_init

        def _lazy_init() -> None:
            try:
                original()
            except BaseException as exc:
                drop_own_frame(exc)
                raise
            finally:
                if cuda._lazy_init is self.lazy_init:
                    cuda._lazy_init = original
            try:
                self.install()
                agent.fact("cuda_initialized", True)
            except Exception as exc:
                agent.error("cuda-hooks", exc, self)

        self.lazy_init = unseen(_lazy_init)
        self.original_lazy_init = original
        cuda._lazy_init = self.lazy_init

    def install(self) -> None:
        tensor = self.torch.Tensor
        agent = self.agent
        clock = agent.clock

        def make_sync(name: str) -> ClassPatch:
            patch: ClassPatch

            def method(t: Any, *args: Any, **kwargs: Any) -> Any:
                self.in_sync = True  # printing calls .item() inside: one sync, not many
                clock.syncs += 1
                t0 = now() if agent.detail else 0  # a counted step keeps no split
                try:
                    return patch.original(t, type(t))(*args, **kwargs)
                except BaseException as exc:
                    drop_own_frame(exc)
                    raise
                finally:
                    self.in_sync = False
                    # waiting for the GPU between two steps (a loss printed after the
                    # update) is the step's bookkeeping, never data wait (clock.py)
                    if t0:
                        clock.housekeeping(t0, now())

            patch = DetailPatch(tensor, name, unseen(method), self.wants_sync, self.busy, agent)
            return patch

        def make_copy(name: str) -> ClassPatch:
            patch: ClassPatch

            def method(t: Any, *args: Any, **kwargs: Any) -> Any:
                try:
                    result = patch.original(t, type(t))(*args, **kwargs)
                except BaseException as exc:
                    drop_own_frame(exc)
                    raise
                try:
                    if result is not t and (result.is_cuda or self.any_device):
                        blocking = not (
                            kwargs.get("non_blocking") or any(a is True for a in args[:3])
                        )
                        if blocking or not t.is_pinned():
                            clock.pageable += 1
                except Exception as exc:
                    agent.error("copy", exc, self)
                return result

            patch = DetailPatch(tensor, name, unseen(method), self.wants_copy, self.busy, agent)
            return patch

        for name in SYNC_METHODS:
            self.patches.append(make_sync(name))
        for name in COPY_METHODS:
            self.patches.append(make_copy(name))
        for patch in self.patches:
            patch.install()

    def wants_sync(self, t: Any) -> bool:
        on_device = t.is_cuda or self.any_device
        return self.enabled and not self.in_sync and self.agent.active and on_device

    def wants_copy(self, t: Any) -> bool:
        return self.enabled and self.agent.active and (not t.is_cuda or self.any_device)

    def facts(self) -> dict[str, Any]:
        return {}

    def disable(self) -> None:
        self.enabled = False
        for patch in self.patches:
            patch.remove()
        cuda = self.torch.cuda
        if getattr(self, "lazy_init", None) is not None and cuda._lazy_init is self.lazy_init:
            cuda._lazy_init = self.original_lazy_init
