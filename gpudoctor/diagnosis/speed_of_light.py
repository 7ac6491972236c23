"""How fast the job could be: the FLOPs of a step (counted by the probe, probe/flops.py)
against the device's peak, and the time a step would take at a reachable share of it.

Model FLOPs utilisation (MFU) as PaLM defines it (Chowdhery et al. 2022, appendix B):
the FLOPs a step does over the step's time, against the peak. Where the work runs at
several peaks (bf16 matmuls beside fp32 ones), each kind's FLOPs count at their own
peak: the step's time at peak is the sum of each kind's FLOPs over its peak, and MFU is
that time over the step's. The peak is the GPU's datasheet figure for the dtype
(peaks.py), or on a CPU job the matmul rate the doctor measured on this machine before
the job started (sources/cpu_peak.py).

"Could take": the step's FLOPs at REACHABLE of peak, no input wait, no host syncs:
what the best-tuned large training runs reach. PaLM reports 46.2% MFU (table 3) and
Megatron-LM 52% of the A100's peak on a trillion-parameter GPT (Narayanan et al.,
SC'21); half is a step that has nothing left to fix but its kernels.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from gpudoctor.diagnosis.peaks import gpu_peaks, peak_for
from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _

REACHABLE = 0.5


@dataclass(frozen=True)
class SpeedOfLight:
    flops_per_step: int
    step_ms: float  # the median steady step
    achieved_tflops: float
    peak_tflops: float | None  # the step's work's peak (kinds weighted by their FLOPs)
    mfu: float | None
    could_take_ms: float | None  # at REACHABLE of peak
    device: str  # what the peak is of
    basis: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "flops_per_step": self.flops_per_step,
            "achieved_tflops": _digits(self.achieved_tflops),
            "peak_tflops": _digits(self.peak_tflops),
            "mfu": _digits(self.mfu),
            # as the report's median step (report/build.py): the two lines agree
            "step_ms": round(self.step_ms, 3),
            "could_take_ms": _digits(self.could_take_ms),
            "reachable": REACHABLE,
            "device": self.device,
            "basis": self.basis,
        }


def speed_of_light(w: Window) -> SpeedOfLight | None:
    """The job's speed of light, once the probe counted a step's FLOPs; else None."""
    counted = w.facts.get("flops")
    if not isinstance(counted, dict):
        return None
    try:
        total = int(counted["per_step"])
        kinds = {str(k): int(v) for k, v in dict(counted.get("by_kind", {})).items()}
    except (KeyError, TypeError, ValueError):
        return None
    step_ms = w.step_median_ms
    if total <= 0 or step_ms <= 0 or w.estimated:
        return None
    how = _("FLOPs counted by the probe on step {step} (torch's flop formulas)").format(
        step=counted.get("step", "?")
    )
    scale = _size_ratio(w, counted)
    if scale is not None:
        factor, typical, calls = scale
        total = int(total * factor)
        kinds = {k: int(v * factor) for k, v in kinds.items()}
        how = _("{how}, scaled from its {calls} model calls to the median step's {typical}").format(
            how=how, calls=calls, typical=f"{typical:g}"
        )
    achieved = total / (step_ms / 1e3) / 1e12
    peak = _peak(w, kinds, counted)
    if peak is None:
        return SpeedOfLight(
            total, step_ms, achieved, None, None, None, "unknown",
            _("{how}; no peak known for this device").format(how=how),
        )  # fmt: skip
    at_peak_s, device, where = peak
    peak_tflops = total / at_peak_s / 1e12 if at_peak_s > 0 else None
    mfu = at_peak_s / (step_ms / 1e3)
    return SpeedOfLight(
        flops_per_step=total,
        step_ms=step_ms,
        achieved_tflops=achieved,
        peak_tflops=peak_tflops,
        mfu=mfu,
        could_take_ms=at_peak_s / REACHABLE * 1e3,
        device=device,
        basis=_("{how}; peak: {where}").format(how=how, where=where),
    )


def _size_ratio(w: Window, counted: dict[str, Any]) -> tuple[float, float, int] | None:
    """Steps of unequal size (an RL episode a step, its calls of the policy as many as
    the episode's moves): the counted step's FLOPs scaled to the median step's, by their
    calls of the model (the counted step's, and the median of the steps measured in
    detail). None where they are the same, or either is unknown."""
    calls = counted.get("forwards")
    if not isinstance(calls, int) or calls <= 0:
        return None
    per_step = [s.forwards for s in w.detailed_steps if s.detail and s.forwards > 0]
    if not per_step:
        return None
    typical = statistics.median(per_step)
    if typical == calls:
        return None
    return typical / calls, typical, calls


def _peak(
    w: Window, kinds: dict[str, int], counted: dict[str, Any]
) -> tuple[float, str, str] | None:
    """The step's FLOPs' time at peak (s), the device, and where the peak comes from."""
    on_gpu = str(w.facts.get("device", "cpu")).startswith("cuda")
    if on_gpu:
        name = str(w.facts.get("cuda_device_name") or "") or _job_gpu_name(w)
        found = gpu_peaks(name) if name else None
        if found is None:
            return None
        figures, source = found
        seconds = 0.0
        used: dict[str, float] = {}
        for kind, flops in kinds.items():
            family, _sep, dtype = kind.partition(" ")
            tf32 = bool(counted.get("tf32_conv" if family == "conv" else "tf32_matmul"))
            tflops, key = peak_for(figures, dtype, tf32)
            used[key] = tflops
            seconds += flops / (tflops * 1e12)
        figures_used = ", ".join(f"{k} {v:g} TFLOP/s" for k, v in sorted(used.items()))
        where = _("{name}, dense {figures} ({source})").format(
            name=name, figures=figures_used, source=source
        )
        return seconds, name, where
    peak = w.cpu_peak
    if peak is None:
        return None
    total = sum(kinds.values())
    where = _(
        "a {size}x{size} {dtype} matmul the doctor measured on one of this machine's cores "
        "(within the last day), times its {cores} cores: {gflops:.1f} GFLOP/s"
    ).format(size=peak.size, dtype=peak.dtype, cores=peak.cores, gflops=peak.tflops * 1e3)
    device = _("CPU, {cores} cores").format(cores=peak.cores)
    return total / (peak.tflops * 1e12), device, where


def _job_gpu_name(w: Window) -> str:
    """The name of the GPU the job's processes are on (the first GPU, when none says)."""
    names = [g.name for g in w.gpus if any(p.pid in w.job_pids for p in g.processes)]
    if not names and w.gpus:
        names = [w.gpus[-1].name]
    return names[-1] if names else ""


def _digits(x: float | None) -> float | None:
    """Four significant digits (a CPU's TFLOP/s are small numbers)."""
    return float(f"{x:.4g}") if x is not None else None
