"""Remedies the user asked the doctor to apply in-process (a trial's treatment, through
GPUDOCTOR_OVERRIDES): DataLoader keyword arguments and cudnn.benchmark here, those
that change numerics in numerics.py. Nothing here runs unless asked: without overrides
the job's objects are built exactly as it asks."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from .agent import Agent
from .invisible import drop_own_frame, unseen
from .numerics import applied, apply_numerics

# Keyword arguments DataLoader accepts only with worker processes (it raises otherwise).
WORKER_ONLY = ("prefetch_factor", "persistent_workers")


def apply_overrides(agent: Agent, torch: Any) -> None:
    overrides = agent.overrides
    if overrides.get("cudnn_benchmark") is not None:
        try:
            torch.backends.cudnn.benchmark = bool(overrides["cudnn_benchmark"])
            applied(agent, "cudnn_benchmark", torch.backends.cudnn.benchmark)
        except Exception as exc:
            agent.error("cudnn-override", exc)
    loader_overrides = dict(overrides.get("dataloader") or {})
    if loader_overrides:
        try:
            _override_dataloader(agent, torch, loader_overrides)
        except Exception as exc:
            agent.error("dataloader-override", exc)
    apply_numerics(agent, torch)


def _override_dataloader(agent: Agent, torch: Any, overrides: dict[str, Any]) -> None:
    """DataLoader.__init__ with the requested arguments applied (positional ones too). A
    plain wrapper with the original's signature (functools.wraps): libraries that wrap
    `DataLoader.__init__` themselves (Lightning) wrap it and keep the override."""
    from torch.utils.data import dataloader as dl

    original = dl.DataLoader.__init__
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        args, kwargs = _apply(agent, signature, self, args, kwargs, overrides)
        try:
            original(self, *args, **kwargs)
        except BaseException as exc:
            drop_own_frame(exc)
            raise

    dl.DataLoader.__init__ = unseen(__init__)


def _apply(
    agent: Agent,
    signature: inspect.Signature,
    loader: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    overrides: dict[str, Any],
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments with the overrides applied; worker-only settings are left out when
    the loader ends up with no workers. On any trouble, the arguments as they were."""
    try:
        bound = signature.bind(loader, *args, **kwargs)
        arguments = bound.arguments
        extra = arguments.get("kwargs") if "kwargs" in arguments else None
        workers = overrides.get("num_workers", arguments.get("num_workers", 0))
        changed = {}
        for key, value in overrides.items():
            if key in WORKER_ONLY and not workers:
                continue
            before = arguments.get(key, (extra or {}).get(key))
            arguments[key] = value
            changed[key] = [before, value]
        applied(agent, "dataloader", changed)
        return bound.args[1:], dict(bound.kwargs)
    except Exception as exc:
        agent.error("dataloader-override", exc)
        return args, kwargs
