"""Each diagnosis rule on small hand-built windows: fires on its signal, stays quiet
just below its threshold or without its signal."""

from __future__ import annotations

import dataclasses

import pytest
from windows import JOB_PID, cuda_facts, gpus, host, oom_exit, steps, window

from gpudoctor.diagnosis.engine import FINDING_IDS, RULES, diagnose
from gpudoctor.diagnosis.remedies import CATALOGUE
from gpudoctor.diagnosis.rules import (
    comm_bound,
    cpu_saturated,
    cudnn_benchmark_off,
    data_parallel,
    gpu_throttled,
    grad_in_inference,
    host_sync,
    input_bound,
    low_gpu_util,
    memory_pressure,
    no_mixed_precision,
    noisy_neighbour,
    not_compiled,
    out_of_memory,
    pageable_copies,
    slow_storage,
    small_batch,
    straggler,
)
from gpudoctor.diagnosis.window import Window
from gpudoctor.model import GpuProcess, OtherProcess

LOADER = {"dataloaders": [{"num_workers": 0, "pin_memory": False, "persistent_workers": False}]}


def ids(w) -> list[str]:  # type: ignore[no-untyped-def]
    return [f.id for f in diagnose(w)]


def test_every_design_finding_has_a_rule() -> None:
    assert set(FINDING_IDS) == {
        "input-bound", "slow-storage", "cpu-saturated", "host-sync", "pageable-copies",
        "low-gpu-util", "small-batch", "no-mixed-precision", "out-of-memory", "memory-pressure",
        "not-compiled", "cudnn-benchmark-off", "grad-in-inference", "data-parallel",
        "gpu-throttled", "straggler", "comm-bound", "noisy-neighbour", "low-goodput",
    }  # fmt: skip
    assert set(SIGNALS) == set(FINDING_IDS)


# A window with each rule's signal (the cases the tests below try one by one).
SIGNALS = {
    "input-bound": lambda: window(steps=steps(loader_ms=5.0), facts=LOADER),
    "slow-storage": lambda: window(
        steps=steps(loader_ms=7.0), host=host(iowait=60.0), facts=LOADER
    ),
    "cpu-saturated": lambda: window(
        steps=steps(loader_ms=5.0),
        host=host(job_cores=1.95, cores=2),
        facts={"dataloaders": [{"num_workers": 2, "pin_memory": False}]},
    ),
    "host-sync": lambda: window(steps=steps(syncs=1)),
    "pageable-copies": lambda: window(steps=steps(pageable=2), facts=LOADER),
    "low-gpu-util": lambda: window(gpus=gpus(util=30)),
    "small-batch": lambda: window(gpus=gpus(util=20, mem_fraction=0.2)),
    "no-mixed-precision": lambda: window(facts=cuda_facts()),
    "out-of-memory": lambda: window(exit=oom_exit()),
    "memory-pressure": lambda: window(
        facts=cuda_facts(), gauges=({"peak_reserved": int(0.95 * (80 << 30)), "alloc_retries": 0},)
    ),
    "not-compiled": lambda: window(
        steps=steps(forward_ms=1.6),
        facts={"torch_version": "2.13.0", "compiled": False, "leaf_modules": 80},
    ),
    "cudnn-benchmark-off": lambda: window(
        facts=cuda_facts(conv_layers=3, input_shapes=[[64, 3, 32, 32]])
    ),
    "grad-in-inference": lambda: window(
        facts={"forwards": 30, "forwards_with_grad": 30, "backwards": 0}
    ),
    "data-parallel": lambda: window(facts={"data_parallel": True}),
    "gpu-throttled": lambda: window(
        gpus=gpus(n=8, reasons=("hw-thermal",)) + gpus(n=12, t0=20 * 10**9)
    ),
    "straggler": lambda: ddp_window(slow_host_ms=12.0),
    "comm-bound": lambda: ddp_window(shared_comm_ms=10.0),
    "noisy-neighbour": lambda: window(host=host(run_delay=0.4, others_cores=1.0)),
    "low-goodput": lambda: ledger_window(evaluation_s=30.0, checkpoint_s=5.0),
}

