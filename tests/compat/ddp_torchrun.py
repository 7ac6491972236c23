# launch: torchrun --standalone --nproc_per_node 2
# expect: steps=20,20
"""DDP under torchrun (environment variables set by the launcher), with no_sync for
gradient accumulation over two micro-batches."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from _digest import digest

dist.init_process_group("gloo")
rank = int(os.environ["RANK"])
torch.manual_seed(0)
model = DDP(nn.Linear(10, 3))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(rank)
for step in range(20):
    with model.no_sync():
        model(torch.randn(8, 10, generator=g)).square().mean().backward()
    loss = model(torch.randn(8, 10, generator=g)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
if rank == 0:
    print("loss", f"{loss.item():.6f}", digest(model.module))
dist.barrier()  # both ranks done before the group goes: gloo can abort a rank otherwise
dist.destroy_process_group()
