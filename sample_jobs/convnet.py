"""A small convolutional network on fixed-size images, trained in float32 with
cuDNN autotuning left off.

Demonstrates on a GPU: cudnn-benchmark-off and no-mixed-precision (on a CPU neither
applies: the job is simply healthy).
"""

from __future__ import annotations

import time

import torch
from torch import nn

from _common import parser, step_range


def convnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(64, 10),
    )  # fmt: skip


def main() -> None:
    args = parser(__doc__.splitlines()[0], steps=60, batch_size=64).parse_args()
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    images = torch.randn(1024, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (1024,), device=device)
    model = convnet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for step in step_range(args):
        i = (step * args.batch_size) % max(1, images.shape[0] - args.batch_size)
        loss = criterion(model(images[i : i + args.batch_size]), labels[i : i + args.batch_size])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"convnet: {step + 1} steps in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
