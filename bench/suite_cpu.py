"""Where the test suite's time goes: each test's wall time and the CPU the whole machine
spent meanwhile (every process's: the test's jobs, its doctors, tmux, py-spy), read from
/proc/stat before and after the test. Run the suite one test at a time with it as a
pytest plugin, on a machine with nothing else running, then summarise:

    GPUDOCTOR_SUITE_CPU=/tmp/cpu.jsonl PYTHONPATH=bench .venv/bin/python -m pytest -q \
        -p suite_cpu -p no:cacheprovider
    python bench/suite_cpu.py /tmp/cpu.jsonl

A test whose CPU is near twice its wall kept both cores busy; one near or under its
wall mostly waited (sleeps, sockets, a terminal), and another test could use the rest.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

OUT = os.environ.get("GPUDOCTOR_SUITE_CPU", "suite_cpu.jsonl")
HZ = os.sysconf("SC_CLK_TCK")


def busy_ticks() -> int:
    """The machine's busy CPU time so far, all cores (clock ticks)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(
            int, f.readline().split()[1:9]
        )
    return user + nice + system + irq + softirq + steal


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    busy, start = busy_ticks(), time.monotonic()
    yield
    row = {
        "id": item.nodeid,
        "wall": round(time.monotonic() - start, 2),
        "cpu": round((busy_ticks() - busy) / HZ, 2),
    }
    with open(OUT, "a") as f:
        f.write(json.dumps(row) + "\n")


def summary(rows: list[dict[str, Any]], top: int = 30) -> str:
    wall = sum(r["wall"] for r in rows)
    cpu = sum(r["cpu"] for r in rows)
    lines = [f"{len(rows)} tests: {wall:.0f} s of wall, {cpu:.0f} core-s of CPU", ""]
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        one = by_file[r["id"].split("::")[0]]
        one[0] += r["wall"]
        one[1] += r["cpu"]
    lines.append("   wall    cpu  cores  file")
    for name, (w, c) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{w:7.1f} {c:6.1f} {c / max(w, 0.01):6.2f}  {name}")
    lines += ["", "   wall    cpu  test (most CPU first)"]
    for r in sorted(rows, key=lambda r: -r["cpu"])[:top]:
        lines.append(f"{r['wall']:7.1f} {r['cpu']:6.1f}  {r['id']}")
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(summary([json.loads(line) for line in f if line.strip()]))
