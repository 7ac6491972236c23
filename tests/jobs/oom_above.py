"""A test job for the batch-size finder's out-of-memory path on a machine without a GPU:
above --fits-up-to it raises the CUDA caching allocator's own error, as a GPU job whose
batch does not fit would (same class, same message shape)."""

from __future__ import annotations

import argparse

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--fits-up-to", type=int, default=48)
    p.add_argument("--steps", type=int, default=100000)
    args = p.parse_args()
    model = nn.Linear(64, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
        if args.batch_size > args.fits_up_to:
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {args.batch_size * 64} MiB. GPU 0 has "
                "a total capacity of 79.10 GiB of which 1.06 GiB is free."
            )
        loss = model(torch.randn(args.batch_size, 64)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
