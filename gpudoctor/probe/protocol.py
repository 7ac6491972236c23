"""The wire format between the probe and the doctor: one JSON object per datagram, a
page of counters per process in shared memory, and how a process's start is told.

Shared by both sides; standard library only.
"""

from __future__ import annotations

VERSION = 1

# Order of the fields of one step in a batch's "steps" list.
STEP_FIELDS = (
    "index",
    "t_end_mono_ns",
    "wall_ns",
    "loader_ns",
    "outside_ns",
    "forward_ns",
    "backward_ns",
    "optimizer_ns",
    "forwards",
    "batch_size",  # samples: all the step's DataLoader batches (accumulation's); -1 unknown
    "syncs",
    "pageable_copies",
    "detail",  # 1: measured in detail; 0: only counted and timed (the probe samples)
)
# Rows from before `detail` existed have one field less: they were all detailed.
STEP_FIELDS_V1_0 = len(STEP_FIELDS) - 1
# A step only counted and timed goes as its first three fields (index, end, wall): the
# rest of such a row is always COUNTED_REST (no split, batch size unknown, detail 0).
# Most of a fast loop's rows are such (97% at ~1,800 steps a second), and three numbers
# cost the doctor's decode, checks and store a third of what thirteen did (bench/).
COUNTED_FIELDS = 3
COUNTED_REST = (0, 0, 0, 0, 0, 0, -1, 0, 0, 0)


def sent_rows(rows: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Step rows (STEP_FIELDS) as a message carries them: a step only counted and timed
    as its first COUNTED_FIELDS."""
    short, rest = COUNTED_FIELDS, COUNTED_REST
    if all(len(row) == short for row in rows):  # the probe's counted steps come so
        return rows
    return [row if len(row) == short or row[short:] != rest else row[:short] for row in rows]


# A datagram stays well under the default Unix socket send buffer (about 208 KiB): 2,000
# counted rows are ~70 KB, a half second's flush of a loop of up to 4,000 steps a second.
MAX_STEPS_PER_MESSAGE = 2000

# The counter page: a file of PAGE_BYTES per process (`page-PID` in the folder of the
# doctor's socket), memory-mapped by the probe, which writes the counters as the job
# steps. The doctor reads it whenever it likes: the counts are exact even when the job
# dies by a signal, leaves with os._exit (a forked child) or the doctor stalls and rows
# are lost on the way. Native signed 64-bit integers (both sides share the machine):
PAGE_FIELDS = (
    "magic",
    "version",
    "pid",
    "steps",  # steps ended so far (the last one may still be emitted)
    "last_end_ns",  # when the last counted step ended (time.monotonic_ns)
    "rows_sent",  # step rows the probe handed to the socket
    "rows_dropped",  # step rows it had to drop (its buffer full, the socket full)
)
PAGE_MAGIC = 0x3170_6774_6F64_6770
PAGE_VERSION = 1
PAGE_BYTES = 4096
PAGE_PREFIX = "page-"


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (the 22nd field of /proc/PID/stat,
    after the command name in parentheses); None where it cannot be read. Unlike a
    wall-clock time it does not move when the clock is set: the doctor names its run
    folders with its own (run_folders.py) and hands it to its jobs (ENV_DOCTOR_START),
    whose probe tells its doctor from a later process given the same pid by it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None
