"""The doctor's memory after a week (issue 41): a timeline fed a week of host and GPU
readings (one a second, as the doctor reads them) and a fast loop's step rows (the rows
are full long before a week: step_rows.py) in the probe's messages, through the paths
the live doctor uses (Timeline.host/gpus; Timeline.ingest_probe and Compactor.knows, as
LaunchedJob._drain_probe: the messages compaction will take, up to MAX_KNOWN, are held
too), then the whole run's report built. Each
reading is decoded from its own JSON text, as the store gives them back, so none shares
its numbers with another; the host reading is a real one (HostReader, of this process
with four children in the job's place: a training process and its DataLoader workers),
the GPU one in the NVML reader's shape.

    python bench/week_memory.py [--days 7] [--steps 2400000] [--against TREE]

Cases: one process at 3,000 steps a second with one GPU; 8 ranks at 100 steps a second
each with 8 GPUs. Prints, per case and tree: the RSS the timeline grew by, the process's
peak RSS, the readings held, the report's time. With `--against TREE` (another version's
checkout, `git worktree add /tmp/base HEAD`) each round runs that tree and this one,
alternated, each in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import gc, json, random, resource, subprocess, sys, time
import psutil
from gpudoctor import jsontext
from gpudoctor.compaction import Compactor
from gpudoctor.timeline import Timeline
from gpudoctor.report.build import build
from gpudoctor.sources.host import HostReader
from gpudoctor.store import decode_gpu, decode_host, encode
from gpudoctor.model import GpuProcess, GpuSample

ranks, gpus, steps, rate, days = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                  float(sys.argv[4]), float(sys.argv[5]))
kids = [subprocess.Popen(["sleep", "600"]) for _ in range(4)]
reader = HostReader(__import__("os").getpid())
reader.read(); time.sleep(0.3)
host_text = json.dumps(encode(reader.read()))
for k in kids:
    k.kill()
gpu_text = json.dumps(encode(GpuSample(
    t_mono_ns=0, index=0, name="NVIDIA H100 80GB HBM3", uuid="GPU-0b8d2f0e-8a41-5d1c-9a3e-4c2f6d7e8a91",
    util_gpu_pct=97, util_mem_pct=41, mem_used_bytes=61 << 30, mem_total_bytes=80 << 30,
    power_w=612.5, power_limit_w=700.0, temp_c=64, fan_pct=None, sm_clock_mhz=1980,
    mem_clock_mhz=2619, pcie_rx_bytes_per_s=1 << 20, pcie_tx_bytes_per_s=1 << 21,
    clock_event_reasons=(), compute_capability=(9, 0),
    processes=(GpuProcess(1000, 60 << 30, 97),))))
proc = psutil.Process()
gc.collect()
before = proc.memory_info().rss
timeline = Timeline(["python", "train.py"], 0.0, 0)
live = Compactor()
rng = random.Random(1)
# the probe's messages: a quarter second of rows each, at most 400 (agent.py, protocol.py)
step_ns, per = int(1e9 / rate), min(400, int(rate / 4))
for start in range(0, steps, per):
    for rank in range(ranks):
        batch = []
        for i in range(start, start + per):
            t, wall = 10**9 + i * step_ns, int(rng.lognormvariate(0, 0.3) * step_ns)
            if i % 30 == 0:
                batch.append([i, t, wall, wall // 3, 0, wall // 4, wall // 4, 0, 1, 32, 0, 0, 1])
            else:
                batch.append([i, t, wall])
        message = {"v": "1.1", "pid": 1000 + rank, "seq": start // per, "steps": batch,
                   "counts": {"steps": start + per, "rows": start + per, "dropped": 0}}
        if start == 0 and ranks > 1:
            message["facts"] = {"rank": rank}
        # as the live doctor takes it in (LaunchedJob._drain_probe): read, rolled up on
        # its own too, and handed to compaction, which holds up to MAX_KNOWN of them
        text = json.dumps(message, separators=(",", ":"))
        read = jsontext.loads(text)
        live.knows(t, text, read, timeline.ingest_probe(read, apart=True))
h0, g0 = json.loads(host_text), json.loads(gpu_text)
host_tpl = host_text.replace('"t_mono_ns": %d' % h0["t_mono_ns"], '"t_mono_ns": %d', 1)
host_tpl = host_tpl.replace('"load_1m": %r' % h0["load_1m"], '"load_1m": %r', 1)
gpu_tpl = gpu_text.replace('"t_mono_ns": 0', '"t_mono_ns": %d', 1)
gpu_tpl = gpu_tpl.replace('"index": 0', '"index": %d', 1).replace('"power_w": 612.5', '"power_w": %r', 1)
t0 = time.perf_counter()
for s in range(int(days * 86400)):
    t = 10**9 + s * 10**9
    timeline.host.append(decode_host(json.loads(host_tpl % (t, 1.0 + s % 97 / 100))))
    timeline.gpus.extend(decode_gpu(json.loads(gpu_tpl % (t, g, 600.0 + s % 89 / 10)))
                         for g in range(gpus))
feed_s = time.perf_counter() - t0
gc.collect()
grown = proc.memory_info().rss - before
t0 = time.perf_counter()
report = build(timeline, 1)
report_s = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"grown_mb": round(grown / 1e6, 1), "peak_mb": round(peak, 1),
                  "known": len(live.known),
                  "host_held": len(timeline.host), "gpu_held": len(timeline.gpus),
                  "host_bytes": len(host_text), "feed_s": round(feed_s, 1),
                  "report_s": round(report_s, 3), "findings": [f.id for f in report.findings]}))
"""


def run(tree: Path, ranks: int, gpus: int, steps: int, rate: float, days: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    args = [str(ranks), str(gpus), str(steps), str(rate), str(days)]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
        capture_output=True, text=True, check=True, env=env, cwd=tree,
    )  # fmt: skip
    return dict(json.loads(out.stdout))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--days", type=float, default=7.0)
    p.add_argument("--steps", type=int, default=2_400_000, help="all processes together")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--against", type=Path, help="another version's checkout")
    args = p.parse_args()
    trees = [("then", args.against), ("now", ROOT)] if args.against else [("now", ROOT)]
    cases = [("1 process at 3,000 steps/s, 1 GPU", 1, 1, args.steps, 3000.0),
             ("8 ranks at 100 steps/s each, 8 GPUs", 8, 8, args.steps // 8, 100.0)]  # fmt: skip
    for name, ranks, gpus, steps, rate in cases:
        print(f"{name}, {args.days:g} days of readings, {steps:,} steps each:", flush=True)
        for n in range(args.rounds):
            for label, tree in trees:
                result = run(tree, ranks, gpus, steps, rate, args.days)
                print(f"  {label:4} round {n + 1}: {json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main()
