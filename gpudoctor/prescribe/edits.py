"""A kept in-process override written as an edit of the user's script: a unified diff
that sets the DataLoader's keyword arguments where the loader is made, so the job runs
that way without the doctor.

Only where the change is local and clear: the script (the first `.py` argument of the
command) makes exactly one `DataLoader(...)`; its keyword is replaced where it is
given, else added after the call's last argument. Anything else (several loaders, a
loader made in another module, a `**kwargs` call) gets no diff: the words say what to
change instead.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def script_of(argv: Sequence[str], cwd: Path) -> Path | None:
    """The Python script a command runs (`python train.py ...`), when it is a file."""
    for arg in argv[1:]:
        if arg.endswith(".py"):
            path = cwd / arg
            return path if path.is_file() else None
    return None


def loader_diff(script: Path, settings: Mapping[str, Any], shown_as: str) -> str | None:
    """The diff that sets `settings` (DataLoader keyword: value) in the script's one
    DataLoader call; None where that is not local and clear (see the module)."""
    try:
        text = script.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _called(n) == "DataLoader"]
    if len(calls) != 1 or not settings:
        return None
    call = calls[0]
    if any(
        k.arg is None for k in call.keywords
    ):  # **kwargs: where the value comes from is not here
        return None
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (start, end, new text), offsets into `text`
    given = {k.arg: k for k in call.keywords}
    added = []
    for key, value in settings.items():
        literal = repr(value)
        if key in given:
            node = given[key].value
            edits.append((_offset(lines, node.lineno, node.col_offset),
                          _offset(lines, node.end_lineno, node.end_col_offset), literal))  # fmt: skip
        else:
            added.append(f"{key}={literal}")
    if added:
        args: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
        if args:
            last = max(args, key=lambda a: (a.end_lineno or 0, a.end_col_offset or 0))
            at = _offset(lines, last.end_lineno, last.end_col_offset)
            line = lines[(last.lineno or 1) - 1]
            indent = line[: len(line) - len(line.lstrip())]
            if last.lineno == last.end_lineno and line.lstrip().startswith(
                ast.get_source_segment(text, last) or "\0"
            ):  # one argument a line: the new ones on lines of their own, as indented
                edits.append((at, at, "".join(f",\n{indent}{a}" for a in added)))
            else:
                edits.append((at, at, ", " + ", ".join(added)))
        else:
            at = _offset(lines, call.end_lineno, call.end_col_offset) - 1  # before ")"
            edits.append((at, at, ", ".join(added)))
    new = text
    for start, end, replacement in sorted(edits, reverse=True):
        new = new[:start] + replacement + new[end:]
    if new == text:
        return None
    diff = difflib.unified_diff(
        text.splitlines(keepends=True), new.splitlines(keepends=True),
        fromfile=f"a/{shown_as}", tofile=f"b/{shown_as}",
    )  # fmt: skip
    return "".join(diff)


def _called(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):  # torch.utils.data.DataLoader(...)
        return func.attr
    return None


def _offset(lines: list[str], lineno: int | None, col: int | None) -> int:
    """A character offset into the text from ast's line (1-based) and column (UTF-8
    bytes into that line)."""
    assert lineno is not None and col is not None
    before = sum(len(line) for line in lines[: lineno - 1])
    return before + len(lines[lineno - 1].encode("utf-8")[:col].decode("utf-8"))