S = 10**9


def ledger_window(
    evaluation_s: float = 0.0, checkpoint_s: float = 0.0, wall_s: float = 100.0
) -> Window:
    """A run of `wall_s` from its start (0), its first step at 10 s and its last ending
    at 98 s, with this much evaluation and checkpointing between its steps."""
    parts = {
        "first_step_start": 10 * S, "last_step_end": 98 * S, "evaluation": int(evaluation_s * S),
        "evaluation_before": 0, "checkpoint": int(checkpoint_s * S), "checkpoints": 12,
    }  # fmt: skip
    facts = {"ledger_ns": parts, "evaluation_forwards": 4000}
    return window(facts=facts, start_mono_ns=0, end_mono_ns=int(wall_s * S))


def test_the_ledger_adds_up_and_low_goodput_names_the_largest_other_part() -> None:
    from gpudoctor.diagnosis.rules import low_goodput

    w = ledger_window(evaluation_s=40.0, checkpoint_s=5.0)
    ledger = w.ledger
    assert ledger is not None
    total = (ledger.startup_s + ledger.training_s + ledger.evaluation_s + ledger.checkpoint_s
             + ledger.other_host_s)  # fmt: skip
    assert abs(total - ledger.wall_s) < 1e-9
    assert (ledger.startup_s, ledger.training_s, ledger.other_host_s) == (10.0, 43.0, 2.0)
    finding = low_goodput.evaluate(w)
    assert finding is not None and finding.severity == "medium"  # 43 of 90 s: 48%
    assert finding.remedies == ("evaluate-less", "checkpoint-less")
    assert "evaluation 44% (40.0 s, 4000 forwards)" in finding.evidence
    # a run that trains most of its time after start-up: nothing
    assert low_goodput.evaluate(ledger_window(evaluation_s=5.0)) is None
    # checkpoints the largest part: their remedy first
    heavy = low_goodput.evaluate(ledger_window(evaluation_s=6.0, checkpoint_s=30.0))
    assert heavy is not None and heavy.remedies == ("checkpoint-less", "evaluate-less")
    # too short a run after start-up to say
    short = ledger_window(evaluation_s=2.0, checkpoint_s=2.0, wall_s=15.0)
    assert low_goodput.evaluate(short) is None
    # no ledger (an older probe, a watch): nothing
    assert low_goodput.evaluate(window()) is None


BURNER = OtherProcess(
    pid=8261, name="python3", user="alice", command="python3 burn.py", cpu_cores=0.98
)


def test_noisy_neighbour_names_who_takes_the_cpu_and_needs_both_signals() -> None:
    busy = window(host=host(run_delay=0.4, others_cores=1.0, others=(BURNER,)))
    finding = noisy_neighbour.evaluate(busy)
    assert finding is not None and finding.severity == "medium"
    assert "waited for a core 40%" in finding.evidence
    assert "python3 (pid 8261, alice) 1.0 core" in finding.evidence
    assert "burn.py" not in finding.evidence  # another user's arguments stay theirs
    assert finding.estimated_gain == 0.4
    # the job's own threads outnumber the cores: it waits, but nobody else is busy
    assert noisy_neighbour.evaluate(window(host=host(run_delay=0.4, others_cores=0.2))) is None
    # others busy on cores the job does not need: it never waits
    assert noisy_neighbour.evaluate(window(host=host(run_delay=0.05, others_cores=1.0))) is None
    # older records (no run-queue readings) say nothing
    assert noisy_neighbour.evaluate(window()) is None
    # a passing spell: in fewer than half the samples
    spell = host(n=3, run_delay=0.6, others_cores=1.5) + host(
        n=7, run_delay=0.0, others_cores=0.0, t0=11 * 10**9
    )
    assert noisy_neighbour.evaluate(window(host=spell)) is None
    high = noisy_neighbour.evaluate(window(host=host(run_delay=0.6, others_cores=1.0, steal=30.0)))
    assert (
        high is not None and high.severity == "high" and "hypervisor's steal: 30%" in high.evidence
    )
    # niced neighbours: the wait is theirs all the same, and the words say they are niced
    niced = noisy_neighbour.evaluate(
        window(host=host(run_delay=0.3, others_cores=1.0, niced=1.0, others=(BURNER,)))
    )
    assert (
        niced is not None and "busy (1.0 of those cores niced: niced work still" in niced.evidence
    )
    assert "niced" not in (noisy_neighbour.evaluate(busy) or niced).evidence


