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
    store_path,
)
from gpudoctor.i18n import _

# the doctor's own fault, as app/run.py DOCTOR_FAILED (the TUI's loop broke): README
FAILED = 3
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
    "trace": ("trace", "command"),
    "exporter": ("exporter", "command"),
}


def main(argv: list[str] | None = None) -> int:
    from gpudoctor.cli.parser import build_parser

    args_list = sys.argv[1:] if argv is None else argv
    args: Namespace | None = None
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
    except Exception as exc:  # noqa: BLE001 (a fault of the doctor's own: said, kept)
        return failed(exc, args_list, args)


def failed(exc: Exception, args_list: list[str], args: Namespace | None) -> int:
    """The doctor's own fault (a bug): one line on stderr, the traceback kept in a file
    in the `logs` folder beside the store, exit code 3 (as when the TUI's loop breaks).
    A job it ran or watched goes on: the doctor never takes its job down with it."""
    from gpudoctor.app.sessions import failure_words, keep_failure, redacted_traceback

    where = keep_failure(exc, args_list, store_path(args)[0])
    what = failure_words(exc)
    if where is None:
        sys.stderr.write(redacted_traceback(exc))  # nowhere to keep it: here, then
        line = _("gpudoctor failed ({what}); a job it ran goes on; please report it").format(
            what=what
        )
    else:
        line = _(
            "gpudoctor failed ({what}); a job it ran goes on; the details are in {file}: "
            "please report it"
        ).format(what=what, file=where)
    print(line, file=sys.stderr)
    return FAILED
