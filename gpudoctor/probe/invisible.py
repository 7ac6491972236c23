"""How the probe stays out of the job's sight (DESIGN.md section 3, "It is invisible").

The probe has to run code around a few calls of the job (a root module's call, a
DataLoader batch, backward()). Whatever it puts there must not be seen by anything
the job does with its own objects, nor by torch's tracers. Four means, each tried
on torch 2.13 (tests/compat/ runs real code through them):

- `ClassPatch`: a class attribute that is a descriptor. Class access (`Net.__call__`,
  `inspect.signature`, pickling a class by value, `getattr(type(m), ...)` as Dynamo does)
  and every access while torch compiles, traces (TorchScript, FX) or from another thread
  gets the original; only eager calls in the training thread get the probe's wrapper.
  So Dynamo compiles exactly what it would without the probe (same frames, graphs,
  guards and recompiles), and the probe times compiled modules from outside.
- `drop_own_frame`: a wrapper removes its own frame from the traceback of an exception
  passing through it before re-raising (bare `raise` adds no frame back, Python >= 3.11).
- `unseen`: the wrappers' code carries a file name with "importlib" and "_bootstrap" in
  it, which CPython's warnings module skips when it walks `stacklevel` frames, as it
  does for the import system's own frames: a warning points where it would without us.
- `skip_in_dynamo`: Dynamo runs the wrappers' frames as they are (never compiles them)
  and compiles the frames they call, as it would have without them.
"""

from __future__ import annotations

import copy
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

# The thread whose calls the probe times (the main thread: where torch jobs train).
TRAINING_THREAD = [threading.main_thread().ident]
# Contains "importlib" and "_bootstrap": see the module's docstring.
FILENAME = "<gpudoctor probe (importlib._bootstrap-style frames are skipped by warnings)>"
FRAMES_DROPPED = sys.version_info >= (3, 11)


# The wrappers' code objects (`unseen`), marked for Dynamo once torch is loaded; by the
# code object each was made from.
WRAPPER_CODES: list[types.CodeType] = []
_UNSEEN: dict[types.CodeType, types.CodeType] = {}


def unseen(fn: Any) -> Any:
    """A wrapper of the probe's: its code's file name set to FILENAME (warnings skip its
    frames), and Dynamo told to run its frames as they are while it treats what they
    call as it would have without them (`skip_in_dynamo`; at once if torch is loaded,
    else by `mark_wrappers` when it is)."""
    target = getattr(fn, "__func__", fn)  # a bound method: its function
    code = target.__code__
    if code.co_filename == FILENAME:
        return fn  # a method's function made unseen before
    # each wrapper made from the same `def` (a closure) gets the one code object made for
    # it the first time: an injected probe, attached again and again, keeps no more
    seen = _UNSEEN.get(code)
    if seen is None:
        seen = _UNSEEN[code] = code.replace(co_filename=FILENAME)
        WRAPPER_CODES.append(seen)
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "_C"):
            skip_in_dynamo(torch, seen)
    target.__code__ = seen
    return fn


def mark_wrappers(torch: Any) -> None:
    """The wrappers made before torch was loaded (argparse's), marked for Dynamo."""
    skip_in_dynamo(torch, *WRAPPER_CODES)


