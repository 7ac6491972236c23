"""The host reader's cost on a busy server: the CPU of one `HostReader.read()` of a real
training job (a torch DataLoader with 4 workers), with the machine as it is and with
`--others` more processes on it (sleeping, as a shared server's users' shells, editors
and daemons are), while a process is created every 0.1 s somewhere on the machine (so
the reader sees new pids at every read, as it does on a busy server).

    python bench/host_tree.py [--others 1000] [--reads 40] [--rounds 2] [--against TREE]

With `--against TREE` (another version's checkout) the two trees are read side by side,
alternated, on the same job and machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent

JOB = """
import time, torch
from torch.utils.data import DataLoader, Dataset
class D(Dataset):
    def __len__(self): return 10**9
    def __getitem__(self, i): time.sleep(0.01); return torch.zeros(4)
it = iter(DataLoader(D(), batch_size=4, num_workers=4))
while True: next(it)
"""

# one tree's reader: the CPU of each read, the job's tree it read (as JSON)
READER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from gpudoctor.sources.host import HostReader
reader = HostReader(int(sys.argv[2]))
reader.read()
cpu = []
for _ in range(int(sys.argv[3])):
    time.sleep(0.1)
    t = time.process_time()
    sample = reader.read()
    cpu.append(time.process_time() - t)
print(json.dumps({"cpu": cpu, "tree": len(sample.job)}))
"""

SPAWNER = "import subprocess, time\nwhile True:\n    subprocess.run(['true']); time.sleep(0.1)"


def read_cost(tree: Path, job: int, reads: int) -> tuple[float, int]:
    """The median CPU of a read (ms), the processes in the job's tree."""
    out = subprocess.run([sys.executable, "-c", READER, str(tree), str(job), str(reads)],
                         capture_output=True, text=True, check=True)  # fmt: skip
    result = json.loads(out.stdout)
    return statistics.median(result["cpu"]) * 1e3, int(result["tree"])


@contextlib.contextmanager
def started(*procs: list[str], count: int = 1) -> Iterator[list[subprocess.Popen[bytes]]]:
    running = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for cmd in procs for _ in range(count)]  # fmt: skip
    try:
        yield running
    finally:
        for p in running:
            p.kill()
            p.wait()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--others", type=int, default=1000)
    p.add_argument("--reads", type=int, default=40)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--against", type=Path, help="another version's checkout")
    args = p.parse_args()
    trees = [("then", args.against), ("now", ROOT)] if args.against else [("now", ROOT)]
    print(f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with started([sys.executable, "-c", JOB]) as (job,), started([sys.executable, "-c", SPAWNER]):
        time.sleep(15)  # torch imported, the workers started
        for others in (0, args.others):
            with started(["sleep", "3600"], count=others):
                time.sleep(1)
                machine = len(psutil.pids())
                for r in range(args.rounds):
                    for name, tree in trees:
                        ms, members = read_cost(tree, job.pid, args.reads)
                        print(f"{machine:5d} processes on the machine, round {r + 1}, {name}: "
                              f"{ms:.2f} ms CPU a read (median of {args.reads}), "
                              f"{members} in the job's tree", flush=True)  # fmt: skip
    print(f"load {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
