"""What the probe installs at start-up, before the job imports anything: a watcher for
`import torch` (the torch hook groups are installed once it has loaded) and the
argparse hook (a script's options may be parsed before torch is imported)."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Mapping
from typing import Any

from .agent import Agent
from .invisible import drop_own_frame, unseen


class TorchWatcher(importlib.abc.MetaPathFinder):
    """Waits for `import torch`; installs the torch hook groups once it has loaded. It
    leaves sys.meta_path at the first import of torch."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module
        agent = self.agent

        def exec_module(module: Any) -> None:
            try:
                original(module)
            except BaseException as exc:
                drop_own_frame(exc)
                raise
            finally:
                loader.exec_module = original  # type: ignore[method-assign]
            try:
                install_torch(agent, module)
            except Exception as exc:
                agent.error("install", exc)

        loader.exec_module = unseen(exec_module)  # type: ignore[method-assign]
        return spec


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
    if "CUDA_VISIBLE_DEVICES" in os.environ:  # which GPUs `cuda:N` means (devices.py)
        agent.fact("cuda_visible_devices", os.environ["CUDA_VISIBLE_DEVICES"])
    if not FRAMES_DROPPED:
        agent.limit(
            "Python < 3.11: a traceback through a call the probe times shows one frame of it"
        )
    apply_overrides(agent, torch)
    for group in (ModelHooks, LoaderHooks, BackwardHooks, OptimizerHooks, CudaHooks):
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
