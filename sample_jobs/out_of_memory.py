"""A job that runs out of memory: it trains normally, then a batch with a huge
sequence length asks the allocator for far more memory than the machine has.

Demonstrates: out-of-memory (the steps before the crash are counted; exit code 1).
"""

from __future__ import annotations

import torch
from torch import nn

from _common import mlp, parser, step_range


def main() -> None:
    p = parser(__doc__.splitlines()[0], steps=40, batch_size=64)
    p.add_argument("--oom-at", type=int, default=30, help="the step whose batch does not fit")
    args = p.parse_args()
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    model = mlp(128, 512, 10).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    for step in step_range(args):
        x = torch.randn(args.batch_size, 128, device=device)
        y = torch.randint(0, 10, (args.batch_size,), device=device)
        if step == args.oom_at:
            # one pathological batch: (64 x 2^40) floats is ~256 TiB
            x = torch.empty(args.batch_size, 1 << 40, device=device)
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("out_of_memory: finished without running out of memory")


if __name__ == "__main__":
    main()
