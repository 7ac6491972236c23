"""How fast the job could be: the FLOPs of a step, counted once by the probe, against
the device's peak (MFU), and what a step could take. On a CPU job against a hand count
of its FLOPs, with the job's results the same bits as without the doctor; on a GPU's
figures through the same arithmetic the report uses."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import PY, env_without_probe, run_job
from prometheus_client.parser import text_string_to_metric_families
from windows import steps

from gpudoctor.diagnosis.peaks import gpu_peaks
from gpudoctor.diagnosis.speed_of_light import REACHABLE, speed_of_light
from gpudoctor.diagnosis.window import Window

pytestmark = pytest.mark.timeout(180)

B, IN, HID, OUT = 32, 64, 128, 10  # batch, widths: in, hidden, out
# Three linear layers. Forward: a matmul each (2*B*in*out). Backward: each layer's
# weight gradient (as many again) and the input gradient of layers 2 and 3 (the data
# needs none). Bias additions and the activations are not matmul FLOPs.
LAYERS = [(IN, HID), (HID, HID), (HID, OUT)]
HAND_COUNT = 2 * B * (2 * sum(i * o for i, o in LAYERS) + sum(i * o for i, o in LAYERS[1:]))

JOB = f"""
    import hashlib, sys, torch, torch.nn as nn
    from torch.utils.data import DataLoader, Dataset

    class Data(Dataset):
        def __len__(self):
            return {B} * 10  # ten steps an epoch: the 11th, counted, starts new workers

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return torch.randn({IN}, generator=g), int(torch.randint(0, {OUT}, (1,), generator=g))

    def started(worker_id):
        # a worker forked inside the counted step starts without the counting mode
        print("worker dispatch modes", torch._C._len_torch_dispatch_stack(), flush=True)

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear({IN}, {HID}), nn.ReLU(), nn.Linear({HID}, {HID}), nn.ReLU(),
                          nn.Linear({HID}, {OUT}))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(Data(), batch_size={B}, num_workers=1, worker_init_fn=started)
    val = torch.randn(4 * {B}, {IN})
    for epoch in range(int(sys.argv[1])):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
        model.eval()  # a validation after each epoch: between the counted step and the last
        with torch.no_grad():
            model(val)
        model.train()
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    print("loss", repr(loss.item()), "weights", h.hexdigest())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_cpu_jobs_flops_mfu_and_results_under_the_doctor(tmp_path: Path) -> None:
    script = tmp_path / "mlp.py"
    script.write_text(textwrap.dedent(JOB))
    plain = subprocess.run(
        [PY, str(script), "30"], capture_output=True, text=True, env=env_without_probe(),
        timeout=120,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr[-2000:]
    report_path, port = tmp_path / "r.json", free_port()
    run = subprocess.Popen(
        [PY, "-m", "gpudoctor", "run", "--headless", "--report", str(report_path),
         "--metrics", str(port), "--", PY, str(script), "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_without_probe(),
    )  # fmt: skip
    exposition = ""
    while run.poll() is None and "gpudoctor_mfu_ratio" not in exposition:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                exposition = r.read().decode()
        except OSError:
            pass
        time.sleep(0.2)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err[-3000:]
    # the job's results are the same bits; its workers (one forked inside the counted
    # step) run without the counting mode
    assert out == plain.stdout
    assert out.count("worker dispatch modes 0") == 30, out
    report = json.loads(report_path.read_text())
    sol = report["speed_of_light"]
    assert sol["flops_per_step"] == HAND_COUNT
    step_s = sol["step_ms"] / 1e3
    assert sol["step_ms"] == report["steps"]["median_ms"]  # the two lines say one time
    assert sol["achieved_tflops"] == pytest.approx(HAND_COUNT / step_s / 1e12, rel=0.01)
    assert sol["mfu"] == pytest.approx(sol["achieved_tflops"] / sol["peak_tflops"], rel=0.01)
    assert 0 < sol["mfu"] < 1.5  # against a matmul's best rate on this machine
    # at half the peak, no input wait, no host syncs
    at_peak_ms = HAND_COUNT / (sol["peak_tflops"] * 1e12) * 1e3
    assert sol["could_take_ms"] == pytest.approx(at_peak_ms / REACHABLE, rel=0.01)
    assert sol["device"].startswith("CPU, ")
    assert "matmul the doctor measured on one of this machine's cores" in sol["basis"]
    assert "speed of light: " in err and f"MFU {sol['mfu']:.1%}" in err, err[-2000:]
    assert "a step could take about" in err
    # Prometheus's view while it ran: the same FLOPs, an MFU
    families = {f.name: f for f in text_string_to_metric_families(exposition)}
    assert families["gpudoctor_step_flops"].samples[0].value == HAND_COUNT
    assert 0 < families["gpudoctor_mfu_ratio"].samples[0].value < 1.5


def test_no_count_when_asked_not_to(tmp_path: Path) -> None:
    script = tmp_path / "mlp.py"
    script.write_text(textwrap.dedent(JOB))
    report_path = tmp_path / "r.json"
    proc = subprocess.run(
        [PY, "-m", "gpudoctor", "run", "--headless", "--report", str(report_path), "--",
         PY, str(script), "2"],
        capture_output=True, text=True, timeout=120,
        env={**env_without_probe(), "GPUDOCTOR_FLOPS": "0"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(report_path.read_text())
    assert report["steps"]["count"] == 20
    assert "speed_of_light" not in report
    assert "speed of light" not in proc.stderr


# An episode a step, as REINFORCE's: the policy called once a move, one backward over
# the episode. The first 12 episodes are 3 moves long, the rest 12: the step counted
# (the 11th) is a quarter of the median step.
EPISODES = f"""
    import sys, torch, torch.nn as nn
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = nn.Sequential(nn.Linear({IN}, {HID}), nn.ReLU(), nn.Linear({HID}, {OUT}))
    opt = torch.optim.SGD(policy.parameters(), lr=0.01)
    for episode in range(60):
        moves = 3 if episode < 12 else 12
        loss = sum(policy(torch.randn(1, {IN})).sum() for _ in range(moves))
        opt.zero_grad(); loss.backward(); opt.step()
    print("episodes", 60)
"""
# each call: its forward and the weights' gradients (two matmuls each), the hidden
# layer's input gradient
PER_CALL = 2 * (2 * (IN * HID + HID * OUT) + HID * OUT)


def test_steps_of_unequal_size_are_counted_at_the_median_steps_size(tmp_path: Path) -> None:
    script = tmp_path / "episodes.py"
    script.write_text(textwrap.dedent(EPISODES))
    proc, report = run_job(tmp_path, script)
    assert proc.returncode == 0 and proc.stdout == "episodes 60\n", proc.stderr[-2000:]
    assert report["steps"]["count"] == 60
    sol = report["speed_of_light"]
    assert sol["flops_per_step"] == 12 * PER_CALL  # the median step's size
    assert "scaled from its 3 model calls to the median step's 12" in sol["basis"]


# Ten steps, then a strict export: the FLOP count starts at the tenth step's end and is
# still open while torch.export traces the model (the compat suite's export_strict, with
# the probe injected late, met this once). Nothing of the count's may be in its way.
EXPORT_AFTER_TEN = """
    import torch, torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    for _ in range(10):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    model.eval()
    ep = torch.export.export(model, (x,), strict=True)
    print("exported", torch.allclose(ep.module()(x), model(x)), repr(loss.item()))
"""


def test_a_strict_export_while_the_count_is_open_runs_as_without_the_doctor(
    tmp_path: Path,
) -> None:
    script = tmp_path / "export.py"
    script.write_text(textwrap.dedent(EXPORT_AFTER_TEN))
    plain = subprocess.run(
        [PY, str(script)], capture_output=True, text=True, env=env_without_probe(), timeout=120
    )
    assert plain.returncode == 0 and plain.stdout.startswith("exported True"), plain.stderr
    proc = subprocess.run(
        [PY, "-m", "gpudoctor", "run", "--headless", "--", PY, str(script)],
        capture_output=True, text=True, timeout=120, env=env_without_probe(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == plain.stdout


def test_a_gpu_jobs_mfu_weighs_each_dtype_at_its_own_peak() -> None:
    """bf16 matmuls beside fp32 ones with TF32 off, on an H200 (as torch names it):
    each at its datasheet figure, the step at 10 ms."""
    bf16, fp32 = 4 * 10**12, 10**11
    w = Window(
        steps=steps(40, wall_ms=10.0),
        facts={
            "device": "cuda:0",
            "cuda_device_name": "NVIDIA H200",
            "flops": {
                "per_step": bf16 + fp32,
                "step": 10,
                "by_kind": {"mm bfloat16": bf16, "mm float32": fp32},
                "tf32_matmul": False,
                "tf32_conv": True,
            },
        },
    )
    sol = speed_of_light(w)
    assert sol is not None
    at_peak_s = bf16 / 989.5e12 + fp32 / 67e12
    assert sol.mfu == pytest.approx(at_peak_s / 0.010)
    assert sol.achieved_tflops == pytest.approx((bf16 + fp32) / 0.010 / 1e12)
    assert sol.peak_tflops == pytest.approx((bf16 + fp32) / at_peak_s / 1e12)
    assert sol.could_take_ms == pytest.approx(at_peak_s / REACHABLE * 1e3)
    assert "bf16 989.5 TFLOP/s" in sol.basis and "fp32 67 TFLOP/s" in sol.basis
    assert "H200 datasheet" in sol.basis
    # with TF32 allowed, the fp32 matmuls count at the TF32 figure
    facts = dict(w.facts, flops={**w.facts["flops"], "tf32_matmul": True})
    tf32 = speed_of_light(Window(steps=w.steps, facts=facts))
    assert tf32 is not None and tf32.mfu == pytest.approx(
        (bf16 / 989.5e12 + fp32 / 494.5e12) / 0.010
    )
    # a GPU not in the table: FLOPs and the achieved rate, no MFU, said so
    other = speed_of_light(
        Window(steps=w.steps, facts=dict(w.facts, cuda_device_name="Mystery GPU"))
    )
    assert other is not None and other.mfu is None and "no peak known" in other.basis


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A10", "A10 datasheet"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4 datasheet"),
        ("Tesla V100-SXM2-16GB", "V100 datasheet (SXM2"),
        ("Tesla T4", "T4"),
    ],
)
def test_the_peak_table_finds_each_gpu_by_the_name_nvml_gives(name: str, source: str) -> None:
    found = gpu_peaks(name)
    assert found is not None and source in found[1]


def test_gpus_the_table_does_not_list_are_not_guessed() -> None:
    assert gpu_peaks("NVIDIA A10G") is None  # not an A10, nor an A100
    assert gpu_peaks("NVIDIA L40") is None  # not an L4


def test_a_cores_rate_is_measured_once_a_day_for_this_cpu_and_numpy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run measures and keeps one core's rate; the next reuses it (times the
    cores it may use then); a day later, or with another numpy, it measures again."""
    from gpudoctor.sources import cpu_peak

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    measured: list[float] = []
    real = cpu_peak._best_run

    def counted(np: object, budget_s: float) -> float:
        measured.append(budget_s)
        return real(np, budget_s)

    monkeypatch.setattr(cpu_peak, "_best_run", counted)
    first = cpu_peak.measure(budget_s=0.02)
    assert first is not None and len(measured) == 1
    kept = json.loads((tmp_path / "gpudoctor" / "cpu_peak.json").read_text())
    assert kept["core_tflops"] == pytest.approx(first.tflops / first.cores)
    again = cpu_peak.measure(budget_s=0.02)
    assert again == first and len(measured) == 1  # not measured again
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    one_core = cpu_peak.measure(budget_s=0.02)
    assert one_core is not None and one_core.cores == 1 and len(measured) == 1
    assert one_core.tflops == pytest.approx(kept["core_tflops"])
    kept["measured_unix"] -= cpu_peak.CACHE_TTL_S + 1  # a day old
    (tmp_path / "gpudoctor" / "cpu_peak.json").write_text(json.dumps(kept))
    assert cpu_peak.measure(budget_s=0.02) is not None and len(measured) == 2
    monkeypatch.setattr(cpu_peak, "_key", lambda: {"cpu": "other", "numpy": "", "size": "384"})
    assert cpu_peak.measure(budget_s=0.02) is not None and len(measured) == 3
    (tmp_path / "gpudoctor" / "cpu_peak.json").write_text("{not json")
    assert cpu_peak.measure(budget_s=0.02) is not None and len(measured) == 4


@pytest.mark.parametrize(
    "conv",
    ["dense", "depthwise", "grouped_transposed"],
)
def test_a_convolutions_flops_forward_and_backward_against_a_hand_count(conv: str) -> None:
    """A convolution's forward is 2 x batch x out-channels x out-pixels x (in-channels /
    groups) x kernel; its backward as much again for each gradient it makes. torch's own
    formula counts a grouped convolution's weight gradient `groups` times over (a
    depthwise one's backward read 65 forwards): MobileNet's or ConvNeXt's speed of light
    came out several times too slow, faster than the job itself."""
    import torch

    from gpudoctor.probe.flops import counting_mode

    n, c, size, k = 4, 16, 12, 3
    if conv == "dense":
        layer: torch.nn.Module = torch.nn.Conv2d(c, 2 * c, k, padding=1)
        forward, out_size = 2 * n * (2 * c) * size**2 * c * k * k, size
    elif conv == "depthwise":
        layer = torch.nn.Conv2d(c, c, k, padding=1, groups=c)
        forward, out_size = 2 * n * c * size**2 * 1 * k * k, size
    else:  # stride 2, 4 groups: each input pixel feeds its group's c/4 outputs x kernel
        layer = torch.nn.ConvTranspose2d(c, c, k, stride=2, groups=4)
        forward, out_size = 2 * n * c * size**2 * (c // 4) * k * k, 2 * size + 1
    for input_grad in (False, True):
        x = torch.randn(n, c, size, size, requires_grad=input_grad)
        mode = counting_mode(torch)
        with mode:
            y = layer(x)
        assert y.shape[-1] == out_size
        assert sum(mode.flops.values()) == forward
        with mode:
            y.sum().backward()
        assert sum(mode.flops.values()) == forward * (3 if input_grad else 2), conv