def test_cpu_saturated_by_someone_else_says_by_whom() -> None:
    facts = {"dataloaders": [{"num_workers": 2, "pin_memory": False}]}
    taken = host(job_cores=0.9, cores=2, cpu_pct=98.0, others_cores=1.05, others=(BURNER,))
    finding = cpu_saturated.evaluate(window(steps=steps(loader_ms=5.0), host=taken, facts=facts))
    assert finding is not None
    assert (
        "uses 0.9 of them; other processes take 1.1: python3 (pid 8261, alice)" in finding.evidence
    )
    alone = host(job_cores=1.95, cores=2, others_cores=0.0)
    finding = cpu_saturated.evaluate(window(steps=steps(loader_ms=5.0), host=alone, facts=facts))
    assert finding is not None and "other processes" not in finding.evidence


def test_cores_a_niced_process_fills_are_not_the_cpu_saturated() -> None:
    """A niced background job fills the core the job leaves and yields it when the job
    wants it: the machine reads full, yet a worker more would help (input-bound's remedy),
    so cpu-saturated, whose words are "more workers cannot help", is not raised."""
    facts = {"dataloaders": [{"num_workers": 1, "pin_memory": False}]}
    work = steps(loader_ms=5.0)
    niced = host(job_cores=1.0, cores=2, cpu_pct=97.0, others_cores=0.94, niced=0.94)
    assert cpu_saturated.evaluate(window(steps=work, host=niced, facts=facts)) is None
    assert ids(window(steps=work, host=niced, facts=facts))[0] == "input-bound"
    # the same cores held at the job's own priority: saturated, and by whom it says
    held = host(job_cores=1.0, cores=2, cpu_pct=97.0, others_cores=0.94, niced=0.0)
    finding = cpu_saturated.evaluate(window(steps=work, host=held, facts=facts))
    assert finding is not None and "other processes take 0.9" in finding.evidence
    # part niced: under the line once the niced part is left out; or still over it, and
    # only the part not niced named as taken
    part = host(job_cores=1.0, cores=2, cpu_pct=97.0, others_cores=0.94, niced=0.3)
    finding = cpu_saturated.evaluate(window(steps=work, host=part, facts=facts))
    assert finding is None  # 1.94 - 0.3 = 1.64 of 2 busy: under the 90% line
    mostly = host(job_cores=1.6, cores=2, cpu_pct=99.0, others_cores=0.38, niced=0.1)
    finding = cpu_saturated.evaluate(window(steps=work, host=mostly, facts=facts))
    assert finding is not None and "other processes take 0.3" in finding.evidence


def test_noisy_neighbour_on_the_jobs_gpu() -> None:
    other = GpuProcess(
        pid=777,
        mem_used_bytes=1 << 30,
        sm_util_pct=60,
        user="bob",
        command="/usr/bin/python3 x.py --token abc",
    )
    finding = noisy_neighbour.evaluate(window(gpus=gpus(foreign=(other,))))
    assert finding is not None and finding.id == "noisy-neighbour"
    assert "pid 777 (bob) python3 up to 60% of the SMs" in finding.evidence
    assert "abc" not in finding.evidence
    idle = GpuProcess(pid=777, mem_used_bytes=1 << 30, sm_util_pct=5)
    assert noisy_neighbour.evaluate(window(gpus=gpus(foreign=(idle,)))) is None


