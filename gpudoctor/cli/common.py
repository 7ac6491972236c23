"""What the commands share: usage errors, the store, the checks of common options, the
language, and printing progress and reports."""

from __future__ import annotations

import argparse
import locale
import os
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from gpudoctor.store import Store

USAGE_ERROR = 2


class UsageError(Exception):
    """Bad input: one line for the user, exit code 2."""


def default_lang() -> str:
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(var)
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    try:
        code = locale.getlocale()[0] or ""
    except ValueError:
        code = ""
    return "zh" if code.lower().startswith("zh") else "en"


def lang_of(args: argparse.Namespace) -> str:
    return getattr(args, "lang", None) or default_lang()


def open_store(args: argparse.Namespace) -> Store:
    from gpudoctor.store import Store, StoreError, default_path

    path = getattr(args, "store", None) or default_path()
    try:
        return Store(Path(path))
    except StoreError as exc:
        raise UsageError(f"gpudoctor: {exc}") from None


def command_of(args: argparse.Namespace, name: str) -> tuple[str, ...]:
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError(
            f"gpudoctor {name}: no command given (usage: gpudoctor {name} [OPTIONS] -- CMD [ARGS...])"
        )
    return tuple(command)


def report_path(args: argparse.Namespace, name: str) -> Path | None:
    path: Path | None = args.report
    if path is not None:
        if path.suffix not in (".json", ".md"):
            raise UsageError(f"gpudoctor {name}: --report must end in .json or .md: {path}")
        if not path.parent.is_dir():
            raise UsageError(f"gpudoctor {name}: no such folder for --report: {path.parent}")
    return path


def open_log(store: Store, prefix: str, name: str) -> tuple[Path, IO[bytes]]:
    """A log file for the jobs' output beside the store, or one line and exit 2."""
    from gpudoctor.app import errors, sessions

    try:
        return sessions.open_log(store, prefix)
    except errors.NotPossible as exc:
        store.close()
        raise UsageError(f"gpudoctor {name}: {exc}") from None


def on_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def say(prefix: str) -> Say:
    return Say(prefix)


class Say:
    """A Progress that prints each line on stderr, after the command's name."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __call__(self, text: str, fraction: float | None = None) -> None:
        print(f"{self.prefix}: {text}", file=sys.stderr, flush=True)


def err(text: str) -> None:
    """A whole block of text on stderr, as it is."""
    sys.stderr.write(text)
    sys.stderr.flush()


def write_file(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    print(f"gpudoctor: report written to {path}", file=sys.stderr)
