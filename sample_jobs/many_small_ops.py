"""A deep, narrow model: each step is hundreds of tiny operations, so per-operation
overhead (Python dispatch, kernel launches on a GPU) dominates the step.

Demonstrates: not-compiled (torch.compile fuses such operations; a rerun measures it).
"""

from __future__ import annotations

import time

import torch
from torch import nn

from _common import mlp, parser, step_range


def main() -> None:
    args = parser(__doc__.splitlines()[0], steps=150, batch_size=16).parse_args()
    torch.manual_seed(args.seed)
    # one intra-op thread: these operations are too small to split between threads, and
    # two threads on a machine where another process keeps a core busy stall each other
    # at every operation (about 2,900 us a leaf module on 2 cores, against 10 us with one)
    torch.set_num_threads(1)
    device = torch.device(args.device)
    x_all = torch.randn(4096, 32, device=device)
    y_all = torch.randint(0, 10, (4096,), device=device)
    model = mlp(32, 32, 10, depth=40).to(device)  # 81 Linear/ReLU leaves
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for step in step_range(args):
        i = (step * args.batch_size) % max(1, x_all.shape[0] - args.batch_size)
        loss = criterion(model(x_all[i : i + args.batch_size]), y_all[i : i + args.batch_size])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"many_small_ops: {step + 1} steps in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