@pytest.mark.parametrize("finding_id", sorted(SIGNALS))
def test_each_rule_on_its_signal_offers_remedies_from_the_catalogue(finding_id: str) -> None:
    rule = next(r for r in RULES if finding_id == r.ID)
    finding = rule.evaluate(SIGNALS[finding_id]())
    assert finding is not None and finding.id == finding_id
    assert all(r in CATALOGUE for r in finding.remedies), finding.remedies
    assert len(set(finding.remedies)) == len(finding.remedies)


@pytest.mark.parametrize(
    ("fraction", "severity"), [(0.04, None), (0.06, "low"), (0.25, "medium"), (0.45, "high")]
)
def test_input_bound_bands(fraction: float, severity: str | None) -> None:
    w = window(steps=steps(loader_ms=10 * fraction), facts=LOADER)
    finding = input_bound.evaluate(w)
    assert (finding.severity if finding else None) == severity
    if finding:
        assert finding.remedies[0] == "more-workers"
        assert f"{fraction:.0%}" in finding.evidence
        assert all(r in CATALOGUE for r in finding.remedies)


def test_input_bound_without_dataloader_uses_host_time_outside_the_model() -> None:
    w = window(steps=steps(outside_ms=6.0))
    finding = input_bound.evaluate(w)
    assert finding is not None and finding.severity == "high"
    assert "outside the model" in finding.evidence
    assert finding.remedies[0] == "preprocess-offline"


def test_outside_time_with_an_idle_process_is_called_waiting_not_input_code() -> None:
    """The main thread is blocked (asleep, on a lock) 55% of the time in a step that is
    60% outside the model: it waited then, it did not compute input."""
    idle = window(steps=steps(outside_ms=6.0), host=host(blocked=0.55))
    finding = input_bound.evaluate(idle)
    assert finding is not None and "mostly idle then: it waits" in finding.evidence
    assert "hand-written input code" not in finding.evidence
    assert finding.remedies[0] == "more-workers" and "preprocess-offline" not in finding.remedies
    # blocked for less than half the outside share: computing, as before
    for blocked in (0.25, None):
        busy = input_bound.evaluate(window(steps=steps(outside_ms=6.0), host=host(blocked=blocked)))
        assert busy is not None and "hand-written input code" in busy.evidence


def test_input_bound_needs_enough_steps() -> None:
    assert input_bound.evaluate(window(steps=steps(n=6, loader_ms=8.0))) is None


def test_warm_up_steps_are_not_counted() -> None:
    slow_start = steps(n=5, loader_ms=9.0)
    fast = steps(n=40, loader_ms=0.0, t0=slow_start[-1].t_end_mono_ns)
    assert input_bound.evaluate(window(steps=slow_start + fast)) is None


def test_slow_storage_by_iowait_and_by_disk_sleep() -> None:
    base = {"steps": steps(loader_ms=7.0), "facts": LOADER}
    assert slow_storage.evaluate(window(host=host(iowait=60.0), **base)) is not None
    assert slow_storage.evaluate(window(host=host(status="disk-sleep"), **base)) is not None
    assert slow_storage.evaluate(window(host=host(iowait=40.0), **base)) is None
    # the loader reads from storage (not the page cache) and is not busy on a core: the
    # read counter's average over each second, steadier than a state seen at one moment
    waiting = host(read_mb_s=200.0, job_cores=0.4)
    assert slow_storage.evaluate(window(host=waiting, **base)) is not None
    busy = host(read_mb_s=200.0, job_cores=0.9)  # decoding what it read: the CPU holds it
    assert slow_storage.evaluate(window(host=busy, **base)) is None
    cached = host(read_mb_s=0.0, job_cores=0.4)  # served from the page cache
    assert slow_storage.evaluate(window(host=cached, **base)) is None
    # iowait without waiting for data is not a training problem
    assert slow_storage.evaluate(window(host=host(iowait=90.0), facts=LOADER)) is None


