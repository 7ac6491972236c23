"""Probe overhead inside one process: the same training loop with the probe's hooks
installed and active, and entirely removed (the originals put back), alternating every
`--block` steps, so both arms share the interpreter, the allocator, the caches and the
machine's moment. Trimmed means of each arm's step times (loop_job.trimmed_mean).

    python bench/probe_inprocess.py --socket PATH [--hidden 128 --batch-size 32] [--steps 8000] [--block 1]

With --block 1 the arms alternate step by step (the least drift, but every switch
re-patches classes, which costs the interpreter's caches a little on both sides);
a larger block switches rarely.

Run by bench/probe_overhead.py. Prints JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

PROBE_DIR = Path(__file__).resolve().parent.parent / "gpudoctor" / "probe"


def load_probe(socket_path: str) -> Any:
    os.environ["GPUDOCTOR_SOCKET"] = socket_path
    spec = importlib.util.spec_from_file_location(
        "_gpudoctor_probe", PROBE_DIR / "__init__.py", submodule_search_locations=[str(PROBE_DIR)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_gpudoctor_probe"] = module
    spec.loader.exec_module(module)
    module.start()
    return sys.modules["_gpudoctor_probe.agent"].PROBE


def unwrapped(fn: Any, name: str) -> Any:
    """The original behind one of the probe's wrappers (or fn itself: between the steps
    it measures in detail, the probe has the originals in place)."""
    if name not in fn.__code__.co_freevars:
        return fn
    return fn.__closure__[fn.__code__.co_freevars.index(name)].cell_contents


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=8000)
    p.add_argument("--device", default="cpu")
    p.add_argument("--block", type=int, default=1)
    args = p.parse_args()
    load_probe(args.socket)  # before torch, as the boot folder would

    import torch
    from torch.optim import optimizer as optim_mod
    from torch.utils.data import dataloader as dl

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from loop_job import make_job, trimmed_mean  # after the probe: torch must load under it

    torch.set_num_threads(1)
    device = torch.device(args.device)
    # An odd number of batches per epoch: the step that starts an epoch (a new iterator,
    # a shuffle) is slower, and must fall on both arms alike, not always on the same one.
    loader, model, optimizer, criterion = make_job(
        args.hidden, args.batch_size, device, epoch_batches=63
    )

    def batches() -> Any:
        while True:
            yield from loader

    source = batches()

    def step() -> None:
        x, y = next(source)
        x, y = x.to(device), y.to(device)
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(40):  # warm-up: the probe finds the root module, drops its global hooks,
        # and has measured its first steps in full (FULL_STEPS)
        step()

    # The two states: the probe's hooks in place, or the originals back. The probe
    # switches its own hooks on and off between the steps it measures in detail and
    # those it only counts: switching it off saves everything as the probe left it,
    # switching it on puts that back (the probe does not run in between).
    it_cls = dl._BaseDataLoaderIter
    plain_next = unwrapped(it_cls.__next__, "original_next")
    plain_backward = unwrapped(torch.autograd.backward, "original")
    tables = {
        "opt_pre": optim_mod._global_optimizer_pre_hooks,
        "opt_post": optim_mod._global_optimizer_post_hooks,
        "module_pre": model._forward_pre_hooks,
        "module_post": model._forward_hooks,
        "module_post_always": model._forward_hooks_always_called,
    }
    saved: dict[str, Any] = {}

    def install(on: bool) -> None:
        if on:
            it_cls.__next__ = saved["next"]
            torch.autograd.backward = saved["backward"]
            for key, table in tables.items():
                table.clear()
                table.update(saved[key])
        else:
            saved["next"] = it_cls.__next__
            saved["backward"] = torch.autograd.backward
            it_cls.__next__ = plain_next
            torch.autograd.backward = plain_backward
            for key, table in tables.items():
                saved[key] = dict(table)
                table.clear()

    arms: dict[str, dict[str, list[float]]] = {
        "probe": {"wall": [], "cpu": []},
        "none": {"wall": [], "cpu": []},
    }
    current = "probe"
    for i in range(2 * args.steps):
        arm = "probe" if (i // args.block) % 2 == 0 else "none"
        if arm != current:
            install(arm == "probe")
            current = arm
        t, c = time.perf_counter(), time.thread_time()
        step()
        arms[arm]["wall"].append(time.perf_counter() - t)
        arms[arm]["cpu"].append(time.thread_time() - c)
    install(True)
    print(json.dumps({a: {k: trimmed_mean(v) for k, v in d.items()} for a, d in arms.items()}))


if __name__ == "__main__":
    main()
