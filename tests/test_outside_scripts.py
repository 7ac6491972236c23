"""Training scripts that are not in the repo, written the way people write them,
diagnosed the same way; and the launch forms the probe must reach."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from conftest import PY, doctor, doctor_past_teardown, finding_ids, run_job, top_finding

pytestmark = pytest.mark.timeout(240)


def write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


IMAGE_FOLDER = """
    import math, torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import Dataset, DataLoader

    class ImageFolderLike(Dataset):
        def __len__(self): return 50000
        def __getitem__(self, i):
            # decode + augment, pure Python like a slow PIL pipeline
            px = [math.sin(i * 0.001 + k) for k in range(3 * 16 * 16)]
            for _ in range(6):
                px = [0.5 * p + 0.25 for p in px[::-1]]
            return torch.tensor(px).view(3, 16, 16), i % 10

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.fc = nn.Linear(8 * 16 * 16, 10)
        def forward(self, x):
            return self.fc(F.relu(self.conv(x)).flatten(1))

    net = Net()
    opt = torch.optim.Adam(net.parameters())
    loader = DataLoader(ImageFolderLike(), batch_size=32, shuffle=True)
    for epoch in range(1):
        for i, (x, y) in enumerate(loader):
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
            if i == 150: break
    print("trained")
"""


def test_a_dataloader_bound_script(tmp_path: Path) -> None:
    proc, report = run_job(tmp_path, write(tmp_path, "train_images.py", IMAGE_FOLDER))
    assert proc.returncode == 0 and "trained" in proc.stdout
    assert finding_ids(report)[0] == "input-bound"
    assert report["facts"]["dataloaders"][0]["num_workers"] == 0
    assert report["facts"]["optimizer"] == "Adam"


def test_hand_written_input_and_hand_written_sgd(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        "sgd.py",
        """
        import json, torch
        model = torch.nn.Linear(64, 4)
        lines = [json.dumps({"x": [((i * 7 + k) % 13) / 13 for k in range(64)], "y": i % 4}) for i in range(3000)]
        for step in range(200):
            rows = [json.loads(l) for l in lines[(step * 64) % 2900:(step * 64) % 2900 + 64]]
            x = torch.tensor([[v * 2 - 1 for v in r["x"]] for r in rows])
            y = torch.tensor([r["y"] for r in rows])
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            with torch.no_grad():  # a hand-written SGD update: no torch.optim
                for p in model.parameters():
                    p -= 0.1 * p.grad
                    p.grad = None
        print("done", round(loss.item(), 4))
    """,
    )
    proc, report = run_job(tmp_path, script)
    assert proc.returncode == 0
    assert finding_ids(report)[0] == "input-bound"
    assert "outside the model" in top_finding(report)["evidence"]
    assert report["facts"]["step_mode"] == "backward"  # no torch.optim: steps end at backward()
    assert report["steps"]["count"] == 200


def test_an_evaluation_loop_without_no_grad(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        "evaluate.py",
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        model = torch.nn.Sequential(torch.nn.Linear(256, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096),
                                    torch.nn.GELU(), torch.nn.Linear(4096, 10))
        model.eval()
        data = DataLoader(TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,))), batch_size=256)
        correct = 0
        for x, y in data:
            correct += (model(x).argmax(1) == y).sum().item()
        print("accuracy", correct / 8192)
    """,
    )
    proc, report = run_job(tmp_path, script)
    assert proc.returncode == 0
    assert finding_ids(report)[0] == "grad-in-inference"
    assert report["steps"]["count"] == 32  # one step per batch: no optimizer, no backward
    assert report["facts"]["backwards"] == 0


def test_a_job_that_dies_of_oom_in_its_forward(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        "big.py",
        """
        import torch
        class Attention(torch.nn.Module):
            def __init__(self):
                super().__init__(); self.proj = torch.nn.Linear(32, 32)
            def forward(self, x, seq):
                scores = torch.empty(x.shape[0], seq, seq)  # quadratic in the sequence length
                return self.proj(x) + scores.mean()
        model = Attention(); opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step, seq in enumerate([64] * 12 + [10**7]):
            loss = model(torch.randn(8, 32), seq).pow(2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
    """,
    )
    proc, report = run_job(tmp_path, script)
    assert proc.returncode == 1
    assert finding_ids(report)[0] == "out-of-memory"
    assert report["ended_by"] == "oom" and report["steps"]["count"] == 12


def test_a_healthy_script(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        "fit.py",
        """
        import torch
        torch.manual_seed(1)
        X, Y = torch.randn(4096, 512), torch.randn(4096, 1)
        net = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.Tanh(), torch.nn.Linear(1024, 1024),
                                  torch.nn.Tanh(), torch.nn.Linear(1024, 1))
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        for step in range(120):
            i = (step * 128) % 3968
            loss = torch.nn.functional.mse_loss(net(X[i:i + 128]), Y[i:i + 128])
            opt.zero_grad(); loss.backward(); opt.step()
        print("loss", loss.item())
    """,
    )
    proc, report = run_job(tmp_path, script)
    assert proc.returncode == 0
    assert finding_ids(report, "medium", "high") == []
    assert report["steps"]["count"] == 120


# -- launch forms -----------------------------------------------------------------------------

LOOP = """
    import torch
    m = torch.nn.Linear(8, 2); o = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(40):
        l = m(torch.randn(4, 8)).sum(); o.zero_grad(); l.backward(); o.step()
    print("ok")
"""


def test_python_dash_m(tmp_path: Path) -> None:
    pkg = tmp_path / "mytrainer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    write(pkg, "__main__.py", LOOP)
    report_path = tmp_path / "r.json"
    proc = doctor(
        "run", "--headless", "--report", str(report_path), "--", PY, "-m", "mytrainer", cwd=tmp_path
    )
    assert proc.returncode == 0 and "ok" in proc.stdout
    assert '"count": 40' in report_path.read_text()


def test_a_shell_script_that_calls_python(tmp_path: Path) -> None:
    write(tmp_path, "loop.py", LOOP)
    script = write(
        tmp_path, "train.sh", f"#!/bin/sh\necho starting\nexec {PY} {tmp_path / 'loop.py'}\n"
    )
    script.chmod(0o755)
    report_path = tmp_path / "r.json"
    proc = doctor("run", "--headless", "--report", str(report_path), "--", str(script))
    assert proc.returncode == 0 and "starting" in proc.stdout
    assert '"count": 40' in report_path.read_text()


@pytest.mark.skipif(shutil.which("torchrun") is None and not Path(PY).with_name("torchrun").exists(),
                    reason="torchrun comes with torch")  # fmt: skip
def test_torchrun_ranks_are_each_probed(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        "ddp.py",
        """
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(60):
            loss = model(torch.randn(32, 64)).sum(); opt.zero_grad(); loss.backward(); opt.step()
        dist.destroy_process_group()
    """,
    )
    torchrun = str(Path(PY).with_name("torchrun"))
    report_path = tmp_path / "r.json"
    proc = doctor_past_teardown(
        "run", "--headless", "--report", str(report_path), "--", torchrun,
        "--standalone", "--nproc_per_node=2", str(script), timeout=200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    report = json.loads(report_path.read_text())
    assert len(report["probe"]["stepping_processes"]) == 2
    assert report["facts"]["ddp"] is True and report["facts"]["world_size"] == "2"
    assert report["steps"]["count"] == 60
    assert sorted(report["probe"]["steps_by_process"].values()) == [60, 60]
