"""The DataLoader hooks: the time the training loop waits in `__next__` for a batch, the
batch's size, and the loaders' settings read from their iterators (nothing is put on
the user's loaders or iterators). On a step measured in detail only: `__next__` is a
DetailPatch (invisible.py), in place all along, that hands a step only counted the
original at once."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from .agent import Agent
from .invisible import DetailPatch, drop_own_frame, tracing_checks, unseen

MAX_LOADERS = 8
now = time.monotonic_ns


class LoaderHooks:
    name = "dataloader"

    def __init__(self, agent: Agent, torch: Any) -> None:
        from torch.utils.data import dataloader as dl

        self.agent = agent
        self.torch = torch
        self.enabled = True
        self.loaders: list[dict[str, Any]] = []
        self.batches: dict[int, int] = {}
        self.last_iterator = 0
        self.last_loader = -1
        clock = agent.clock
        tensor = torch.Tensor
        sequences = (tuple, list)
        patch: DetailPatch

        def __next__(it: Any) -> Any:
            t0 = now()
            try:
                batch = patch.original(it, type(it))()
            except BaseException as exc:
                drop_own_frame(exc)
                raise
            t1 = now()
            try:
                # the common shapes first: a tensor, or a tuple/list whose first item is one
                first = batch[0] if type(batch) in sequences and batch else batch
                if type(first) is tensor:
                    shape = first.shape
                    size = shape[0] if shape else -1
                else:
                    size = batch_size(torch, batch)
                clock.loader_batch(t0, t1, size)
                if id(it) != self.last_iterator:
                    self.last_iterator = id(it)
                    self.last_loader = self.describe(it)
                self.batches[self.last_loader] = self.batches.get(self.last_loader, 0) + 1
                agent.discover()
                agent.note_steps()
                if agent.flusher is None:
                    agent.touch()
            except Exception as exc:
                agent.error("dataloader-next", exc, self)
            return batch

        patch = DetailPatch(
            dl._BaseDataLoaderIter,
            "__next__",
            unseen(__next__),
            self.wanted,
            tracing_checks(torch),
            agent,
        )
        patch.install()
        self.patch = patch

    def wanted(self, it: Any) -> bool:
        return self.enabled and self.agent.active

    def on(self) -> None:
        if self.enabled:
            self.patch.install()

    def off(self) -> None:
        self.patch.remove()

    def describe(self, it: Any) -> int:
        """The settings of the loader behind an iterator (one entry per distinct loader
        setting); its index."""
        sampler = getattr(it, "_index_sampler", None)
        entry: dict[str, Any] = {
            "dataset": type(getattr(it, "_dataset", None)).__name__,
            "batch_size": getattr(sampler, "batch_size", None),
            "num_workers": int(getattr(it, "_num_workers", 0)),
            "pin_memory": bool(getattr(it, "_pin_memory", False)),
            "prefetch_factor": getattr(it, "_prefetch_factor", None),
            "persistent_workers": bool(getattr(it, "_persistent_workers", False)),
        }
        root = data_root(getattr(it, "_dataset", None))
        if root is not None:
            entry["root"] = root
        for known in self.loaders:
            if {k: v for k, v in known.items() if k != "index"} == entry:
                return int(known["index"])
        if len(self.loaders) >= MAX_LOADERS:
            return -1
        index = len(self.loaders)
        self.loaders.append({"index": index, **entry})
        self.agent.fact("dataloaders", [dict(d) for d in self.loaders])
        return index

    def facts(self) -> dict[str, Any]:
        if not self.batches:
            return {}
        return {"dataloader_batches": {str(k): v for k, v in self.batches.items()}}

    def after_fork(self) -> None:
        self.batches = {}
        self.last_iterator = 0

    def disable(self) -> None:
        self.enabled = False
        self.patch.remove()


def batch_size(torch: Any, batch: Any, depth: int = 0) -> int:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else -1
    if depth < 3:
        if isinstance(batch, (list, tuple)) and batch:
            return batch_size(torch, batch[0], depth + 1)
        if isinstance(batch, dict) and batch:
            return batch_size(torch, next(iter(batch.values())), depth + 1)
        if isinstance(batch, Mapping):  # Hugging Face's collators: a BatchEncoding (UserDict)
            try:
                first = next(iter(batch.values()), None)
            except Exception:  # noqa: BLE001 - the job's own mapping: never its trouble
                return -1
            return batch_size(torch, first, depth + 1) if first is not None else -1
    return -1


def data_root(dataset: Any) -> str | None:
    """Where the dataset reads from, when it says so the common way (a `root` attribute
    that is a path: torchvision's datasets and many written like them), on it or on
    the dataset it wraps (a Subset); None otherwise. A dataset's own attribute lookup
    may fail in any way: that is never the job's trouble."""
    for candidate in (dataset, getattr_quietly(dataset, "dataset")):
        root = getattr_quietly(candidate, "root")
        if isinstance(root, (str, os.PathLike)):
            try:
                return os.fspath(root)
            except Exception:  # noqa: BLE001 - a path-like whose __fspath__ fails
                return None
    return None


def getattr_quietly(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001 - a dataset's __getattr__ can raise anything
        return None
