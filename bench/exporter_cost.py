"""What `gpudoctor exporter` costs with N training jobs on the node, side by side with
the floor: a bare psutil collector reading the same jobs' CPU and memory once a second.

    python bench/exporter_cost.py [--jobs 8] [--seconds 120] [--rounds 2] [--scrape-every 15]

The N jobs are small torch loops that sleep most of each step (a node's jobs wait on
their GPUs; this 2-core machine could not run eight busy ones), started once and kept
for the whole run. Each round runs the collector, then the exporter (the order
alternating between rounds), each for --seconds, on the same jobs. A side's CPU is
its process's and every child's (the exporter's py-spy samplers, reaped ones included:
wait4() counts them), over its seconds: % of one core. Memory: the peak of the side's
RSS summed over its process tree, sampled every second. The exporter is scraped every
--scrape-every seconds (15: the scrape interval of Prometheus' example configuration)
so its serving costs are in; what one scrape costs it is measured apart, at the end (its
own CPU over 200 scrapes in a row). Budget (issue 44): <= 1% of one core and <= 150 MB
with 8 jobs. "Steady": from STEADY_AFTER_S on (start-up and the first chunks left out).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
STEADY_AFTER_S = 30.0  # the steady state: after start-up and the first stack chunks
JOB = """
    import time, torch
    torch.set_num_threads(1)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    end = time.monotonic() + float(__import__("sys").argv[1])
    while time.monotonic() < end:
        loss = model(torch.randn(32, 64)).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(0.05)  # the GPU's turn: the host waits
"""
COLLECTOR = """
    import sys, time, psutil
    pids = [int(p) for p in sys.argv[2:]]
    procs = [psutil.Process(p) for p in pids]
    for p in procs:
        p.cpu_percent()
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        for p in procs:
            with p.oneshot():
                p.cpu_percent(); p.memory_info()
        time.sleep(1.0)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tree_rss(pid: int) -> int:
    try:
        p = psutil.Process(pid)
        return sum(q.memory_info().rss for q in [p, *p.children(recursive=True)])
    except psutil.Error:
        return 0


def scrape(port: int) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        r.read()


def scrape_cost(folder: Path, jobs: int) -> float:
    """CPU ms the exporter spends on one scrape of `jobs` jobs: its own CPU over 200
    scrapes in a row, once it serves them all."""
    port = free_port()
    argv = [sys.executable, "-m", "gpudoctor", "--store", str(folder / "scrape.db"),
            "exporter", "--metrics", str(port), "--max-seconds", "60"]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            time.sleep(1.0)
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r,
            ):
                if r.read().decode().count("gpudoctor_job_info{") >= jobs:
                    break
        me = psutil.Process(proc.pid)
        before = me.cpu_times()
        for _ in range(200):
            scrape(port)
        after = me.cpu_times()
        return 1000 * (after.user + after.system - before.user - before.system) / 200
    finally:
        proc.terminate()  # as systemd stops it: it removes its socket
        proc.wait()


def tree_cpu(pid: int) -> float:
    """CPU seconds of the process, of every child it reaped, and of those still running."""
    try:
        p = psutil.Process(pid)
        t = p.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for child in p.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                c = child.cpu_times()
                total += c.user + c.system
        return total
    except psutil.Error:
        return 0.0


