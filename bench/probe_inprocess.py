"""Probe overhead inside one process: the same training loop with the probe's hooks in
place and with the originals put back, alternating every `--block` steps, the job
timing its own steps. Run by bench/probe_overhead.py, which also starts the probe
server.

What the main thread pays shows in its steps; what the probe's flush thread spends
(encoding and sending the rows) runs beside them, so it is measured apart: that
thread's CPU time over the whole run, per step of the probe's arm.

It under-measures (bench/RESULTS.md, 2026-12-05): each switch sets attributes on classes,
and CPython relearns their look-ups afterwards in both arms. `bench/probe_cycle.py`
(nothing switched) and `bench/probe_versions.py` (separate processes) read the cost
without that.
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
    """The probe as the boot folder loads it: under its private name, armed."""
    os.environ["GPUDOCTOR_SOCKET"] = socket_path
    spec = importlib.util.spec_from_file_location(
        "_gpudoctor_probe", PROBE_DIR / "__init__.py", submodule_search_locations=[str(PROBE_DIR)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_gpudoctor_probe"] = module
    spec.loader.exec_module(module)
    module.start()
    return sys.modules["_gpudoctor_probe.agent"].AGENT


class Switch:
    """The probe's hooks out (the originals back) and in again, as the probe left them:
    the probe does not run in between, so its state stays as it was."""

    def __init__(self, agent: Any, torch: Any, optimizer: Any) -> None:
        self.groups = {g.name: g for g in agent.groups}
        self.autograd = torch.autograd
        self.opt_cls = type(optimizer)
        self.saved: dict[str, Any] = {}

    def off(self, only: str = "") -> None:
        """Every hook out, or `only` one part: "roots" (the root modules' calls) or
        "step" (the optimizer's step)."""
        if only:
            self.only = only
            if only == "roots":
                models = self.groups["models"]
                self.saved = {
                    "roots": [p for p in models.patches if p.owner.__dict__.get("__call__") is p]
                }
                for patch in self.saved["roots"]:
                    patch.remove()
            else:
                self.saved = {"step": self.opt_cls.__dict__["step"]}
                self.opt_cls.step = self.saved["step"].__wrapped__
            return
        self.only = ""
        models, loader = self.groups["models"], self.groups["dataloader"]
        self.saved = {
            "roots": [p for p in models.patches if p.owner.__dict__.get("__call__") is p],
            "loader": loader.patch.owner.__dict__.get("__next__") is loader.patch,
            "backward": self.autograd.backward,
            "step": self.opt_cls.__dict__["step"],
        }
        for patch in self.saved["roots"]:
            patch.remove()
        loader.patch.remove()
        housekeeping = self.groups.get("housekeeping")  # zero_grad, no_grad, ... (issue 39)
        if housekeeping is not None:  # in place all along (DetailPatch)
            self.saved["housekeeping"] = True
            housekeeping.off()
        self.autograd.backward = self.groups["backward"].original
        self.opt_cls.step = self.saved["step"].__wrapped__  # torch's own, under the probe's

    def on(self) -> None:
        if self.only == "roots":
            for patch in self.saved["roots"]:
                patch.install()
            return
        if self.only:
            self.opt_cls.step = self.saved["step"]
            return
        for patch in self.saved["roots"]:
            patch.install()
        if self.saved["loader"]:
            self.groups["dataloader"].patch.install()
        if self.saved.get("housekeeping"):
            self.groups["housekeeping"].on()
        self.autograd.backward = self.saved["backward"]
        self.opt_cls.step = self.saved["step"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=8000)
    p.add_argument("--device", default="cpu")
    p.add_argument("--block", type=int, default=1)
    p.add_argument("--detail-every", type=int, default=0, help="the probe's SAMPLE_EVERY")
    p.add_argument("--only", choices=("roots", "step"), default="", help="switch one part")
    p.add_argument("--threads", type=int, default=1, help="torch's intra-op threads")
    p.add_argument("--pause", type=float, default=0.0, help="seconds slept after each step")
    args = p.parse_args()
    agent = load_probe(args.socket)  # before torch, as the boot folder would
    if args.detail_every:  # what a step measured in detail costs: 1 measures each so
        sys.modules["_gpudoctor_probe.clock"].SAMPLE_EVERY = args.detail_every

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from loop_job import (  # after the probe: torch must load under it
        make_job,
        stepper,
        trimmed_mean,
    )

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    # An odd number of batches per epoch: the step that starts an epoch (a new iterator,
    # a shuffle) is slower, and must fall on both arms alike, not always on the same one.
    loader, model, optimizer, criterion = make_job(
        args.hidden, args.batch_size, device, epoch_batches=63
    )

    step = stepper(loader, model, optimizer, criterion, device)

    for _ in range(40):  # warm-up: the probe finds the root module, drops the patches it
        # no longer needs, and has measured its first steps in full (FULL_STEPS)
        step()

    switch = Switch(agent, torch, optimizer)
    flusher_clock = time.pthread_getcpuclockid(agent.flusher.ident)
    flusher_start = time.clock_gettime(flusher_clock)
    arms: dict[str, dict[str, list[float]]] = {
        "probe": {"wall": [], "cpu": []},
        "none": {"wall": [], "cpu": []},
    }
    current = "probe"
    for i in range(2 * args.steps):
        arm = "probe" if (i // args.block) % 2 == 0 else "none"
        if arm != current:
            switch.on() if arm == "probe" else switch.off(args.only)
            current = arm
        t, c = time.perf_counter(), time.thread_time()
        step()
        arms[arm]["wall"].append(time.perf_counter() - t)
        arms[arm]["cpu"].append(time.thread_time() - c)
        if args.pause:
            time.sleep(args.pause)  # after the step's clock: a job's own pause
    if current == "none":
        switch.on()
    agent.flush()
    flusher_s = time.clock_gettime(flusher_clock) - flusher_start
    result: dict[str, Any] = {
        a: {k: trimmed_mean(v) for k, v in d.items()} for a, d in arms.items()
    }
    result["flusher_cpu_per_step_s"] = flusher_s / len(arms["probe"]["wall"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
