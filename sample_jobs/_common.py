"""Shared by the sample jobs: a small model and a command line.

Each sample job is an ordinary training script: it knows nothing of gpudoctor.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

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
    p.add_argument("--seconds", type=float, default=None, help="run for this long instead")
    p.add_argument(
        "--pause-ms", type=float, default=0.0,
        help="rest this long after each step, as a job that waits on something else does "
        "(a device, a rate limit): a job that trains without keeping the cores busy",
    )  # fmt: skip
    return p


def step_range(args: argparse.Namespace) -> Iterator[int]:
    """0, 1, 2, ...: --steps of them, or as many as --seconds allows (each followed by
    --pause-ms of rest)."""
    start = time.perf_counter()
    step = 0
    while step < args.steps if args.seconds is None else time.perf_counter() - start < args.seconds:
        yield step
        step += 1
        if args.pause_ms:
            time.sleep(args.pause_ms / 1000)


def mlp(inputs: int, hidden: int, classes: int, depth: int = 2) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(inputs, hidden), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(hidden, hidden), nn.ReLU()]
    layers.append(nn.Linear(hidden, classes))
    return nn.Sequential(*layers)
