"""A job that wraps its model in nn.DataParallel, the legacy single-process way to
use several GPUs (on a CPU-only machine it simply calls the model).

Demonstrates: data-parallel (the remedy is DistributedDataParallel).
"""

from __future__ import annotations

import time

import torch
from torch import nn

from _common import mlp, parser, step_range


def main() -> None:
    args = parser(__doc__.splitlines()[0], steps=60, batch_size=256).parse_args()
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    x_all = torch.randn(8192, 512, device=device)
    y_all = torch.randint(0, 10, (8192,), device=device)
    model = nn.DataParallel(mlp(512, 1024, 10, depth=3).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for step in step_range(args):
        i = (step * args.batch_size) % max(1, x_all.shape[0] - args.batch_size)
        loss = criterion(model(x_all[i : i + args.batch_size]), y_all[i : i + args.batch_size])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"data_parallel: {step + 1} steps in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
