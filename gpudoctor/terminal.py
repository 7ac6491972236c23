"""The job's output as a terminal would show it: the log's bytes fed, as they come,
through a terminal emulator (pyte), so that carriage-return progress bars, colours,
cursor moves and wide characters look as they do in the user's own terminal.

Core code: it gives lines of (text, style) segments, the style in Rich's words
("bold red on blue"), and the TUI draws them. Undecodable bytes become U+FFFD, one
cell wide like any other character the emulator placed, so no line is wider than the
emulator's columns.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pyte itself is loaded at the first read, after the first frame
    import pyte
    from pyte.screens import Char

Segment = tuple[str, str]  # text, Rich style ("" for plain)
OutputLine = tuple[Segment, ...]

COLUMNS = 200  # as wide as any panel shows; longer lines wrap, as in a terminal
LINES = 200  # the tail kept (the full-screen view shows it all)
# Read at most this much new output a tick: a job printing 50 MB/s costs the doctor
# the last 64 KB of it each second, never the whole (the emulator starts afresh there).
FEED_MAX_BYTES = 65_536


def plain(line: OutputLine) -> str:
    return "".join(text for text, _ in line)


class TerminalView:
    """The tail of a log file as a terminal shows it, updated from where it left off."""

    def __init__(self, path: Path, columns: int = COLUMNS, lines: int = LINES) -> None:
        self.path = path
        self.columns = columns
        self.lines = lines
        self.offset = 0
        self.screen: pyte.Screen | None = None
        self.stream: pyte.ByteStream | None = None
        self._rows: dict[int, OutputLine] = {}

    def _start(self) -> None:
        import pyte

        self.screen = pyte.Screen(self.columns, self.lines)
        # a log file holds "\n" where a terminal's line discipline made "\r\n"
        self.screen.set_mode(pyte.modes.LNM)
        self.stream = pyte.ByteStream(self.screen)
        self._rows = {}

    def read(self) -> tuple[OutputLine, ...]:
        """The screen after the output written since the last read."""
        if self.screen is None:
            self._start()
        try:
            with self.path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset:  # rotated (copied aside and emptied): go on from 0
                    self.offset = 0
                if size - self.offset > FEED_MAX_BYTES:
                    self._start()
                    self.offset = size - FEED_MAX_BYTES
                f.seek(self.offset)
                data = f.read(size - self.offset)
        except OSError:
            data = b""
        if data and self.stream is not None:
            self.offset += len(data)
            self.stream.feed(data)
        return self._render()

    def _render(self) -> tuple[OutputLine, ...]:
        screen = self.screen
        if screen is None:
            return ()
        for y in screen.dirty:
            self._rows[y] = _line(screen.buffer[y], screen.columns)
        screen.dirty.clear()
        last = max((y for y, row in self._rows.items() if row), default=-1)
        last = max(last, screen.cursor.y if screen.cursor.x else screen.cursor.y - 1)
        return tuple(self._rows.get(y, ()) for y in range(last + 1))


def _line(row: dict[int, Char], columns: int) -> OutputLine:
    segments: list[Segment] = []
    text: list[str] = []
    style = ""
    for x in range(columns):
        char = row[x]
        char_style = _style(char)
        if char_style != style and text:
            segments.append(("".join(text), style))
            text = []
        style = char_style
        text.append(char.data)  # a wide character's second cell holds ""
    if text:
        segments.append(("".join(text), style))
    # the blank cells after the last character
    while segments and not segments[-1][1] and not segments[-1][0].strip():
        segments.pop()
    if segments and not segments[-1][1]:
        segments[-1] = (segments[-1][0].rstrip(), "")
    return tuple(segments)


def _style(char: Char) -> str:
    if (
        char.fg == "default"
        and char.bg == "default"
        and not (char.bold or char.italics or char.underscore or char.reverse)
        and not char.strikethrough
    ):
        return ""
    words = []
    if char.bold:
        words.append("bold")
    if char.italics:
        words.append("italic")
    if char.underscore:
        words.append("underline")
    if char.strikethrough:
        words.append("strike")
    if char.reverse:
        words.append("reverse")
    if char.fg != "default":
        words.append(_colour(char.fg))
    if char.bg != "default":
        words += ["on", _colour(char.bg)]
    return " ".join(words)


def _colour(name: str) -> str:
    """pyte's colour: a name ("red", "brightred") or six hex digits."""
    if name.startswith("bright"):
        return "bright_" + _colour(name[len("bright") :])
    if name == "brown":  # pyte's name for ANSI 33
        return "yellow"
    if len(name) == 6 and all(c in "0123456789abcdefABCDEF" for c in name):
        return "#" + name
    return name
