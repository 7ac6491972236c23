"""The job the probe-overhead benchmark runs: a plain training loop (DataLoader over
in-memory tensors, an MLP, SGD) that times its own steps and prints them as JSON.

It knows nothing of gpudoctor; the benchmark runs it with and without the probe.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_job(
    hidden: int, batch_size: int, device: torch.device, epoch_batches: int = 64
) -> tuple[Any, nn.Module, Any, nn.Module]:
    """The benchmark's training setup: loader, model, optimizer, loss (shared with
    bench/probe_inprocess.py, which times the same loop in one process)."""
    torch.manual_seed(0)
    n = batch_size * epoch_batches
    data = TensorDataset(torch.randn(n, hidden), torch.randint(0, 10, (n,)))
    loader = DataLoader(data, batch_size=batch_size, shuffle=True, drop_last=True)
    model = nn.Sequential(
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, 10),
    ).to(device)  # fmt: skip
    return loader, model, torch.optim.SGD(model.parameters(), lr=0.01), nn.CrossEntropyLoss()


def stepper(
    loader: Any, model: nn.Module, optimizer: Any, criterion: nn.Module, device: Any = None
) -> Callable[[], None]:
    """One training step of make_job's setup per call, its loader gone over endlessly
    (the in-process benchmarks time the steps themselves). With `device`, each batch is
    moved there and a CUDA step waited for (the benchmark's own clock)."""

    def batches() -> Any:
        while True:
            yield from loader

    source = batches()

    def step() -> None:
        x, y = next(source)
        if device is not None:
            x, y = x.to(device), y.to(device)
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if device is not None and device.type == "cuda":
            torch.cuda.synchronize()

    return step


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    # a step of at least this long (its rest asleep, outside the model): a loop at a
    # chosen step rate (bench/doctor_cost.py: the 10 ms step of the probe's budget)
    p.add_argument("--pace-ms", type=float, default=0.0)
    # tensor methods a step calls (the probe's CUDA hooks patch them: probe/cuda.py):
    # the batch cast this many times before the forward, as a model casts its activations
    # (mixed-precision norms), and the loss read once with .item() after the step
    p.add_argument("--tensor-calls", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    loader, model, optimizer, criterion = make_job(args.hidden, args.batch_size, device)
    times: list[float] = []
    cpu: list[float] = []
    total = args.steps + args.warmup
    last = time.perf_counter()
    last_cpu = time.thread_time()
    process_cpu: list[float] = []  # every thread's CPU (the probe's flush thread too)
    while len(times) < total:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            for _ in range(args.tensor_calls):
                x = x.to(torch.float32)
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if args.tensor_calls:
                loss.item()
            if device.type == "cuda":
                torch.cuda.synchronize()  # the benchmark's own clock, not the probe's
            if args.pace_ms:
                time.sleep(max(0.0, last + args.pace_ms / 1000 - time.perf_counter()))
            now, now_cpu = time.perf_counter(), time.thread_time()
            times.append(now - last)
            cpu.append(now_cpu - last_cpu)
            process_cpu.append(time.process_time())
            last, last_cpu = now, now_cpu
            if len(times) >= total:
                break
    steady = times[args.warmup :]
    spent = process_cpu[-1] - process_cpu[args.warmup - 1] if args.warmup else process_cpu[-1]
    print(
        json.dumps(
            {
                "mean_s": trimmed_mean(steady),
                "median_s": statistics.median(steady),  # a step only counted, on a short one
                "mean_cpu_s": trimmed_mean(cpu[args.warmup :]),  # this thread's CPU time
                "process_cpu_s": spent / len(steady),  # all threads, per step (not trimmed)
                "steps": len(steady),
            }
        )
    )


def trimmed_mean(values: list[float], cut: float = 0.01) -> float:
    """The mean without the 1% slowest and fastest: a mean, since the probe measures one
    step in several in detail and the cost is their average; trimmed, since this machine
    now and then stalls a step for milliseconds."""
    ordered = sorted(values)
    k = int(len(ordered) * cut)
    return statistics.fmean(ordered[k : len(ordered) - k] if k else ordered)


if __name__ == "__main__":
    main()
