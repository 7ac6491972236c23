"""A job the doctor launches, with the probe inside: started with the probe's boot
folder on PYTHONPATH, its messages and counter pages read as it runs, stopped politely
when asked (SIGINT, then SIGTERM and SIGKILL if it lingers).

The job inherits the terminal (or writes to a log file): never a pipe the doctor owns,
so the job's next print cannot fail if the doctor dies.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from gpudoctor import probe, run_folders
from gpudoctor.diagnosis.auto_profile import STEPS as AUTO_STEPS
from gpudoctor.diagnosis.auto_profile import should_capture
from gpudoctor.diagnosis.ranks import RankSummary, rank_summaries
from gpudoctor.diagnosis.window import WARMUP_STEPS
from gpudoctor.i18n import _
from gpudoctor.jobs.captures import CAPTURE_WAIT_S, Captures
from gpudoctor.jobs.source import Recorder, ask_for_profile
from gpudoctor.model import EndedBy, HotspotChunk, JobExit
from gpudoctor.output_log import OutputLog
from gpudoctor.probe import ENV_DOCTOR_PID, ENV_DOCTOR_START, ENV_SOCKET
from gpudoctor.probe.profile import ENV_CONTROL, ENV_PROFILE_TRACE_DIR
from gpudoctor.probe.protocol import start_ticks
from gpudoctor.sources import cpu_peak
from gpudoctor.sources.host import HostReader
from gpudoctor.sources.hotspots import HotspotSampler
from gpudoctor.sources.nvml import NvmlReader
from gpudoctor.sources.probe_server import ProbeServer
from gpudoctor.sources.rendezvous import RankExchange, of_command
from gpudoctor.store import Store, StoreError, encode

BOOT_DIR = Path(probe.__file__).resolve().parent / "boot"  # first on the job's PYTHONPATH
# --max-seconds: SIGINT first (Python jobs unwind and flush), then these escalations.
STOP_ESCALATION_S = ((10.0, signal.SIGTERM), (15.0, signal.SIGKILL))
# A multi-node job's doctors trade their ranks' summaries this often (sources/rendezvous.py),
# each over its ranks' recent steps.
EXCHANGE_S = 2.0
EXCHANGE_STEPS = 500
# How often the doctor asks whether to capture by itself (diagnosis/auto_profile.py)
AUTO_CHECK_S = 10.0


class LaunchError(Exception):
    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def probe_env(socket_path: str, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(BOOT_DIR) + (os.pathsep + existing if existing else "")
    env[ENV_SOCKET] = socket_path
    return env


class LaunchedJob(Recorder):
    can_profile = True

    def __init__(
        self,
        command: list[str],
        store: Store,
        interval_s: float = 1.0,
        max_seconds: float | None = None,
        nvml: NvmlReader | None = None,
        output: IO[Any] | OutputLog | None = None,
        own_terminal: bool = False,
        extra_env: dict[str, str] | None = None,
        exchange_ranks: bool = True,
        py_spy: str | None = None,
        auto_profile: bool = False,
    ) -> None:
        super().__init__(command, store, interval_s, max_seconds, nvml)
        # a multi-node torchrun job: trade rank summaries with the other nodes' doctors
        self.exchange_ranks = exchange_ranks
        self.exchange: RankExchange | None = None
        self._exchanged = 0.0
        # a log the doctor keeps (capped: rotated when full), or any file, or None
        self.output_log = output if isinstance(output, OutputLog) else None
        self.output = output.file if isinstance(output, OutputLog) else output
        self.extra_env = extra_env or {}  # a trial's in-process remedies
        # Under the TUI the job must not share the doctor's terminal: its own session
        # (terminal signals and a closed terminal do not reach it), no stdin, output in
        # a log file, so that leaving it running really leaves it running.
        self.own_terminal = own_terminal
        self.proc: subprocess.Popen[bytes] | None = None
        self._dir = run_folders.make("run")  # owner-only; stale ones of dead doctors go
        self.server = ProbeServer(os.path.join(self._dir, "probe.sock"))
        # the probe looks here for requests (a profiler capture): see probe/profile.py
        self.control_path = os.path.join(self._dir, "control")
        self._stop_started: float | None = None
        self._stop_reason: EndedBy | None = None
        self._escalation = 0
        # py-spy, from outside, once the job is in its steady steps: which lines of the
        # user's code the time outside the model goes to (sources/hotspots.py)
        self.lines = HotspotSampler(py_spy) if py_spy else None
        # profiler captures' traces, read as GPU timelines as they come (jobs/captures.py)
        self.captures = Captures()
        # a capture by the doctor itself, once, when the GPU idles unexplained
        self.auto_profile = auto_profile
        self._auto_checked = 0.0

    @property
    def job_pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    # -- launch ---------------------------------------------------------------------------

    def start(self) -> None:
        # a job with no GPU to run on: the CPU's peak, measured before the job competes
        peak = cpu_peak.measure() if not self.nvml.devices else None
        try:
            self.proc = subprocess.Popen(
                self.command,
                env={
                    **probe_env(self.server.path),
                    ENV_DOCTOR_PID: str(os.getpid()),
                    ENV_DOCTOR_START: str(start_ticks(os.getpid()) or ""),
                    ENV_CONTROL: self.control_path,
                    ENV_PROFILE_TRACE_DIR: self._dir,
                    **self.extra_env,
                },
                stdin=subprocess.DEVNULL if self.own_terminal else None,
                stdout=self.output,
                stderr=self.output,
                start_new_session=self.own_terminal,
            )
        except FileNotFoundError:
            self.close()
            raise LaunchError(
                127, _("command not found: {command}").format(command=self.command[0])
            ) from None
        except PermissionError:
            self.close()
            raise LaunchError(
                126, _("permission denied: {command}").format(command=self.command[0])
            ) from None
        except OSError as exc:
            self.close()
            raise LaunchError(
                126,
                _("cannot run {command}: {why}").format(command=self.command[0], why=exc.strerror),
            ) from None
        self.host = HostReader(self.proc.pid)
        try:
            self.session_id = self.store.create_session(self.timeline, os.getcwd(), self.proc.pid)
        except StoreError as exc:  # just started, not recorded: stopped, not left unseen
            self.proc.kill()
            self.proc.wait()
            self.close()
            raise LaunchError(2, str(exc)) from None
        if peak is not None:
            self.timeline.cpu_peak = peak
            self.store.add(self.session_id, "cpu_peak", time.monotonic_ns(), encode(peak))
        if self.output_log is not None:
            self.store.set_output(self.session_id, self.output_log.path)
            self._note_output()
        rendezvous = of_command(self.command) if self.exchange_ranks else None
        if rendezvous is not None:
            host = self.timeline.hostname or "?"
            self.exchange = RankExchange(rendezvous, f"{host}/{os.getpid()}", host)

    # -- the loop's parts (source.Recorder.run) -----------------------------------------------

    def _handles(self) -> list[tuple[Any, str]]:
        return [(self.server, "probe")]

    def _readable(self, tag: str) -> None:
        self._drain()

    def _read_counts(self) -> None:
        self._read_pages()

    def _job_ended(self) -> bool:
        assert self.proc is not None
        return self.proc.poll() is not None

    def _time_is_up(self) -> None:
        self.stop("max-seconds")

    def _wrap_up(self) -> int | None:
        assert self.proc is not None
        self.proc.wait()
        self._drain()
        self._read_pages()
        if self.lines is not None:  # the samples since the last whole chunk
            self._keep_lines(self.lines.finish())
        self._keep_traces(self.captures.finish(self.timeline.facts, CAPTURE_WAIT_S), self._dir)
        return self.proc.returncode

    def _drain(self) -> None:
        self._drain_probe(self.server)

    def _tick(self) -> None:
        assert self.host is not None
        self.host.step_pids = set(self.timeline.steps)
        self._read_host_and_gpus()
        self._read_pages()
        if self.output_log is not None and self.output_log.rotate_if_full():
            self._note_output()
        if self.lines is not None:
            self._sample_lines(self.lines)
        self._keep_traces(self.captures.poll(self.timeline.facts), self._dir)
        if self.auto_profile and time.monotonic() - self._auto_checked >= AUTO_CHECK_S:
            self._maybe_capture()
        if self.exchange is not None and time.monotonic() - self._exchanged >= EXCHANGE_S:
            self._exchange_ranks(self.exchange)
        if not self.server.still_bound():  # removed by someone: made again
            assert self.session_id is not None
            self._handles_changed = True
            t = self.server.remade[-1]
            self.timeline.socket_remade.append(t)
            self.store.add(self.session_id, "socket", t, {"t": t})
            self._drain()
        self._commit()

    def _exchange_ranks(self, exchange: RankExchange) -> None:
        """Send this node's ranks, take in the other nodes' (a record when they change)."""
        assert self.session_id is not None
        self._exchanged = time.monotonic()
        window = self.timeline.window(max_steps=EXCHANGE_STEPS, max_samples=1)
        counts = self.timeline.counted_steps()  # exact, not the recent rows measured
        exchange.publish(
            [{**s.as_dict(), "steps": counts.get(s.pid, s.steps)} for s in rank_summaries(window)]
        )
        for node, sent in exchange.received().items():
            try:
                ranks = tuple(RankSummary.from_dict(r) for r in sent.get("ranks", ()))
            except (KeyError, TypeError, ValueError):
                continue  # not a doctor's summary: left out
            if ranks and self.timeline.remote_ranks.get(node) != ranks:
                self.timeline.remote_ranks[node] = ranks
                record = {"node": node, "ranks": [r.as_dict() for r in ranks]}
                self.store.add(self.session_id, "ranks", time.monotonic_ns(), record)

    def _sample_lines(self, sampler: HotspotSampler) -> None:
        """Begins once the main process is past its warm-up steps; a chunk when one ends."""
        assert self.session_id is not None
        if not sampler.started:
            main = self.timeline.main_pid()
            if main is not None and self.timeline.counted_steps().get(main, 0) >= WARMUP_STEPS:
                sampler.begin(main)
        self._keep_lines(sampler.poll())

    def _keep_lines(self, chunk: HotspotChunk | None) -> None:
        assert self.session_id is not None
        if chunk is not None:
            self.timeline.hotspots.append(chunk)
            self.store.add(self.session_id, "hotspots", chunk.t_end_mono_ns, encode(chunk))

    def _maybe_capture(self) -> None:
        """A capture by the doctor itself (diagnosis/auto_profile.py), once."""
        assert self.session_id is not None
        self._auto_checked = time.monotonic()
        why = should_capture(self.timeline.window(max_steps=2000, max_samples=60))
        if why is None:
            return
        self.auto_profile = False
        self.request_profile(AUTO_STEPS)
        t = time.monotonic_ns()
        self.timeline.auto_profile = (t, why)
        self.store.add(self.session_id, "auto_profile", t, {"t": t, "why": why})

    def _note_output(self) -> None:
        """Where the job's output is kept, and how often it was rotated (a record)."""
        assert self.session_id is not None and self.output_log is not None
        log = self.output_log
        self.timeline.output_log, self.timeline.output_rotations = str(log.path), log.rotations
        record = {"path": str(log.path), "rotations": log.rotations}
        self.store.add(self.session_id, "output", time.monotonic_ns(), record)

    def _read_pages(self) -> None:
        self._read_probe_pages(self._dir)

    # -- stopping -------------------------------------------------------------------------

    def stop(self, reason: EndedBy = "max-seconds") -> None:
        """Ask the job to stop: SIGINT now, SIGTERM and SIGKILL later if it lingers."""
        if self._stop_started is not None or self.proc is None or self.proc.poll() is not None:
            return
        self._stop_started = time.monotonic()
        self._stop_reason = reason
        self.signal_job(signal.SIGINT)

    def signal_job(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def request_profile(self, steps: int) -> None:
        ask_for_profile(self.control_path, steps)

    def _escalate(self) -> None:
        if self._stop_started is None or self._escalation >= len(STOP_ESCALATION_S):
            return
        after, sig = STOP_ESCALATION_S[self._escalation]
        if time.monotonic() - self._stop_started >= after:
            self._escalation += 1
            self.signal_job(sig)

    def _finish(self, ended: bool, returncode: int | None) -> JobExit:
        assert self.session_id is not None
        self.timeline.end_mono_ns = time.monotonic_ns()
        self.timeline.bad_messages = self.server.bad_messages
        if self.server.bad_messages:
            self.store.add(
                self.session_id, "bad_messages", time.monotonic_ns(), self.server.bad_messages
            )
        job_exit = (
            classify_exit(
                returncode, self.timeline.ends, self.timeline.main_pid(), self._stop_reason
            )
            if ended and returncode is not None
            else JobExit(exit_code=None, ended_by="detached")
        )
        self.timeline.exit = job_exit
        return job_exit

    def close(self) -> None:
        if self.lines is not None:
            self.lines.close()
        if self.exchange is not None:
            self.exchange.close()
            self.exchange = None
        self.server.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def classify_exit(
    returncode: int,
    ends: dict[int, dict[str, Any]],
    main_pid: int | None,
    stop_reason: EndedBy | None,
) -> JobExit:
    sig = -returncode if returncode < 0 else None
    exit_code = 128 + sig if sig else returncode
    end = ends.get(main_pid) if main_pid is not None else None
    failed = [e for e in ends.values() if e.get("exception_type")]
    end = end if end and end.get("exception_type") else (failed[0] if failed else None)
    ended_by: EndedBy
    if stop_reason is not None:
        ended_by = stop_reason
    elif any(e.get("oom") for e in ends.values()):
        ended_by = "oom"
        end = next(e for e in ends.values() if e.get("oom"))
    elif sig:
        ended_by = "signal"
    elif end is not None and returncode != 0:
        ended_by = "exception"
    else:
        ended_by = "exit"
    return JobExit(
        exit_code=exit_code,
        ended_by=ended_by,
        signal=sig,
        exception_type=end.get("exception_type") if end else None,
        exception_message=end.get("exception_message") if end else None,
    )
