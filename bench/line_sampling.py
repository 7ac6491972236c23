"""What naming the line costs (issue 20): the job's throughput while py-spy's two runs
sample it (sources/hotspots.py, 10 Hz each, non-blocking, its workers followed) side by
side with the same job unsampled, and the CPU the py-spy processes take.

    python bench/line_sampling.py [--periods 6] [--period-s 10]

One job per kind runs for the whole measurement and writes the end time of each of its
steps; the benchmark alternates periods with the sampler on (one chunk) and off, so the
ratio compares the same process with itself, period by period, which of the two comes
first alternating. The py-spy processes' CPU comes from wait4() (getrusage of this
process's reaped children: only the py-spy runs are reaped before the end).
Budget (DESIGN.md section 7): py-spy non-blocking at 20 Hz or less; the job's slowdown
is the figure to read. In a run the sampler takes one chunk a minute after its first
three, so its CPU averages a sixth of the figure while sampling.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpudoctor.sources.hotspots import HotspotSampler
from gpudoctor.sources.stacks import find_py_spy

READER = """
import sys, time, torch
torch.set_num_threads(1)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.001)
TEXT = ",".join(str(i % 97) for i in range(20000))
ends = []
stop = time.monotonic() + float(sys.argv[2])
while time.monotonic() < stop:
    fields = [float(v) * 0.5 for v in TEXT.split(",")]
    x = torch.tensor(fields[:16]).view(1, 16)
    loss = (model(x) - 1.0).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    ends.append(time.monotonic())
open(sys.argv[1], "w").write("\\n".join(map(str, ends)))
"""

LOADER = """
import sys, time, numpy as np, torch
from torch.utils.data import DataLoader, Dataset
torch.set_num_threads(1)
class D(Dataset):
    def __len__(self): return 10**7
    def __getitem__(self, i):
        a = np.full((64, 64), i % 7, dtype=np.float32)
        for _ in range(4): a = (a + np.roll(a, 1, 0)) / 2
        return torch.from_numpy(a)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4096, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.001)
ends = []
stop = time.monotonic() + float(sys.argv[2])
for x in DataLoader(D(), batch_size=16, num_workers=1):
    loss = model(x).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    ends.append(time.monotonic())
    if time.monotonic() > stop: break
open(sys.argv[1], "w").write("\\n".join(map(str, ends)))
"""


def rate(ends: list[float], start: float, stop: float) -> float:
    n = sum(1 for t in ends if start <= t < stop)
    return n / (stop - start)


def measure(name: str, code: str, periods: int, period_s: float, py_spy: str) -> None:
    work = Path(tempfile.mkdtemp())
    script, out = work / f"{name}.py", work / "ends.txt"
    script.write_text(code)
    total = 6.0 + periods * (period_s + 2.0) + 5.0
    job = subprocess.Popen([sys.executable, str(script), str(out), str(total)])
    time.sleep(6.0)  # imports, the loader's start
    spans: list[tuple[bool, float, float]] = []
    cpu_s = wall_s = 0.0
    for k in range(periods):
        on = (k % 2 == 0) == ((k // 2) % 2 == 0)  # on, off, off, on, on, off, ...
        start = time.monotonic()
        if on:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            sampler = HotspotSampler(py_spy, chunk_s=period_s, first_chunks=1, gap_s=3600)
            sampler.begin(job.pid)
            sampler.poll()
            while sampler.poll() is None and time.monotonic() - start < period_s + 5:
                time.sleep(0.1)
            sampler.close()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu_s += (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            wall_s += time.monotonic() - start
        else:
            time.sleep(period_s)
        spans.append((on, start, time.monotonic()))
        time.sleep(2.0)  # py-spy's runs detached before the next period
    job.wait()
    ends = [float(t) for t in out.read_text().split()]
    with_ = [rate(ends, a, b) for on, a, b in spans if on]
    without = [rate(ends, a, b) for on, a, b in spans if not on]
    ratio = statistics.mean(with_) / statistics.mean(without)
    print(
        f"== {name}: unsampled {statistics.mean(without):.1f} steps/s "
        f"(periods {', '.join(f'{r:.1f}' for r in without)}), sampled "
        f"{statistics.mean(with_):.1f} steps/s (periods {', '.join(f'{r:.1f}' for r in with_)}): "
        f"ratio {ratio:.3f}; py-spy's two runs {100 * cpu_s / wall_s:.2f}% of a core while "
        "sampling"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--periods", type=int, default=6)
    p.add_argument("--period-s", type=float, default=10.0)
    args = p.parse_args()
    py_spy = find_py_spy()
    assert py_spy, "py-spy is needed"
    print(f"line sampling, {args.periods} periods of {args.period_s:.0f} s, half sampled")
    measure("python-heavy step (one thread)", READER, args.periods, args.period_s, py_spy)
    measure("DataLoader job, one worker", LOADER, args.periods, args.period_s, py_spy)


if __name__ == "__main__":
    main()
