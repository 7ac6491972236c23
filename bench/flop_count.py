"""What counting a step's FLOPs costs (issue 15, speed of light): the one step the probe
counts (probe/flops.py) against the job's other steps, with the count on and off.

    python bench/flop_count.py [--repeat 3]

Each job runs under `gpudoctor run --headless` and times its own steps (perf_counter
around each iteration, written to a file); the figure is the counted step (the 11th)
less the median of steps 12-60, with GPUDOCTOR_FLOPS unset (counted) and "0" (not
counted: the control, same step), the median of --repeat runs of each, alternating.
Two jobs: a small MLP (few operators, short steps) and a two-layer Transformer encoder
(hundreds of operators a step). No other step pays anything.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

JOBS = {
    "mlp": """
import sys, time, torch, torch.nn as nn
torch.manual_seed(0); torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
times = []
for step in range(60):
    t = time.perf_counter()
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    times.append(time.perf_counter() - t)
open(sys.argv[1], "w").write(" ".join(map(str, times)))
""",
    "transformer": """
import sys, time, torch, torch.nn as nn
torch.manual_seed(0); torch.set_num_threads(1)
layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True)
model = nn.Sequential(nn.TransformerEncoder(layer, num_layers=2), nn.Flatten(), nn.Linear(32 * 128, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(16, 32, 128), torch.randint(0, 10, (16,))
times = []
for step in range(60):
    t = time.perf_counter()
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    times.append(time.perf_counter() - t)
open(sys.argv[1], "w").write(" ".join(map(str, times)))
""",
}
COUNTED = 10  # the 11th step (probe/flops.py COUNT_AFTER_STEPS)


def one(script: Path, count: bool) -> tuple[float, float]:
    """(the counted step less the median step, the median step), in ms."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "times"
        env = {**os.environ, "GPUDOCTOR_STORE": str(Path(tmp) / "s.db")}
        if not count:
            env["GPUDOCTOR_FLOPS"] = "0"
        subprocess.run(
            [sys.executable, "-m", "gpudoctor", "run", "--headless", "--no-stacks", "--",
             sys.executable, str(script), str(out)],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
        times = [float(t) * 1e3 for t in out.read_text().split()]
    median = statistics.median(times[COUNTED + 1 :])
    return times[COUNTED] - median, median


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| job | median step | counted step's extra, counted | same step, not counted |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in JOBS.items():
            script = Path(tmp) / f"{name}.py"
            script.write_text(text)
            on: list[float] = []
            off: list[float] = []
            steps: list[float] = []
            for i in range(args.repeat):
                for count in (True, False) if i % 2 == 0 else (False, True):
                    extra, median = one(script, count)
                    (on if count else off).append(extra)
                    steps.append(median)
            print(
                f"| {name} | {statistics.median(steps):.2f} ms | "
                f"+{statistics.median(on):.2f} ms | {statistics.median(off):+.2f} ms |"
            )


if __name__ == "__main__":
    main()
