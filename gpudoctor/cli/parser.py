"""The command line's grammar (DESIGN.md section 6): every command and option."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

from gpudoctor import __version__
from gpudoctor.cli.common import STATUS_EVERY_S_OFF_TERMINAL, UsageError
from gpudoctor.i18n import N_, _
from gpudoctor.output_log import DEFAULT_MAX_MB
from gpudoctor.units import cell_width, wrap_columns


class _Formatter(argparse.HelpFormatter):
    """Help laid out by display width (CJK characters take two columns)."""

    def _format_usage(
        self,
        usage: str | None,
        actions: Iterable[argparse.Action],
        groups: Iterable[argparse._MutuallyExclusiveGroup],
        prefix: str | None,
    ) -> str:
        """The usage's later lines under its first's words: argparse indents them by the
        prefix's characters, a terminal shows a Chinese prefix two columns a character."""
        prefix = _("usage: ") if prefix is None else prefix
        text = super()._format_usage(usage, actions, groups, prefix)
        extra = " " * (cell_width(prefix) - len(prefix))
        first, *rest = text.split("\n")
        return "\n".join([first, *(extra + line if line.strip() else line for line in rest)])

    def _split_lines(self, text: str, width: int) -> list[str]:
        return wrap_columns(" ".join(text.split()), width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(indent + line for line in wrap_columns(" ".join(text.split()), width))


# argparse's own words ("usage: ", its headings, its errors): argparse looks each up
# through its module's `_` (gettext's default domain, which the doctor does not use);
# build_parser() points that at the doctor's catalogue, which holds these.
ARGPARSE_WORDS = (
    N_("usage: "),
    N_("positional arguments"),
    N_("options"),
    N_("show this help message and exit"),
    N_("argument %(argument_name)s: %(message)s"),
    N_("unrecognized arguments: %s"),
    N_("not allowed with argument %s"),
    N_("ignored explicit argument %r"),
    N_("the following arguments are required: %s"),
    N_("one of the arguments %s is required"),
    N_("expected one argument"),
    N_("expected at most one argument"),
    N_("expected at least one argument"),
    N_("ambiguous option: %(option)s could match %(matches)s"),
    N_("invalid %(type)s value: %(value)r"),
    N_("invalid choice: %(value)r (choose from %(choices)s)"),
)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(
            _("{prog}: {message} (see {prog} --help)").format(prog=self.prog, message=message)
        )


def build_parser() -> argparse.ArgumentParser:
    argparse._ = _  # type: ignore[attr-defined]  # argparse's own words: ARGPARSE_WORDS
    cmd_help = _(
        "the job's command; `--` before it is optional: everything from its first word on is "
        "the job's, options included"
    )
    metrics_help = _(
        "serve OpenMetrics for Prometheus while it runs (HOST defaults to 127.0.0.1): step "
        "time, data wait, comm wait, samples/s per rank, GPU util and memory, findings"
    )
    store_help = _(
        "session database (default: $GPUDOCTOR_STORE or ~/.local/share/gpudoctor/sessions.db)"
    )
    parser = _Parser(
        prog="gpudoctor",
        description=_(
            "A terminal performance doctor for PyTorch training jobs. `gpudoctor` alone, on a "
            "terminal, opens the machine view: the GPUs, the host and the processes using them."
        ),
    )
    parser.add_argument(
        "--version", action="version", version=f"gpudoctor {__version__}",
        # argparse (3.11) gives this action's default help as a plain string, not through `_`
        help=_("show program's version number and exit"),
    )  # fmt: skip
    parser.add_argument("--store", type=Path, help=store_help)
    parser.add_argument(
        "--lang", choices=("en", "zh"), default=None,
        help=_("language of what the doctor writes (default: the locale)"),
    )  # fmt: skip
    status_help = _(
        "headless: seconds between the status lines on stderr (default 1 on a terminal, "
        "{off:.0f} off one, as in a log file; 0: none)"
    ).format(off=STATUS_EVERY_S_OFF_TERMINAL)
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--store", type=Path, default=argparse.SUPPRESS, help=store_help)
        return p

    run = add("run", _("launch a command under the doctor"))
    run.add_argument("--headless", action="store_true", help=_("no TUI: a status line on stderr"))
    run.add_argument("--status-every", type=_seconds_or_zero, metavar="S", help=status_help)
    run.add_argument(
        "--report", type=Path, metavar="PATH", help=_("write the report (.json or .md)")
    )
    run.add_argument(
        "--max-seconds", type=_positive_float, metavar="S", help=_("stop the job after S seconds")
    )
    run.add_argument(
        "--interval",
        type=_positive_float,
        default=1.0,
        metavar="S",
        help=_("sampling period (default 1 s)"),
    )
    run.add_argument(
        "--lang",
        choices=("en", "zh"),
        default=None,
        help=_("language of what the doctor writes (default: the locale)"),
    )
    run.add_argument(
        "--profile-steps", type=_positive_int, metavar="N",
        help=_("run torch.profiler over N steps after the warm-up; the top operators go "
        "in the report"),
    )  # fmt: skip
    run.add_argument(
        "--profile-trace", type=Path, metavar="PATH",
        help=_("with --profile-steps: also write the Chrome trace (can be large)"),
    )  # fmt: skip
    run.add_argument(
        "--output-max-mb", type=_positive_float, default=DEFAULT_MAX_MB, metavar="MB",
        help=_(
            "in the TUI the job's output goes to a log file; past MB it is moved to LOG.1 "
            "and begun again (default {mb})"
        ).format(mb=DEFAULT_MAX_MB),
    )  # fmt: skip
    run.add_argument("--metrics", metavar="[HOST:]PORT", help=metrics_help)
    run.add_argument(
        "--no-rank-exchange", action="store_true",
        help=_("a torchrun job on several nodes: do not trade rank summaries (rank, host, pid, "
        "step timings) with the other nodes' doctors through the job's rendezvous store"),
    )  # fmt: skip
    run.add_argument(
        "--no-stacks", action="store_true",
        help=_("do not sample the job's stacks with py-spy (which names the lines of your code "
        "that the time outside the model goes to)"),
    )  # fmt: skip
    run.add_argument(
        "--no-auto-profile", action="store_true",
        help=_("never capture a few steps with torch.profiler unasked (the doctor does it "
        "once when the GPU idles and nothing on the host explains it)"),
    )  # fmt: skip
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="[--] CMD [ARGS...]", help=cmd_help)

    watch = add(
        "watch",
        _("attach to a running job (from outside, never stopped; --inject loads the probe)"),
    )
    watch.add_argument("--pid", type=int, required=True, help=_("the job's process id"))
    watch.add_argument(
        "--inject", action="store_true",
        help=_("load the probe into the running job (a debugger stops it for under half a "
        "second): exact steps, the step's phases, syncs and copies, a profiler capture on p; "
        "removed again when the doctor leaves"),
    )  # fmt: skip
    watch.add_argument(
        "--all-ranks", action="store_true",
        help=_("with --inject, on a torchrun job's launcher or one of its ranks: into every "
        "local rank"),
    )  # fmt: skip
    watch.add_argument("--headless", action="store_true", help=_("no TUI: a status line on stderr"))
    watch.add_argument("--status-every", type=_seconds_or_zero, metavar="S", help=status_help)
    watch.add_argument(
        "--report", type=Path, metavar="PATH", help=_("write the report (.json or .md)")
    )
    watch.add_argument(
        "--max-seconds", type=_positive_float, metavar="S", help=_("leave after S seconds")
    )
    watch.add_argument(
        "--interval",
        type=_positive_float,
        default=1.0,
        metavar="S",
        help=_("sampling period (default 1 s)"),
    )
    watch.add_argument(
        "--lang",
        choices=("en", "zh"),
        default=None,
        help=_("language of what the doctor writes (default: the locale)"),
    )
    watch.add_argument("--metrics", metavar="[HOST:]PORT", help=metrics_help)

    exporter = add(
        "exporter",
        _("serve every training job on this node to Prometheus (a node agent: found by "
        "itself, watched from outside, never stopped)"),
    )  # fmt: skip
    exporter.add_argument(
        "--metrics", metavar="[HOST:]PORT", required=True,
        help=_("where to serve OpenMetrics (HOST defaults to 127.0.0.1)"),
    )  # fmt: skip
    exporter.add_argument(
        "--interval", type=_positive_float, default=10.0, metavar="S",
        help=_("how often the node is looked at and each job read (default 10 s)"),
    )  # fmt: skip
    exporter.add_argument(
        "--grace", type=_positive_float, default=60.0, metavar="S",
        help=_("an ended job's series are served this long more (default 60 s)"),
    )  # fmt: skip
    exporter.add_argument(
        "--max-seconds", type=_positive_float, metavar="S", help=_("leave after S seconds")
    )
    exporter.add_argument(
        "--lang", choices=("en", "zh"), default=None,
        help=_("language of what the doctor writes (default: the locale)"),
    )  # fmt: skip

    trace = add(
        "trace",
        _("the GPU timeline of torch.profiler / Kineto traces: where the GPU's time goes, why "
        "it idles, and what to do"),
    )  # fmt: skip
    trace.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH",
        help=_("a trace (.json or .json.gz), or a folder of them (one per rank)"),
    )  # fmt: skip
    trace.add_argument("--json", action="store_true", help=_("print the analysis as JSON"))
    trace.add_argument(
        "--lang",
        choices=("en", "zh"),
        default=None,
        help=_("language of what the doctor writes (default: the locale)"),
    )

    trial = add(
        "trial", _("A/B: the job as it is, then with a remedy applied; the measured speedup")
    )
    trial.add_argument(
        "--apply", action="append", default=[], metavar="REMEDY",
        help=_("remedy id to apply (repeatable; default: the top finding's first remedy)"),
    )  # fmt: skip
    trial.add_argument(
        "--steps", type=_positive_int, default=100, metavar="N",
        help=_("steady-state steps measured in each run, warm-up excluded (default 100)"),
    )  # fmt: skip
    trial.add_argument(
        "--repeat", type=_positive_int, default=2, metavar="K",
        help=_("run each side K times, alternating: B T T B ... (default 2)"),
    )  # fmt: skip
    trial.add_argument(
        "--extra-pairs", type=_count, default=2, metavar="K",
        help=_("at most K more runs a side while the runs read a change of 10%% or more that "
        "the interval cannot tell from noise (default 2; 0: never)"),
    )  # fmt: skip
    trial.add_argument(
        "--report", type=Path, metavar="PATH", help=_("write the report (.json or .md)")
    )
    trial.add_argument("--lang", choices=("en", "zh"), default=None)
    trial.add_argument("cmd", nargs=argparse.REMAINDER, metavar="[--] CMD [ARGS...]", help=cmd_help)

    fix = add(
        "fix",
        _("diagnose, apply the remedy predicted to buy most, trial it, keep it if faster, repeat"),
    )
    fix.add_argument(
        "--budget", type=_age, default=600.0, metavar="TIME",
        help=_("stop before a trial would run past this much time (e.g. 10m, 90s, 1h; "
        "default 10m)"),
    )  # fmt: skip
    fix.add_argument(
        "--steps", type=_positive_int, default=100, metavar="N",
        help=_("steady-state steps measured in each run, warm-up excluded (default 100)"),
    )  # fmt: skip
    fix.add_argument(
        "--repeat", type=_positive_int, default=2, metavar="K",
        help=_("runs a side in each trial, alternating (default 2)"),
    )  # fmt: skip
    fix.add_argument(
        "--extra-pairs", type=_count, default=2, metavar="K",
        help=_("at most K more runs a side while the runs read a change of 10%% or more that "
        "the interval cannot tell from noise (default 2; 0: never)"),
    )  # fmt: skip
    fix.add_argument(
        "--report", type=Path, metavar="PATH", help=_("write the visit (.json or .md)")
    )
    fix.add_argument("--lang", choices=("en", "zh"), default=None)
    fix.add_argument("cmd", nargs=argparse.REMAINDER, metavar="[--] CMD [ARGS...]", help=cmd_help)

    tune = add("tune", _("find settings by measuring: `tune batch-size -- CMD`"))
    tune_sub = tune.add_subparsers(dest="what", metavar="WHAT", parser_class=_Parser)
    bs = tune_sub.add_parser(
        "batch-size",
        help=_("the largest batch that fits and the fastest (each size a fresh run)"),
        description=_("the largest batch that fits and the fastest (each size a fresh run)"),
    )
    bs.add_argument("--store", type=Path, default=argparse.SUPPRESS, help=store_help)
    bs.add_argument(
        "--max-memory", metavar="SIZE",
        help=_("memory limit for the job (e.g. 8GiB): its processes' RSS on a CPU job; "
        "default: the GPU's memory, none on a CPU job"),
    )  # fmt: skip
    bs.add_argument(
        "--cap", type=_positive_int, default=4096, metavar="N",
        help=_("largest batch size to try (default 4096)"),
    )  # fmt: skip
    bs.add_argument(
        "--steps", type=_positive_int, default=15, metavar="N",
        help=_("steps measured at each size, after 5 warm-up steps (default 15)"),
    )  # fmt: skip
    bs.add_argument(
        "--start", type=_positive_int, metavar="N", help=_("first size (default: the job's)")
    )
    bs.add_argument(
        "--report", type=Path, metavar="PATH", help=_("write the result (.json or .md)")
    )
    bs.add_argument("cmd", nargs=argparse.REMAINDER, metavar="[--] CMD [ARGS...]", help=cmd_help)

    compare = add("compare", _("compare two recorded runs: samples/s, speedup, symptoms"))
    compare.add_argument("baseline", help=_("session id of the first run"))
    compare.add_argument("treatment", help=_("session id of the second run (or `last`)"))
    compare.add_argument(
        "--format", choices=("text", "json", "html"), default="text",
        help=_("html: one self-contained page, the two runs over time overlaid (to stdout)"),
    )  # fmt: skip

    history = add("history", _("recorded sessions, newest first"))
    history.add_argument("--limit", type=int, default=20, help=_("how many to list (default 20)"))
    history.add_argument(
        "--prune", type=_age, metavar="AGE",
        help=_("first delete the sessions that started more than AGE ago (e.g. 30d, 12h, 2w), "
        "their records with them, and shrink the store (live sessions are kept)"),
    )  # fmt: skip

    report = add("report", _("rebuild the report of a recorded session"))
    report.add_argument("session", help=_("session id (see `gpudoctor history`), or `last`"))
    report.add_argument(
        "--format", choices=("md", "json", "html"), default=None,
        help=_("html: one self-contained page with the run over time as charts (default: "
        "from the --output file's suffix, else md)"),
    )  # fmt: skip
    report.add_argument(
        "-o", "--output", "--report", type=Path, metavar="FILE", dest="output",
        help=_("write the report to FILE (.md, .json or .html) instead of printing it"),
    )  # fmt: skip
    report.add_argument(
        "--svg", type=Path, metavar="FILE.svg",
        help=_("md: the run over time as charts in this SVG file, shown by the Markdown "
        "(an image link to FILE.svg as given: keep them side by side)"),
    )  # fmt: skip
    report.add_argument("--lang", choices=("en", "zh"), default=None)

    attach = add("attach", _("the live TUI on a session another doctor is recording"))
    attach.add_argument(
        "session", nargs="?", default="last",
        help=_("session id (see `gpudoctor history`), or `last` (the newest live one; default)"),
    )  # fmt: skip
    attach.add_argument("--lang", choices=("en", "zh"), default=None)

    replay = add("replay", _("the TUI over a recorded session"))
    replay.add_argument("session", help=_("session id (see `gpudoctor history`), or `last`"))
    replay.add_argument("--lang", choices=("en", "zh"), default=None)

    remedies = add("remedies", _("print the remedy catalogue"))
    remedies.add_argument("--lang", choices=("en", "zh"), default=None)

    guide = add("guide", _("print a section of the guide the remedies cite (the list without one)"))
    guide.add_argument("section", nargs="?", help=_("a section id, e.g. dataloader"))
    guide.add_argument("--lang", choices=("en", "zh"), default=None)
    # `gpudoctor --lang zh report 9` as `gpudoctor report 9 --lang zh`: a command's own
    # --lang, when not given, leaves the one given before the command as it is
    for command in sub.choices.values():
        _keep_outer_lang(command)
    return parser


