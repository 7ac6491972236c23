"""Durations, FLOPs and rates as people read them, the same everywhere (evidence,
reports, screens)."""

from __future__ import annotations

import re

from wcwidth import wcswidth


def ms_text(ms: float) -> str:
    """`21.3 ms`, or below a millisecond `320 µs`, below a microsecond `400 ns` (never
    `0.0 ms` or `0 µs` for a time that was there); nothing at all is `0.0 ms`."""
    if 0 < abs(ms) < 0.001:  # a time that was there is never `0 µs`
        return f"{ms * 1e6:.0f} ns"
    if 0 < abs(ms) < 1.0:
        return f"{ms * 1000:.0f} µs"
    return f"{ms:.1f} ms"


def seconds_text(seconds: float) -> str:
    """`12.3 s`, `4 min 05 s`, `2 h 03 min`: a stretch of a run's wall time."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def short_duration(seconds: float) -> str:
    """`12.3 s`, `4m05s`, `2h03m`, `3d04h`: a run's length in seven columns at most (a
    table's cell: `history`)."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def flop_text(flops: float) -> str:
    """`35.5 MFLOP`, `1.2 TFLOP`: three digits and the unit."""
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.0f} FLOP"


def rate_text(tflops: float) -> str:
    """`149 GFLOP/s` below a TFLOP/s, else `989 TFLOP/s`."""
    if tflops >= 1:
        return f"{tflops:.3g} TFLOP/s"
    return f"{tflops * 1e3:.3g} GFLOP/s"


def cell_width(text: str) -> int:
    """Columns `text` takes on a terminal: CJK characters take two (wcwidth's table,
    which pyte, the job's output screen, uses too)."""
    width = wcswidth(text)
    return width if width >= 0 else len(text)


def crop(text: str, width: int) -> str:
    """`text` cut to `width` terminal columns (a wide character that would straddle the
    edge is left out)."""
    if cell_width(text) <= width:
        return text
    out, used = [], 0
    for char in text:
        w = max(0, wcswidth(char))
        if used + w > width:
            break
        out.append(char)
        used += w
    return "".join(out)


def clip(text: str, width: int) -> str:
    """`text` in `width` terminal columns: cut with `…` when it does not fit (never cut
    without saying so)."""
    if cell_width(text) <= width:
        return text
    return crop(text, max(0, width - 1)) + "…"


def pad(text: str, width: int, right: bool = False) -> str:
    """`text` filled with spaces to `width` terminal columns (on the left: `right`)."""
    fill = " " * max(0, width - cell_width(text))
    return fill + text if right else text + fill


# a CJK character is a word of its own (Chinese has no spaces to break lines at)
WORDS = re.compile(r"[\u2e80-\u9fff\uff00-\uffef]|[^\s\u2e80-\u9fff\uff00-\uffef]+|\s+")


# Chinese line-breaking rules (W3C "Requirements for Chinese Text Layout", 3.1.7): no
# line starts with a closing mark, none ends with an opening one
CLOSING = set("，。、；：？！）》」』”")
OPENING = set("（《「『“")
# a line's last word (a CJK character, or a run of others) and the closing marks after it
LAST_WORD = re.compile(
    r"(?:[\u2e80-\u9fff]|[^\s\u2e80-\u9fff\uff00-\uffef]+)[" + "".join(CLOSING) + "]*$"
)


def wrap_columns(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` terminal columns (a word wider than that on a
    line of its own), broken between words, or between two CJK characters."""
    lines: list[str] = []
    line = ""
    for word in WORDS.findall(text):
        if word.isspace():
            line += " " if line else ""
            continue
        if line and cell_width(line + word) > width:
            carried = ""
            if word in CLOSING:  # no line starts with a comma: its word goes with it
                last = LAST_WORD.search(line)
                if last is not None and line[: last.start()].strip():
                    line, carried = line[: last.start()], last.group()
            if len(line) > 1 and line[-1] in OPENING:
                line, carried = line[:-1], line[-1] + carried  # nor ends with a bracket
            lines.append(line.rstrip())
            line = carried
        line += word
    if line.strip():
        lines.append(line.rstrip())
    return lines
