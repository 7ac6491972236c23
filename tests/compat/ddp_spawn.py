# expect: steps=25,25
"""DistributedDataParallel on CPU (gloo), two ranks started with mp.spawn, a
DistributedSampler; rank 0 prints the result."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler
from _digest import digest


def worker(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
    data = TensorDataset(torch.randn(800, 8), torch.randint(0, 2, (800,)))
    loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, shuffle=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        print("loss", repr(loss.item()), digest(model.module))
    dist.barrier()  # both ranks done before the group goes: gloo can abort a rank otherwise
    dist.destroy_process_group()


if __name__ == "__main__":
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(2, port), nprocs=2)
    print("done")
