"""The doctor's folders under the system's temp directory: one per followed job (the
probe's socket, its counter pages, the control file; py-spy's output in watch mode),
owner-only (mkdtemp makes them 0700), named for the doctor's pid so that a doctor that
starts can remove those whose doctor is gone (killed, or its terminal closed on an old
version): a normal exit removes its own.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import psutil

_NAME = re.compile(r"gpudoctor-(?:run|stacks)-(\d+)-")


def make(kind: str) -> str:
    """A new folder for this doctor (`kind`: run or stacks), after clearing stale ones."""
    clean_stale()
    return tempfile.mkdtemp(prefix=f"gpudoctor-{kind}-{os.getpid()}-")


def clean_stale(base: Path | None = None) -> list[Path]:
    """This user's doctor folders whose doctor is gone: removed; returned."""
    base = base or Path(tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        match = _NAME.match(entry.name)
        if match is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid != os.getuid() or not entry.is_dir(follow_symlinks=False):
            continue
        if _alive(int(match.group(1)), st.st_mtime):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def _alive(pid: int, made: float) -> bool:
    """The doctor that made the folder still runs: its pid is there and started before
    the folder was made (a later process given the same pid is not it)."""
    try:
        return psutil.Process(pid).create_time() <= made + 1.0
    except psutil.Error:
        return False
