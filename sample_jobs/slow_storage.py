"""A job that reads every sample from disk, uncached: each sample is two 1 MiB
blocks read with O_DIRECT (bypassing the page cache, as a cold dataset on a network
or spinning disk would be), so the loader sits in disk sleep while the model waits.

Demonstrates: slow-storage (keep the data on a local SSD, preprocess, memory-map).
The data file (128 MiB) is written to --data-dir first and removed at the end.
"""

from __future__ import annotations

import mmap
import os
import random
import tempfile
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from _common import mlp, parser

BLOCK = 1 << 20
FILE_BLOCKS = 128


class DiskDataset(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, path: str, size: int) -> None:
        self.path = path
        self.size = size
        self.fd: int | None = None
        self.direct = True

    def __len__(self) -> int:
        return self.size

    def _read(self, offset: int) -> bytes:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECT)
            except OSError:  # a filesystem without O_DIRECT (tmpfs): drop the cache instead
                self.fd, self.direct = os.open(self.path, os.O_RDONLY), False
        buf = mmap.mmap(-1, BLOCK)
        if not self.direct:
            os.posix_fadvise(self.fd, offset, BLOCK, os.POSIX_FADV_DONTNEED)
        os.preadv(self.fd, [buf], offset)
        return bytes(buf[:2048])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = random.Random(index)
        chunks = [self._read(rng.randrange(FILE_BLOCKS) * BLOCK) for _ in range(2)]
        raw = torch.frombuffer(bytearray(b"".join(chunks)[:512]), dtype=torch.uint8)
        return raw.float() / 255.0, index % 10


def main() -> None:
    p = parser(__doc__.splitlines()[0], steps=40, batch_size=16)
    p.add_argument("--data-dir", default=os.environ.get("SAMPLE_DATA_DIR", tempfile.gettempdir()))
    args = p.parse_args()
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    fd, path = tempfile.mkstemp(prefix="slow-storage-", suffix=".bin", dir=args.data_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            for _ in range(FILE_BLOCKS):
                f.write(os.urandom(BLOCK))
            f.flush()
            os.fsync(f.fileno())
        loader = DataLoader(
            DiskDataset(path, 100_000),
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
            if step >= args.steps if args.seconds is None else time.perf_counter() - start >= args.seconds:
                break
        print(f"slow_storage: {step} steps in {time.perf_counter() - start:.1f} s")
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