def _keep_outer_lang(command: argparse.ArgumentParser) -> None:
    for action in command._actions:
        if action.dest == "lang":
            action.default = argparse.SUPPRESS
        elif isinstance(action, argparse._SubParsersAction):
            for inner in action.choices.values():
                _keep_outer_lang(inner)


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            _("not a whole number: {text!r}").format(text=text)
        ) from None


def _positive_int(text: str) -> int:
    value = _whole(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(_("must be positive: {text!r}").format(text=text))
    return value


def _count(text: str) -> int:
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(_("must not be negative: {text!r}").format(text=text))
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(_("not a number: {text!r}").format(text=text)) from None


def _seconds_or_zero(text: str) -> float:
    """A number of seconds, 0 or more (0: never)."""
    value = _number(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(_("must be 0 or more: {text!r}").format(text=text))
    return value


def _positive_float(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(_("must be positive: {text!r}").format(text=text))
    return value


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _age(text: str) -> float:
    """`30d`, `12h`, `2w`, `90m`, `45s`: seconds."""
    number, unit = text[:-1], text[-1:].lower()
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in _AGE_UNITS or value <= 0:
        raise argparse.ArgumentTypeError(
            _("not a time: {text!r} (e.g. 30d, 12h, 2w, 10m)").format(text=text)
        )
    return value * _AGE_UNITS[unit]
