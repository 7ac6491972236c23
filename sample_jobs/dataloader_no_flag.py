"""A DataLoader-bound job whose script has no workers option: num_workers=0 is written
in the code, as in many training scripts.

Demonstrates: input-bound, where a rerun can apply more workers only in-process (the
doctor's probe overrides the DataLoader's num_workers; the script is not edited).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader

from _common import mlp
from dataloader_bound import AugmentedDataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--seconds", type=float, default=None)
    p.add_argument("--decode-work", type=int, default=8, help="CPU work per sample (x ~0.3 ms)")
    p.add_argument("--read-ms", type=float, default=0.0, help="storage wait per sample (ms)")
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # as in dataloader_bound.py: a small model, one thread
    loader = DataLoader(
        AugmentedDataset(100_000, work=args.decode_work, read_ms=args.read_ms),
        batch_size=32,
        shuffle=True,
        num_workers=0,
    )
    model = mlp(512, 256, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    start = time.perf_counter()
    step = 0
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if (
            step >= args.steps
            if args.seconds is None
            else time.perf_counter() - start >= args.seconds
        ):
            break
    print(f"dataloader_no_flag: {step} steps in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
