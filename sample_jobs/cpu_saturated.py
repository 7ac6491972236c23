"""A job whose DataLoader workers already use every core: the per-sample work is so
heavy that even with a worker per core the model waits for batches.

Demonstrates: cpu-saturated (more workers cannot help; do less work per sample).
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader

from _common import mlp, parser
from dataloader_bound import AugmentedDataset


def main() -> None:
    cores = len(os.sched_getaffinity(0))
    args = parser(__doc__.splitlines()[0], steps=200, batch_size=32, num_workers=cores).parse_args()
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    loader = DataLoader(
        AugmentedDataset(100_000, work=4),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
        persistent_workers=args.num_workers > 0,
    )
    model = mlp(512, 256, 10).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    start = time.perf_counter()
    step = 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
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
    print(
        f"cpu_saturated: {step} steps with {args.num_workers} workers in "
        f"{time.perf_counter() - start:.1f} s"
    )


if __name__ == "__main__":
    main()