def test_slow_storage_ranks_above_input_bound() -> None:
    w = window(steps=steps(loader_ms=7.0), host=host(status="disk-sleep"), facts=LOADER)
    assert ids(w)[:2] == ["slow-storage", "input-bound"]


def test_cpu_saturated_when_the_workers_fill_the_allowed_cores() -> None:
    workers = {"dataloaders": [{"num_workers": 2, "pin_memory": False}]}
    busy = window(steps=steps(loader_ms=5.0), host=host(job_cores=1.95, cores=2), facts=workers)
    idle = window(steps=steps(loader_ms=5.0), host=host(job_cores=1.0, cores=2), facts=workers)
    assert cpu_saturated.evaluate(busy) is not None
    assert cpu_saturated.evaluate(idle) is None
    assert ids(busy)[0] == "cpu-saturated"
    # no workers yet: the cores look full (spinning compute threads), more workers is the fix
    no_workers = window(
        steps=steps(loader_ms=5.0), host=host(job_cores=1.95, cores=2), facts=LOADER
    )
    assert cpu_saturated.evaluate(no_workers) is None
    assert ids(no_workers)[0] == "input-bound"


def test_more_workers_is_not_offered_when_every_core_has_one() -> None:
    facts = {"dataloaders": [{"num_workers": 2, "pin_memory": False}]}
    finding = input_bound.evaluate(window(steps=steps(loader_ms=5.0), facts=facts))
    assert finding is not None and "more-workers" not in finding.remedies


def test_host_sync_counts_per_step() -> None:
    assert host_sync.evaluate(window(steps=steps(syncs=1))) is not None
    assert host_sync.evaluate(window(steps=steps(syncs=0))) is None
    assert host_sync.evaluate(window(steps=steps(syncs=3))).severity == "medium"  # type: ignore[union-attr]


def test_pageable_copies() -> None:
    finding = pageable_copies.evaluate(window(steps=steps(pageable=2), facts=LOADER))
    assert finding is not None and finding.remedies == ("pin-memory", "non-blocking")
    pinned = {"dataloaders": [{"pin_memory": True}]}
    pinned_finding = pageable_copies.evaluate(window(steps=steps(pageable=1), facts=pinned))
    assert pinned_finding is not None and pinned_finding.remedies == ("non-blocking",)
    assert pageable_copies.evaluate(window(steps=steps(pageable=0))) is None


def test_low_gpu_util_uses_p95_after_warm_up() -> None:
    assert low_gpu_util.evaluate(window(gpus=gpus(util=30))) is not None
    assert low_gpu_util.evaluate(window(gpus=gpus(util=60))) is None
    # busy only during start-up (the first seconds), idle after: still low
    start = gpus(n=10, util=100, t0=0)
    assert low_gpu_util.evaluate(window(gpus=start + gpus(util=10))) is not None


def test_low_gpu_util_names_its_causes() -> None:
    w = window(gpus=gpus(util=10), steps=steps(loader_ms=6.0), facts=LOADER)
    low = next(f for f in diagnose(w) if f.id == "low-gpu-util")
    assert "input-bound" in low.evidence and low.remedies[0] == "more-workers"


def test_small_batch_needs_idle_gpu_spare_memory_and_no_input_wait() -> None:
    assert small_batch.evaluate(window(gpus=gpus(util=20, mem_fraction=0.2))) is not None
    assert small_batch.evaluate(window(gpus=gpus(util=20, mem_fraction=0.7))) is None
    assert (
        small_batch.evaluate(
            window(gpus=gpus(util=20, mem_fraction=0.2), steps=steps(loader_ms=3.0))
        )
        is None
    )
    assert small_batch.evaluate(window(gpus=gpus(util=90, mem_fraction=0.2))) is None
    w = window(gpus=gpus(util=20, mem_fraction=0.2))
    assert ids(w)[:2] == ["small-batch", "low-gpu-util"]
    found = small_batch.evaluate(w)
    assert found is not None and "batch size 32, " in found.evidence


