"""A DataLoader-bound job: every sample is decoded and augmented on the CPU, and the
DataLoader has no workers (num_workers=0, the default), so the model waits.

Demonstrates: input-bound (the remedy, more workers, is the script's own --num-workers).
"""

from __future__ import annotations

import random
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from _common import mlp, parser


class AugmentedDataset(Dataset[tuple[torch.Tensor, int]]):
    """Stands in for decoding plus augmentation: ~1 ms of single-threaded CPU work per
    sample, as a JPEG decoder in PIL would be; and, when `read_ms` is given, the wait for
    each file from network storage (an object store, NFS), which takes no CPU."""

    def __init__(self, size: int, work: int = 4, read_ms: float = 0.0) -> None:
        self.size = size
        self.work = work
        self.read_s = read_ms / 1000.0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.read_s:
            time.sleep(self.read_s)
        rng = random.Random(index)
        pixels = [rng.random() for _ in range(512)]
        for _ in range(3 * self.work):  # a few augmentation passes, in Python
            pixels = [0.9 * p + 0.05 * (1.0 - p) for p in reversed(pixels)]
        return torch.tensor(pixels), index % 10


def main() -> None:
    p = parser(__doc__.splitlines()[0], steps=250, batch_size=32)
    p.add_argument("--decode-work", type=int, default=4, help="CPU work per sample (x ~0.3 ms)")
    p.add_argument("--read-ms", type=float, default=0.0, help="storage wait per sample (ms)")
    args = p.parse_args()
    torch.manual_seed(args.seed)
    # A small model needs one intra-op thread; the default of one per core would spin
    # on the very cores the DataLoader's workers need (on a 2-core machine, all of them).
    torch.set_num_threads(1)
    device = torch.device(args.device)
    loader = DataLoader(
        AugmentedDataset(100_000, work=args.decode_work, read_ms=args.read_ms),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
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
    print(f"dataloader_bound: {step} steps in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
