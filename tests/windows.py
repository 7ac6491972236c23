"""Hand-built windows for the rule tests: plain values, no I/O."""

from __future__ import annotations

from typing import Any

from gpudoctor.diagnosis.window import Window
from gpudoctor.model import (
    GpuProcess,
    GpuSample,
    HostSample,
    JobExit,
    OtherProcess,
    ProcSample,
    StepRecord,
)

MS = 1_000_000
S = 1_000_000_000
JOB_PID = 4242


def steps(
    n: int = 40,
    wall_ms: float = 10.0,
    loader_ms: float = 0.0,
    outside_ms: float = 0.0,
    forward_ms: float = 3.0,
    backward_ms: float = 4.0,
    optimizer_ms: float = 1.0,
    syncs: int = 0,
    pageable: int = 0,
    batch: int | None = 32,
    pid: int = JOB_PID,
    forwards: int = 1,
    t0: int = 10 * S,
) -> tuple[StepRecord, ...]:
    out = []
    t = t0
    for i in range(n):
        t += int(wall_ms * MS)
        out.append(StepRecord(
            pid=pid, number=i, t_end_mono_ns=t, wall_ns=int(wall_ms * MS), loader_ns=int(loader_ms * MS),
            outside_ns=int(outside_ms * MS), forward_ns=int(forward_ms * MS), backward_ns=int(backward_ms * MS),
            optimizer_ns=int(optimizer_ms * MS), forwards=forwards, batch_size=batch, syncs=syncs,
            pageable_copies=pageable,
        ))  # fmt: skip
    return tuple(out)


def host(
    n: int = 10,
    job_cores: float = 1.0,
    cores: int = 2,
    iowait: float = 0.0,
    status: str = "running",
    t0: int = 10 * S,
    cpu_pct: float | None = None,
    spacing_ns: int = 40 * MS,
    read_mb_s: float = 0.0,
    run_delay: float | None = None,
    others_cores: float | None = None,
    others: tuple[OtherProcess, ...] = (),
    steal: float | None = None,
    blocked: float | None = None,
    niced: float | None = None,
) -> tuple[HostSample, ...]:
    """Samples spread over the default steps (a real run samples once a second over
    a longer run; the rules care about the share of samples, not their rate)."""
    per_core = cpu_pct if cpu_pct is not None else min(100.0, job_cores / cores * 100)
    return tuple(
        HostSample(
            t_mono_ns=t0 + i * spacing_ns, cpu_pct_per_core=(per_core,) * cores, iowait_pct=iowait,
            load_1m=1.0, mem_used_bytes=2 << 30, mem_total_bytes=16 << 30, swap_used_bytes=0,
            swap_total_bytes=0, disk_read_bytes_per_s=5e7, disk_write_bytes_per_s=0.0,
            net_rx_bytes_per_s=0.0, net_tx_bytes_per_s=0.0, cores_allowed=cores,
            job=(ProcSample(JOB_PID, 1, "python", "main", job_cores * 100, 1 << 30, read_mb_s * 1e6, 0.0, status, 4),),
            others_cpu_cores=others_cores, job_run_delay_fraction=run_delay, steal_pct=steal,
            main_blocked_fraction=blocked,
            others=others, others_niced_cpu_cores=niced,
        )
        for i in range(n)
    )  # fmt: skip


def gpus(
    n: int = 20,
    util: int = 95,
    mem_fraction: float = 0.8,
    reasons: tuple[str, ...] = (),
    t0: int = 16 * S,
    cc: tuple[int, int] = (9, 0),
    foreign: tuple[GpuProcess, ...] = (),
) -> tuple[GpuSample, ...]:
    total = 80 << 30
    return tuple(
        GpuSample(
            t_mono_ns=t0 + i * S // 2, index=0, name="NVIDIA H100", uuid="GPU-x", util_gpu_pct=util,
            util_mem_pct=30, mem_used_bytes=int(total * mem_fraction), mem_total_bytes=total,
            power_w=400.0, power_limit_w=700.0, temp_c=60, fan_pct=None, sm_clock_mhz=1980,
            mem_clock_mhz=2619, pcie_rx_bytes_per_s=1 << 20, pcie_tx_bytes_per_s=1 << 20,
            clock_event_reasons=reasons, compute_capability=cc,
            processes=(GpuProcess(JOB_PID, int(total * mem_fraction), util), *foreign),
        )
        for i in range(n)
    )  # fmt: skip


def window(**kw: Any) -> Window:
    kw.setdefault("steps", steps())
    kw.setdefault("host", host())
    kw.setdefault("facts", {"device": "cpu", "torch_version": "2.13.0"})
    kw.setdefault("job_pids", frozenset({JOB_PID}))
    if "steps_by_pid" not in kw:
        kw["steps_by_pid"] = {JOB_PID: kw["steps"]} if kw["steps"] else {}
    return Window(**kw)


def cuda_facts(**extra: Any) -> dict[str, Any]:
    facts = {"device": "cuda:0", "torch_version": "2.13.0", "param_dtype": "float32", "forwards": 40,
             "autocast_seen": False, "cuda_capability": [9, 0], "cuda_total_bytes": 80 << 30,
             "cudnn_benchmark": False, "conv_layers": 0}  # fmt: skip
    facts.update(extra)
    return facts


def oom_exit() -> JobExit:
    return JobExit(
        1, "oom", None, "OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB"
    )
