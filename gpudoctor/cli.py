"""The command line (DESIGN.md section 6). Usage errors: one line on stderr, exit 2."""

from __future__ import annotations

import argparse
import json
import locale
import math
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from gpudoctor import __version__
from gpudoctor.model import JobExit

USAGE_ERROR = 2


class UsageError(Exception):
    """Bad input: one line for the user, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


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


def build_parser() -> argparse.ArgumentParser:
    store_help = (
        "session database (default: $GPUDOCTOR_STORE or ~/.local/share/gpudoctor/sessions.db)"
    )
    parser = _Parser(
        prog="gpudoctor",
        description="A terminal performance doctor for PyTorch training jobs.",
    )
    parser.add_argument("--version", action="version", version=f"gpudoctor {__version__}")
    parser.add_argument("--store", type=Path, help=store_help)
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--store", type=Path, default=argparse.SUPPRESS, help=store_help)
        return p

    run = add("run", "launch a command under the doctor")
    run.add_argument("--headless", action="store_true", help="no TUI: a status line on stderr")
    run.add_argument("--report", type=Path, metavar="PATH", help="write the report (.json or .md)")
    run.add_argument(
        "--max-seconds", type=_positive_float, metavar="S", help="stop the job after S seconds"
    )
    run.add_argument(
        "--interval",
        type=_positive_float,
        default=1.0,
        metavar="S",
        help="sampling period (default 1 s)",
    )
    run.add_argument("--lang", choices=("en", "zh"), default=None, help="language of the remedies")
    run.add_argument(
        "--profile-steps", type=_positive_int, metavar="N",
        help="run torch.profiler over N steps after the warm-up; the top operators go "
        "in the report",
    )  # fmt: skip
    run.add_argument(
        "--profile-trace", type=Path, metavar="PATH",
        help="with --profile-steps: also write the Chrome trace (can be large)",
    )  # fmt: skip
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")

    watch = add("watch", "attach to a running job (no code injected; it is never stopped)")
    watch.add_argument("--pid", type=int, required=True, help="the job's process id")
    watch.add_argument("--headless", action="store_true", help="no TUI: a status line on stderr")
    watch.add_argument(
        "--report", type=Path, metavar="PATH", help="write the report (.json or .md)"
    )
    watch.add_argument(
        "--max-seconds", type=_positive_float, metavar="S", help="leave after S seconds"
    )
    watch.add_argument(
        "--interval",
        type=_positive_float,
        default=1.0,
        metavar="S",
        help="sampling period (default 1 s)",
    )
    watch.add_argument(
        "--lang", choices=("en", "zh"), default=None, help="language of the remedies"
    )

    trial = add("trial", "A/B: the job as it is, then with a remedy applied; the measured speedup")
    trial.add_argument(
        "--apply", action="append", default=[], metavar="REMEDY",
        help="remedy id to apply (repeatable; default: the top finding's first remedy)",
    )  # fmt: skip
    trial.add_argument(
        "--steps", type=_positive_int, default=100, metavar="N",
        help="steady-state steps measured in each run, warm-up excluded (default 100)",
    )  # fmt: skip
    trial.add_argument(
        "--repeat", type=_positive_int, default=2, metavar="K",
        help="run each side K times, alternating: B T T B ... (default 2)",
    )  # fmt: skip
    trial.add_argument(
        "--report", type=Path, metavar="PATH", help="write the report (.json or .md)"
    )
    trial.add_argument("--lang", choices=("en", "zh"), default=None)
    trial.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")

    tune = add("tune", "find settings by measuring: `tune batch-size -- CMD`")
    tune_sub = tune.add_subparsers(dest="what", metavar="WHAT", parser_class=_Parser)
    bs = tune_sub.add_parser(
        "batch-size",
        help="the largest batch that fits and the fastest (each size a fresh run)",
        description="the largest batch that fits and the fastest (each size a fresh run)",
    )
    bs.add_argument("--store", type=Path, default=argparse.SUPPRESS, help=store_help)
    bs.add_argument(
        "--max-memory", metavar="SIZE",
        help="memory limit for the job (e.g. 8GiB): its processes' RSS on a CPU job; "
        "default: the GPU's memory, none on a CPU job",
    )  # fmt: skip
    bs.add_argument(
        "--cap", type=_positive_int, default=4096, metavar="N",
        help="largest batch size to try (default 4096)",
    )  # fmt: skip
    bs.add_argument(
        "--steps", type=_positive_int, default=15, metavar="N",
        help="steps measured at each size, after 5 warm-up steps (default 15)",
    )  # fmt: skip
    bs.add_argument(
        "--start", type=_positive_int, metavar="N", help="first size (default: the job's)"
    )
    bs.add_argument("--report", type=Path, metavar="PATH", help="write the result (.json or .md)")
    bs.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")

    compare = add("compare", "compare two recorded runs: samples/s, speedup, symptoms")
    compare.add_argument("baseline", help="session id of the first run")
    compare.add_argument("treatment", help="session id of the second run (or `last`)")
    compare.add_argument("--format", choices=("text", "json"), default="text")

    history = add("history", "recorded sessions, newest first")
    history.add_argument("--limit", type=int, default=20, help="how many to list (default 20)")

    report = add("report", "rebuild the report of a recorded session")
    report.add_argument("session", help="session id (see `gpudoctor history`), or `last`")
    report.add_argument("--format", choices=("md", "json"), default="md")
    report.add_argument("--lang", choices=("en", "zh"), default=None)

    replay = add("replay", "the TUI over a recorded session")
    replay.add_argument("session", help="session id (see `gpudoctor history`), or `last`")
    replay.add_argument("--lang", choices=("en", "zh"), default=None)

    remedies = add("remedies", "print the remedy catalogue")
    remedies.add_argument("--lang", choices=("en", "zh"), default=None)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(args_list)
        if args.command_name is None:
            if sys.stdin.isatty() and sys.stdout.isatty():
                return cmd_home(args)
            build_parser().print_help()
            return 0
        handler = {
            "run": cmd_run,
            "watch": cmd_watch,
            "trial": cmd_trial,
            "tune": cmd_tune,
            "compare": cmd_compare,
            "history": cmd_history,
            "report": cmd_report,
            "replay": cmd_replay,
            "remedies": cmd_remedies,
        }[args.command_name]
        return handler(args)
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return USAGE_ERROR
    except BrokenPipeError:  # `gpudoctor history | head`
        sys.stderr.close()
        return 0


def _open_store(args: argparse.Namespace) -> Any:
    from gpudoctor.store import Store, StoreError, default_path

    path = args.store or default_path()
    try:
        return Store(Path(path))
    except StoreError as exc:
        raise UsageError(f"gpudoctor: {exc}") from None


# -- run ------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    command = _command_of(args, "run")
    report_path = _report_path(args, "run")
    args.profile_env = _profile_env(args)  # checked before anything starts
    lang = args.lang or default_lang()
    if not args.headless and not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("gpudoctor: no terminal for the TUI: running headless.", file=sys.stderr)
        args.headless = True
    store = _open_store(args)
    if not args.headless:
        return _run_tui(args, command, store, lang, report_path)
    from gpudoctor.live import status_line
    from gpudoctor.session import LaunchError, Session

    session = Session(
        command,
        store,
        interval_s=args.interval,
        max_seconds=args.max_seconds,
        extra_env=args.profile_env,
    )
    try:
        session.start()
    except LaunchError as exc:
        print(f"gpudoctor: {exc}", file=sys.stderr)
        store.close()
        return exc.exit_code

    presses = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal presses
        if signum == signal.SIGINT:
            presses += 1
            if presses == 1:
                if not _terminal_delivered():
                    session.signal_job(signal.SIGINT)
                print(
                    "\ngpudoctor: waiting for the job to stop (Ctrl-C again to force)",
                    file=sys.stderr,
                )
            else:
                session.signal_job(signal.SIGTERM if presses == 2 else signal.SIGKILL)
        else:
            session.signal_job(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    def on_tick(timeline: Any) -> None:
        line = status_line(timeline)
        print(line, file=sys.stderr, flush=True)

    try:
        job_exit = session.run(on_tick)
        report = _record_end(session, store, job_exit, lang)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        session.close()
        store.close()
    return _conclude(report, report_path, job_exit)


def _profile_env(args: argparse.Namespace) -> dict[str, str]:
    from gpudoctor.probe.profile import ENV_PROFILE_STEPS, ENV_PROFILE_TRACE

    steps = getattr(args, "profile_steps", None)
    trace = getattr(args, "profile_trace", None)
    if trace is not None and steps is None:
        raise UsageError("gpudoctor run: --profile-trace needs --profile-steps N")
    if trace is not None and not trace.parent.is_dir():
        raise UsageError(f"gpudoctor run: no such folder for --profile-trace: {trace.parent}")
    env = {ENV_PROFILE_STEPS: str(steps)} if steps else {}
    if trace is not None:
        env[ENV_PROFILE_TRACE] = str(trace.resolve())
    return env


def _report_path(args: argparse.Namespace, name: str) -> Path | None:
    path: Path | None = args.report
    if path is not None:
        if path.suffix not in (".json", ".md"):
            raise UsageError(f"gpudoctor {name}: --report must end in .json or .md: {path}")
        if not path.parent.is_dir():
            raise UsageError(f"gpudoctor {name}: no such folder for --report: {path.parent}")
    return path


def _open_log(store: Any, prefix: str, name: str) -> tuple[Path, Any]:
    """A new log file in the `logs` folder beside the store (the jobs' own output)."""
    logs = Path(store.path).parent / "logs"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        path = logs / time.strftime(f"{prefix}-%Y%m%d-%H%M%S.log")
        return path, path.open("ab")
    except OSError as exc:
        store.close()
        raise UsageError(f"gpudoctor {name}: cannot write the job's log in {logs}: {exc}") from None


def _record_end(session: Any, store: Any, job_exit: JobExit, lang: str) -> dict[str, Any]:
    """The run's report, and the session marked as ended with it in the store."""
    from gpudoctor import report as reports

    report = reports.build(session.timeline, session.session_id, lang)
    assert session.session_id is not None and session.timeline.end_mono_ns is not None
    store.finish(
        session.session_id, session.timeline.end_mono_ns, job_exit, reports.summary(report)
    )
    return report


def _conclude(
    report: dict[str, Any], report_path: Path | None, job_exit: JobExit, notes: tuple[str, ...] = ()
) -> int:
    """After a run: the findings, any notes, the report file; the exit code to return."""
    _print_findings(report)
    for note in notes:
        print(f"gpudoctor: {note}", file=sys.stderr)
    if report_path is not None:
        _write_report(report, report_path)
    if job_exit.ended_by in ("max-seconds", "detached"):
        return 0  # stopped as asked, or left running: the job's own code is in the report
    return job_exit.exit_code if job_exit.exit_code is not None else 1


def _run_tui(
    args: argparse.Namespace, command: list[str], store: Any, lang: str, report_path: Path | None
) -> int:
    """The job in its own session, its output in a log file beside the store; the app
    runs the session loop in a thread worker. The report is built and kept as headless."""
    from gpudoctor.session import LaunchError, Session
    from gpudoctor.tui.app import make_live_app

    log_path, log = _open_log(store, "job", "run")
    session = Session(
        command,
        store,
        interval_s=args.interval,
        max_seconds=args.max_seconds,
        output=log,
        own_terminal=True,
        extra_env=args.profile_env,
    )
    try:
        session.start()
    except LaunchError as exc:
        log.close()
        store.close()
        print(f"gpudoctor: {exc}", file=sys.stderr)
        return exc.exit_code
    app = make_live_app(session, log_path, lang)
    try:
        app.run()
    finally:
        if session.timeline.exit is None:  # the app failed: leave the job running
            session.detach()
            deadline = time.monotonic() + 2 * args.interval + 2
            while session.timeline.exit is None and time.monotonic() < deadline:
                time.sleep(0.05)
        log.close()
    job_exit = session.timeline.exit
    if job_exit is None:
        session.close()
        store.close()
        print(f"gpudoctor: the job (pid {session.job_pid}) was left running", file=sys.stderr)
        return 3
    try:
        report = _record_end(session, store, job_exit, lang)
    finally:
        session.close()
        store.close()
    notes = [f"the job's output is in {log_path}"]
    if job_exit.ended_by == "detached" and session.proc is not None:
        notes.append(f"the job (pid {session.proc.pid}) was left running")
    code = _conclude(report, report_path, job_exit, tuple(notes))
    if app.trial_request is not None:
        return _trial_from_tui(args, command, app.trial_request)
    return code


def _trial_from_tui(args: argparse.Namespace, command: list[str], remedy: str) -> int:
    """`t` on a finding's screen: the trial of its first remedy, as `gpudoctor trial`."""
    print(f"gpudoctor: trial of {remedy} on {' '.join(command)}", file=sys.stderr)
    trial_args = argparse.Namespace(
        cmd=list(command), apply=[remedy], steps=100, repeat=2, report=None,
        lang=getattr(args, "lang", None), store=args.store,
    )  # fmt: skip
    return cmd_trial(trial_args)


# -- trial and compare ----------------------------------------------------------------------


def cmd_trial(args: argparse.Namespace) -> int:
    """Baseline, then treatment (alternating when repeated); the speedup and its interval."""
    from gpudoctor import report as reports
    from gpudoctor.diagnosis.engine import diagnose
    from gpudoctor.prescribe import trial as trials
    from gpudoctor.prescribe.rerun import NotApplicable, plan
    from gpudoctor.session import LaunchError

    command = _command_of(args, "trial")
    report_path = _report_path(args, "trial")
    from gpudoctor.diagnosis.remedies import CATALOGUE

    unknown = [r for r in args.apply if r not in CATALOGUE]
    if unknown:
        raise UsageError(
            f"gpudoctor trial: unknown remedy {unknown[0]!r} (see gpudoctor remedies; known: "
            f"{', '.join(sorted(CATALOGUE))})"
        )
    lang = args.lang or default_lang()
    store = _open_store(args)
    arms: dict[str, list[Any]] = {"baseline": [], "treatment": []}
    # the runs' own output (and the KeyboardInterrupt that ends them) goes to a log
    log_path, log = _open_log(store, "trial", "trial")
    print(f"gpudoctor trial: the runs' output goes to {log_path}", file=sys.stderr)

    def run(side: str, argv: list[str], env: dict[str, str]) -> Any:
        n = len(arms[side]) + 1
        print(f"gpudoctor trial: {side} run {n}: {' '.join(argv)}", file=sys.stderr, flush=True)
        session, arm = trials.run_arm(argv, env, args.steps, store, output=log)
        assert session.timeline.exit is not None
        _record_end(session, store, session.timeline.exit, lang)
        arms[side].append(arm)
        print(
            f"gpudoctor trial:   {len(arm.walls_s)} steps, "
            f"{_rate_words(arm)}, data wait {_pct(arm.data_wait_fraction)}",
            file=sys.stderr,
            flush=True,
        )
        return session

    try:
        try:
            first = run("baseline", command, {})
        except LaunchError as exc:
            print(f"gpudoctor trial: {exc}", file=sys.stderr)
            return exc.exit_code
        base = arms["baseline"][0]
        if base.failed or len(base.walls_s) < 5:
            why = (
                f"exit code {base.exit_code}"
                if base.failed
                else f"only {base.total_steps} steps (warm-up is {5})"
            )
            print(
                f"gpudoctor trial: the baseline run failed ({why}): nothing to compare",
                file=sys.stderr,
            )
            return base.exit_code if base.failed and base.exit_code else 1
        timeline = first.timeline
        facts = timeline.merged_facts()
        cores = timeline.host[-1].cores_allowed if timeline.host else (os.cpu_count() or 1)
        remedies = list(args.apply)
        if not remedies:
            findings = [f for f in diagnose(timeline.window()) if f.remedies]
            if not findings:
                raise UsageError(
                    "gpudoctor trial: the baseline run has no finding with a remedy; "
                    "name one with --apply REMEDY"
                )
            remedies = [findings[0].remedies[0]]
            print(
                f"gpudoctor trial: applying {remedies[0]}, the first remedy of the top "
                f"finding ({findings[0].id})",
                file=sys.stderr,
            )
        try:
            treatment = plan(remedies, command, facts, cores)
        except NotApplicable as exc:
            raise UsageError(f"gpudoctor trial: {exc}") from None
        for c in treatment.applied:
            print(
                f"gpudoctor trial: {c.remedy} via {c.via}: {c.change}"
                + (f" ({c.why})" if c.why else ""),
                file=sys.stderr,
            )
        order = ["treatment"]
        for r in range(1, args.repeat):
            order += ["treatment", "baseline"] if r % 2 else ["baseline", "treatment"]
        last = None
        for side in order:
            if side == "treatment":
                last = run("treatment", list(treatment.argv), treatment.env)
            else:
                run("baseline", command, {})
        result = {
            **_comparison(arms["baseline"], arms["treatment"]),
            "applied": [c.as_dict() for c in treatment.applied],
            "commands": {"baseline": command, "treatment": list(treatment.argv)},
            "treatment_env": treatment.env,
            "treatment_shown": treatment.shown(),
            "steps_per_run": args.steps,
            "repeat": args.repeat,
            "method": (
                "moving-block bootstrap over the steady steps (blocks of a quarter run, "
                "runs resampled), 2000 rounds, widened by the spread between runs when "
                "repeated; the first 25 steps of each run are warm-up"
            ),
        }
        if last is not None and last.session_id is not None:
            store.add(last.session_id, "trial", time.monotonic_ns(), result)
            store.commit()
    finally:
        store.close()
        log.close()
    _print_trial(result)
    if report_path is not None:
        report = {"schema": reports.SCHEMA, "mode": "trial", "command": command, "trial": result}
        _write_report(report, report_path) if report_path.suffix == ".json" else (
            report_path.write_text(_trial_markdown(result), encoding="utf-8")
        )
    return 0


def _command_of(args: argparse.Namespace, name: str) -> list[str]:
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError(
            f"gpudoctor {name}: no command given (usage: gpudoctor {name} [OPTIONS] -- CMD [ARGS...])"
        )
    return command


def _comparison(baseline: list[Any], treatment: list[Any]) -> dict[str, Any]:
    """Each side pooled, the speedup, its 95% interval and the verdict (trial, compare)."""
    from gpudoctor.prescribe import trial as trials

    point, ci = trials.speedup(baseline, treatment)
    return {
        "baseline": _pooled(baseline),
        "treatment": _pooled(treatment),
        "speedup": round(point, 4),
        "ci95": [round(ci[0], 4), round(ci[1], 4)],
        "verdict": trials.verdict(point, ci, treatment),
    }


def _pooled(arms: list[Any]) -> dict[str, Any]:
    from gpudoctor.prescribe.trial import _rate

    first: dict[str, Any] = arms[0].as_dict()
    waits = [a.data_wait_fraction for a in arms if a.data_wait_fraction is not None]
    first["samples_per_s"] = round(_rate(arms), 2)
    first["data_wait_fraction"] = round(sum(waits) / len(waits), 4) if waits else None
    first["runs"] = [a.as_dict() for a in arms]
    first["sessions"] = [a.session_id for a in arms]
    return first


def _rate_words(arm: Any) -> str:
    sps = arm.samples_per_s
    unit = "samples/s" if arm.batch_size else "steps/s"
    return f"{sps:.1f} {unit}" if sps else "no rate"


def _pct(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "n/a"


def _print_trial(r: dict[str, Any]) -> None:
    out = sys.stderr
    b, t = r["baseline"], r["treatment"]
    unit = b["unit"] + "/s"
    print("", file=out)
    print(f"gpudoctor trial: {r['verdict']}", file=out)
    for c in r["applied"]:
        print(f"  applied {c['remedy']} via {c['via']}: {c['change']}", file=out)
    print(f"  baseline  {b['samples_per_s']:.1f} {unit}, step {b['step_median_ms']:.1f} ms median, "
          f"data wait {_pct(b['data_wait_fraction'])}", file=out)  # fmt: skip
    print(f"  treatment {t['samples_per_s']:.1f} {unit}, step "
          f"{(t['step_median_ms'] or 0):.1f} ms median, data wait {_pct(t['data_wait_fraction'])}",
          file=out)  # fmt: skip
    low, high = r["ci95"]
    print(f"  speedup {r['speedup']:.2f}x (95% interval {low:.2f}-{high:.2f}); data wait "
          f"{_pct(b['data_wait_fraction'])} -> {_pct(t['data_wait_fraction'])}", file=out)  # fmt: skip
    print(f"  treatment command: {r['treatment_shown']}", file=out)


def _trial_markdown(r: dict[str, Any]) -> str:
    b, t = r["baseline"], r["treatment"]
    lines = [
        "# gpudoctor trial",
        "",
        f"- verdict: **{r['verdict']}**, speedup {r['speedup']:.2f}x "
        f"(95% interval {r['ci95'][0]:.2f}-{r['ci95'][1]:.2f})",
        f"- baseline: {b['samples_per_s']} {b['unit']}/s, data wait {_pct(b['data_wait_fraction'])}",
        f"- treatment: {t['samples_per_s']} {t['unit']}/s, data wait {_pct(t['data_wait_fraction'])}",
        f"- treatment command: `{r['treatment_shown']}`",
    ]
    lines += [f"- applied `{c['remedy']}` via {c['via']}: {c['change']}" for c in r["applied"]]
    return "\n".join(lines) + "\n"


def cmd_tune(args: argparse.Namespace) -> int:
    """The batch-size finder: each size a fresh run under the doctor."""
    from gpudoctor import display
    from gpudoctor.prescribe import batch_size as finder
    from gpudoctor.prescribe import trial as trials
    from gpudoctor.prescribe.rerun import with_batch_size
    from gpudoctor.session import LaunchError

    if args.what is None:
        raise UsageError("gpudoctor tune: say what to tune: gpudoctor tune batch-size -- CMD")
    command = _command_of(args, "tune batch-size")
    report_path = _report_path(args, "tune")
    cap_bytes = None
    if args.max_memory is not None:
        try:
            cap_bytes = finder.parse_size(args.max_memory)
        except ValueError as exc:
            raise UsageError(f"gpudoctor tune: --max-memory: {exc}") from None
    store = _open_store(args)
    log_path, log = _open_log(store, "tune", "tune")
    state: dict[str, Any] = {"facts": None, "n": 0}

    def say(line: str, fraction: float | None = None) -> None:
        print(line, file=sys.stderr, flush=True)

    show = {"say": say}  # the TUI puts its own in (a progress bar, a table of tries)

    def job_rss(timeline: Any) -> int:
        return sum(p.rss_bytes for p in timeline.host[-1].job) if timeline.host else 0

    def try_size(size: int | None) -> Any:
        """One run at `size` (None: the job as it is, which tells its own size)."""
        argv, env = list(command), {}
        if state["facts"] is not None and size is not None:
            sized = with_batch_size(command, state["facts"], size)
            argv, env = list(sized.argv), sized.env
        over = {"cap": False}

        def stop_if(timeline: Any) -> bool:
            over["cap"] = cap_bytes is not None and job_rss(timeline) > cap_bytes
            return bool(over["cap"])

        state["n"] += 1
        # at most: doublings from the job's size to the cap, then a few bisections
        start = size or 1
        most = max(state["n"], math.ceil(math.log2(max(2, args.cap / start))) + 4)
        progress = display.bar(state["n"] / most, 12)
        show["say"](
            f"gpudoctor tune: [{progress}] try {state['n']} (at most ~{most}): batch size "
            f"{size if size is not None else 'as the job has it'} ...",
            state["n"] / most,
        )
        session, arm = trials.run_arm(
            argv, env, args.steps, store, output=log, stop_if=stop_if, warmup_steps=0
        )
        timeline = session.timeline
        assert timeline.exit is not None
        _record_end(session, store, timeline.exit, "en")
        if state["facts"] is None:
            state["facts"] = timeline.merged_facts()
        if size is None:
            size = _job_batch_size(state["facts"])
            if size is None:
                raise UsageError(
                    "gpudoctor tune: cannot tell this job's batch size (no --batch-size flag, "
                    "no DataLoader): give the first size with --start N"
                )
        rate = arm.samples_per_s
        if rate is not None and arm.batch_size is None:
            rate *= size  # the probe saw no batch (no DataLoader): the size set is the batch
        gpu = [g for g in timeline.gpus if any(p.pid in timeline.steps for p in g.processes)]
        if gpu:
            peak = max(
                p.mem_used_bytes or 0 for g in gpu for p in g.processes if p.pid in timeline.steps
            )
            limit = gpu[-1].mem_total_bytes
        else:
            peak = max((sum(p.rss_bytes for p in h.job) for h in timeline.host), default=0)
            limit = cap_bytes
        if timeline.exit.ended_by == "oom":
            t = finder.Try(size, False, "oom", None, peak or None)
        elif over["cap"]:
            t = finder.Try(size, False, "over memory cap", None, peak or None)
        elif arm.failed or len(arm.walls_s) < 2:
            t = finder.Try(size, False, f"crashed (exit code {arm.exit_code})", None, peak or None)
        elif limit and peak > (1 - finder.SAFETY_MARGIN) * limit:
            t = finder.Try(size, False, "over safety margin", rate, peak)
        else:
            t = finder.Try(size, True, "fits", rate, peak or None)
        speed = f", {t.samples_per_s:.1f} samples/s" if t.samples_per_s else ""
        mem = f", peak {t.peak_bytes / 2**20:.0f} MiB" if t.peak_bytes else ""
        show["say"](f"gpudoctor tune:   {t.reason}{speed}{mem}", None)
        return t

    def search() -> Any:
        """The finder's result, or an exit code (the job could not run as it is)."""
        try:
            first = try_size(args.start)
        except LaunchError as exc:
            show["say"](f"gpudoctor tune: {exc}", None)
            return exc.exit_code
        if first.reason.startswith("crashed"):  # not a memory limit: the job itself fails
            show["say"](f"gpudoctor tune: the job fails as it is: {first.reason}", None)
            return 1
        tries = [first]

        def cached(size: int) -> Any:
            for t in tries:
                if t.batch_size == size:
                    return t
            t = try_size(size)
            tries.append(t)
            return t

        return finder.search(first.batch_size, cached, cap=args.cap)

    say(f"gpudoctor tune: the runs' output goes to {log_path}")
    try:
        if sys.stdin.isatty() and sys.stdout.isatty():
            from gpudoctor.tui.tune import run_tune_app

            result = run_tune_app(search, show, " ".join(command))
        else:
            result = search()
    finally:
        store.close()
        log.close()
    if isinstance(result, int):
        return result
    out = result.as_dict()
    print("", file=sys.stderr)
    print(
        f"gpudoctor tune: largest batch size that fits: {out['largest_fitting']}; fastest: "
        f"{out['fastest']} (stopped by {out['stopped_by']}; safety margin "
        f"{finder.SAFETY_MARGIN:.0%} of the memory limit)",
        file=sys.stderr,
    )
    if report_path is not None:
        report = {"schema": "gpudoctor.report/1", "mode": "tune", "command": command,
                  "batch_size": out}  # fmt: skip
        if report_path.suffix == ".json":
            report_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        else:
            rows = "\n".join(
                f"| {t['batch_size']} | {t['reason']} | {t['samples_per_s'] or ''} |"
                for t in out["tries"]
            )
            report_path.write_text(
                f"# gpudoctor tune batch-size\n\n- largest that fits: {out['largest_fitting']}\n"
                f"- fastest: {out['fastest']}\n- stopped by: {out['stopped_by']}\n\n"
                f"| batch size | result | samples/s |\n|---|---|---|\n{rows}\n",
                encoding="utf-8",
            )
        print(f"gpudoctor: report written to {report_path}", file=sys.stderr)
    return 0


def _job_batch_size(facts: dict[str, Any]) -> int | None:
    """The job's own batch size: its --batch-size flag, else its DataLoader's."""
    from gpudoctor.prescribe.how import script_flag

    found = script_flag("larger-batch", facts)
    if found is not None and isinstance(found[1], int) and found[1] > 0:
        return found[1]
    loaders = facts.get("dataloaders") or []
    size = loaders[0].get("batch_size") if loaders else None
    return size if isinstance(size, int) and size > 0 else None


def cmd_compare(args: argparse.Namespace) -> int:
    from gpudoctor.prescribe import trial as trials

    runs = []
    for name in (args.baseline, args.treatment):
        args.session = name
        session_id, timeline = _load_session(args, "compare")
        arm = trials.arm_of(timeline, session_id)
        if len(arm.walls_s) < 5:
            raise UsageError(
                f"gpudoctor compare: session {session_id} has too few steps to compare"
            )
        runs.append(arm)
    result = {
        **_comparison([runs[0]], [runs[1]]),
        "applied": [],
        "commands": {"baseline": list(runs[0].argv), "treatment": list(runs[1].argv)},
        "treatment_shown": " ".join(runs[1].argv),
    }
    if args.format == "json":
        print(json.dumps(result, indent=2))
    else:
        _print_trial(result)
    return 0


# -- home: `gpudoctor` alone -----------------------------------------------------------------


def cmd_home(args: argparse.Namespace) -> int:
    """The machine dashboard; then watch the chosen process, or run the typed command."""
    from gpudoctor.machine import Machine
    from gpudoctor.tui.home import make_home_app

    choice = make_home_app(Machine()).run()
    if choice is None:
        return 0
    common = {"store": args.store, "headless": False, "report": None, "max_seconds": None,
              "interval": 1.0, "lang": None}  # fmt: skip
    if choice.action == "watch":
        return cmd_watch(argparse.Namespace(pid=choice.pid, **common))
    return cmd_run(argparse.Namespace(cmd=list(choice.command), **common))


# -- watch ------------------------------------------------------------------------------------


def cmd_watch(args: argparse.Namespace) -> int:
    """Attach to a running job; every way out leaves it running, untouched."""
    from gpudoctor.sources.nvml import NvmlReader
    from gpudoctor.sources.stacks import AttachError, check_access, find_py_spy
    from gpudoctor.watch import container_message, find_target, foreign_gpu_pids

    report_path = _report_path(args, "watch")
    lang = args.lang or default_lang()
    try:
        target = find_target(args.pid)
    except AttachError as exc:
        raise UsageError(f"gpudoctor watch: {exc}") from None
    if not args.headless and not (sys.stdin.isatty() and sys.stdout.isatty()):
        args.headless = True  # said once the checks pass
        print_headless = True
    else:
        print_headless = False
    not_python = (
        f"pid {target.pid} ({' '.join(target.command)[:60]}) is not a Python process: "
        "only its GPU and host use can be watched"
    )
    py_spy = None
    if target.python:
        py_spy = find_py_spy()
        if py_spy is None:
            raise UsageError(
                "gpudoctor watch: py-spy is not installed (it samples the job from outside): "
                "pip install py-spy"
            )
        try:
            check_access(py_spy, target.pid)
        except AttachError as exc:
            raise UsageError(f"gpudoctor watch: {exc}") from None
    elif args.headless:
        raise UsageError(f"gpudoctor watch: {not_python} (in the TUI: drop --headless)")
    nvml = NvmlReader()
    foreign = foreign_gpu_pids(nvml.read())
    if foreign:
        raise UsageError(f"gpudoctor watch: {container_message(foreign, target.pid)}")
    store = _open_store(args)
    if print_headless:
        print("gpudoctor: no terminal for the TUI: watching headless.", file=sys.stderr)
    from gpudoctor.watch import WatchSession

    session = WatchSession(
        target,
        store,
        interval_s=args.interval,
        max_seconds=args.max_seconds,
        nvml=nvml,
        py_spy=py_spy,
    )
    session.start()
    if not args.headless:
        code = _watch_tui(session, store, lang, report_path)
        if not target.python and code == 0:
            print(f"gpudoctor watch: {not_python}", file=sys.stderr)
            return USAGE_ERROR
        return code
    from gpudoctor.live import status_line

    def on_signal(signum: int, frame: FrameType | None) -> None:
        session.detach()  # Ctrl-C at the doctor: leave, the job goes on

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    print(
        f"gpudoctor: watching pid {target.pid} ({' '.join(target.command)[:80]}); "
        "Ctrl-C leaves it running",
        file=sys.stderr,
    )
    try:
        job_exit = session.run(lambda t: print(status_line(t), file=sys.stderr, flush=True))
        report = _record_end(session, store, job_exit, lang)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        session.close()
        store.close()
    _conclude(report, report_path, job_exit)
    return 0  # left, or the job ended: its exit code cannot be seen from outside


def _watch_tui(session: Any, store: Any, lang: str, report_path: Path | None) -> int:
    from gpudoctor.tui.app import make_live_app

    app = make_live_app(session, None, lang)
    try:
        app.run()
    finally:
        if session.timeline.exit is None:
            session.detach()
            deadline = time.monotonic() + 2 * session.interval_s + 2
            while session.timeline.exit is None and time.monotonic() < deadline:
                time.sleep(0.05)
        session.close()
    job_exit = session.timeline.exit
    if job_exit is None:
        store.close()
        print("gpudoctor: the watch did not end cleanly; the job goes on", file=sys.stderr)
        return 3
    try:
        report = _record_end(session, store, job_exit, lang)
    finally:
        store.close()
    notes = (f"pid {session.job_pid} was left running",) if job_exit.ended_by == "detached" else ()
    _conclude(report, report_path, job_exit, notes)
    return 0


def _write_report(report: dict[str, Any], path: Path) -> None:
    from gpudoctor import report as reports

    text = reports.to_json(report) if path.suffix == ".json" else reports.to_markdown(report)
    path.write_text(text, encoding="utf-8")
    print(f"gpudoctor: report written to {path}", file=sys.stderr)


def _terminal_delivered() -> bool:
    """Ctrl-C at the terminal reaches the whole foreground group, the job included."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def _print_findings(report: dict[str, Any]) -> None:
    from gpudoctor.report import status_words

    s = report["steps"]
    out = sys.stderr
    print("", file=out)
    counted = f", {s['count']} steps" if s["count"] is not None else ""
    print(
        f"gpudoctor: session {report['session']}: {status_words(report)}, "
        f"{report['duration_s']:.1f} s{counted}",
        file=out,
    )
    if s.get("stack_samples") is not None:
        line = f"  from outside: {s['stack_samples']} stack samples of the main thread"
        if s["steps_per_s"]:
            line += f", about {s['steps_per_s']:.1f} steps/s"
        if s["data_wait_fraction"] is not None:
            line += f", data wait about {s['data_wait_fraction']:.0%}"
        print(line, file=out)
    elif s["median_ms"] is not None:
        line = f"  step {s['median_ms']:.1f} ms median, {s['p90_ms']:.1f} ms p90"
        if s["samples_per_s"]:
            line += f", {s['samples_per_s']:.1f} samples/s"
        line += f", data wait {s['data_wait_fraction']:.0%}"
        print(line, file=out)
    print(f"  GPU: {report['gpu_status']}", file=out)
    if not report["findings"]:
        print("  no findings: nothing measured points at a bottleneck", file=out)
    for f in report["findings"]:
        estimated = ", estimated" if f.get("confidence") == "estimated" else ""
        print(f"  [{f['severity']}{estimated}] {f['id']}: {f['title']}", file=out)
        print(f"      {f['evidence']}", file=out)
        for r in f["remedies"][:3]:
            print(f"      -> {r['id']}: {r['how']}", file=out)
    profile = report.get("profile")
    if profile:
        unit = "self device" if profile["sort"] == "device" else "self CPU"
        print(f"  profile of {profile['steps']} steps, top operators by {unit} time:", file=out)
        key = (
            "self_device_time_total_us" if profile["sort"] == "device" else "self_cpu_time_total_us"
        )
        for op in profile["operators"][:8]:
            print(f"      {op[key]:>10.0f} us  {op['calls']:>6} calls  {op['name']}", file=out)
        if profile.get("trace"):
            print(f"      trace: {profile['trace']}", file=out)
    for note in report["notes"]:
        print(f"  note: {note}", file=out)


# -- history, report, remedies ------------------------------------------------------------


def cmd_history(args: argparse.Namespace) -> int:
    from gpudoctor.store import StoreError

    store = _open_store(args)
    try:
        rows = store.sessions()
    except StoreError as exc:
        raise UsageError(f"gpudoctor: {exc}") from None
    finally:
        store.close()
    if not rows:
        print(f"no recorded sessions in {store.path}")
        return 0
    print(
        f"{'id':>4}  {'started':16}  {'took':>7}  {'ended':22}  {'steps':>6}  {'top finding':26}  command"
    )
    for row in rows[: args.limit]:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.started_unix))
        took = f"{row.duration_s:.0f}s" if row.duration_s is not None else "-"
        ended = f"{row.exit.ended_by} ({row.exit.exit_code})" if row.exit else "incomplete"
        steps = row.summary.get("steps")
        # a watched job's steps are not counted (py-spy samples them): "watch" says why
        steps = ("watch" if row.summary.get("mode") == "watch" else "-") if steps is None else steps
        top = row.summary.get("top_finding") or "-"
        command = " ".join(row.command)
        print(
            f"{row.id:>4}  {started:16}  {took:>7}  {ended:22}  {steps!s:>6}  {top:26}  {command[:60]}"
        )
    return 0


def _load_session(args: argparse.Namespace, name: str) -> tuple[int, Any]:
    """(id, timeline) of the session the user named: an id or `last`."""
    from gpudoctor.store import StoreError

    store = _open_store(args)
    try:
        if args.session == "last":
            rows = store.sessions()
            if not rows:
                raise UsageError(f"gpudoctor {name}: no recorded sessions in {store.path}")
            session_id = rows[0].id
        else:
            try:
                session_id = int(args.session)
            except ValueError:
                raise UsageError(
                    f"gpudoctor {name}: not a session id: {args.session!r} (see gpudoctor history)"
                ) from None
        return session_id, store.load(session_id)
    except StoreError as exc:
        raise UsageError(f"gpudoctor {name}: {exc}") from None
    finally:
        store.close()


def cmd_replay(args: argparse.Namespace) -> int:
    session_id, timeline = _load_session(args, "replay")
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("gpudoctor replay: needs a terminal (for a text report: gpudoctor report)")
    from gpudoctor.tui.app import make_replay_app

    app = make_replay_app(timeline, session_id, args.lang or default_lang())
    app.run()
    if app.trial_request is not None:
        return _trial_from_tui(args, list(timeline.command), app.trial_request)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from gpudoctor import report as reports

    session_id, timeline = _load_session(args, "report")
    report = reports.build(timeline, session_id, args.lang or default_lang())
    sys.stdout.write(
        reports.to_json(report) if args.format == "json" else reports.to_markdown(report)
    )
    return 0


def cmd_remedies(args: argparse.Namespace) -> int:
    from gpudoctor.diagnosis.remedies import CATALOGUE, section_title

    lang = args.lang or default_lang()
    for remedy in CATALOGUE.values():
        section = section_title(remedy.guide_section, lang)
        extra = (
            (" (超出指南)" if lang == "zh" else " (beyond the guide)")
            if remedy.beyond_guide
            else ""
        )
        print(f"{remedy.id}: {remedy.title[lang]}{extra}")
        print(f"  {'指南' if lang == 'zh' else 'guide'}: [{remedy.guide_section}] {section}")
        print(f"  {remedy.explanation[lang]}")
        for line in remedy.snippet.splitlines():
            print(f"    {line}")
        print()
    return 0
