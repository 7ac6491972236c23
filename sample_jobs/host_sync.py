"""A job that prints its loss with .item() in every step: on a GPU each call makes the
host wait until the GPU has finished all the queued work (guide [transfer]).

Demonstrates: host-sync (GPU only: on a CPU there is nothing to wait for, no finding).
"""

from __future__ import annotations

import time

import torch
from torch import nn

from _common import mlp, parser, step_range


def main() -> None:
    args = parser(__doc__.splitlines()[0], steps=150, batch_size=256).parse_args()
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    x_all = torch.randn(8192, 512, device=device)
    y_all = torch.randint(0, 10, (8192,), device=device)
    model = mlp(512, 1024, 10, depth=3).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for step in step_range(args):
        i = (step * args.batch_size) % max(1, x_all.shape[0] - args.batch_size)
        loss = criterion(model(x_all[i : i + args.batch_size]), y_all[i : i + args.batch_size])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")  # a sync in every step
        else:
            _ = loss.item()
    print(f"host_sync: {step + 1} steps in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
