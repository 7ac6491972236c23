"""Where the test suite's time goes: each test's wall time and the CPU the whole machine
spent meanwhile (every process's: the test's jobs, its doctors, tmux, py-spy), read from
/proc/stat before and after the test. Run the suite one test at a time with it as a
pytest plugin, on a machine with nothing else running, then summarise:

    GPUDOCTOR_SUITE_CPU=/tmp/cpu.jsonl PYTHONPATH=bench .venv/bin/python -m pytest -q \
        -p suite_cpu -p no:cacheprovider
    python bench/suite_cpu.py /tmp/cpu.jsonl
    python bench/suite_cpu.py --same /tmp/cpu.jsonl

A test whose CPU is near twice its wall kept both cores busy; one near or under its
wall mostly waited (sleeps, sockets, a terminal), and another test could use the rest.

Each row also holds the processes the machine started during the test (/proc/stat's
`processes`) and the commands the test itself launched (the `subprocess.Popen` audit
event: a doctor's command holds its job's), so that `--same` lists the commands more than
one test ran alike: runs a shared fixture could make once.
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


LAUNCHED: list[list[str]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "subprocess.Popen":
        LAUNCHED.append([str(a) for a in (args[1] or [])])


sys.addaudithook(_audit)


def forks() -> int:
    """Processes the machine has started since boot."""
    with open("/proc/stat") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("processes "))


def busy_ticks() -> int:
    """The machine's busy CPU time so far, all cores (clock ticks)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(
            int, f.readline().split()[1:9]
        )
    return user + nice + system + irq + softirq + steal


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    busy, start, started = busy_ticks(), time.monotonic(), forks()
    LAUNCHED.clear()
    yield
    row = {
        "id": item.nodeid,
        "wall": round(time.monotonic() - start, 2),
        "cpu": round((busy_ticks() - busy) / HZ, 2),
        "forks": forks() - started,
        "launched": list(LAUNCHED),
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


def _alike(argv: list[str]) -> str:
    """A command with its temporary paths (pytest's, mktemp's) made one."""
    words = []
    for word in argv:
        if word.startswith("/tmp/") or "/pytest-" in word:
            word = "TMP/" + word.rsplit("/", 1)[-1]
        words.append(word)
    return " ".join(words)


def same(rows: list[dict[str, Any]], top: int = 40) -> str:
    """The commands launched alike by more than one test, with how many tests launched
    each (the candidates for one run shared between them), and the processes started
    in all."""
    tests: dict[str, set[str]] = collections.defaultdict(set)
    for r in rows:
        for argv in r.get("launched", []):
            tests[_alike(argv)].add(r["id"])
    shared = sorted(((len(ids), cmd) for cmd, ids in tests.items() if len(ids) > 1), reverse=True)
    lines = [f"{n:3d} tests  {cmd[:200]}" for n, cmd in shared[:top]]
    started = sum(r.get("forks", 0) for r in rows)
    return "\n".join([f"processes started: {started}", *lines])


if __name__ == "__main__":
    with open(sys.argv[-1]) as f:
        loaded = [json.loads(line) for line in f if line.strip()]
    print(same(loaded) if "--same" in sys.argv else summary(loaded))
