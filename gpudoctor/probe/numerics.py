"""Overrides that change the job's numerics, asked for by a trial or `fix` through
GPUDOCTOR_OVERRIDES, and the loss tap that lets the doctor check what they did. Nothing
here runs unless asked: without these keys the job runs exactly as it would.

- `record_loss`: each one-element tensor handed to `torch.autograd.backward` (what
  `loss.backward()` passes) is kept detached, up to MAX_LOSSES, and read as a number in
  the flush thread, never in the training thread (no sync added to a step); fact
  `losses`. Keeping a reference changes nothing the job computes.
- `autocast` ("bfloat16"): each root module's forward runs under `torch.autocast` for
  the device its parameters are on, and its floating outputs come back as float32 (as
  Hugging Face Accelerate's `autocast` wrapper does), so the loss is computed as before.
  A patch on the root's class `forward` (invisible.ClassPatch) that only the roots get:
  nothing is put in the module itself, so pickling or saving it is unchanged.
- `compile`: each root module's forward compiled (`torch.compile` of its bound forward,
  the pattern torch documents for a module's method), through the same class patch.
- `matmul_precision` ("high"): `torch.set_float32_matmul_precision` (TF32 on CUDA).
- `threads` (n): `torch.set_num_threads(n)`, the intra-op threads of the training process.

The roots are those the model hooks find (models.py), at their first call measured in
detail: a root the job first calls later is overridden from then on.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any

from .agent import Agent
from .invisible import TRAINING_THREAD, ClassPatch, drop_own_frame, tracing_checks, unseen

# A trial's run measures 100 steady steps after 25 of warm-up: 1000 covers it many times
# over, and keeps the fact's message small (about 10 KB).
MAX_LOSSES = 1000
SIGNIFICANT_DIGITS = 7


def applied(agent: Agent, key: str, value: Any) -> None:
    """Say an override took effect (fact `overrides_applied`, one key per override)."""
    current = dict(agent.facts.get("overrides_applied") or {})
    current[key] = value
    agent.fact("overrides_applied", current)


def apply_numerics(agent: Agent, torch: Any) -> None:
    """The process-wide switches now; the per-root ones when a root is found."""
    o = agent.overrides
    switches = (
        ("matmul_precision", "float32_matmul_precision", str),
        ("threads", "num_threads", int),
    )
    for key, name, kind in switches:
        if o.get(key):
            try:  # torch's get_X and set_X, looked up here: an old torch lacks one
                get, set_ = getattr(torch, f"get_{name}"), getattr(torch, f"set_{name}")
                before = get()
                set_(kind(o[key]))
                applied(agent, key, [before, get()])
            except Exception as exc:
                agent.error(f"{key.replace('_', '-')}-override", exc)
    if o.get("record_loss"):
        try:
            agent.groups.append(LossTap(agent, torch))
        except Exception as exc:
            agent.error("loss-install", exc)
    if o.get("autocast") or o.get("compile"):
        roots = RootOverrides(agent, torch, str(o.get("autocast") or ""), bool(o.get("compile")))
        agent.root_callbacks.append(roots.on_root)


class LossTap:
    """The losses the job's backward calls were given (see the module's docstring)."""

    name = "loss"

    def __init__(self, agent: Agent, torch: Any) -> None:
        self.agent = agent
        self.torch = torch
        self.enabled = True
        self.pending: list[Any] = []
        self.values: list[float] = []
        self.kept = 0
        tensor_type = torch.Tensor
        original = torch.autograd.backward
        get_ident = threading.get_ident
        thread = TRAINING_THREAD

        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            if self.enabled and self.kept < MAX_LOSSES and get_ident() == thread[0]:
                try:
                    loss = args[0] if args else kwargs.get("tensors")
                    if isinstance(loss, tensor_type) and loss.numel() == 1:
                        self.pending.append(loss.detach())
                        self.kept += 1
                except Exception as exc:
                    agent.error("loss", exc, self)
            try:
                return original(*args, **kwargs)
            except BaseException as exc:
                drop_own_frame(exc)
                raise

        self.original = original
        self.wrapper = unseen(backward)
        torch.autograd.backward = self.wrapper

    def facts(self) -> dict[str, Any]:
        """In the flush thread: the losses kept so far, read as numbers (one copy to the
        host for all those of a device)."""
        taken, self.pending = self.pending, []
        if taken:
            torch = self.torch
            devices = {t.device for t in taken}
            if len(devices) == 1:
                numbers = torch.stack([t.reshape(()).double() for t in taken]).tolist()
            else:
                numbers = [float(t) for t in taken]
            self.values.extend(float(f"{v:.{SIGNIFICANT_DIGITS}g}") for v in numbers)
        return {"losses": list(self.values)} if self.values else {}

    def after_fork(self) -> None:
        self.pending, self.values, self.kept = [], [], 0

    def disable(self) -> None:
        self.enabled = False
        if self.torch.autograd.backward is self.wrapper:
            self.torch.autograd.backward = self.original


class RootOverrides:
    """Autocast and compile, put on each root as it is found (agent.root_callbacks): a
    patch on the root's class `forward` that only the roots get (the compiled forward
    is `torch.compile` of the original bound forward, one per root)."""

    def __init__(self, agent: Agent, torch: Any, autocast: str, compile: bool) -> None:
        self.agent = agent
        self.torch = torch
        self.dtype = getattr(torch, autocast) if autocast else None
        self.compile = compile
        self.busy = tracing_checks(torch)
        self.roots: weakref.WeakSet[Any] = weakref.WeakSet()  # kept across a fork
        self.compiled: dict[int, Any] = {}
        self.patches: dict[type, ClassPatch] = {}

    def on_root(self, module: Any) -> None:
        if module in self.roots:
            return
        try:
            self._override(module)
        except Exception as exc:
            self.agent.error("root-override", exc)

    def _override(self, module: Any) -> None:
        torch = self.torch
        cls = type(module)
        if "forward" in vars(module):  # set on the instance (a compiled wrapper's own)
            self.agent.limit(
                f"autocast and compile not applied to {cls.__name__}: its forward is the "
                "instance's own"
            )
            return
        param = next(module.parameters(), None)
        device_type = param.device.type if param is not None else "cpu"
        if cls not in self.patches:
            dtype, compiled = self.dtype, self.compiled
            patch: ClassPatch

            def forward(root: Any, *args: Any, **kwargs: Any) -> Any:
                call = compiled.get(id(root)) or patch.original(root, type(root))
                try:
                    if dtype is None:
                        return call(*args, **kwargs)
                    with torch.autocast(device_type, dtype=dtype):
                        out = call(*args, **kwargs)
                except BaseException as exc:
                    drop_own_frame(exc)
                    raise
                return _to_float32(torch, out)

            patch = ClassPatch(cls, "forward", unseen(forward), self.roots.__contains__, self.busy)
            if not patch.install():
                self.agent.limit(f"autocast and compile not applied to {cls.__name__}")
                return
            self.patches[cls] = patch
        if self.compile:
            self.compiled[id(module)] = torch.compile(self.patches[cls].original(module, cls))
            applied(self.agent, "compile", cls.__name__)
        if self.dtype is not None:
            applied(self.agent, "autocast", [device_type, str(self.dtype).replace("torch.", "")])
        self.roots.add(module)


def _to_float32(torch: Any, out: Any) -> Any:
    """A forward's output with its half-precision tensors cast to float32 (tensors,
    and tuples, lists and dicts of them; other objects as they are)."""
    if isinstance(out, torch.Tensor):
        return out.float() if out.dtype in (torch.bfloat16, torch.float16) else out
    if isinstance(out, tuple):
        items = [_to_float32(torch, v) for v in out]
        return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
    if isinstance(out, list):
        return [_to_float32(torch, v) for v in out]
    if isinstance(out, dict):
        for key in list(out):  # in place: a dict subclass (a ModelOutput) stays itself
            out[key] = _to_float32(torch, out[key])
        return out
    return out
