"""The wire format between the probe and the doctor: one JSON object per datagram.

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
    "batch_size",
    "syncs",
    "pageable_copies",
    "detail",  # 1: measured in detail; 0: only counted and timed (the probe samples)
)
# Rows from before `detail` existed have one field less: they were all detailed.
STEP_FIELDS_V1_0 = len(STEP_FIELDS) - 1

# A datagram stays well under the default Unix socket send buffer (about 208 KiB).
MAX_STEPS_PER_MESSAGE = 400
