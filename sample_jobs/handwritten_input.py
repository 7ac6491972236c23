"""A job with a hand-written input pipeline and no DataLoader: each batch is parsed
from text records in the training loop itself, so the model waits between steps.

Demonstrates: input-bound, measured as host time outside the model.
"""

from __future__ import annotations

import random
import time

import torch
from torch import nn

from _common import mlp, parser, step_range


def make_records(n: int) -> list[str]:
    rng = random.Random(0)
    return [",".join(f"{rng.random():.6f}" for _ in range(256)) + f";{i % 10}" for i in range(n)]


def parse_batch(records: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    features, labels = [], []
    for record in records:
        values, label = record.split(";")
        row = [float(v) for v in values.split(",")]
        mean = sum(row) / len(row)
        features.append([v - mean for v in row])  # per-sample normalisation, in Python
        labels.append(int(label))
    return torch.tensor(features), torch.tensor(labels)


def main() -> None:
    args = parser(__doc__.splitlines()[0], steps=80, batch_size=64).parse_args()
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    records = make_records(4096)
    model = mlp(256, 256, 10).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for step in step_range(args):
        i = (step * args.batch_size) % max(1, len(records) - args.batch_size)
        x, y = parse_batch(records[i : i + args.batch_size])
        x, y = x.to(device), y.to(device)
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"handwritten_input: {step + 1} steps in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
