"""GPU checks: run for real on a machine with an NVIDIA GPU (scripts/gpu_checks.sh).

Deselected by default (`-m 'not gpu'` in pyproject); CI has no GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.sources.nvml import NvmlReader

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.gpu


def test_live_nvml_reader_reads_every_default_field() -> None:
    reader = NvmlReader()
    assert reader.available, reader.reason
    samples = reader.read()
    assert samples
    for s in samples:
        assert s.util_gpu_pct is not None and 0 <= s.util_gpu_pct <= 100
        assert s.mem_total_bytes and s.mem_used_bytes is not None
        assert s.power_w and s.power_limit_w and s.temp_c is not None
        assert s.sm_clock_mhz and s.mem_clock_mhz
        assert s.clock_event_reasons is not None
        assert s.compute_capability and s.compute_capability >= (7, 0)
    reader.close()


def _doctor(tmp_path: Path, job: str, *job_args: str) -> dict[str, Any]:
    report = tmp_path / f"{job}.json"
    cmd = [
        sys.executable,
        "-m",
        "gpudoctor",
        "--store",
        str(tmp_path / "s.db"),
        "run",
        "--headless",
        "--report",
        str(report),
        "--",
        sys.executable,
        str(ROOT / "sample_jobs" / f"{job}.py"),
        "--device",
        "cuda",
        *job_args,
    ]
    subprocess.run(cmd, check=True, timeout=120)
    report_data: dict[str, Any] = json.loads(report.read_text())
    return report_data


def test_host_sync_found_on_gpu(tmp_path: Path) -> None:
    report = _doctor(tmp_path, "host_sync", "--seconds", "8")
    ids = [f["id"] for f in report["findings"]]
    assert "host-sync" in ids
    assert report["steps"]["syncs_per_step"] >= 1
    assert report["gpus"] and report["gpus"][0]["used_by_job"]


def test_convnet_on_gpu_lacks_amp_and_cudnn_benchmark(tmp_path: Path) -> None:
    report = _doctor(tmp_path, "convnet", "--seconds", "8")
    ids = [f["id"] for f in report["findings"]]
    assert "no-mixed-precision" in ids
    assert "cudnn-benchmark-off" in ids


def test_speed_of_light_on_gpu_against_the_datasheet(tmp_path: Path) -> None:
    """The FLOPs a CUDA step does, against the GPU's datasheet figure (the H200 the
    device tool lends is in the table): an MFU above nothing and below the peak."""
    report = _doctor(tmp_path, "healthy", "--seconds", "8", "--batch-size", "4096")
    sol = report["speed_of_light"]
    assert sol["flops_per_step"] > 0
    assert "datasheet" in sol["basis"], sol
    assert 0.0005 < sol["mfu"] < 1.0, sol
    assert sol["could_take_ms"] == pytest.approx(sol["mfu"] * sol["step_ms"] / 0.5, rel=0.01)


def test_each_rank_is_on_the_gpu_cuda_visible_devices_names(tmp_path: Path) -> None:
    """Two ranks on the machine's last GPU (CUDA_VISIBLE_DEVICES): the report's ranks
    name that GPU by its NVML index, not by their local ranks, with its utilisation."""
    import os

    count = len(NvmlReader().read())
    last = count - 1
    report = tmp_path / "ddp.json"
    torchrun = str(Path(sys.executable).parent / "torchrun")
    subprocess.run(
        [sys.executable, "-m", "gpudoctor", "--store", str(tmp_path / "s.db"), "run",
         "--headless", "--report", str(report), "--", torchrun, "--standalone",
         "--nproc_per_node", "2", str(ROOT / "sample_jobs" / "ddp_straggler.py"),
         "--device", "cuda", "--steps", "150"],
        check=True, timeout=180, env={**os.environ, "CUDA_VISIBLE_DEVICES": str(last)},
    )  # fmt: skip
    ranks = json.loads(report.read_text())["ranks"]
    assert [r["gpu"] for r in ranks] == [last, last], ranks
    assert all(r["gpu_util_pct"] is not None for r in ranks), ranks
