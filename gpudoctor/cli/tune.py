"""`gpudoctor tune batch-size -- CMD`: the batch-size finder (a progress bar and the
tries on a terminal, lines on stderr otherwise)."""

from __future__ import annotations

import argparse

from gpudoctor.app import errors
from gpudoctor.app import tune as tuning
from gpudoctor.app.progress import Progress
from gpudoctor.cli.common import (
    UsageError,
    command_of,
    err,
    on_terminal,
    open_log,
    open_store,
    report_path,
    say,
    write_file,
)
from gpudoctor.i18n import _
from gpudoctor.jobs import LaunchError
from gpudoctor.prescribe.batch_size import Found
from gpudoctor.redact import redact_argv
from gpudoctor.report import to_json
from gpudoctor.report.render import tune_document, tune_markdown, tune_text


def command(args: argparse.Namespace) -> int:
    if args.what is None:
        raise UsageError(
            "gpudoctor tune: " + _("say what to tune: gpudoctor tune batch-size -- CMD")
        )
    request = tuning.TuneRequest(
        command=command_of(args, "tune batch-size"),
        max_memory=args.max_memory,
        cap=args.cap,
        steps=args.steps,
        start=args.start,
    )
    path = report_path(args, "tune")
    try:
        tuning.memory_cap(request)  # checked before anything starts
    except errors.NotPossible as exc:
        raise UsageError(f"gpudoctor tune: {exc}") from None
    store = open_store(args)
    progress = say("gpudoctor tune")
    log = open_log(store, "tune", "tune")
    progress(_("the runs' output goes to {path}").format(path=log.path))

    def search(said: Progress) -> Found:
        return tuning.tune_batch_size(request, store, said, output=log.file)

    try:
        if on_terminal():
            from gpudoctor.tui.work import run_work_app

            found = run_work_app(
                "gpudoctor tune batch-size",
                _("each size a fresh run of: {command}").format(
                    command=" ".join(redact_argv(request.command))
                ),
                search,
                tune_text,
                _("still searching: each try ends within its steps"),
            )
        else:
            found = search(progress)
    except LaunchError as exc:
        progress(str(exc))
        return exc.exit_code
    except tuning.JobFails as exc:
        progress(str(exc))
        return exc.exit_code
    except errors.NotPossible as exc:
        raise UsageError(f"gpudoctor tune: {exc}") from None
    finally:
        store.close()
        log.close()
    err(tune_text(found))
    if path is not None:
        text = (
            to_json(tune_document(request.command, found))
            if path.suffix == ".json"
            else tune_markdown(found)
        )
        write_file(path, text)
    return 0
