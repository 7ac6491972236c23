"""Which GPU each rank computes on: read from NVML readings in the shapes nvidia-ml-py
returns (an H200's recording, made eight GPUs), through the live reader, with the
probe's facts as a real run under each launcher's environment records them."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import PY, load_recorded_session
from nvml_replay import FIXTURES, ReplayNvml
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from test_tui import ddp_timeline

from gpudoctor.diagnosis.devices import gpu_of
from gpudoctor.diagnosis.ranks import rank_measures
from gpudoctor.display import rank_rows
from gpudoctor.metrics import RunCollector
from gpudoctor.model import GpuSample
from gpudoctor.report.build import build
from gpudoctor.snapshot import take
from gpudoctor.sources.nvml import NvmlReader
from gpudoctor.timeline import Timeline


def uuid(i: int) -> str:
    return f"GPU-{i:08x}-2b71-bf01-23ea-70c021ace309"


def eight_gpus(on: dict[int, list[int]] | None = None) -> tuple[GpuSample, ...]:
    """The H200 recording's last sample as eight GPUs: GPU i at 10*i+5% util, its own
    UUID, and the compute processes `on[i]`."""
    recording = json.loads((FIXTURES / "nvml_h200_load.json").read_text())
    device = recording["samples"][-1][0]
    sample = []
    for i in range(8):
        d = copy.deepcopy(device)
        d["nvmlDeviceGetUUID"] = {"value": uuid(i)}
        d["nvmlDeviceGetUtilizationRates"]["fields"]["gpu"] = {"value": 10 * i + 5}
        d["nvmlDeviceGetComputeRunningProcesses"] = {
            "list": [
                {"friendly": {"pid": {"value": pid}, "usedGpuMemory": {"value": 2**30}}}
                for pid in (on or {}).get(i, [])
            ]
        }
        sample.append(d)
    recording.update(samples=[sample], device_count=8)
    gpus = NvmlReader(ReplayNvml(recording)).read()
    assert [g.index for g in gpus] == list(range(8)) and gpus[3].uuid == uuid(3)
    return tuple(gpus)


def index(facts: dict[str, Any], pid: int = 1, on: dict[int, list[int]] | None = None) -> Any:
    found = gpu_of(facts, pid, eight_gpus(on))
    return found.index if found else None


def test_a_ranks_gpu_follows_cuda_visible_devices_and_its_model_not_its_local_rank() -> None:
    # torchrun on GPUs 4-7 of the node: local rank 1 is cuda:1, NVML's GPU 5
    assert index({"local_rank": "1", "cuda_visible_devices": "4,5,6,7"}) == 5
    assert index({"device": "cuda:1", "cuda_visible_devices": "4,5,6,7"}) == 5
    # no list: the ordinal is NVML's index; the model's device wins over LOCAL_RANK
    assert index({"device": "cuda:3", "local_rank": "0"}) == 3
    assert index({"local_rank": "6"}) == 6
    # UUIDs and unique prefixes of them, in the order given
    assert index({"local_rank": "1", "cuda_visible_devices": f"{uuid(6)},{uuid(2)[:12]}"}) == 2
    # CUDA stops at the first entry that names no device; an empty list hides them all
    assert index({"local_rank": "1", "cuda_visible_devices": "4,99,5"}) is None
    assert index({"local_rank": "0", "cuda_visible_devices": ""}) is None
    assert index({"local_rank": "0", "cuda_visible_devices": "GPU-0000"}) is None  # ambiguous
    # the UUID torch gives for the model's device (bare, without NVML's prefix) is exact,
    # whatever the list and ordering say (CUDA numbers fastest first by default)
    bare = uuid(6)[4:]
    assert index({"device": "cuda:0", "cuda_visible_devices": "0", "cuda_device_uuid": bare}) == 6
    # NVML's own process list, when the process is on one GPU
    assert index({"local_rank": "0"}, pid=4242, on={7: [4242]}) == 7
    assert index({"local_rank": "0"}, pid=4242, on={7: [4242], 2: [4242]}) == 0  # two: ordinal
    # not told: a CPU job, a MIG instance, nothing to go by, no GPU
    assert index({"device": "cpu", "local_rank": "0"}) is None
    assert index({"local_rank": "0", "cuda_visible_devices": "MIG-5c2e1b9a-0000"}) is None
    assert index({}) is None
    assert gpu_of({"local_rank": "0"}, 1, ()) is None


def test_the_rank_table_report_and_prometheus_name_each_ranks_own_gpu() -> None:
    timeline = ddp_timeline(4, slow_rank=2)
    for facts in timeline.facts.values():
        facts.update(cuda_visible_devices="4,5,6,7", device=f"cuda:{facts['local_rank']}")
    timeline.gpus.extend(eight_gpus())
    ranks = rank_measures(timeline.window())
    assert [(r.rank, r.gpu_index, r.gpu_util_pct) for r in ranks] == [
        (0, 4, 45.0), (1, 5, 55.0), (2, 6, 65.0), (3, 7, 75.0)
    ]  # fmt: skip
    rows = rank_rows(ranks, room=10)
    assert [row.split()[-1] for row in rows] == ["45%", "55%", "65%", "75%"]
    # the report's ranks say the GPU and its utilisation
    lines = build(timeline, 1).ranks
    assert [(line.rank, line.gpu, line.gpu_util_pct) for line in lines] == [
        (0, 4, 45.0), (1, 5, 55.0), (2, 6, 65.0), (3, 7, 75.0)
    ]  # fmt: skip
    # Prometheus: each rank's GPU by index and UUID, every series with the host
    families = served(timeline)
    host = socket.gethostname()
    info = {s.labels["rank"]: s.labels for s in families["gpudoctor_rank_gpu_info"].samples}
    assert info["1"] == {"rank": "1", "pid": "101", "hostname": host, "gpu": "5", "UUID": uuid(5)}
    assert sorted(info) == ["0", "1", "2", "3"]
    for name in ("gpudoctor_step_seconds", "gpudoctor_gpu_utilization_ratio"):
        assert {s.labels["hostname"] for s in families[name].samples} == {host}
    util = {s.labels["gpu"]: s.value for s in families["gpudoctor_gpu_utilization_ratio"].samples}
    assert util["5"] == pytest.approx(0.55)


@pytest.mark.parametrize(
    ("env", "facts"),
    [
        (
            {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8"},
            {"rank": "5", "local_rank": "1", "world_size": "8"},
        ),
        (
            {
                "OMPI_COMM_WORLD_RANK": "2",
                "OMPI_COMM_WORLD_LOCAL_RANK": "2",
                "OMPI_COMM_WORLD_SIZE": "4",
            },
            {"rank": "2", "local_rank": "2", "world_size": "4"},
        ),  # fmt: skip
        ({"PMI_RANK": "3", "PMI_SIZE": "4"}, {"rank": "3", "world_size": "4"}),
        # torchrun started inside an srun task: torchrun's own variables
        (
            {
                "SLURM_PROCID": "0",
                "SLURM_NTASKS": "2",
                "RANK": "9",
                "LOCAL_RANK": "1",
                "WORLD_SIZE": "16",
            },
            {"rank": "9", "local_rank": "1", "world_size": "16"},
        ),  # fmt: skip
        # an sbatch script's one task: no distributed job
        ({"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "1"}, {}),
    ],
)
def test_each_launchers_rank_reaches_the_report(
    tmp_path: Path, env: dict[str, str], facts: dict[str, str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(12):\n"
        "    opt.zero_grad()\n"
        "    model(torch.randn(8, 4)).sum().backward()\n"
        "    opt.step()\n"
    )
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "OMPI_", "PMI_")) and k not in ("RANK", "LOCAL_RANK")
    }
    clean.update(env, CUDA_VISIBLE_DEVICES="2,3")
    report = tmp_path / "r.json"
    proc = subprocess.run(
        [PY, "-m", "gpudoctor", "run", "--headless", "--report", str(report), "--", PY,
         str(script)],
        capture_output=True, text=True, env=clean, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(report.read_text())["facts"]
    got = {k: shown[k] for k in ("rank", "local_rank", "world_size") if k in shown}
    assert got == facts
    assert shown["cuda_visible_devices"] == "2,3"


def test_a_finding_carries_its_jobs_pid_rank_and_lowercase_hostname() -> None:
    """A recorded input-bound run's findings as served: each series names the job (pid,
    rank) and the node as DCGM's exporter now does (`hostname`, lowercase), so that a
    finding joins the job's step time and its GPU's counters."""
    timeline = load_recorded_session("dataloader_bound")
    families = served(timeline)
    findings = families["gpudoctor_finding_estimated_gain_ratio"].samples
    pid = str(take(timeline).job_pid)
    assert {s.labels["id"] for s in findings} >= {"input-bound"}
    assert {(s.labels["pid"], s.labels["hostname"]) for s in findings} == {
        (pid, socket.gethostname())
    }
    steps = families["gpudoctor_step_seconds"].samples
    assert {s.labels["pid"] for s in steps} == {pid}
    assert all("Hostname" not in s.labels for f in families.values() for s in f.samples)


def served(timeline: Timeline) -> dict[str, Metric]:
    """What `--metrics` serves for the run, by family name (parsed back as Prometheus
    reads it)."""
    collector = RunCollector()
    collector.latest = take(timeline)
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}
