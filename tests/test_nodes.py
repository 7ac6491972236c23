"""A torchrun job on two nodes (two torchruns on this machine, meeting at a c10d
rendezvous as two servers would), each node under its own doctor: the doctors trade
their ranks through the job's rendezvous store, so each report has every rank and the
straggler is named from the other node."""

from __future__ import annotations

import json
import subprocess
import textwrap
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


def two_nodes(tmp_path: Path, *doctor_args: str) -> list[dict]:  # type: ignore[type-arg]
    """Node 0 and node 1, one rank each, rank 1 doing 12 ms of extra host work a step."""
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(DDP).replace("range(3)", "range(4)"))
    port = free_port()
    runs = []
    for node in (0, 1):
        report = tmp_path / f"node{node}.json"
        command = [
            PY, "-m", "gpudoctor", "--store", str(tmp_path / f"node{node}.db"), "run",
            "--headless", "--report", str(report), *doctor_args, "--",
            TORCHRUN, "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
            "--rdzv-id", "nodes-test", str(script), "1", "0.012",
        ]  # fmt: skip
        runs.append((subprocess.Popen(command, stderr=subprocess.PIPE, text=True), report))
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
    for report in (node0, node1):
        assert [r["rank"] for r in report["ranks"]] == [0, 1], report["ranks"]
        assert len({r["pid"] for r in report["ranks"]}) == 2
    # node 0's doctor: its own rank 0 waits in the all-reduce for rank 1, on the other node
    theirs = {r["rank"]: r for r in node1["ranks"]}
    own = {r["rank"]: r for r in node0["ranks"]}
    assert own[1]["pid"] == theirs[1]["pid"] and own[0]["pid"] == theirs[0]["pid"]
    assert own[0]["steps"]["count"] == 256  # 4 epochs of 64 batches: its own, exact
    assert own[1]["steps"]["count"] > 20  # as node 1's doctor last sent it
    assert own[0]["comm_wait_ms"] > 6.0 and own[1]["own_ms"] > 2 * own[0]["own_ms"]
    assert finding_ids(node0)[0] == "straggler"
    straggler = next(f for f in node0["findings"] if f["id"] == "straggler")
    assert straggler["evidence"].startswith(f"rank 1 (pid {own[1]['pid']})")
    assert any("Ranks on other nodes" in n for n in node0["notes"])
    assert finding_ids(node1)[0] == "straggler"  # node 1's doctor says the same of its own


def test_without_the_exchange_each_doctor_sees_its_own_node(tmp_path: Path) -> None:
    node0, node1 = two_nodes(tmp_path, "--no-rank-exchange")
    # one rank a node: nothing to compare, and nothing of the other node
    assert node0["ranks"] == [] and node1["ranks"] == []
    assert not any("Ranks on other nodes" in n for n in node0["notes"])