def test_small_batch_under_accumulation_says_each_forward_sees_a_share() -> None:
    """Gradient accumulation: 4 micro-batches of 8 a step. The step's 32 samples are not
    what each forward call gives the GPU: the evidence says both."""
    w = window(gpus=gpus(util=20, mem_fraction=0.2), steps=steps(batch=32, forwards=4))
    found = small_batch.evaluate(w)
    assert found is not None
    assert "32 samples a step in 4 forward calls" in found.evidence
    assert "batch size 32" not in found.evidence


def test_no_mixed_precision() -> None:
    assert no_mixed_precision.evaluate(window(facts=cuda_facts())) is not None
    assert no_mixed_precision.evaluate(window(facts=cuda_facts(autocast_seen=True))) is None
    assert no_mixed_precision.evaluate(window(facts=cuda_facts(param_dtype="bfloat16"))) is None
    assert no_mixed_precision.evaluate(window(facts=cuda_facts(cuda_capability=[6, 1]))) is None
    assert no_mixed_precision.evaluate(window(facts={"device": "cpu", "forwards": 99})) is None


def test_out_of_memory_from_the_exit_or_a_rank() -> None:
    assert out_of_memory.evaluate(window(exit=oom_exit())).severity == "high"  # type: ignore[union-attr]
    end = {
        "oom": True,
        "exception_type": "OutOfMemoryError",
        "exception_message": "CUDA out of memory",
    }
    assert out_of_memory.evaluate(window(ends={JOB_PID: end})) is not None
    assert out_of_memory.evaluate(window()) is None
    assert (
        ids(window(exit=oom_exit(), steps=steps(loader_ms=9.0), facts=LOADER))[0] == "out-of-memory"
    )


def test_memory_pressure_by_peak_and_by_retries() -> None:
    total = 80 << 30
    peak = [{"peak_reserved": int(total * 0.95), "alloc_retries": 0}]
    calm = [{"peak_reserved": int(total * 0.5), "alloc_retries": 0}]
    retrying = [{"peak_reserved": int(total * 0.5), "alloc_retries": n} for n in (0, 1, 3, 6)]
    once = [{"peak_reserved": int(total * 0.5), "alloc_retries": n} for n in (0, 1, 1, 1)]
    assert memory_pressure.evaluate(window(facts=cuda_facts(), gauges=tuple(peak))) is not None
    assert memory_pressure.evaluate(window(facts=cuda_facts(), gauges=tuple(calm))) is None
    retried = memory_pressure.evaluate(window(facts=cuda_facts(), gauges=tuple(retrying)))
    assert retried is not None and retried.severity == "high"
    assert memory_pressure.evaluate(window(facts=cuda_facts(), gauges=tuple(once))) is None


def test_not_compiled_heuristic() -> None:
    facts = {"torch_version": "2.13.0", "compiled": False, "leaf_modules": 80}
    short_ops = window(steps=steps(forward_ms=1.6), facts=facts)  # 20 us per leaf
    long_ops = window(steps=steps(forward_ms=8.0), facts=facts)  # 100 us per leaf
    assert not_compiled.evaluate(short_ops) is not None
    assert not_compiled.evaluate(long_ops) is None
    assert (
        not_compiled.evaluate(
            window(steps=steps(forward_ms=1.6), facts={**facts, "compiled": True})
        )
        is None
    )
    assert (
        not_compiled.evaluate(
            window(steps=steps(forward_ms=1.6), facts={**facts, "torch_version": "1.13.1"})
        )
        is None
    )


