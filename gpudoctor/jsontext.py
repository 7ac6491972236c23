"""JSON text decoded: by orjson (3-4x faster: the probe's step rows arrive by the
thousand a second, and a report decodes every stored record again), and by the standard
library where orjson refuses what Python's own json writes (NaN and Infinity, which the
probe's json.dumps writes for a NaN loss). One difference is left: an integer past 64 bits
comes back as a float (no record holds one: times are 64-bit nanoseconds)."""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    """ValueError (json.JSONDecodeError, orjson.JSONDecodeError) when it is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
