"""The command line (DESIGN.md section 6): each command parses its options, calls the
application layer (gpudoctor.app) and prints what it returns. Usage errors: one line
on stderr, exit 2."""

from __future__ import annotations

import importlib
import sys
from argparse import Namespace
from collections.abc import Callable

from gpudoctor import i18n
from gpudoctor.cli.common import (
    USAGE_ERROR,
    UsageError,
    default_lang,
    lang_asked,
    lang_of,
    on_terminal,
)

# command -> (module of gpudoctor.cli, function): only the chosen one is imported
COMMANDS = {
    "run": ("run", "command"),
    "watch": ("watch", "command"),
    "trial": ("trial", "command"),
    "fix": ("fix", "command"),
    "tune": ("tune", "command"),
    "compare": ("trial", "compare"),
    "history": ("sessions", "history"),
    "report": ("sessions", "report"),
    "replay": ("sessions", "replay"),
    "attach": ("sessions", "attach"),
    "remedies": ("catalogue", "remedies"),
    "guide": ("catalogue", "guide"),
}


def main(argv: list[str] | None = None) -> int:
    from gpudoctor.cli.parser import build_parser

    args_list = sys.argv[1:] if argv is None else argv
    try:
        # the language before anything is written for a person, bad input's words too
        i18n.use(lang_asked(args_list) or default_lang())
        args = build_parser().parse_args(args_list)
        i18n.use(lang_of(args))
        if args.command_name is None:
            if on_terminal():
                from gpudoctor.cli.home import home

                return home(args)
            build_parser().print_help()
            return 0
        module, name = COMMANDS[args.command_name]
        command: Callable[[Namespace], int] = getattr(
            importlib.import_module(f"gpudoctor.cli.{module}"), name
        )
        return command(args)
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return USAGE_ERROR
    except BrokenPipeError:  # `gpudoctor history | head`
        sys.stderr.close()
        return 0
