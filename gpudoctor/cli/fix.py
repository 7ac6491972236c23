"""`gpudoctor fix [--budget 10m] [--report PATH] -- CMD`: diagnose, apply, trial, keep,
repeat (gpudoctor/app/fix.py)."""

from __future__ import annotations

import argparse

from gpudoctor.app import errors
from gpudoctor.app import fix as visits
from gpudoctor.app.progress import Progress
from gpudoctor.app.trial import BaselineFailed
from gpudoctor.cli.common import (
    UsageError,
    command_of,
    err,
    lang_of,
    on_terminal,
    open_log,
    open_store,
    report_path,
    say,
    write_file,
)
from gpudoctor.i18n import _
from gpudoctor.jobs import LaunchError
from gpudoctor.prescribe.visit import FixResult
from gpudoctor.redact import redact_argv
from gpudoctor.report import to_json
from gpudoctor.report.render import fix_document, fix_markdown, fix_text


def command(args: argparse.Namespace) -> int:
    request = visits.FixRequest(
        command=command_of(args, "fix"),
        budget_s=args.budget,
        steps=args.steps,
        repeat=args.repeat,
        extra_pairs=args.extra_pairs,
        lang=lang_of(args),
    )
    path = report_path(args, "fix")
    store = open_store(args)
    progress = say("gpudoctor fix")
    log = open_log(store, "fix", "fix")
    progress(_("the runs' output goes to {path}").format(path=log.path))

    def visit(said: Progress) -> FixResult:
        return visits.fix(request, store, said, output=log.file)

    try:
        if on_terminal():  # the visit as it goes, and its outcome, in a window
            from gpudoctor.tui.work import run_work_app

            result = run_work_app(
                "gpudoctor fix",
                _("each remedy tried on fresh runs of: {command}").format(
                    command=" ".join(redact_argv(request.command))
                ),
                visit,
                fix_text,
                _("still trying: each run ends within its steps (Ctrl-C stops the visit)"),
            )
        else:
            result = visit(progress)
    except LaunchError as exc:
        progress(str(exc))
        return exc.exit_code
    except BaselineFailed as exc:
        progress(str(exc))
        return exc.exit_code
    except errors.NotPossible as exc:
        raise UsageError(f"gpudoctor fix: {exc}") from None
    finally:
        store.close()
        log.close()
    err(fix_text(result))
    if path is not None:
        if path.suffix == ".json":
            write_file(path, to_json(fix_document(result)))
        else:
            path.write_text(fix_markdown(result), encoding="utf-8")
    return 0
