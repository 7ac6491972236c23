"""A healthy job with a DataLoader: the dataset is tensors already in memory, so taking
a batch is cheap next to the model's work.

Demonstrates: no medium or high finding, and that more DataLoader workers do not help
a job that is not waiting for data (a trial reports no gain).
"""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from _common import mlp, parser


class Batches(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Batches cut from tensors in memory: taking one is a slice (a view, no copy)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> None:
        self.x, self.y, self.batch_size = x, y, batch_size

    def __len__(self) -> int:
        return len(self.x) // self.batch_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = slice(i * self.batch_size, (i + 1) * self.batch_size)
        return self.x[rows], self.y[rows]


def main() -> None:
    args = parser(__doc__.splitlines()[0], steps=200, batch_size=128).parse_args()
    torch.manual_seed(args.seed)
    data = Batches(torch.randn(16384, 512), torch.randint(0, 10, (16384,)), args.batch_size)
    # batch_size=None: the dataset yields whole batches
    loader = DataLoader(data, batch_size=None, shuffle=True, num_workers=args.num_workers)
    model = mlp(512, 1024, 10, depth=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    start = time.perf_counter()
    step = 0
    while True:
        for x, y in loader:
            loss = criterion(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            done = (
                step >= args.steps
                if args.seconds is None
                else time.perf_counter() - start >= args.seconds
            )
            if done:
                print(f"in_memory_loader: {step} steps in {time.perf_counter() - start:.1f} s")
                return


if __name__ == "__main__":
    main()
