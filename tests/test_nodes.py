"""A torchrun job on two nodes (two torchruns on this machine, meeting at a c10d
rendezvous as two servers would), each node under its own doctor: the doctors trade
their ranks through the job's rendezvous store, so each report has every rank and the
straggler is named from the other node."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from conftest import PY, finding_ids
from test_metrics import free_port
from test_ranks import DDP, TORCHRUN

from gpudoctor.sources.rendezvous import Rendezvous, of_command

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["torchrun", "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
          "head:29511", "--rdzv-id", "exp7", "train.py", "--nnodes", "9"],
         Rendezvous("head", 29511, "exp7", "2")),
        (["/venv/bin/torchrun", "--nnodes=1:4", "--rdzv_backend=c10d",
          "--rdzv_endpoint=10.0.0.5", "train.py"], Rendezvous("10.0.0.5", 29400, "none", "1:4")),
        (["python", "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", "1",
          "--master-addr", "10.0.0.9", "--master-port", "23456", "train.py"],
         Rendezvous("10.0.0.9", 23456, "none", "2")),
        (["torchrun", "--nnodes", "2", "--node_rank", "0", "train.py"],
         Rendezvous("127.0.0.1", 29500, "none", "2")),
        (["torchrun", "--standalone", "--nnodes", "2", "train.py"], None),
        (["torchrun", "--nproc-per-node", "8", "train.py"], None),
        (["torchrun", "--nnodes", "2", "--rdzv-backend", "etcd", "train.py"], None),
        (["python", "train.py", "--nnodes", "2"], None),
    ],
)  # fmt: skip
def test_the_rendezvous_store_is_read_from_torchruns_options(
    argv: list[str], expected: Rendezvous | None
) -> None:
    assert of_command(argv) == expected


def report_of(tmp_path: Path, node: int) -> Path:
    return tmp_path / f"node{node}.json"


def node_command(
    tmp_path: Path, node: int, port: int, doctor_args: tuple[str, ...], *job: str
) -> list[str]:
    """One node's torchrun (one rank) under its own doctor, meeting the other at a c10d
    rendezvous on this machine."""
    return [
        PY, "-m", "gpudoctor", "--store", str(tmp_path / f"node{node}.db"), "run",
        "--headless", "--report", str(report_of(tmp_path, node)), *doctor_args, "--",
        TORCHRUN, "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
        "--rdzv-id", f"nodes-{tmp_path.name}", *job,
    ]  # fmt: skip


def two_nodes(tmp_path: Path, *doctor_args: str) -> list[dict]:  # type: ignore[type-arg]
    """Node 0 and node 1, one rank each, rank 1 doing 12 ms of extra host work a step."""
    script = tmp_path / "ddp.py"
    # 12 epochs (768 steps, 10 s or more): time for the doctors to trade, each 2 s, once
    # their helpers are up and each rank has its first steady steps, on a busy machine too
    script.write_text(textwrap.dedent(DDP).replace("range(3)", "range(12)"))
    port = free_port()
    runs = []
    for node in (0, 1):
        command = node_command(tmp_path, node, port, doctor_args, str(script), "1", "0.012")
        runs.append(
            (
                subprocess.Popen(command, stderr=subprocess.PIPE, text=True),
                report_of(tmp_path, node),
            )
        )
    reports = []
    for proc, report in runs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        reports.append(json.loads(report.read_text()))
    return reports


def test_each_nodes_doctor_sees_every_rank_and_names_the_straggler_on_the_other(
    tmp_path: Path,
) -> None:
    node0, node1 = two_nodes(tmp_path)
    pids = set()
    for report in (node0, node1):
        assert [r["rank"] for r in report["ranks"]] == [0, 1], report["ranks"]
        pids.add(tuple(r["pid"] for r in report["ranks"]))
        # the rendezvous deals the ranks out: each node holds one, its doctor counts it
        # exactly; the other's count is as its doctor last sent it
        (mine,) = report["probe"]["stepping_processes"]
        local = next(r for r in report["ranks"] if r["pid"] == mine)
        remote = next(r for r in report["ranks"] if r["pid"] != mine)
        assert local["steps"]["count"] == 768  # 12 epochs of 64 batches
        assert 20 < remote["steps"]["count"] <= 768
        assert any("Ranks on other nodes" in n for n in report["notes"])
        # rank 1 does 12 ms more host work a step; rank 0 waits for it in the all-reduce
        fast, slow = report["ranks"]
        assert fast["comm_wait_ms"] > 6.0 and slow["own_ms"] > 2 * fast["own_ms"]
        assert finding_ids(report)[0] == "straggler"
        straggler = next(f for f in report["findings"] if f["id"] == "straggler")
        assert straggler["evidence"].startswith(f"rank 1 (pid {slow['pid']})")
    assert len(pids) == 1  # both doctors saw the same two processes as the same ranks
    # one of the two doctors named the straggler from the other node's summary
    assert {
        node0["probe"]["stepping_processes"][0],
        node1["probe"]["stepping_processes"][0],
    } == set(pids.pop())


def test_without_the_exchange_each_doctor_sees_its_own_node(tmp_path: Path) -> None:
    node0, node1 = two_nodes(tmp_path, "--no-rank-exchange")
    # one rank a node: nothing to compare, and nothing of the other node
    assert node0["ranks"] == [] and node1["ranks"] == []
    assert not any("Ranks on other nodes" in n for n in node0["notes"])


LONG_DDP = """
import os, sys, time, torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
torch.set_num_threads(1)
model = DDP(nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
stop = sys.argv[2] if len(sys.argv) > 2 else ""  # a file: when it is there, both stop
for step in range(int(sys.argv[1])):
    loss = model(torch.randn(16, 64)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    time.sleep(0.005)
    if step == 30:
        print("training", flush=True)
    if stop and step % 10 == 0:  # the ranks agree, at the same steps, whether to stop
        seen = torch.tensor([float(os.path.exists(stop))])
        dist.all_reduce(seen)
        if seen.item():
            break
dist.barrier()
dist.destroy_process_group()
"""


def start_nodes(tmp_path: Path, steps: int, *stop: str) -> list[tuple[subprocess.Popen[str], Path]]:
    script = tmp_path / "long.py"
    script.write_text(LONG_DDP)
    port = free_port()
    runs = []
    for node in (0, 1):
        command = node_command(tmp_path, node, port, (), str(script), str(steps), *stop)
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        runs.append((proc, report_of(tmp_path, node)))
    for proc, _ in runs:  # both ranks are training
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "training":
                break
    # and each doctor has taken in the other node's ranks (a record in its store)
    deadline = time.monotonic() + 60
    for node in (0, 1):
        while not traded(tmp_path / f"node{node}.db"):
            assert time.monotonic() < deadline, f"node {node}'s doctor never heard of the other"
            time.sleep(0.2)
    return runs


def traded(store: Path) -> bool:
    with contextlib.closing(sqlite3.connect(store, timeout=5)) as db:
        return db.execute("SELECT 1 FROM records WHERE kind='ranks' LIMIT 1").fetchone() is not None


def test_a_node_whose_doctor_is_killed_leaves_the_other_node_unharmed(tmp_path: Path) -> None:
    """SIGKILL to node 1's doctor: its job trains on (node 0's job can only finish with
    it), its helper leaves, and node 0's doctor reports both ranks as last sent."""
    stop = tmp_path / "stop"
    (zero, report0), (one, _) = start_nodes(tmp_path, 100_000, str(stop))
    one.kill()
    one.wait()
    time.sleep(3.0)  # both ranks train on (each step an all-reduce with the other)
    stop.touch()
    _, err = zero.communicate(timeout=240)
    assert zero.returncode == 0, err[-3000:]
    report = json.loads(report0.read_text())
    assert report["ended_by"] == "exit" and [r["rank"] for r in report["ranks"]] == [0, 1]
    helper = f"rendezvous_helper.*nodes-{tmp_path.name}"
    assert subprocess.run(["pgrep", "-f", helper]).returncode == 1


def test_a_node_whose_job_ends_early_does_not_hang_the_other_doctor(tmp_path: Path) -> None:
    """Node 0's torchrun (the rendezvous store's host) and its rank are killed mid-run:
    node 1's rank fails, and its doctor ends with the job, reporting how it ended."""
    (zero, report0), (one, report1) = start_nodes(tmp_path, 100_000)
    launcher = subprocess.run(
        ["pgrep", "-P", str(zero.pid), "-f", "torchrun"], capture_output=True, text=True
    ).stdout.split()
    assert len(launcher) == 1
    worker = subprocess.run(["pgrep", "-P", launcher[0]], capture_output=True, text=True).stdout
    subprocess.run(["kill", "-9", launcher[0], *worker.split()], check=True)
    _, err = one.communicate(timeout=120)
    assert one.returncode not in (0, None), err[-3000:]
    report = json.loads(report1.read_text())
    assert report["exit_code"] == one.returncode and report["steps"]["count"] > 30
    zero.communicate(timeout=60)
    assert json.loads(report0.read_text())["exit_code"] == 137
