"""The suite's own helpers, where a test's verdict rests on them: a doctor starved of
CPU (scripts/test.sh's group beside the rest, a busy machine) is owed the time it waited
for a core, and one that hangs still times out."""

from __future__ import annotations

import subprocess
import time

import pytest
from conftest import OWED_TIMES, PY, one_core_shared, run_owed

# 0.6 s of CPU, then a line: about 2.4 s on a core shared with three busy loops
WORK = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"


def test_a_process_starved_of_cpu_is_owed_the_time_it_waited_for_a_core() -> None:
    with one_core_shared(3) as on_that_core:
        started = time.monotonic()
        done = run_owed(
            [PY, "-c", WORK + "import sys; print(sys.stdin.read().upper())"],
            1.0, input="from stdin", preexec_fn=on_that_core,
        )  # fmt: skip
        took = time.monotonic() - started
    assert done.returncode == 0 and done.stdout == "FROM STDIN\n", done
    assert took > 1.5  # past its 1 s, waiting for the core


def test_a_process_that_only_sleeps_times_out_and_is_killed() -> None:
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        run_owed([PY, "-c", "import time; print('up', flush=True); time.sleep(60)"], 1.5)
    assert time.monotonic() - started < OWED_TIMES * 1.5
    assert raised.value.output == "up\n"
