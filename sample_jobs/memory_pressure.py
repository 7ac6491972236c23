"""A GPU job that leaves almost no device memory free: a ballast tensor takes most of
the GPU, then training runs in what is left (as a too-large model or batch would).

Demonstrates on a GPU: memory-pressure. On a CPU there is no CUDA allocator to watch.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from _common import mlp, parser, step_range


def main() -> None:
    p = parser(__doc__.splitlines()[0], steps=100, batch_size=256)
    p.add_argument("--fill", type=float, default=0.93, help="share of GPU memory to take first")
    args = p.parse_args()
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    ballast = None
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        ballast = torch.empty(int(total * args.fill), dtype=torch.uint8, device=device)
    x_all = torch.randn(8192, 512, device=device)
    y_all = torch.randint(0, 10, (8192,), device=device)
    model = mlp(512, 1024, 10, depth=3).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for step in step_range(args):
        i = (step * args.batch_size) % max(1, x_all.shape[0] - args.batch_size)
        loss = criterion(model(x_all[i : i + args.batch_size]), y_all[i : i + args.batch_size])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    del ballast
    print(f"memory_pressure: {step + 1} steps in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
