"""Durations as people read them, the same everywhere (evidence, reports, screens)."""

from __future__ import annotations


def ms_text(ms: float) -> str:
    """`21.3 ms`, or below a millisecond `320 µs` (never `0.0 ms` for a time that was
    there); nothing at all is `0.0 ms`."""
    if 0 < abs(ms) < 1.0:
        return f"{ms * 1000:.0f} µs"
    return f"{ms:.1f} ms"
