"""A job that reads every sample from a busy disk, uncached: each sample is sixteen
64 KiB records at random places, read with O_DIRECT (bypassing the page cache, as a
cold dataset too big for memory would be), while another tenant streams writes to the
same disk (a checkpoint, a neighbour's job). The loader sits in disk sleep while the
model waits.

Demonstrates: slow-storage (keep the data on a local SSD, preprocess, memory-map).
Without the busy neighbour, a fast local disk serves these reads quickly and the report
says input-bound instead, which is the truth on such a machine.
The data file (128 MiB) and the neighbour's scratch file (up to 256 MiB) are written
to --data-dir and removed at the end.
"""

from __future__ import annotations

import mmap
import os
import random
import subprocess
import sys
import tempfile
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from _common import mlp, parser

BLOCK = 64 << 10
FILE_BLOCKS = 2048  # 128 MiB
READS_PER_SAMPLE = 16


class DiskDataset(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, path: str, size: int) -> None:
        self.path = path
        self.size = size
        self.fd: int | None = None
        self.direct = True
        self.buf: mmap.mmap | None = None  # page-aligned, as O_DIRECT requires

    def __len__(self) -> int:
        return self.size

    def _read(self, offset: int) -> bytes:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECT)
            except OSError:  # a filesystem without O_DIRECT (tmpfs): drop the cache instead
                self.fd, self.direct = os.open(self.path, os.O_RDONLY), False
        if self.buf is None:
            self.buf = mmap.mmap(-1, BLOCK)
        buf = self.buf
        if not self.direct:
            os.posix_fadvise(self.fd, offset, BLOCK, os.POSIX_FADV_DONTNEED)
        os.preadv(self.fd, [buf], offset)
        return bytes(buf[:32])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = random.Random(index)
        chunks = [self._read(rng.randrange(FILE_BLOCKS) * BLOCK) for _ in range(READS_PER_SAMPLE)]
        raw = torch.frombuffer(bytearray(b"".join(chunks)[:512]), dtype=torch.uint8)
        return raw.float() / 255.0, index % 10


NEIGHBOUR = """
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | getattr(os, "O_DIRECT", 0), 0o600)
buf = mmap.mmap(-1, 1 << 20)
buf.write(os.urandom(1 << 20))
offset = 0
while True:
    os.pwritev(fd, [buf], offset)
    offset = (offset + (1 << 20)) % (256 << 20)
"""


def main() -> None:
    p = parser(__doc__.splitlines()[0], steps=100, batch_size=8)
    p.add_argument("--data-dir", default=os.environ.get("SAMPLE_DATA_DIR", tempfile.gettempdir()))
    args = p.parse_args()
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    fd, path = tempfile.mkstemp(prefix="slow-storage-", suffix=".bin", dir=args.data_dir)
    scratch = path + ".neighbour"
    neighbour = None
    try:
        with os.fdopen(fd, "wb") as f:
            for _ in range(FILE_BLOCKS):
                f.write(os.urandom(BLOCK))
            f.flush()
            os.fsync(f.fileno())
        neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, scratch])
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
            if (
                step >= args.steps
                if args.seconds is None
                else time.perf_counter() - start >= args.seconds
            ):
                break
        print(f"slow_storage: {step} steps in {time.perf_counter() - start:.1f} s")
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
        for leftover in (path, scratch):
            if os.path.exists(leftover):
                os.unlink(leftover)


if __name__ == "__main__":
    main()
