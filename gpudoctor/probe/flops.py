"""The FLOPs of one training step, counted once per process (the speed of light's
numerator: diagnosis/speed_of_light.py).

On one step measured in detail after the warm-up (the step after COUNT_AFTER_STEPS
steps, while every step is still measured in detail), a dispatch mode sees each aten
operator the step runs and adds up the FLOPs torch's own flop counter
(torch.utils.flop_counter.flop_registry: matmuls, convolutions, attention, forward and
backward) gives it, by family (matmul or convolution) and dtype. The operators run as
they are called, untouched: the mode only looks (nothing decomposed, unlike
FlopCounterMode, which may run an operator it has no formula for as its parts), so the
job's results are the same bits. It costs that one step some microseconds per operator;
no other step pays anything. Not counted: a job that compiles (a dispatch mode under
torch.compile would make Dynamo trace or guard anew), a step that does not end at an
optimizer, and operators torch has no formula for (custom kernels).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from .invisible import drop_own_frame, unseen

ENV_FLOPS = "GPUDOCTOR_FLOPS"  # "0": do not count
COUNT_AFTER_STEPS = 10  # past the doctor's warm-up (5), inside the detailed first 20
CONV_NAMES = ("convolution", "conv")  # operator names of the convolution family


class FlopCount:
    """The agent's FLOP counting: `step_ended()` at each closer's step measured in
    detail; it starts the count at one step's end and ends it at the next."""

    def __init__(self) -> None:
        self.wanted = os.environ.get(ENV_FLOPS, "1") != "0"
        self.mode: Any = None
        self.step = 0
        # the counted step's calls of its models (not evaluations'), counted by the model
        # hooks (models.py) as a detailed step's row counts them, when that step has them
        # on (0: not known): steps of unequal size (an RL episode a step) scale by it.
        # No hooks of its own: on the model, a `torch.save(model)` in that step would
        # pickle them; torch's global module hooks make a strict torch.export fail.
        self.forwards = 0

    @property
    def running(self) -> bool:
        return self.mode is not None

    def step_ended(self, agent: Any, steps_done: int) -> None:
        if self.mode is not None:
            self._finish(agent)
        elif self.wanted and steps_done >= COUNT_AFTER_STEPS:
            self.wanted = False  # once per process, whatever happens next
            if _compiles():
                agent.limit("FLOPs not counted: the job compiles (torch.compile)")
                return
            self._start(agent, steps_done)

    def _start(self, agent: Any, steps_done: int) -> None:
        mode = counting_mode(agent.torch)
        mode.__enter__()
        self.mode = mode
        self.step = steps_done
        self.forwards = 0
        # the counted step (slower under the mode, and this start in its host time) is
        # timed but not measured in detail: its split stays out of the job's shares
        agent.clock.detail = 0

    def _finish(self, agent: Any) -> None:
        mode, self.mode = self.mode, None
        mode.__exit__(None, None, None)
        agent.clock.detail = 0  # the next step's host time holds this finish: not in detail
        total = sum(mode.flops.values())
        agent.fact(
            "flops",
            {
                "per_step": int(total),
                "step": self.step,
                "forwards": self.forwards,
                # "family dtype": FLOPs (family: mm or conv)
                "by_kind": {
                    f"{family} {dtype}": int(n) for (family, dtype), n in mode.flops.items()
                },
                # operators whose formula failed on these arguments (not counted)
                "uncounted_ops": sorted(mode.uncounted)[:10],
                "tf32_matmul": _tf32_matmul(agent.torch),
                "tf32_conv": _tf32_conv(agent.torch),
            },
        )

    def evaluating(self, on: bool) -> None:
        """An evaluation's forward begins (on) or ends: its operators are not the
        step's. The step counted is the 11th, after the 10th's end: an epoch of 10
        batches has its validation there (pytorch/examples' imagenet: 40 validation
        images made MobileNet's step 9.8 GFLOP for its 5.3)."""
        if self.mode is not None:
            self.mode.paused = on

    def after_fork(self) -> None:
        """A forked child (a DataLoader worker started in the counted step) starts
        without the mode its parent had on the stack, and counts its own steps if any."""
        self.abandon()
        self.wanted = os.environ.get(ENV_FLOPS, "1") != "0"

    def abandon(self) -> None:
        """Switched off (a failure of ours): the mode comes off the job's stack."""
        mode, self.mode = self.mode, None
        self.wanted = False
        if mode is not None:
            with contextlib.suppress(Exception):
                mode.__exit__(None, None, None)


def counting_mode(torch: Any) -> Any:
    """A dispatch mode that runs each operator as called and adds up its FLOPs."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    tensor = torch.Tensor
    conv_backward = torch.ops.aten.convolution_backward

    class Counting(TorchDispatchMode):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.flops: dict[tuple[str, str], int] = {}
            self.uncounted: set[str] = set()
            self.paused = False  # an evaluation's forward: not counted

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            try:
                out = func(*args, **kwargs)
            except BaseException as exc:
                drop_own_frame(exc)  # the job's own error, as it would be without us
                raise
            if self.paused:
                return out
            packet = getattr(func, "_overloadpacket", None)
            count = flop_registry.get(packet)
            if count is None:
                return out
            try:
                if packet is conv_backward:
                    flops = conv_backward_flops(*args)
                else:
                    flops = int(count(*args, **kwargs, out_val=out))
                first = next((a for a in args if isinstance(a, tensor)), None)
                dtype = str(first.dtype).replace("torch.", "") if first is not None else "?"
                name = str(packet)
                family = "conv" if any(c in name for c in CONV_NAMES) else "mm"
                key = (family, dtype)
                self.flops[key] = self.flops.get(key, 0) + flops
            except Exception:
                self.uncounted.add(str(packet))
            return out

    unseen(Counting.__torch_dispatch__)  # warnings raised inside point past it
    return Counting()


def conv_backward_flops(grad_out: Any, x: Any, w: Any, *rest: Any) -> int:
    """A convolution's backward: its forward's FLOPs once for each gradient it makes
    (of the input, of the weight: `output_mask`), each being a convolution of as many
    multiply-adds. torch's own formula (up to 2.14 at least) counts the weight's
    gradient without the groups, `groups` times too many: a depthwise convolution's
    backward read 65 times its forward for 64 channels, and MobileNet V3 small's step 62
    GFLOP for 5 (pytorch/pytorch#183405 fixes it in torch)."""
    from torch.utils.flop_counter import conv_flop_count

    transposed, output_mask = rest[4], rest[7]
    # the forward's: the weight's shape holds the groups (in-channels / groups)
    forward = conv_flop_count(list(x.shape), list(w.shape), list(grad_out.shape), transposed)
    return int(forward) * (bool(output_mask[0]) + bool(output_mask[1]))


def _compiles() -> bool:
    """Has anything been compiled in this process (Dynamo's own frame counter)?"""
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    if dynamo_utils is None:
        return False
    try:
        counters = dynamo_utils.counters
        return bool(counters["frames"]["ok"] or counters["stats"]["unique_graphs"])
    except Exception:
        return True  # unsure: do not count


def _tf32_matmul(torch: Any) -> bool:
    try:
        return bool(torch.backends.cuda.matmul.allow_tf32)
    except Exception:
        return False


def _tf32_conv(torch: Any) -> bool:
    try:
        return bool(torch.backends.cudnn.allow_tf32)
    except Exception:
        return False
