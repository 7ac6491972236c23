"""A 2-rank gloo DDP job ending the way the torchrun tutorials end theirs (training, a
snapshot saved by rank 0, destroy_process_group with no barrier before it), run N times
plain and N times under `gpudoctor run --headless`, alternated: how many runs of each
end with a rank that aborted ("terminate called without an active exception") or any
exit code but 0 (issue 39, point 8: one in 14 doctored runs aborted at a stop, none of
13 plain).

    python bench/ddp_teardown.py --runs 50
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python")

JOB = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    from torch.distributed import destroy_process_group, init_process_group
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    init_process_group(backend="gloo")
    rank = int(os.environ["RANK"])
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(512, 20), torch.randn(512, 1))
    loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data))
    model = DDP(torch.nn.Linear(20, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch in range(3):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        if rank == 0:
            torch.save(model.module.state_dict(), "snapshot.pt")
            print(f"Epoch {epoch} | Training snapshot saved")
    destroy_process_group()
""")


def once(doctored: bool, folder: Path, script: Path, stacks: bool) -> tuple[int, bool, float]:
    launch = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
              str(script)]  # fmt: skip
    argv = [PY, "-m", "gpudoctor", "--store", str(folder / "store.db"), "run", "--headless",
            *([] if stacks else ["--no-stacks"]), "--", *launch] if doctored else launch  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=300)
    aborted = "terminate called" in proc.stderr or "Aborted" in proc.stderr
    return proc.returncode, aborted, time.monotonic() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument(
        "--script", type=Path, default=None,
        help="another 2-rank job to end (tests/compat/ddp_torchrun.py: a barrier before "
        "destroy_process_group, as the tutorials' fix has it)",
    )  # fmt: skip
    parser.add_argument(
        "--stacks",
        action="store_true",
        help="the doctor samples the ranks' stacks too, as tests/test_compat.py runs it",
    )
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ddp-teardown-"))
    (folder / "ddp_job.py").write_text(JOB)
    script = args.script.resolve() if args.script else folder / "ddp_job.py"
    bad = {False: 0, True: 0}
    aborts = {False: 0, True: 0}
    for i in range(args.runs):
        for doctored in (i % 2 == 1, i % 2 == 0):  # alternated, each first in turn
            code, aborted, seconds = once(doctored, folder, script, args.stacks)
            bad[doctored] += code != 0
            aborts[doctored] += aborted
            print(f"run {i + 1} {'doctor' if doctored else 'plain '} exit {code} "
                  f"{'ABORT ' if aborted else ''}{seconds:.1f} s", flush=True)  # fmt: skip
    for doctored in (False, True):
        name = "under the doctor" if doctored else "plain"
        print(f"{name}: {bad[doctored]} of {args.runs} runs exited non-zero, "
              f"{aborts[doctored]} with a rank's abort")  # fmt: skip
    sys.exit(0)


if __name__ == "__main__":
    main()
