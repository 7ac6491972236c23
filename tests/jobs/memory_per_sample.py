"""A test job for the batch-size finder on a CPU: each sample of a batch holds
--mib-per-sample MiB for the whole run, as activations kept for backward would, so
the job's memory grows with its batch size by a known amount."""

from __future__ import annotations

import argparse

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--mib-per-sample", type=int, default=16)
    p.add_argument("--steps", type=int, default=100000)
    args = p.parse_args()
    held = torch.ones(args.batch_size, args.mib_per_sample * 2**18)  # float32: 4 bytes each
    model = nn.Linear(32, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
        loss = model(torch.randn(args.batch_size, 32)).square().mean() + held[0, 0] * 0
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
