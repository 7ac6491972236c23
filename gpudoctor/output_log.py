"""The job's output kept in a log file beside the store, with a cap on its size.

The job writes to the file itself (an inherited descriptor, opened for appending: never
a pipe the doctor owns, so the job's next print cannot fail if the doctor dies). When
the file passes its cap, the doctor copies it to `NAME.1` (replacing the part before)
and truncates it: the job's next write lands at the new start, because the file is in
append mode. The disk holds at most twice the cap.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# A job printing 50 MB/s fills 100 MB in two seconds and is rotated each tick; a
# chatty one (a progress bar, a few lines a step) takes days to reach it.
DEFAULT_MAX_MB = 100


class OutputLog:
    def __init__(self, path: Path, max_bytes: int = DEFAULT_MAX_MB << 20) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.rotations = 0
        # O_APPEND: the job's writes follow a truncation; 0600: only its owner reads it
        self.file = os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
        os.chmod(path, 0o600)  # whatever the umask

    @property
    def previous(self) -> Path:
        return self.path.with_name(self.path.name + ".1")

    def rotate_if_full(self) -> bool:
        """Over the cap: the file moved to `NAME.1` and emptied (True). A failure (a
        full disk) leaves it as it is, to try again at the next tick."""
        try:
            if os.stat(self.path).st_size < self.max_bytes:
                return False
            part = self.previous.with_name(self.previous.name + ".tmp")
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with self.path.open("rb") as src, os.fdopen(fd, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
                # what the job wrote while it was copied; only the bytes written between
                # this last read and the truncation can be lost (microseconds)
                shutil.copyfileobj(src, dst, 1 << 20)
                os.truncate(self.path, 0)
            os.replace(part, self.previous)
        except OSError:
            return False
        self.rotations += 1
        return True

    def close(self) -> None:
        self.file.close()
