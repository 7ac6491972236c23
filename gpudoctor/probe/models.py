"""The model hooks: which modules are the job's roots, and their calls timed.

A root is a module with parameters that the training loop calls itself, not from
inside another module: the model, its DDP or compiled wrapper, a GAN's two halves.
The probe learns of modules from torch's global registration tables (a submodule or a
parameter assigned to a module: `_global_module_registration_hooks`,
`_global_parameter_registration_hooks`, entered under a key of the probe's own so that
no hook handle's id moves) and from unpickling and deepcopy (`Module.__setstate__`);
nothing is put in any module's own hook tables.

The class of each such module gets a ClassPatch on `__call__` (invisible.py) at once,
so that the very first call is seen: a call at depth 0 in the training thread is a
root's, and is timed; nested calls, calls while torch compiles or traces, and calls on
steps that are only counted get the original. DISCOVERY_STEPS steps after the last new
module, the classes that no root belongs to lose their patch again: their nested calls
then cost nothing at all.
"""

from __future__ import annotations

import inspect
import sys
import time
import weakref
from typing import Any

from .agent import Agent
from .clock import END_BACKWARD, SAMPLE_MIN_GAP_NS
from .invisible import ClassPatch, RootCall, drop_own_frame, tracing_checks, unseen
from .running import running_objects

# The probe's key in torch's global registration tables (handles count up from 0).
KEY = -0x6770_6471
MAX_DISTINCT_SHAPES = 8
# Steps after the last new patch that a class keeps it (see the docstring); and how many
# times a class is patched again after losing its patch (a job may build modules every
# step: its classes must not stay patched, nor keep the window open, for ever).
DISCOVERY_STEPS = 3
MAX_PATCHES_PER_CLASS = 3

now = time.monotonic_ns


