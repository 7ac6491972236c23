"""A healthy job: the data is already in memory, the model does the work.

Demonstrates: no medium or high finding. Each step is compute (forward, backward,
optimizer); taking the next batch is a slice of a tensor.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from _common import mlp, parser, step_range


def main() -> None:
    args = parser(__doc__.splitlines()[0], steps=100, batch_size=256).parse_args()
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    x_all = torch.randn(8192, 512, device=device)
    y_all = torch.randint(0, 10, (8192,), device=device)
    model = mlp(512, 1024, 10, depth=3).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    start = time.perf_counter()
    losses = []
    for step in step_range(args):
        i = (step * args.batch_size) % max(1, x_all.shape[0] - args.batch_size)
        x, y = x_all[i : i + args.batch_size], y_all[i : i + args.batch_size]
        loss = criterion(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    print(
        f"healthy: {step + 1} steps in {time.perf_counter() - start:.1f} s, "
        f"final loss {torch.stack(losses[-10:]).mean().item():.4f}"
    )


if __name__ == "__main__":
    main()
