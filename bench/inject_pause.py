"""How long `watch --inject` holds a running job, and what attaching and leaving many
times leaves behind (issue 43).

A small training loop (an MLP on random batches, SGD, a 2 ms sleep standing in for the
data) records the gap between each two of its steps and its own RSS. The doctor attaches
(`watch --pid N --inject --headless --max-seconds S`) CYCLES times in a row, a pause
between cycles. Side by side in the one job: the largest gap in each attach's window
(the debugger's stop, the boot script, the probe's set-up) against the largest gap in
the pauses between attaches (the job alone on this machine, the baseline), and the RSS
after the first and the last cycle, and after as long again alone (the job keeps its
step times in an array made at its start: it grows by nothing of its own).

    .venv/bin/python bench/inject_pause.py --cycles 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

JOB = """
    import array, json, os, sys, time, torch
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    out, stop = sys.argv[1], sys.argv[2]
    ends, n, rss = array.array("q", bytes(8 * 2_000_000)), 0, []  # no growth of its own
    while not os.path.exists(stop):
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
        time.sleep(0.002)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        ends[n] = time.monotonic_ns()
        n += 1
        if n == 600:
            open(stop + ".ready", "w").close()
        if n % 200 == 0:
            with open(f"/proc/{os.getpid()}/statm") as f:
                rss.append((time.monotonic_ns(), int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")))
    json.dump({"ends": ends[:n].tolist(), "rss": rss}, open(out, "w"))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=1.0, help="each attach's length")
    parser.add_argument("--pause", type=float, default=1.0, help="between attaches")
    parser.add_argument("--alone", type=float, default=30.0, help="after the last attach")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    script, out, stop = folder / "job.py", folder / "out.json", folder / "stop"
    script.write_text(textwrap.dedent(JOB))
    job = subprocess.Popen([sys.executable, str(script), str(out), str(stop)])
    while not Path(str(stop) + ".ready").exists():  # training, its RSS sampled already
        time.sleep(0.1)
    windows = []
    env = {**os.environ, "GPUDOCTOR_STORE": str(folder / "sessions.db")}
    for _ in range(args.cycles):
        t0 = time.monotonic_ns()
        done = subprocess.run(
            [sys.executable, "-m", "gpudoctor", "watch", "--pid", str(job.pid), "--inject",
             "--headless", "--max-seconds", str(args.seconds)],
            capture_output=True, text=True, env=env,
        )  # fmt: skip
        windows.append((t0, time.monotonic_ns()))
        if done.returncode != 0:
            sys.exit(f"the attach failed: {done.stderr.strip()}")
        time.sleep(args.pause)
    time.sleep(args.alone)  # the job alone again: its own RSS over the same kind of time
    stop.touch()
    job.wait()
    data = json.loads(out.read_text())
    ends = data["ends"]
    gaps = [(b, (b - a) / 1e6) for a, b in zip(ends, ends[1:], strict=False)]

    def inside(t: int) -> bool:
        return any(a <= t <= b for a, b in windows)

    attached = [max((g for t, g in gaps if a <= t <= b), default=0.0) for a, b in windows]
    alone = [g for t, g in gaps if not inside(t) and t > windows[0][0]]
    rss = data["rss"]
    before = next(r for t, r in reversed(rss) if t < windows[0][0])
    first = next(r for t, r in rss if t > windows[0][1])
    last = next(r for t, r in rss if t > windows[-1][1])
    end = rss[-1][1]
    print(f"job pid {job.pid}: {len(ends)} steps, {args.cycles} attaches of {args.seconds} s")
    print(
        f"  largest gap between two steps while attaching: median {statistics.median(attached):.0f} ms, "
        f"max {max(attached):.0f} ms (each attach: {', '.join(f'{g:.0f}' for g in attached)})"
    )
    print(
        f"  between attaches (the job alone): median step {statistics.median(alone):.1f} ms, "
        f"largest gap {max(alone):.0f} ms"
    )
    print(
        f"  RSS before the first attach {before / 2**20:.1f} MiB, after the first "
        f"{first / 2**20:.1f} MiB, after the last {last / 2**20:.1f} MiB "
        f"({(last - first) / 2**10 / max(1, args.cycles - 1):.0f} KiB a further attach); "
        f"{args.alone:.0f} s alone after it: {end / 2**20:.1f} MiB"
    )
    print(f"  load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
