"""What the probe hooks, and how: each hook observes, returns what it was given, and
swallows its own failures (reported once through `Probe.error`)."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import sys
from typing import Any

from .agent import DISCOVERY_MAX_CALLS, DISCOVERY_STEPS, MAX_DISTINCT_SHAPES, Probe, now

# The key of the probe's hooks in a root module's hook tables (PyTorch's own handles
# count up from 0; this one is out of their way).
ROOT_HOOK_KEY = -0x6770_6471

SYNC_METHODS = ("item", "tolist", "cpu", "__bool__", "__float__", "__int__", "__repr__")


# -- at boot: stdlib only ---------------------------------------------------------------


class _TorchWatcher(importlib.abc.MetaPathFinder):
    """Waits for `import torch`; installs the torch hooks once it has finished loading."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

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
        probe = self.probe

        def exec_module(module: Any) -> None:
            original(module)
            loader.exec_module = original  # type: ignore[method-assign]
            try:
                install_torch(probe, module)
            except Exception as exc:
                probe.error("install", exc)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install_boot(probe: Probe) -> None:
    if "torch" in sys.modules:
        install_torch(probe, sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchWatcher(probe))
    _hook_argparse(probe)


def _hook_argparse(probe: Probe) -> None:
    """Record the script's command-line options: a rerun can apply a remedy through them."""
    import argparse

    original = argparse.ArgumentParser.parse_known_args

    def parse_known_args(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        try:
            namespace = result[0]
            options = {}
            for action in self._actions:
                if not action.option_strings or action.dest == "help":
                    continue
                value = getattr(namespace, action.dest, None)
                if not isinstance(value, (int, float, str, bool, type(None))):
                    value = repr(value)
                options[action.option_strings[-1]] = {
                    "dest": action.dest,
                    "strings": list(action.option_strings),
                    "value": value,
                    "takes_value": action.nargs != 0,
                }
            if options and "script_options" not in probe.facts:
                probe.fact("script_options", options)
        except Exception as exc:
            probe.error("argparse", exc)
        return result

    argparse.ArgumentParser.parse_known_args = parse_known_args  # type: ignore[method-assign]


# -- once torch is loaded -----------------------------------------------------------------


def install_torch(probe: Probe, torch: Any) -> None:
    probe.torch = torch
    probe.fact("torch_version", str(torch.__version__))
    probe.fact("torch_cuda_build", getattr(torch.version, "cuda", None))
    probe.fact("argv", list(sys.argv))
    probe.fact("python", sys.executable)
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        if key in os.environ:
            probe.fact(key.lower(), os.environ[key])
    if probe.overrides.get("cudnn_benchmark") is not None:
        try:
            torch.backends.cudnn.benchmark = bool(probe.overrides["cudnn_benchmark"])
            probe.fact("overrides_applied", {"cudnn_benchmark": torch.backends.cudnn.benchmark})
        except Exception as exc:
            probe.error("cudnn-override", exc)
    _hook_dataloader(probe, torch)
    _hook_modules(probe, torch)
    _hook_backward(probe, torch)
    _hook_optimizer(probe, torch)
    _hook_cuda_init(probe, torch)


def _hook_cuda_init(probe: Probe, torch: Any) -> None:
    """Tensor-method hooks only matter on CUDA: install them when CUDA starts, so a
    CPU job's tensors keep their own methods (and its warnings their own line)."""
    cuda = torch.cuda
    original = cuda._lazy_init

    def _lazy_init() -> None:
        original()
        cuda._lazy_init = original
        try:
            _hook_syncs(probe, torch)
            _hook_copies(probe, torch)
            probe.fact("cuda_initialized", True)
        except Exception as exc:
            probe.error("cuda-hooks", exc)

    cuda._lazy_init = _lazy_init


def _batch_size(torch: Any, batch: Any, depth: int = 0) -> int:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else -1
    if depth < 3:
        if isinstance(batch, (list, tuple)) and batch:
            return _batch_size(torch, batch[0], depth + 1)
        if isinstance(batch, dict) and batch:
            return _batch_size(torch, next(iter(batch.values())), depth + 1)
    return -1


def _hook_dataloader(probe: Probe, torch: Any) -> None:
    from torch.utils.data import dataloader as dl

    loader_cls = dl.DataLoader
    iter_cls = dl._BaseDataLoaderIter
    original_init = loader_cls.__init__
    original_iter = loader_cls.__iter__
    original_next = iter_cls.__next__
    loaders: list[dict[str, Any]] = []

    overrides = dict(probe.overrides.get("dataloader") or {})

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if overrides:  # a remedy the user asked to apply: only then is a loader changed
            args, kwargs = _override_loader(probe, original_init, self, args, kwargs, overrides)
        original_init(self, *args, **kwargs)
        try:
            if len(loaders) < 8:
                self._gpudoctor_index = len(loaders)
                loaders.append(
                    {
                        "index": len(loaders),
                        "dataset": type(self.dataset).__name__,
                        "batch_size": self.batch_size,
                        "num_workers": self.num_workers,
                        "pin_memory": bool(self.pin_memory),
                        "prefetch_factor": self.prefetch_factor,
                        "persistent_workers": bool(self.persistent_workers),
                    }
                )
                probe.fact("dataloaders", [dict(d) for d in loaders])
        except Exception as exc:
            probe.error("dataloader-init", exc)

    def __iter__(self: Any) -> Any:
        it = original_iter(self)
        try:
            it._gpudoctor_loader = getattr(self, "_gpudoctor_index", -1)
        except Exception as exc:
            probe.error("dataloader-iter", exc)
        return it

    tensor = torch.Tensor
    sequences = (tuple, list)

    def __next__(self: Any) -> Any:
        if not probe.active:
            return original_next(self)
        t0 = now()
        batch = original_next(self)
        t1 = now()
        try:
            # the common shapes first: a tensor, or a tuple/list whose first item is one
            first = batch[0] if type(batch) in sequences and batch else batch
            if type(first) is tensor:
                shape = first.shape
                size = shape[0] if shape else -1
            else:
                size = _batch_size(torch, batch)
            probe.clock.loader_batch(t0, t1, size)
            index = getattr(self, "_gpudoctor_loader", -1)
            counts = probe.loader_batches
            counts[index] = counts.get(index, 0) + 1
            if probe.flusher is None:
                probe.touch()
        except Exception as exc:
            probe.error("dataloader-next", exc)
        return batch

    loader_cls.__init__ = __init__
    loader_cls.__iter__ = __iter__
    iter_cls.__next__ = __next__
    probe.detail_parts.append(_swap(iter_cls, "__next__", __next__, original_next))


# Keyword arguments DataLoader accepts only with worker processes (it raises otherwise).
_WORKER_ONLY = ("prefetch_factor", "persistent_workers")


def _override_loader(
    probe: Probe,
    init: Any,
    loader: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    overrides: dict[str, Any],
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The DataLoader's arguments with the requested overrides applied (positional ones
    too); worker-only settings are left out when the loader ends up with no workers.
    On any trouble the loader is built exactly as the job asked."""
    try:
        import inspect

        bound = inspect.signature(init).bind(loader, *args, **kwargs)
        arguments = bound.arguments
        extra = arguments.get("kwargs") if "kwargs" in arguments else None
        workers = overrides.get("num_workers", arguments.get("num_workers", 0))
        changed = {}
        for key, value in overrides.items():
            if key in _WORKER_ONLY and not workers:
                continue
            before = arguments.get(key, (extra or {}).get(key))
            arguments[key] = value
            changed[key] = [before, value]
        probe.fact("overrides_applied", {"dataloader": changed})
        return bound.args[1:], dict(bound.kwargs)
    except Exception as exc:
        probe.error("dataloader-override", exc)
        return args, kwargs


def _swap(owner: Any, name: str, ours: Any, original: Any) -> tuple[Any, Any]:
    """(attach, detach) that put our wrapper or the original in `owner.name`, as long
    as nobody else has replaced it since (then ours stays, and stays correct)."""

    def attach() -> None:
        if getattr(owner, name) is original:
            setattr(owner, name, ours)

    def detach() -> None:
        if getattr(owner, name) is ours:
            setattr(owner, name, original)

    return attach, detach


def _root_facts(probe: Probe, torch: Any, module: Any) -> None:
    param = next(module.parameters(), None)
    names = [type(module).__name__]
    inner = getattr(module, "module", None) or getattr(module, "_orig_mod", None)
    if inner is not None:
        names.append(type(inner).__name__)
    conv = sum(1 for m in module.modules() if isinstance(m, torch.nn.modules.conv._ConvNd))
    leaves = sum(1 for m in module.modules() if next(m.children(), None) is None)
    if param is not None:
        probe.device_type = param.device.type
        probe.device_index = param.device.index
        probe.fact("device", str(param.device))
        probe.fact("param_dtype", str(param.dtype).replace("torch.", ""))
    probe.fact("model", names)
    probe.fact("compiled", type(module).__name__ == "OptimizedModule")
    probe.fact("data_parallel", type(module).__name__ == "DataParallel")
    probe.fact("ddp", type(module).__name__ == "DistributedDataParallel")
    probe.fact("conv_layers", conv)
    probe.fact("leaf_modules", leaves)
    probe.fact("parameters", sum(p.numel() for p in module.parameters()))


def _hook_modules(probe: Probe, torch: Any) -> None:
    from torch.nn.modules import module as mod

    tensor = torch.Tensor

    def root_pre(module: Any, args: Any) -> None:
        if not probe.active:
            return
        probe.root_depth += 1
        if probe.root_depth != 1:
            return
        t = now()
        probe.fwd_t0 = t
        try:
            probe.clock.forward_start(t)
            probe.forwards_total += 1
            if not probe.backwards and torch.is_grad_enabled():  # matters until a backward
                probe.forwards_grad += 1
            if not probe.autocast_seen and torch.is_autocast_enabled(probe.device_type):
                probe.autocast_seen = True
            if args:
                first = args[0]
                if type(first) is tensor:
                    shape = first.shape
                    if shape != probe.last_shape and len(probe.shapes) < MAX_DISTINCT_SHAPES:
                        probe.last_shape = shape
                        probe.shapes.add(tuple(shape))
            if probe.flusher is None:
                probe.touch()
        except Exception as exc:
            probe.error("forward-pre", exc)

    def root_post(module: Any, args: Any, output: Any) -> None:
        if not probe.active or probe.root_depth == 0:
            return
        probe.root_depth -= 1
        if probe.root_depth == 0:
            try:
                probe.clock.forward_end(probe.fwd_t0, now())
            except Exception as exc:
                probe.error("forward-post", exc)

    def attach(module: Any) -> None:
        module._forward_pre_hooks[ROOT_HOOK_KEY] = root_pre
        module._forward_hooks[ROOT_HOOK_KEY] = root_post
        module._forward_hooks_always_called[ROOT_HOOK_KEY] = True

    def attach_roots() -> None:
        probe.root_depth = 0
        for module in probe.roots.values():
            attach(module)

    def detach_roots() -> None:
        for module in probe.roots.values():
            module._forward_pre_hooks.pop(ROOT_HOOK_KEY, None)
            module._forward_hooks.pop(ROOT_HOOK_KEY, None)
            module._forward_hooks_always_called.pop(ROOT_HOOK_KEY, None)

    # The root hooks go straight into the modules' hook tables under a key of ours, so
    # that they can come and go each step cheaply (PyTorch >= 2.0 has these tables;
    # older ones keep the hooks registered the usual way, every step measured).
    switchable = hasattr(mod.Module(), "_forward_hooks_always_called")
    if switchable:
        probe.detail_parts.append((attach_roots, detach_roots))

    def adopt(module: Any) -> None:
        probe.roots[id(module)] = module
        if switchable:
            attach(module)
        else:
            module.register_forward_pre_hook(root_pre)
            module.register_forward_hook(root_post, always_call=True)
        _root_facts(probe, torch, module)
        probe.fact("root_modules", probe.fact_list_add("root_modules", type(module).__name__))

    def discovery_pre(module: Any, args: Any) -> None:
        if not probe.active:
            return
        try:
            if (
                probe.depth == 0
                and probe.root_depth == 0
                and id(module) not in probe.roots
                and next(module.parameters(), None) is not None
            ):
                adopt(module)
                root_pre(module, args)  # its own pre-hook joins only from the next call
            probe.depth += 1
            probe.discovery_calls += 1
            if probe.clock.index >= DISCOVERY_STEPS or probe.discovery_calls > DISCOVERY_MAX_CALLS:
                probe.go_discovered()
        except Exception as exc:
            probe.error("discovery", exc)

    def discovery_post(module: Any, args: Any, output: Any) -> None:
        if probe.depth > 0:
            probe.depth -= 1

    probe.global_hooks = [
        mod.register_module_forward_pre_hook(discovery_pre),
        mod.register_module_forward_hook(discovery_post, always_call=True),
    ]


def _hook_backward(probe: Probe, torch: Any) -> None:
    original = torch.autograd.backward

    def backward(*args: Any, **kwargs: Any) -> Any:
        if not probe.active:
            return original(*args, **kwargs)
        t0 = now()
        try:
            return original(*args, **kwargs)
        finally:
            try:
                probe.clock.backward_done(t0, now())
                probe.backwards += 1
                if probe.flusher is None:
                    probe.touch()
            except Exception as exc:
                probe.error("backward", exc)

    torch.autograd.backward = backward
    probe.detail_parts.append(_swap(torch.autograd, "backward", backward, original))


def _hook_optimizer(probe: Probe, torch: Any) -> None:
    from torch.optim import optimizer as opt

    def pre(optimizer: Any, args: Any, kwargs: Any) -> None:
        if probe.active:
            probe.opt_t0 = now()

    def post(optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            if not probe.detail:
                # A counted step (see steps.py, sampling): as little as can be, since on
                # a short step every line here shows. Dormant, there is no lead (below).
                if id(optimizer) == probe.lead_optimizer:
                    t = now()
                    probe.counted_ends.append(t)
                    probe.countdown -= 1
                    if probe.countdown <= 0 or t >= probe.deadline:
                        probe.end_counting()
                return
            if not probe.active:
                return
            if probe.lead_optimizer is None:
                probe.lead_optimizer = id(optimizer)
                probe.fact("optimizer", type(optimizer).__name__)
            lead = id(optimizer) == probe.lead_optimizer
            t1 = now()
            clock = probe.clock
            clock.optimizer_done(probe.opt_t0, t1, lead)
            if lead:
                probe.optimizer_steps += 1
                profiling = probe.profiling
                if profiling.control or profiling.pending or profiling.running:
                    profiling.step_ended(probe, t1, probe.optimizer_steps)
                probe.countdown, probe.deadline = clock.plan_next(t1)
                if probe.countdown > 0 and not profiling.running:
                    probe.measure_next_step(False)
            if probe.flusher is None:
                probe.touch()
        except Exception as exc:
            probe.error("optimizer", exc)

    pre_key = opt.register_optimizer_step_pre_hook(pre).id
    opt.register_optimizer_step_post_hook(post)
    table = opt._global_optimizer_pre_hooks

    def attach() -> None:
        table[pre_key] = pre

    def detach() -> None:
        table.pop(pre_key, None)

    probe.detail_parts.append((attach, detach))


def _hook_syncs(probe: Probe, torch: Any) -> None:
    """Count host syncs on CUDA tensors (`.item()`, `.cpu()`, printing...)."""
    tensor = torch.Tensor

    def wrap(name: str) -> None:
        original = getattr(tensor, name)

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            if probe.in_sync or not probe.active or not self.is_cuda:
                return original(self, *args, **kwargs)
            probe.clock.syncs += 1
            probe.in_sync = True  # printing calls .item() inside: one sync, not many
            try:
                return original(self, *args, **kwargs)
            finally:
                probe.in_sync = False

        method.__name__ = name
        method.__doc__ = original.__doc__
        setattr(tensor, name, method)

    for name in SYNC_METHODS:
        wrap(name)


def _hook_copies(probe: Probe, torch: Any) -> None:
    """Count host-to-device copies from pageable memory or without non_blocking."""
    tensor = torch.Tensor

    def wrap(name: str) -> None:
        original = getattr(tensor, name)

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, *args, **kwargs)
            if probe.active and result is not self and not self.is_cuda and result.is_cuda:
                try:
                    blocking = not (kwargs.get("non_blocking") or any(a is True for a in args[:3]))
                    if blocking or not self.is_pinned():
                        probe.clock.pageable += 1
                except Exception as exc:
                    probe.error("copy", exc)
            return result

        method.__name__ = name
        method.__doc__ = original.__doc__
        setattr(tensor, name, method)

    wrap("to")
    wrap("cuda")
