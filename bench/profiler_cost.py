"""What torch.profiler costs on the probe benchmark's training loop (the figure the
probe's budget is set against, DESIGN.md section 7).

    python bench/profiler_cost.py [--blocks 10] [--block-steps 100]

One process, one intra-op thread: blocks of steps alternately under
`torch.profiler.profile(activities=[CPU])` and without it; the mean step of each (trimmed
as loop_job does), and what entering and leaving the profiler costs per block
(building its event table is most of it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loop_job import make_job, stepper, trimmed_mean  # noqa: E402

SIZES = {"~10 ms step": (512, 128), "~1 ms step": (128, 32)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--blocks", type=int, default=10)
    p.add_argument("--block-steps", type=int, default=100)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(
        f"torch.profiler cost, {args.blocks} blocks a side of {args.block_steps} steps "
        f"(torch {torch.__version__}, CPU activity)"
    )
    for name, (hidden, batch) in SIZES.items():
        plain, profiled, edges = measure(hidden, batch, args.blocks, args.block_steps)
        b, q = trimmed_mean(plain), trimmed_mean(profiled)
        print(
            f"  {name}: without {b * 1e3:.3f} ms, profiled {q * 1e3:.3f} ms, "
            f"+{(q - b) * 1e6:.1f} us a step ({(q / b - 1) * 100:+.1f}%); entering, leaving "
            f"and its table {statistics.median(edges) * 1e3:.0f} ms a block"
        )


def measure(
    hidden: int, batch: int, blocks: int, block_steps: int
) -> tuple[list[float], list[float], list[float]]:
    """Step times without and under the profiler, and each block's enter/exit cost."""
    step = stepper(*make_job(hidden, batch, torch.device("cpu"), epoch_batches=63))

    for _ in range(50):
        step()
    plain: list[float] = []
    profiled: list[float] = []
    edges: list[float] = []
    for _ in range(blocks):
        for _ in range(block_steps):
            t = time.perf_counter()
            step()
            plain.append(time.perf_counter() - t)
        t0 = time.perf_counter()
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        prof.__enter__()
        t1 = time.perf_counter()
        for _ in range(block_steps):
            t = time.perf_counter()
            step()
            profiled.append(time.perf_counter() - t)
        t2 = time.perf_counter()
        prof.__exit__(None, None, None)
        prof.key_averages()
        edges.append((t1 - t0) + (time.perf_counter() - t2))
    return plain, profiled, edges


if __name__ == "__main__":
    main()
