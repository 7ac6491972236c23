"""The GPU-only findings on sessions recorded on a real H200 (scripts/gpu_checks.sh:
the sample jobs with --device cuda under `gpudoctor run`), replayed from their records
through the same path as `gpudoctor report`."""

from __future__ import annotations

from conftest import load_recorded_session

from gpudoctor.report import build as reports


def build(name: str) -> dict:  # type: ignore[type-arg]
    return reports.build(load_recorded_session(name), session_id=1).to_dict()


def ids(report: dict) -> list[str]:  # type: ignore[type-arg]
    return [f["id"] for f in report["findings"]]


def test_item_in_every_step_is_a_host_sync() -> None:
    r = build("host_sync")
    assert "host-sync" in ids(r)
    assert r["steps"]["syncs_per_step"] == 1.0
    assert r["gpus"][0]["name"] == "NVIDIA H200" and r["gpus"][0]["used_by_job"]


def test_dataloader_bound_on_a_gpu() -> None:
    r = build("dataloader_bound")
    assert ids(r)[0] == "input-bound"
    assert {"low-gpu-util", "pageable-copies", "no-mixed-precision"} <= set(ids(r))
    low = next(f for f in r["findings"] if f["id"] == "low-gpu-util")
    assert "input-bound" in low["evidence"]
    assert r["gpus"][0]["util_p95_pct"] < 10


def test_convnet_without_autotuning_or_amp() -> None:
    r = build("convnet")
    assert {"cudnn-benchmark-off", "no-mixed-precision", "small-batch"} <= set(ids(r))
    assert r["facts"]["conv_layers"] == 3 and r["facts"]["cudnn_benchmark"] is False


def test_memory_pressure_from_the_allocator_gauges() -> None:
    r = build("memory_pressure")
    finding = next(f for f in r["findings"] if f["id"] == "memory-pressure")
    assert "93%" in finding["evidence"]


def test_cuda_oom_by_class_with_steps_counted() -> None:
    r = build("out_of_memory")
    assert ids(r)[0] == "out-of-memory"
    assert r["ended_by"] == "oom" and r["exit_code"] == 1
    assert r["steps"]["count"] == 30
    assert r["exception"]["type"] == "OutOfMemoryError"


def test_inference_without_no_grad_on_a_gpu() -> None:
    r = build("eval")
    assert {"grad-in-inference", "host-sync"} <= set(ids(r))  # int(tensor.sum()) syncs


def test_a_small_model_leaves_the_h200_idle() -> None:
    r = build("healthy")
    assert ids(r)[:2] == ["small-batch", "low-gpu-util"]
    assert r["gpus"][0]["mem_used_max_bytes"] < 0.1 * r["gpus"][0]["mem_total_bytes"]
