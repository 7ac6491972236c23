"""`gpudoctor trial [--apply REMEDY]... -- CMD` and `gpudoctor compare A B`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpudoctor.app import errors, sessions
from gpudoctor.app import trial as trials
from gpudoctor.cli.common import (
    UsageError,
    command_of,
    err,
    lang_of,
    open_log,
    open_store,
    report_path,
    say,
    write_file,
)
from gpudoctor.i18n import _
from gpudoctor.jobs import LaunchError
from gpudoctor.redact import redact_argv
from gpudoctor.report import to_json
from gpudoctor.report.render import trial_document, trial_markdown, trial_text


def command(args: argparse.Namespace) -> int:
    request = trials.TrialRequest(
        command=command_of(args, "trial"),
        remedies=tuple(args.apply),
        steps=args.steps,
        repeat=args.repeat,
        extra_pairs=args.extra_pairs,
        lang=lang_of(args),
    )
    return run(request, report_path(args, "trial"), args.store)


def from_tui(command: tuple[str, ...], remedy: str, lang: str, store: Path | None) -> int:
    """`t` on a finding's screen: the trial of its first remedy, as `gpudoctor trial`."""
    print(f"gpudoctor: trial of {remedy} on {' '.join(redact_argv(command))}", file=sys.stderr)
    request = trials.TrialRequest(
        command=command, remedies=(remedy,), steps=100, repeat=2, lang=lang
    )
    return run(request, None, store)


def run(request: trials.TrialRequest, path: Path | None, store_path: Path | None) -> int:
    try:
        trials.check_remedies(request.remedies)
    except errors.NotPossible as exc:
        raise UsageError(f"gpudoctor trial: {exc}") from None
    store = open_store(argparse.Namespace(store=store_path))
    progress = say("gpudoctor trial")
    log = open_log(store, "trial", "trial")
    progress(_("the runs' output goes to {path}").format(path=log.path))
    try:
        result = trials.trial(request, store, progress, output=log.file)
    except LaunchError as exc:
        progress(str(exc))
        return exc.exit_code
    except trials.BaselineFailed as exc:
        progress(str(exc))
        return exc.exit_code
    except errors.NotPossible as exc:
        raise UsageError(f"gpudoctor trial: {exc}") from None
    finally:
        store.close()
        log.close()
    err(trial_text(result))
    if path is not None:
        if path.suffix == ".json":
            write_file(path, to_json(trial_document(result)))
        else:
            path.write_text(trial_markdown(result), encoding="utf-8")
    return 0


def compare(args: argparse.Namespace) -> int:
    store = open_store(args)
    try:
        result = trials.compare(store, args.baseline, args.treatment)
        runs = [sessions.load(store, name) for name in (args.baseline, args.treatment)]
    except errors.NotPossible as exc:
        raise UsageError(f"gpudoctor compare: {exc}") from None
    finally:
        store.close()
    if args.format == "json":
        print(to_json(result.to_dict()), end="")
    elif args.format == "html":
        from gpudoctor.report.html import compare_page  # pygal: only when asked
        from gpudoctor.series import run_series

        series = [(session_id, run_series(timeline)) for session_id, timeline in runs]
        sys.stdout.write(compare_page(trial_text(result), series))
    else:
        err(trial_text(result))
    return 0
