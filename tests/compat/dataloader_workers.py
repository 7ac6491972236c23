# expect: steps=36
"""DataLoader forms: two workers with persistent workers and a worker_init_fn, a
custom collate_fn, manual next() on an iterator, an IterableDataset sharded by
worker, and a sampler; three epochs over a map-style dataset."""
import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info
from _digest import digest


class Squares(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        return {"x": torch.full((4,), float(i) / 96), "y": torch.tensor(float(i % 3))}


class Stream(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if info else (0, 1)
        for i in range(start, 64, step):
            yield torch.full((4,), math.sin(i)), torch.tensor(float(i % 2))


def collate(items):
    return torch.stack([it["x"] for it in items]), torch.stack([it["y"] for it in items])


def init_worker(worker_id):
    torch.manual_seed(1000 + worker_id)


if __name__ == "__main__":
    torch.manual_seed(19)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Squares(), batch_size=16, num_workers=2, persistent_workers=True,
                        worker_init_fn=init_worker, collate_fn=collate,
                        sampler=torch.utils.data.SequentialSampler(range(96)))
    for epoch in range(3):  # 3 epochs x 6 batches
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x).squeeze(1), y)
            opt.zero_grad(); loss.backward(); opt.step()
    it = iter(DataLoader(Stream(), batch_size=8, num_workers=2))
    for _ in range(8):  # manual next(): 8 batches of the stream
        x, y = next(it)
        loss = nn.functional.mse_loss(model(x).squeeze(1), y)
        opt.zero_grad(); loss.backward(); opt.step()
    for x, y in DataLoader(Stream(), batch_size=6):  # in-process: 11 batches (10 steps)
        if len(x) < 6:
            break
        loss = nn.functional.mse_loss(model(x).squeeze(1), y)
        opt.zero_grad(); loss.backward(); opt.step()
    print("loss", repr(loss.item()), digest(model))
    print("loader", loader.num_workers, loader.persistent_workers, loader.collate_fn.__name__)
