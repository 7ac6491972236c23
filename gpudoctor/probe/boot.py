"""What the probe installs at start-up, before the job imports anything: a watcher for
`import torch` (the torch hook groups are installed once it has loaded) and the
argparse hook (a script's options may be parsed before torch is imported)."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
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
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        if key in os.environ:
            agent.fact(key.lower(), os.environ[key])
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
