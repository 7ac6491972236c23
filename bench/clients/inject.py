"""Upstream training scripts, injected and detached mid-run (issue 43): each started
plainly, `gpudoctor watch --pid N --inject --headless --max-seconds S` at a random moment
once it is past its first steps, then left to finish. Checked against a plain run of the
same script before it: its exit code and its output, normalised as run.py normalises
them (times differ between any two runs); and the doctor's step count against the
steps the script itself logged while the probe was in it (a line a step: the lines that
reached the pipe between the first and the last step the probe saw, and half a median
step after it, the line being printed after its step ends).

The repositories and the Python as for run.py (its docstring); the clients are run.py's,
with options that make them run longer and log every step:

    python bench/clients/inject.py --repos /tmp/up --python /tmp/cvenv/bin/python [--only nanoGPT]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import run as clients

from gpudoctor.store import Store


@dataclass(frozen=True)
class Injected:
    script: str  # run.py's client, by its script
    changes: dict[str, str]  # its options, changed: each word as a whole
    step_line: str  # a regex for the line the script prints once a step (on stdout)
    seconds: int  # how long the doctor stays


INJECTED = [
    Injected(
        "nanoGPT/train.py",
        {
            "--max_iters=60": "--max_iters=1500",
            "--log_interval=10": "--log_interval=1",
            "--eval_interval=20": "--eval_interval=500",
        },  # fmt: skip
        r"^iter \d+: loss",
        10,
    ),
    Injected(
        "examples/reinforcement_learning/reinforce.py",
        {},  # --log-interval 1 already: a line an episode
        r"^Episode \d+\t",
        15,
    ),
    Injected(  # the Trainer, one process: a line of its metrics a step
        "transformers/run_clm.py",
        {"60": "3000", "20": "1"},  # --max_steps, --logging_steps
        r"^\{'loss'",
        8,
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=Path, required=True)
    parser.add_argument("--only", default="")
    parser.add_argument("--python", help="the Python that runs job and doctor")
    parser.add_argument("--seed", type=int, default=0, help="of the moments of attaching")
    args = parser.parse_args()
    clients.PY = args.python or clients.PY
    rng = random.Random(args.seed)
    keep = Path(tempfile.mkdtemp(prefix="gpudoctor-inject-"))
    wanted = [w for w in args.only.split(",") if w]
    ok = True
    for spec in INJECTED:
        if wanted and not any(w in spec.script for w in wanted):
            continue
        (c,) = [
            c for c in clients.CLIENTS if c.script == spec.script and not c.launcher and
            ("--do_eval" not in c.argv)
        ]  # fmt: skip
        row = inject_one(c, spec, args.repos.resolve(), keep, rng)
        ok = ok and bool(row["same"]) and row["steps_ours"] == row["steps_theirs_plus_minus"]
        print(json.dumps(row), flush=True)
    sys.exit(0 if ok else 1)


def inject_one(
    c: clients.Client, spec: Injected, repos: Path, keep: Path, rng: random.Random
) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="client-", dir=keep))
    c.setup(repos, work)
    argv = [clients.PY, str(repos / c.script), *[spec.changes.get(w, w) for w in c.argv]]
    env = {**os.environ, **{k: v.format(repos=repos, work=work) for k, v in c.env.items()}}
    env.pop("GPUDOCTOR_SOCKET", None)
    env["PYTHONUNBUFFERED"] = "1"  # its lines reach the pipe as it prints them

    def fresh() -> None:
        for leftover in ("out", "out-shakespeare-char", "run"):
            shutil.rmtree(work / leftover, ignore_errors=True)
        env["HF_DATASETS_CACHE"] = str(work / "run" / "hf-datasets")

    fresh()
    plain = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    fresh()
    arrived: list[tuple[int, str]] = []  # (time.monotonic_ns() at arrival, line)
    err_path = work / "injected.err"
    with err_path.open("w") as err:
        job = subprocess.Popen(
            argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=err, text=True
        )
        assert job.stdout is not None
        stdout = job.stdout

        def read() -> None:
            for line in stdout:
                arrived.append((time.monotonic_ns(), line))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        step = re.compile(spec.step_line)
        deadline = time.monotonic() + 300
        while sum(1 for _, line in arrived if step.match(line)) < 20:  # past its first steps
            if job.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{c.script} ended before its 20th step")
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 2))  # a moment of no one's choosing
        store = work / "store.db"
        report = work / "report.json"
        watched = subprocess.run(
            [clients.PY, "-m", "gpudoctor", "--store", str(store), "watch", "--pid",
             str(job.pid), "--inject", "--headless", "--max-seconds", str(spec.seconds),
             "--report", str(report)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        code = job.wait(timeout=1800)
        reader.join(timeout=60)
    out = "".join(line for _, line in arrived)
    err_text = err_path.read_text()
    for name, text in (("plain.out", plain.stdout), ("plain.err", plain.stderr),
                       ("injected.out", out)):  # fmt: skip
        (work / name).write_text(text)
    data = json.loads(report.read_text()) if report.exists() else {}
    made = None
    if data.get("session"):
        timeline = Store(store).load(int(data["session"]))
        rows: list[Any] = list(timeline.steps.get(job.pid) or [])
        if rows:
            first, last = rows[0].t_end_mono_ns, rows[-1].t_end_mono_ns
            half = int((data.get("steps") or {}).get("median_ms", 0) * 1e6 / 2)
            made = sum(1 for t, line in arrived if step.match(line) and first <= t <= last + half)
    ours = (data.get("steps") or {}).get("count")
    same = (
        (plain.returncode, clients.normalise(plain.stdout), clients.normalise(plain.stderr))
        == (code, clients.normalise(out), clients.normalise(err_text))
    )  # fmt: skip
    return {
        "project": c.project,
        "script": c.script.split("/", 1)[1],
        "watch_exit": watched.returncode,
        "watch_error": watched.stderr.strip().splitlines()[-1:] if watched.returncode else [],
        "exit": f"{plain.returncode}/{code}",
        "same": same,
        "mode": data.get("mode"),
        "ended_by": data.get("ended_by"),
        "steps_ours": ours,
        "steps_theirs": made,
        # within 1% (or 2 steps): the count taken as theirs when it is
        "steps_theirs_plus_minus": (
            ours
            if made is not None and ours is not None and abs(ours - made) <= max(2, made // 100)
            else made
        ),  # fmt: skip
        "findings": [f"{f['id']} ({f['severity']})" for f in data.get("findings", [])],
        "split": (data.get("steps") or {}).get("split"),
        "limits": (data.get("probe") or {}).get("limits"),
        "work": str(work),
    }


if __name__ == "__main__":
    main()