def drop_own_frame(exc: BaseException) -> None:
    """Called in a wrapper's `except` clause: its own frame leaves the traceback."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame.f_code.co_filename == FILENAME:
        exc.__traceback__ = tb.tb_next


def skip_in_dynamo(torch: Any, *functions: Any, recursive: bool = False) -> bool:
    """Dynamo never compiles these functions' frames; the frames they call it treats as
    it would have without them (`recursive`: it skips those too). Through torch's C API,
    without importing torch._dynamo; False where that API is missing."""
    try:
        from torch._C._dynamo.eval_frame import (
            _FrameAction,
            _FrameExecStrategy,
            set_code_exec_strategy,
        )

        nested = _FrameAction.SKIP if recursive else _FrameAction.DEFAULT
        for fn in functions:
            code = fn if isinstance(fn, types.CodeType) else getattr(fn, "__func__", fn).__code__
            if not recursive and code.co_filename != FILENAME:
                raise ValueError(f"{code.co_name} is not a wrapper of the probe's (unseen)")
            set_code_exec_strategy(code, _FrameExecStrategy(_FrameAction.SKIP, nested))
        return True
    except Exception:
        return False


def skip_all_in_dynamo(torch: Any, package: str) -> bool:
    """Every function of the probe's own modules, and what they call, left alone by
    Dynamo: when a compiled function falls back to eager code that calls into the probe
    (a graph break before `optimizer.step()`), Dynamo must not even look at the probe's
    frames, or its frame counts change. Wrappers that call the job's or torch's code
    are marked afterwards with `skip_in_dynamo` (not recursive)."""
    codes: list[types.CodeType] = []

    def collect(code: types.CodeType) -> None:
        codes.append(code)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                collect(const)

    wrappers = set(WRAPPER_CODES)
    for name, module in list(sys.modules.items()):
        if module is None or not (name == package or name.startswith(package + ".")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, types.FunctionType) and value.__module__ == name:
                collect(value.__code__)
            elif isinstance(value, type) and value.__module__ == name:
                for member in vars(value).values():
                    fn = getattr(member, "__func__", member)
                    if isinstance(fn, types.FunctionType):
                        collect(fn.__code__)
                    elif isinstance(member, property) and member.fget is not None:
                        collect(member.fget.__code__)
    return skip_in_dynamo(torch, *(c for c in codes if c not in wrappers), recursive=True)


def tracing_checks(torch: Any) -> Callable[[], bool]:
    """A function that says whether torch is compiling or tracing right now (Dynamo and
    export, TorchScript's tracer, FX): the probe then stays out of the way.

    Dynamo may trace code that calls it (a hook inside a compiled optimizer step): it
    asks `torch.compiler.is_compiling()` first, which Dynamo folds to a constant. Reading
    the flag behind it would make Dynamo guard on a value that differs at run time, and
    recompile at every call."""
    is_compiling = getattr(torch.compiler, "is_compiling", None) or (lambda: False)
    get_tracing_state = torch._C._get_tracing_state
    fx = sys.modules.get("torch.fx._symbolic_trace")
    fx_flag = "_is_fx_tracing_flag" if hasattr(fx, "_is_fx_tracing_flag") else None

    def busy() -> bool:
        if is_compiling() or get_tracing_state() is not None:
            return True
        return fx_flag is not None and bool(getattr(fx, fx_flag))

    return busy


class ClassPatch:
    """`owner.name` becomes this descriptor: eager instance access in the thread that
    trains gets `timed` bound to the instance when `wanted(instance)` says so; every
    other access gets the original, as if the probe were not there (see the module's
    docstring). `remove()` puts the original back."""

    __slots__ = ("owner", "name", "own", "timed", "wanted", "busy", "thread", "had_own")
    owner: type

    def __init__(
        self,
        owner: type,
        name: str,
        timed: Callable[..., Any],
        wanted: Callable[[Any], bool],
        busy: Callable[[], bool],
    ) -> None:
        self.owner = owner
        self.name = name
        self.had_own = name in owner.__dict__
        self.own = owner.__dict__.get(name)  # the class's own attribute, or inherited
        self.timed = timed
        self.wanted = wanted
        self.busy = busy
        self.thread: int | None = TRAINING_THREAD[0]  # None: any thread

    def original(self, obj: Any, objtype: Any = None) -> Any:
        if self.own is not None:
            get = getattr(type(self.own), "__get__", None)
            return get(self.own, obj, objtype) if get is not None else self.own
        if obj is None:
            return getattr(super(self.owner, objtype or self.owner), self.name)
        return getattr(super(self.owner, obj), self.name)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if (
            obj is None
            or self.busy()
            or (self.thread is not None and threading.get_ident() != self.thread)
            or not self.wanted(obj)
        ):
            return self.original(obj, objtype)
        return types.MethodType(self.timed, obj)

    def __reduce__(self) -> Any:
        """Pickled by value (cloudpickle pickles a `__main__` class so): as the original."""
        if self.own is not None:  # copy.copy of a function is the function itself
            return (copy.copy, (self.own,))
        for base in self.owner.__mro__[1:]:
            if self.name in base.__dict__:
                return (getattr, (base, self.name))
        raise TypeError(f"nothing to pickle for {self.owner.__name__}.{self.name}")

    def install(self) -> bool:
        """In place, unless somebody else has replaced the attribute meanwhile (then
        theirs stays, and the probe does without)."""
        current = self.owner.__dict__.get(self.name)
        if current is self:
            return True
        if current is not self.own:
            return False
        setattr(self.owner, self.name, self)
        return True

    def remove(self) -> None:
        if self.owner.__dict__.get(self.name) is self:
            if self.had_own:
                setattr(self.owner, self.name, self.own)
            else:
                delattr(self.owner, self.name)


class RootCall(ClassPatch):
    """The ClassPatch on a root module's class `__call__`, with the checks in the order
    that costs least on most calls: a nested call, or a step that is only counted, gets
    the original before anything else is asked (`hooks.depth`, `hooks.agent.detail`,
    read as they are: no call). Dynamo evaluates a module's `__call__` for real, as
    Python does, rather than tracing this: the order is safe."""

    __slots__ = ("hooks",)

    def __init__(
        self,
        owner: type,
        timed: Callable[..., Any],
        wanted: Callable[[Any], bool],
        busy: Callable[[], bool],
        hooks: Any,
    ) -> None:
        super().__init__(owner, "__call__", timed, wanted, busy)
        self.hooks = hooks

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        hooks = self.hooks
        # on a step only counted, a call with gradients off may be an evaluation
        # (ModelHooks._wanted): the one call there that is timed
        if obj is None or hooks.depth or (not hooks.agent.detail and hooks.grad_enabled()):
            if self.own is not None:
                return self.own.__get__(obj, objtype)
            target: Any = objtype if obj is None else obj
            return getattr(super(self.owner, target), self.name)
        return ClassPatch.__get__(self, obj, objtype)


class DetailPatch(ClassPatch):
    """A ClassPatch that stays in place and wants only the steps measured in detail: on
    a step that is only counted, an access gets the original before anything else is
    asked (`agent.detail`, read as it is: no call). Putting a patch in and taking it out
    at every detailed step cost far more than this check (bench/RESULTS.md, 2026-12-05):
    an attribute set on a class (on `nn.Module` above all) makes CPython forget what it
    had learnt about that class and every subclass, and the job's next steps ran its
    attribute look-ups the slow way until it had learnt them again."""

    __slots__ = ("agent", "fast", "fast_get")

    def __init__(
        self,
        owner: type,
        name: str,
        timed: Callable[..., Any],
        wanted: Callable[[Any], bool],
        busy: Callable[[], bool],
        agent: Any,
    ) -> None:
        super().__init__(owner, name, timed, wanted, busy)
        self.agent = agent
        # what a counted step's access binds: the class's own attribute, or one it
        # inherits from a class that cannot change (a C type's: torch.Tensor's `item`
        # is TensorBase's), found once here rather than through super() at each access
        self.fast = self.own if self.own is not None else _inherited_for_good(owner, name)
        self.fast_get = getattr(type(self.fast), "__get__", None)  # a function's, mostly

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # the original written out, as in RootCall: calling `original` here cost an
        # access half as much again (0.27 against 0.17 us, timed alone)
        if obj is None or not self.agent.detail:
            fast = self.fast
            if fast is not None:
                get = self.fast_get
                return get(fast, obj, objtype) if get is not None else fast
            target: Any = objtype if obj is None else obj
            return getattr(super(self.owner, target), self.name)
        return ClassPatch.__get__(self, obj, objtype)


IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE (3.10+): a static C type's


def _inherited_for_good(owner: type, name: str) -> Any:
    """The attribute `owner` inherits as `name`, when no class it inherits it through
    can ever change (all of them C types up to the one that defines it); else None."""
    for base in owner.__mro__[1:]:
        if not base.__flags__ & IMMUTABLE_TYPE:
            return None
        if name in base.__dict__:
            return base.__dict__[name]
    return None


def patched(owner: type, name: str) -> ClassPatch | None:
    """The probe's patch on `owner.name`, if there is one."""
    value = owner.__dict__.get(name)
    return value if isinstance(value, ClassPatch) else None