class ModelHooks:
    name = "models"

    def __init__(self, agent: Agent, torch: Any) -> None:
        self.agent = agent
        self.torch = torch
        self.busy = tracing_checks(torch)
        self.enabled = True
        self.patched_times: dict[type, int] = {}
        self.discovery_until = 0
        self.roots: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self.patches: list[ClassPatch] = []
        self.provisional: list[ClassPatch] = []
        self.verdicts: dict[int, tuple[Any, bool]] = {}
        self.described: set[int] = set()
        self.depth = 0
        self.evaluating = False  # the root call under way is an evaluation (clock.py)
        self.eval_detail_ns = 0  # when an evaluation last switched to detail
        # roots called with gradients on: the models the job trains (ids; bounded)
        self.trained: set[int] = set()
        self.device_type = "cpu"
        self.forwards = 0
        self.forwards_with_grad = 0
        self.autocast_seen = False
        self.shapes: set[tuple[int, ...]] = set()
        self.last_shape: Any = None
        self.root_names: list[str] = []
        self.timed = self._make_timed()
        self.grad_enabled = torch.is_grad_enabled  # read by RootCall on counted steps

        from torch.nn.modules import module as mod

        mod._global_module_registration_hooks[KEY] = self._on_registration
        mod._global_parameter_registration_hooks[KEY] = self._on_registration
        self.tables = (
            mod._global_module_registration_hooks,
            mod._global_parameter_registration_hooks,
        )
        setstate = ClassPatch(
            mod.Module, "__setstate__", unseen(self._setstate), lambda m: self.enabled, self.busy
        )
        setstate.thread = None
        setstate.install()
        self.setstate = setstate
        agent.discover = self.discover
        # a process joined late (injected.py): its models are looked for at the first
        # step's end in the training thread, where no forward is under way
        self.look_for_running = agent.injected

    # -- learning of modules ----------------------------------------------------------------

    def _on_registration(self, module: Any, name: str, value: Any) -> None:
        """torch calls this when a submodule or parameter is assigned to `module`."""
        if self.enabled and not self.busy():
            try:
                cls = type(module)
                times = self.patched_times.get(cls, 0)
                if times < MAX_PATCHES_PER_CLASS and self._patch(cls):
                    self.patched_times[cls] = times + 1
                    self.discovery_until = self.agent.clock.index + DISCOVERY_STEPS
            except Exception as exc:
                self.agent.error("models-registration", exc, self)

    def _setstate(self, module: Any, state: Any) -> None:
        """Module.__setstate__: a module unpickled (torch.load) or deep-copied."""
        try:
            self.setstate.original(module, type(module))(state)
        except BaseException as exc:
            drop_own_frame(exc)
            raise
        self._on_registration(module, "", None)

    def discover(self, from_flush_thread: bool = False) -> None:
        """DISCOVERY_STEPS steps after the last new module: the classes that no root
        belongs to lose their patch. From the flush thread only while torch is not
        compiling (a class never changes under Dynamo's eyes)."""
        if self.look_for_running and not from_flush_thread:
            self.look_for_running = False
            self.adopt_running()
        if not self.provisional or self.agent.clock.index < self.discovery_until:
            return
        if from_flush_thread and self.busy():
            return
        # taken whole first: the training thread and the flush thread may both be here
        # (a step's end and a flush at once), and only one of them must remove each patch
        provisional, self.provisional = self.provisional, []
        try:
            # a wrapper's model keeps its class patched: it may be called unwrapped
            roots = list(self.roots.values())
            root_classes = {type(m) for root in roots for m in wrapped(root)}
            parts = self._trained_parts(roots)
            root_classes.update(type(m) for m in parts)
            self.trained.update(id(m) for m in parts)
            for patch in provisional:
                if not any(issubclass(c, patch.owner) for c in root_classes):
                    patch.remove()
                    if patch in self.patches:
                        self.patches.remove(patch)
        except Exception as exc:
            self.agent.error("models-discovery", exc, self)

    def _trained_parts(self, roots: list[Any]) -> list[Any]:
        """Of each root the job trains, the one part whose parameters an optimizer
        steps, when there is just one: timm's train.py trains a task module that holds
        the model (stepped), its average (not stepped) and its loss, and validates the
        model alone; that call is of a model the job trains. A model's own layers are
        several parts, and keep no patch (each call of theirs would cost the patch)."""
        parts = []
        try:  # (from the flush thread, a model changed meanwhile: none found, this time)
            stepped = self.agent.stepped_parameters()
            for root in roots if stepped else []:
                if id(root) not in self.trained:
                    continue
                held = root.__dict__.get("_modules")
                if type(held) is not dict:
                    continue
                found = [
                    m for m in list(held.values())
                    if m is not None and any(id(p) in stepped for p in m.parameters())
                ]  # fmt: skip
                if len(found) == 1:
                    parts.append(found[0])
        except Exception as exc:
            self.agent.error("models-trained-parts", exc)
        return parts

    def adopt_running(self) -> None:
        """The models a process made before the probe arrived: the modules its training
        thread's frames hold (their locals, and one level of the attributes of what
        they hold: a trainer's `self.model`) and `__main__`'s, each with its submodules,
        learnt as if they had just been registered (the first calls at depth 0 tell the
        roots, as at a launch)."""
        try:
            found = outermost(running_objects(self.torch.nn.Module, sys._getframe(1)))
            for module in found:
                for sub in module.modules():
                    self._on_registration(sub, "", None)
            self.agent.fact("models_found_running", len(found))
        except Exception as exc:
            self.agent.error("models-running", exc)

    def _patch(self, cls: type) -> bool:
        """A provisional patch on `cls.__call__`; False when none was put there."""
        if isinstance(inspect.getattr_static(cls, "__call__", None), ClassPatch):
            return False  # it, or a class it inherits from, is patched already
        patch = RootCall(cls, self.timed, self._wanted, self.busy, self)
        try:
            if not patch.install():
                return False  # somebody else's __call__ is there now: theirs stays
        except (TypeError, AttributeError) as exc:
            self.agent.limit(f"calls of {cls.__name__} are not timed ({exc})")
            return False
        self.patches.append(patch)
        self.provisional.append(patch)
        return True

    # -- timing a root's call -------------------------------------------------------------

    def _wanted(self, module: Any) -> bool:
        """A call to time: at depth 0, on a step measured in detail, of a module with
        parameters (a model, not a parameter-free transform the loop calls)."""
        agent = self.agent
        if self.depth or not agent.active or not self.enabled:
            return False
        if not agent.detail:  # a counted step: only an evaluation is timed (clock.py)
            return not self.torch.is_grad_enabled() and self._evaluation(module)
        verdict = self.verdicts.get(id(module))
        if verdict is None or verdict[0]() is not module:
            try:
                has = next(module.parameters(), None) is not None
            except Exception:
                has = False
            if len(self.verdicts) > 1024:
                self.verdicts.clear()
            verdict = self.verdicts[id(module)] = (weakref.ref(module), has)
        return verdict[1]

    def _make_timed(self) -> Any:
        enter, leave = self._enter, self._leave

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            # What to call, first: class access gives the original whether the class is
            # patched or not (the group may switch itself off in `enter`).
            call = type(module).__call__
            t0 = enter(module, args)
            try:
                return call(module, *args, **kwargs)
            except BaseException as exc:
                drop_own_frame(exc)
                raise
            finally:
                leave(t0)

        return unseen(__call__)

    def _trains(self, module: Any) -> None:
        """A root called with gradients on: a model the job trains, and so is the model
        a wrapper of it holds (DDP's and DataParallel's `module`, a compiled module's
        `_orig_mod`): Trainer evaluates a DDP job's model unwrapped."""
        self.trained.update(id(m) for m in wrapped(module))

    def _evaluation(self, module: Any) -> bool:
        """A call with gradients off is an evaluation, once the job trains (clock.py),
        when it is of a model the job trains (called with gradients on before) in eval
        mode (`model.eval()`: every evaluation loop of Trainer, Lightning, timm, nanoGPT
        and pytorch/examples calls it; a call in training mode inside a step, as
        pseudo-labels and rollouts are made, is the step's); or of another model while
        an evaluation is under way (no training forward since): an average of the
        weights (timm validates its EMA model after the model), the best model loaded
        back for a final test."""
        clock = self.agent.clock
        if clock.level < END_BACKWARD:
            return False
        if clock.eval_mark is not None:
            return True
        return id(module) in self.trained and not module.training

    def _measure_evaluation(self) -> None:
        """An evaluation's first forward on a step only counted: the counting ends here,
        and the step is measured in detail from now on, so that the whole evaluation is
        timed (its loader's batches, the loop around its forwards: clock.evaluated), not
        only its forwards. At most once in SAMPLE_MIN_GAP_NS, the sampling's own
        bound: a job that calls its model with gradients off in every short step (a
        GAN's generator for the discriminator's step, a policy's rollout) keeps most of
        its steps counted, and their such calls are timed alone."""
        t = now()
        if t - self.eval_detail_ns >= SAMPLE_MIN_GAP_NS:
            self.eval_detail_ns = t
            self.agent.end_counting()

    def _enter(self, module: Any, args: tuple[Any, ...]) -> int:
        self.depth = 1
        t = now()
        try:
            agent = self.agent
            torch = self.torch
            clock = agent.clock
            key = id(module)
            if torch.is_grad_enabled():
                self.evaluating = False
                if key not in self.trained and len(self.trained) < 64:
                    self._trains(module)
                if not agent.backwards:  # matters until a backward
                    self.forwards_with_grad += 1
            else:
                self.evaluating = self._evaluation(module)
                if self.evaluating:
                    agent.flops.evaluating(True)
                    if not agent.detail:
                        self._measure_evaluation()
            if not self.evaluating:
                clock.forward_start(t, key)
                if agent.flops.mode is not None:
                    agent.flops.forwards += 1  # the FLOP-counted step's calls (flops.py)
                if not agent.backwards and (torch.is_grad_enabled() or module.training):
                    clock.training_row = True  # no backward yet: a step's own (clock.py)
            self.forwards += 1
            if not self.autocast_seen and torch.is_autocast_enabled(self.device_type):
                self.autocast_seen = True
            if args:
                first = args[0]
                if type(first) is torch.Tensor:
                    shape = first.shape
                    if shape != self.last_shape and len(self.shapes) < MAX_DISTINCT_SHAPES:
                        self.last_shape = shape
                        self.shapes.add(tuple(shape))
            if id(module) not in self.described:
                self.roots[id(module)] = module  # called by the loop itself: a root
                self._describe(module)
            if agent.flusher is None:
                agent.touch()
        except Exception as exc:
            self.agent.error("forward", exc, self)
        return t

    def _leave(self, t0: int) -> None:
        self.depth = 0
        try:
            if self.evaluating:
                self.agent.clock.evaluated(t0, now())
                self.agent.flops.evaluating(False)
                return
            self.agent.clock.forward_end(t0, now())
            self.agent.note_steps()
        except Exception as exc:
            self.agent.error("forward", exc, self)

    def _describe(self, module: Any) -> None:
        """The facts of a root, at its first timed call."""
        self.described.add(id(module))
        torch = self.torch
        agent = self.agent
        name = type(module).__name__
        names = [name]
        chain = wrapped(module)
        if len(chain) > 1:  # a wrapper's model (DDP's, a compiled module's)
            names.append(type(chain[1]).__name__)
        param = next(module.parameters(), None)
        if param is not None:
            self.device_type = param.device.type
            agent.fact("device", str(param.device))
            agent.fact("param_dtype", str(param.dtype).replace("torch.", ""))
        conv = torch.nn.modules.conv._ConvNd
        agent.fact("model", names)
        agent.fact("compiled", name == "OptimizedModule")
        agent.fact("data_parallel", name == "DataParallel")
        agent.fact("ddp", name == "DistributedDataParallel")
        agent.fact("conv_layers", sum(1 for m in module.modules() if isinstance(m, conv)))
        agent.fact("leaf_modules", sum(1 for m in module.modules() if not m._modules))
        agent.fact("parameters", sum(p.numel() for p in module.parameters()))
        agent.fact("intra_op_threads", int(torch.get_num_threads()))
        if name not in self.root_names:
            self.root_names.append(name)
            agent.fact("root_modules", list(self.root_names))
        for callback in agent.root_callbacks:
            try:
                callback(module)
            except Exception as exc:
                agent.error("root-override", exc)

    # -- the group's life -------------------------------------------------------------------

    def facts(self) -> dict[str, Any]:
        self.discover(from_flush_thread=True)
        return {
            "forwards": self.forwards,
            "forwards_with_grad": self.forwards_with_grad,
            # evaluation (clock.py), on the steps measured in detail
            "evaluation_ns": self.agent.clock.eval_ns,
            "evaluation_forwards": self.agent.clock.eval_forwards,
            "autocast_seen": self.autocast_seen,
            "input_shapes": sorted(list(s) for s in self.shapes),
        }

    def after_fork(self) -> None:
        self.depth = 0
        self.evaluating = False
        self.trained.clear()
        self.forwards = self.forwards_with_grad = 0
        self.described.clear()

    def disable(self) -> None:
        """Off for good: the tables and classes as they were."""
        self.enabled = False
        for table in self.tables:
            table.pop(KEY, None)
        self.setstate.remove()
        for patch in self.patches:
            patch.remove()
        self.patches.clear()
        self.provisional.clear()


def wrapped(module: Any) -> list[Any]:
    """The module, and the models it wraps (DDP's and DataParallel's `module`, a compiled
    module's `_orig_mod`), outermost first."""
    chain = [module]
    for _ in range(3):
        held = module.__dict__.get("_modules")
        if type(held) is not dict:  # a ScriptModule's is a mapping of its own, no wrapper
            break
        module = held.get("module") or held.get("_orig_mod")
        if module is None:
            break
        chain.append(module)
    return chain


def outermost(modules: list[Any]) -> list[Any]:
    """The modules not nested in another of them."""
    nested = {id(sub) for m in modules for sub in list(m.modules())[1:]}
    return [m for m in modules if id(m) not in nested]