def measure(
    argv: list[str], seconds: float, port: int | None, scrape_every: float = 15.0
) -> tuple[float, int, float]:
    """% of one core over its run (the process and its reaped children: run in a
    process of its own, `isolated`), the peak RSS of its tree, and % of one core in
    its steady state (from STEADY_AFTER_S on: its start-up and first chunks left out)."""
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.monotonic()
    peak = 0
    steady: tuple[float, float] | None = None
    last: tuple[float, float] | None = None
    scraped = start
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        now = time.monotonic()
        if port is not None and now - scraped >= scrape_every:
            scraped = now
            with contextlib.suppress(OSError):
                scrape(port)
        if now - start >= STEADY_AFTER_S:
            reading = (now, tree_cpu(proc.pid))
            steady = steady or reading
            last = reading
        time.sleep(1.0)
    wall = time.monotonic() - start
    # the side, reaped, and every child it reaped (getrusage(2): RUSAGE_CHILDREN)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    rate = 0.0
    if steady is not None and last is not None and last[0] > steady[0]:
        rate = 100 * (last[1] - steady[1]) / (last[0] - steady[0])
    return 100 * (usage.ru_utime + usage.ru_stime) / wall, peak, rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scrape-every", type=float, default=15.0)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    # the exporters' socket in the bench's folder, not the node's (/run, as root): one
    # killed there left its file, and every `gpudoctor run` on the machine took it for
    # a listening exporter (fixed in pushed.py too)
    os.environ["GPUDOCTOR_EXPORTER_SOCKET"] = str(folder / "exporter.sock")
    (folder / "job.py").write_text(textwrap.dedent(JOB))
    (folder / "collector.py").write_text(textwrap.dedent(COLLECTOR))
    total = args.rounds * 2 * (args.seconds + 15) + 60
    jobs = [
        subprocess.Popen([sys.executable, str(folder / "job.py"), str(total)])
        for _ in range(args.jobs)
    ]
    time.sleep(8)  # torch imported
    load0 = os.getloadavg()[0]
    results: dict[str, list[tuple[float, int, float]]] = {"collector": [], "exporter": []}
    try:
        for r in range(args.rounds):
            order = ["collector", "exporter"] if r % 2 == 0 else ["exporter", "collector"]
            for side in order:
                # each side in a child python whose own rusage counts only that side
                if side == "collector":
                    argv = [sys.executable, str(folder / "collector.py"), str(args.seconds),
                            *(str(j.pid) for j in jobs)]  # fmt: skip
                    port = None
                else:
                    port = free_port()
                    argv = [sys.executable, "-m", "gpudoctor", "--store", str(folder / "s.db"),
                            "exporter", "--metrics", str(port), "--max-seconds",
                            str(args.seconds)]  # fmt: skip
                results[side].append(isolated(argv, args.seconds, port, args.scrape_every))
                cpu, peak, rate = results[side][-1]
                print(f"round {r + 1} {side}: {cpu:.2f}% of a core over its run, {rate:.2f}% "
                      f"after its first {STEADY_AFTER_S:.0f} s, peak {peak / 2**20:.0f} MB",
                      flush=True)  # fmt: skip
    finally:
        for j in jobs:
            j.kill()
    print(f"exporter cost, {args.jobs} jobs, {args.rounds} rounds of {args.seconds:.0f} s a side "
          f"(load average {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end)")  # fmt: skip
    for side, rows in results.items():
        print(f"  {side:9s} CPU % of one core per round, whole run "
              f"{[round(c, 2) for c, _, _ in rows]}, steady {[round(r, 2) for _, _, r in rows]}, "
              f"peak RSS {max(m for _, m, _ in rows) / 2**20:.0f} MB")  # fmt: skip
    e = sum(r for _, _, r in results["exporter"]) / args.rounds
    c = sum(r for _, _, r in results["collector"]) / args.rounds
    print(f"  steady: exporter {e:.2f}% of one core, collector {c:.2f}% ({e / max(c, 1e-9):.1f}x)")
    try:
        jobs = [
            subprocess.Popen([sys.executable, str(folder / "job.py"), "120"])
            for _ in range(args.jobs)
        ]
        time.sleep(8)
        cost = scrape_cost(folder, args.jobs)
    finally:
        for j in jobs:
            j.kill()
    print(
        f"  one scrape of {args.jobs} jobs: {cost:.2f} ms of the exporter's CPU "
        f"({cost / 10:.2f}% of a core at a scrape a second)"
    )


def isolated(
    argv: list[str], seconds: float, port: int | None, scrape_every: float
) -> tuple[float, int, float]:
    """measure() in a child of its own, so that RUSAGE_CHILDREN counts only this side."""

    code = (
        f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import exporter_cost as b; "
        "print(json.dumps(b.measure(json.loads(sys.argv[1]), float(sys.argv[2]), "
        "json.loads(sys.argv[3]), float(sys.argv[4]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(argv), str(seconds), json.dumps(port),
         str(scrape_every)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    cpu, peak, rate = json.loads(out.stdout.strip().splitlines()[-1])
    return float(cpu), int(peak), float(rate)


if __name__ == "__main__":
    main()
