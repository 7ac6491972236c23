"""The owed wait (sources/contention.Owed) the suite's helpers and the injector share: a
doctor or a debugger starved of CPU (scripts/test.sh's group beside the rest, a busy
machine) is owed the time it waited for a core, and one that hangs still times out.
Here, not beside the rest: starved there for longer than the cap, a stand-in is rightly
given up on (CI, 2026-12-07)."""

from __future__ import annotations

import subprocess
import time

import pytest
from conftest import OWED_TIMES, PY, one_core_shared, run_owed

from gpudoctor.jobs import inject

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


def test_a_debugger_starved_of_cpu_is_waited_for_the_time_it_waited_for_a_core() -> None:
    """Beside CI's suite a starved gdb was still reaching the job when the doctor's wait
    for it ran out. Here a stand-in for the debugger needs 0.6 s of CPU and shares one
    core with three busy loops (about 2.4 s to do it); waited for 1 s, it is owed the time
    it spent waiting for the core, so what it printed comes back."""
    job = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"], text=True)
    work = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
    with one_core_shared(3) as on_that_core:
        stand_in = subprocess.Popen(
            [PY, "-c", work + "print('reached', flush=True)"],
            stdout=subprocess.PIPE, text=True, preexec_fn=on_that_core,
        )  # fmt: skip
        try:
            started = time.monotonic()
            said = inject.wait_owed(stand_in, 1.0, job.pid)
            took = time.monotonic() - started
        finally:
            for process in (job, stand_in):
                process.kill()
                process.wait()
    assert said == "reached\n"
    assert took > 1.5  # it did wait past its 1 s, for the core
