"""The doctor's folders under the system's temp directory: one per followed job (the
probe's socket, its counter pages, the control file; py-spy's output in watch mode),
owner-only (mkdtemp makes them 0700), named for the doctor's pid and when it started
so that a doctor that starts can remove those whose doctor is gone (killed, or its
terminal closed on an old version): a normal exit removes its own.

When the doctor started is its start time in clock ticks since boot (/proc/PID/stat),
not a wall-clock time: the wall clock moves when it is set (NTP stepping it, a virtual
machine resumed), and a folder judged by it could be taken from a live doctor. Removed
so, the probe's socket and counter pages go with it and the job runs on unseen.

Root injecting into another user's job makes its folder where that user can reach it:
the temp directory where it can, else their runtime folder, /dev/shm or /var/tmp.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

import psutil

from gpudoctor.probe.protocol import start_ticks

# gpudoctor-run-PID-tTICKS-RANDOM; before the start ticks: gpudoctor-run-PID-RANDOM
# (mkdtemp's RANDOM has no "-", so the ticks part cannot be read into an old name)
_NAME = re.compile(r"gpudoctor-(?:run|stacks)-(\d+)-(?:t(\d+)-)?")


# where a folder for another user's job goes when the temp directory is not reachable
# for them (root's TMPDIR private, or a /tmp others may not enter, as on some CI
# machines): their own runtime folder, then the folders every user may enter
_FOR_OTHERS = ("/run/user/{uid}", "/dev/shm", "/var/tmp")


def make(kind: str, reachable_by: int | None = None) -> str:
    """A new folder for this doctor (`kind`: run or stacks), after clearing stale ones.
    `reachable_by`: another user's process that must reach it (root injecting into
    their job): where that user may not pass through the temp directory, the first
    place in _FOR_OTHERS they may."""
    base = Path(tempfile.gettempdir())
    if reachable_by is not None:
        ids = _ids(reachable_by)
        if ids is not None and not searchable(base, *ids):
            for candidate in _FOR_OTHERS:
                path = Path(candidate.format(uid=ids[0]))
                if path.is_dir() and searchable(path, *ids):
                    base = path
                    break
    clean_stale(base)
    pid = os.getpid()
    ticks = start_ticks(pid)
    started = f"t{ticks}-" if ticks is not None else ""
    return tempfile.mkdtemp(prefix=f"gpudoctor-{kind}-{pid}-{started}", dir=base)


def reachable(folder: str, pid: int) -> bool:
    """Whether process `pid`'s user may pass through `folder` (True where /proc cannot
    tell: the injection then says what it finds)."""
    ids = _ids(pid)
    return ids is None or searchable(Path(folder), *ids)


def _ids(pid: int) -> tuple[int, set[int]] | None:
    """The user and every group of `pid` (its real ones, and the supplementary)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    try:
        uid = int(fields["Uid"].split()[0])
        groups = {int(fields["Gid"].split()[0]), *map(int, fields.get("Groups", "").split())}
    except (KeyError, ValueError, IndexError):
        return None
    return uid, groups


def searchable(folder: Path, uid: int, gids: set[int]) -> bool:
    """Whether user `uid` (of groups `gids`) may pass through `folder` and every folder
    above it (their search bits; ACLs and the like not read). Root passes anywhere."""
    if uid == 0:
        return True
    path = folder.resolve()
    for step in (path, *path.parents):
        try:
            st = step.stat()
        except OSError:
            return False
        if st.st_uid == uid:
            allowed = st.st_mode & stat.S_IXUSR
        elif st.st_gid in gids:
            allowed = st.st_mode & stat.S_IXGRP
        else:
            allowed = st.st_mode & stat.S_IXOTH
        if not allowed:
            return False
    return True


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
        ticks = int(match.group(2)) if match.group(2) is not None else None
        if _alive(int(match.group(1)), ticks, st.st_mtime):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def _alive(pid: int, ticks: int | None, made: float) -> bool:
    """The doctor that made the folder still runs: its pid is there and it is the same
    process (the start ticks its folder's name holds; a later process given the same
    pid started later). A folder named without them (an older doctor's), or where
    /proc cannot tell: the process started before the folder was last changed."""
    if ticks is not None:
        now = start_ticks(pid)
        if now is not None or not psutil.pid_exists(pid):
            return now == ticks
    try:
        return psutil.Process(pid).create_time() <= made + 1.0
    except psutil.Error:
        return False