def test_cudnn_benchmark_off_needs_convs_on_cuda_with_one_shape() -> None:
    facts = cuda_facts(conv_layers=3, input_shapes=[[64, 3, 32, 32]])
    assert cudnn_benchmark_off.evaluate(window(facts=facts)) is not None
    assert cudnn_benchmark_off.evaluate(window(facts={**facts, "cudnn_benchmark": True})) is None
    assert (
        cudnn_benchmark_off.evaluate(
            window(facts={**facts, "input_shapes": [[64, 3, 32, 32], [64, 3, 48, 48]]})
        )
        is None
    )
    assert cudnn_benchmark_off.evaluate(window(facts={**facts, "device": "cpu"})) is None


def test_grad_in_inference() -> None:
    facts = {"forwards": 30, "forwards_with_grad": 30, "backwards": 0}
    assert grad_in_inference.evaluate(window(facts=facts)) is not None
    assert grad_in_inference.evaluate(window(facts={**facts, "backwards": 30})) is None
    assert grad_in_inference.evaluate(window(facts={**facts, "forwards_with_grad": 0})) is None
    assert (
        grad_in_inference.evaluate(
            window(facts={"forwards": 10, "forwards_with_grad": 10, "backwards": 0})
        )
        is None
    )


def test_data_parallel() -> None:
    assert data_parallel.evaluate(window(facts={"data_parallel": True})).remedies == ("ddp",)  # type: ignore[union-attr]
    assert data_parallel.evaluate(window(facts={"data_parallel": False})) is None


def test_gpu_throttled_over_ten_percent_of_samples() -> None:
    hot = gpus(n=8, reasons=("hw-thermal",)) + gpus(n=12, t0=20 * 10**9)
    idle_only = gpus(n=20, reasons=("gpu-idle",))
    assert gpu_throttled.evaluate(window(gpus=hot)) is not None
    assert gpu_throttled.evaluate(window(gpus=idle_only)) is None


def ddp_window(slow_host_ms: float = 0.0, ranks: int = 3, shared_comm_ms: float = 0.0) -> Window:
    """DDP as it looks from inside: every rank's step as long as the slowest's; rank 1
    does `slow_host_ms` of extra host work and the others wait that long in backward
    (the gradient all-reduce); `shared_comm_ms` of all-reduce all ranks wait in."""
    wall = 9.0 + slow_host_ms + shared_comm_ms
    by_pid = {
        100 + r: steps(
            pid=100 + r, wall_ms=wall, loader_ms=1.0, forward_ms=3.0, optimizer_ms=1.0,
            backward_ms=4.0 + shared_comm_ms + (0.0 if r == 1 else slow_host_ms),
        )
        for r in range(ranks)
    }  # fmt: skip
    facts = {100 + r: {"rank": str(r), "local_rank": str(r)} for r in range(ranks)}
    return window(steps=by_pid[100], steps_by_pid=by_pid, facts_by_pid=facts)


def test_straggler_names_the_rank_the_others_wait_for_and_its_cause() -> None:
    finding = straggler.evaluate(ddp_window(slow_host_ms=12.0))
    assert finding is not None
    assert finding.evidence.startswith("rank 1 (pid 101) does 21.0 ms of its own work a step")
    assert "against 9.0 ms for the other 2 (median), 2.33x" in finding.evidence
    assert "about 2.33x as fast if it kept up" in finding.evidence  # 21 ms -> 9 ms
    assert "12.0 ms more in host code" in finding.evidence
    assert "ranks 0, 2 wait 12.0 ms a step for it" in finding.evidence
    assert finding.severity == "high"
    # every rank's step takes as long: wall time alone cannot tell (the old rule's way)
    assert straggler.evaluate(ddp_window(slow_host_ms=0.0)) is None  # balanced
    assert straggler.evaluate(ddp_window(slow_host_ms=0.3)) is None  # within the noise


