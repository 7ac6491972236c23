"""How long work says how it goes: a line of text, and how far along it is when that is
known. The command line prints the lines; the TUI writes them to a log and a bar. The
work never knows which face is watching."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def __call__(self, text: str, fraction: float | None = None) -> None: ...


def silent(text: str, fraction: float | None = None) -> None:
    """A Progress that says nothing (tests, and callers that only want the result)."""
