"""What a process made before the probe arrived (an injected probe, injected.py): the
objects of a kind that the training thread's frames hold."""

from __future__ import annotations

import os
import sys
from typing import Any

from .invisible import FILENAME

MAX_FOUND = 16
MAX_ATTRIBUTES = 64


def running_objects(kind: type, frame: Any) -> list[Any]:
    """The instances of `kind` that `frame` and its callers hold in their locals or in
    one level of their locals' attributes (a trainer's `self.model`, a scheduler's
    `.optimizer`), and `__main__` in its globals; the probe's own frames are passed
    over. A lookup that fails is skipped: a user's object may answer `vars()` in any way."""
    found: dict[int, Any] = {}

    def consider(value: Any, depth: int) -> None:
        if len(found) >= MAX_FOUND:
            return
        if isinstance(value, kind):
            found.setdefault(id(value), value)
        elif depth and not isinstance(value, (type, type(sys))):
            try:
                attributes = list(vars(value).values())[:MAX_ATTRIBUTES]
            except Exception:  # noqa: BLE001 - no __dict__, or one that raises
                return
            for attribute in attributes:
                if isinstance(attribute, kind):
                    found.setdefault(id(attribute), attribute)

    own = os.path.dirname(os.path.abspath(__file__))
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename != FILENAME and not filename.startswith(own):
            try:
                values = list(frame.f_locals.values())
            except Exception:  # noqa: BLE001
                values = []
            for value in values:
                consider(value, 1)
        frame = frame.f_back
    main = sys.modules.get("__main__")
    for value in list(getattr(main, "__dict__", {}).values()):
        consider(value, 1)
    return list(found.values())
