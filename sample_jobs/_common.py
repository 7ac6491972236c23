"""Shared by the sample jobs: a small model and a command line.

Each sample job is an ordinary training script: it knows nothing of gpudoctor.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


def parser(
    description: str, steps: int, batch_size: int, num_workers: int = 0
) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=steps, help="training steps to run")
    p.add_argument("--batch-size", type=int, default=batch_size)
    p.add_argument("--num-workers", type=int, default=num_workers, help="DataLoader workers")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    return p


def mlp(inputs: int, hidden: int, classes: int, depth: int = 2) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(inputs, hidden), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(hidden, hidden), nn.ReLU()]
    layers.append(nn.Linear(hidden, classes))
    return nn.Sequential(*layers)
