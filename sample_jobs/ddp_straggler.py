"""DDP where one rank does extra host work every step (a slow augmentation on one node,
a noisy neighbour on its cores): every rank's step lasts as long as the slow one's, the
others wait for it in the gradient all-reduce.

Demonstrates: straggler (names the rank, where its extra time goes, what the others
wait). Run under torchrun:
    torchrun --standalone --nproc_per_node 2 sample_jobs/ddp_straggler.py [--device cuda]
NCCL when every rank has a GPU of its own, else gloo (CUDA tensors too).
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from _common import mlp, parser, step_range


def main() -> None:
    p = parser(__doc__.splitlines()[0], steps=200, batch_size=64)
    p.add_argument("--slow-rank", type=int, default=1)
    p.add_argument("--extra-ms", type=float, default=12.0, help="the slow rank's extra host work")
    args = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = args.device == "cuda"
    own_gpu = cuda and torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    dist.init_process_group("nccl" if own_gpu else "gloo")
    rank = dist.get_rank()
    device = torch.device(f"cuda:{local % torch.cuda.device_count()}" if cuda else "cpu")
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    model = DDP(mlp(256, 256, 10).to(device), device_ids=[device.index] if own_gpu else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    x = torch.randn(args.batch_size, 256, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)
    start = time.perf_counter()
    steps = 0
    for _ in step_range(args):
        if rank == args.slow_rank:  # host work on one rank only
            end = time.perf_counter() + args.extra_ms / 1e3
            while time.perf_counter() < end:
                pass
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
    if rank == 0:
        print(f"ddp_straggler: {steps} steps in {time.perf_counter() - start:.1f} s")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
