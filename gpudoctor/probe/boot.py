"""What the probe installs at start-up, before the job imports anything: a watcher for
`import torch` (the torch hook groups are installed once it has loaded) and the
argparse hook (a script's options may be parsed before torch is imported)."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
import threading
from collections.abc import Mapping
from typing import Any

from .agent import Agent
from .invisible import drop_own_frame, unseen


class TorchWatcher(importlib.abc.MetaPathFinder):
    """Waits for torch to load, however it is imported: `import torch` or a library that
    imports it, `importlib.import_module`, a LazyLoader, a thread. Each lookup of
    "torch" (the import system's, or a caller's own `importlib.util.find_spec("torch")`,
    as transformers, datasets and accelerate ask before they import it) gets the spec the
    finders after this one give, the same object; its loader runs the probe's
    `exec_module` once, the torch hook groups installed after the original. The watcher
    stays in sys.meta_path until torch has loaded: a spec a caller looks at and throws
    away must not cost the import that follows."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.installed = False
        self.local = threading.local()  # a finder after this one may ask again

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch" or getattr(self.local, "inside", False):
            return None
        self.local.inside = True
        try:  # what the other finders raise is theirs to raise, as without the probe
            spec = self._others(name, path, target)
        finally:
            self.local.inside = False
        if spec is not None:
            try:
                self._watch(spec.loader)
            except Exception as exc:
                self.agent.error("torch-watch", exc)
        return spec

    def _others(self, name: str, path: Any, target: Any) -> Any:
        """What the finders after this one answer, asked in sys.meta_path's order."""
        for finder in list(sys.meta_path):
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                return spec
        return None

    def _watch(self, loader: Any) -> None:
        if loader is None or not hasattr(loader, "exec_module"):
            return
        if getattr(loader.__dict__.get("exec_module"), "_gpudoctor_watch", False):
            return  # this loader is watched already (asked twice for the same spec)
        had_own = "exec_module" in loader.__dict__
        original = loader.exec_module
        watcher = self

        def exec_module(module: Any) -> None:
            try:
                original(module)
            except BaseException as exc:
                drop_own_frame(exc)
                raise
            finally:
                with contextlib.suppress(Exception):
                    if had_own:
                        loader.exec_module = original
                    else:
                        del loader.exec_module
            watcher.loaded(module)

        exec_module._gpudoctor_watch = True  # type: ignore[attr-defined]
        loader.exec_module = unseen(exec_module)

    def loaded(self, module: Any) -> None:
        """torch has loaded: the watcher leaves, and the hook groups go in (once)."""
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        if self.installed:
            return
        self.installed = True
        try:
            install_torch(self.agent, module)
        except Exception as exc:
            self.agent.error("install", exc)


def install(agent: Agent) -> None:
    from .args import ArgparseHooks

    try:
        agent.groups.append(ArgparseHooks(agent))
    except Exception as exc:
        agent.error("argparse-install", exc)
    if "torch" in sys.modules:
        install_torch(agent, sys.modules["torch"])
    else:
        sys.meta_path.insert(0, TorchWatcher(agent))


# Where launchers put a process's rank, its rank on its node and the world's size:
# torchrun and torch.distributed.launch; Slurm's srun (one task a process); Open MPI's
# and MPICH's (Hydra/PMI) mpirun.
_LAUNCHERS = (
    ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
    ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"),
)


def launcher_ranks(environ: Mapping[str, str]) -> dict[str, str]:
    """rank, local_rank and world_size as the first launcher that set them says. Slurm
    and MPI set theirs in a one-process job too (an sbatch script's single task): a
    world of one is no distributed job, and torchrun started under them sets its own."""
    for rank, local, size in _LAUNCHERS:
        if rank not in environ:
            continue
        if rank != "RANK" and environ.get(size, "1").strip() in ("", "0", "1"):
            continue
        out = {"rank": environ[rank]}
        for key, name in ((local, "local_rank"), (size, "world_size")):
            if key in environ:
                out[name] = environ[key]
        return out
    return {}


def install_torch(agent: Agent, torch: Any) -> None:
    """The torch hook groups, each on its own: one that cannot install is left out and
    said so; the others work."""
    import os

    from .autograd import BackwardHooks
    from .cuda import CudaHooks
    from .housekeeping import HousekeepingHooks
    from .invisible import FRAMES_DROPPED, mark_wrappers, skip_all_in_dynamo
    from .loader import LoaderHooks
    from .models import ModelHooks
    from .optim import OptimizerHooks
    from .overrides import apply_overrides

    agent.torch = torch
    agent.fact("torch_version", str(torch.__version__))
    agent.fact("torch_cuda_build", getattr(torch.version, "cuda", None))
    agent.fact("argv", list(sys.argv))
    agent.fact("python", sys.executable)
    for key, value in launcher_ranks(os.environ).items():
        agent.fact(key, value)
    if "LOCAL_WORLD_SIZE" in os.environ:  # torchrun: the ranks on this node
        agent.fact("local_world_size", os.environ["LOCAL_WORLD_SIZE"])
    if "CUDA_VISIBLE_DEVICES" in os.environ:  # which GPUs `cuda:N` means (devices.py)
        agent.fact("cuda_visible_devices", os.environ["CUDA_VISIBLE_DEVICES"])
    if not FRAMES_DROPPED:
        agent.limit(
            "Python < 3.11: a traceback through a call the probe times shows one frame of it"
        )
    # the per-step hooks run on the steps measured in detail (clock.py, sampling): the
    # counts they keep are samples, and the audit says so beside them
    agent.fact("forwards_counted_on", "steps measured in detail")
    apply_overrides(agent, torch)
    groups = (ModelHooks, LoaderHooks, BackwardHooks, OptimizerHooks, HousekeepingHooks, CudaHooks)
    for group in groups:
        try:
            agent.groups.append(group(agent, torch))
        except Exception as exc:
            agent.error(f"{group.name}-install", exc)
            agent.limit(f"{group.name} hooks not installed ({type(exc).__name__}: {exc})")
    # Dynamo leaves the probe's frames alone (invisible.py): its helpers and what they
    # call entirely, its wrappers themselves but not what they call.
    package = __name__.rpartition(".")[0]
    if not skip_all_in_dynamo(torch, package):
        agent.limit(
            "this torch has no Dynamo frame-skip API: torch.compile may see the probe's frames"
        )
    mark_wrappers(torch)