def test_a_straggler_on_a_crowded_machine_says_so() -> None:
    crowded = dataclasses.replace(
        ddp_window(slow_host_ms=12.0), host=host(run_delay=0.4, others_cores=1.0, others=(BURNER,))
    )
    finding = straggler.evaluate(crowded)
    assert finding is not None and finding.evidence.startswith("rank 1 (pid 101)")
    assert "(noisy-neighbour): a rank they crowd falls behind" in finding.evidence
    quiet = straggler.evaluate(ddp_window(slow_host_ms=12.0))
    assert quiet is not None and "noisy-neighbour" not in quiet.evidence


def test_a_healthy_window_has_no_findings() -> None:
    assert diagnose(window(gpus=gpus(util=95), facts={"device": "cpu"})) == []


def test_findings_rank_by_severity_then_gain() -> None:
    w = window(steps=steps(loader_ms=3.0, syncs=3), facts={**LOADER, "data_parallel": True})
    found = diagnose(w)
    assert [f.severity for f in found] == sorted(
        (f.severity for f in found), key=["high", "medium", "low", "info"].index
    )
    mediums = [f for f in found if f.severity == "medium"]
    assert mediums[0].id == "input-bound"  # it has an estimated gain, the others none


def test_comm_bound_when_every_rank_waits_in_the_collectives_together() -> None:
    finding = comm_bound.evaluate(ddp_window(shared_comm_ms=10.0))
    assert finding is not None and finding.severity == "medium"  # high from half the step
    # backward 14 ms, twice the 3 ms forward is compute: 8 ms of a 19 ms step
    assert finding.evidence.startswith("about 8.0 ms of a 19.0 ms step (42%)")
    assert comm_bound.evaluate(ddp_window()) is None  # balanced, little communication
    assert comm_bound.evaluate(ddp_window(slow_host_ms=12.0)) is None  # a straggler's wait
    assert straggler.evaluate(ddp_window(shared_comm_ms=10.0)) is None
    assert finding.remedies == ("ddp-no-sync", "comm-hook-bf16", "ddp-buckets")  # size unknown


def test_comm_bound_of_a_model_in_one_bucket_offers_fewer_all_reduces_only() -> None:
    """A small model's gradients fit in one DDP bucket: a latency-bound all-reduce, which
    a bf16 hook or other buckets cannot shorten (issue 39)."""
    import dataclasses

    small = ddp_window(shared_comm_ms=10.0)
    small = dataclasses.replace(small, facts={**small.facts, "parameters": 33})
    finding = comm_bound.evaluate(small)
    assert finding is not None and finding.remedies == ("ddp-no-sync",)
    assert "Its gradients (0 KiB) fit in DDP's first bucket (1 MiB)" in finding.evidence
    big = dataclasses.replace(small, facts={**small.facts, "parameters": 6_297_600})
    finding = comm_bound.evaluate(big)
    assert finding is not None and "comm-hook-bf16" in finding.remedies


def test_samples_a_step_count_a_step_that_fetched_no_batch_as_none_taken() -> None:
    """A loader that reads a batch ahead (Accelerate's, under every Hugging Face Trainer)
    fetches each step's batch in the step before, and an epoch's last step fetches none:
    samples a step are the batches seen over the steps, not only over those that saw one
    (and samples/s is known at all: it was None once an epoch ended in a measured step).
    Fewer than half with a batch: not a DataLoader job, nothing said."""
    epoch = [steps(n=1, batch=40)[0], *steps(n=5, batch=32), steps(n=1, batch=None)[0]]
    # past the warm-up's 5 steps
    shifted = tuple(
        s._replace(number=5 + i, t_end_mono_ns=(i + 1) * 10**7) for i, s in enumerate(epoch * 6)
    )
    w = window(steps=shifted)
    assert w.samples_per_step == pytest.approx(200 / 7)
    assert w.steps_per_s is not None
    assert w.samples_per_s == pytest.approx(200 / 7 * w.steps_per_s)
    few = tuple(s._replace(batch_size=32 if i % 3 == 0 else None) for i, s in enumerate(shifted))
    assert window(steps=few).samples_per_step is None
