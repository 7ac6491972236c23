"""The gpudoctor app. Its data comes from a source: a live session run in a thread
worker, or a recorded one moved through in time. Built by `make_live_app` and
`make_replay_app`, so tests build the same app over a replayed source."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from textual import events, on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Header, OptionList

from gpudoctor.i18n import _
from gpudoctor.model import JobExit
from gpudoctor.report.render import ended_words
from gpudoctor.series import POINTS, RunSeries, first_seen, run_series
from gpudoctor.snapshot import Snapshot, take, timeline_span
from gpudoctor.timeline import Timeline
from gpudoctor.tui.messages import JobExited, PanelResized, SessionFailed, SnapshotReady
from gpudoctor.tui.plots import RANGES, STRIP_RANGE_S, HistoryStrip, PlotsScreen
from gpudoctor.tui.screens import (
    FindingScreen,
    HelpScreen,
    InjectScreen,
    OutputScreen,
    ProfileScreen,
    QuitScreen,
    RanksScreen,
)
from gpudoctor.tui.widgets import FindingsPanel, GpuPanel, HostPanel, JobPanel, OutputPanel

if TYPE_CHECKING:  # the app only follows what it is given: no need to load the jobs
    from gpudoctor.app.follow import Follower

REPLAY_STEP_S = 5.0
TALL_ROWS = 40  # from this many rows the findings panel is as tall as its content,
# and the main screen shows plots of the run (HistoryStrip)
WIDE_COLUMNS = 160  # from this many columns the main screen's plots are three
MIN_PANEL_ROWS = 5  # the host and job panels keep at least this many rows
# the main screen's strip of plots: its height at least (a plot's axes, title, legend
# and nine rows of data), at most, and the output's rows it leaves before it grows (the
# output is a tail, `o` shows it all: a tall screen's rows go to the plots and findings)
STRIP_ROWS, STRIP_MAX_ROWS, OUTPUT_ROWS = 12, 24, 6
REPLAY_PAGE_S = 60.0


class DoctorApp(App[JobExit | None]):
    CSS_PATH = "doctor.tcss"
    TITLE = "gpudoctor"
    BINDINGS = [
        # Textual's own command palette key, its words in the person's language
        Binding("ctrl+p", "command_palette", _("palette"), show=False, priority=True),
        Binding("q", "quit_doctor", _("Quit")),
        # Ctrl-C is the doctor's quit too (it asks about a running job, as q does)
        Binding("ctrl+c", "quit_doctor", _("Quit"), show=False, priority=True),
        Binding("question_mark", "help", _("Help")),
        Binding("enter", "open_finding", _("Remedies"), show=True),
        Binding("o", "output", _("Output")),
        Binding("r", "ranks", _("Ranks"), show=False),
        Binding("h", "plots", _("History")),
    ]

    def __init__(self, lang: str = "en") -> None:
        super().__init__()
        self.lang = lang
        self._panel_rows = 0  # the height given to the host and job panels
        self._strip_rows = STRIP_ROWS  # the height given to the strip of plots
        self.snapshot: Snapshot | None = None
        self.job_exit: JobExit | None = None
        # `t` on a finding's screen: the remedy to trial once the app has closed (the
        # command line runs `gpudoctor trial --apply REMEDY` over the same command)
        self.trial_request: str | None = None
        self.plots: PlotsScreen | None = None  # the plots screen, while it is open
        self.plot_range = len(RANGES) - 1  # the stretch it shows (the whole run at first)
        self.tall = False  # a tall terminal: findings as tall as they need, a strip of plots
        self._hidden = False  # snapshots came while another screen hid the main one
        self._watching_screens = False  # told when the screen changes

    def request_trial(self, remedy: str) -> None:
        self.trial_request = remedy
        self.exit(self.job_exit)

    def compose(self) -> ComposeResult:
        yield Header()
        yield GpuPanel(id="gpu-panel")
        # host and job side by side, as tall as the taller's content; the output below
        # them across the screen gets the rows they leave (empty host rows took them)
        with Horizontal(id="panels"):
            yield HostPanel(id="host-panel")
            yield JobPanel(id="job-panel")
        yield HistoryStrip(id="history-strip")
        yield OutputPanel(id="output-panel")
        findings = FindingsPanel(id="findings-panel")
        findings.lang = self.lang
        yield findings
        yield Footer()

    def on_mount(self) -> None:
        """NO_COLOR is honoured by Textual itself (App.no_color turns the output
        monochrome); the main screen is brought up to date when it shows again."""
        # once: Textual calls every class's on_mount, and the apps below call this too
        if not self._watching_screens:
            self._watching_screens = True
            self.screen_change_signal.subscribe(self, self._screen_changed)

    def _main_hidden(self) -> bool:
        """Another whole screen (plots, a finding, the output...) hides the main one: a
        dialog (ModalScreen) leaves it in sight."""
        return len(self.screen_stack) > 1 and not isinstance(self.screen, ModalScreen)

    def _screen_changed(self, _screen: Screen[Any]) -> None:
        if self._hidden and not self._main_hidden() and self.snapshot is not None:
            self.show(self.snapshot)

    def on_resize(self, event: events.Resize) -> None:
        # the event's size: the app's own is updated after this handler runs
        # the GPU panel's layout follows the screen's height, which may change alone
        self.call_after_refresh(self.query_one(GpuPanel).rerender)
        # the findings as tall as they need, up to half of a tall screen and 30% of a
        # short one, the output the rest: a short screen's fixed share kept empty rows
        # under "no findings yet" while the output beside a busy machine (the host
        # panel's "others" line) was cut to one line
        self.tall = tall = event.size.height >= TALL_ROWS
        findings = self.query_one(FindingsPanel)
        findings.styles.max_height = "50%" if tall else "30%"
        findings.show_actions(tall, self.snapshot)
        strip = self.query_one(HistoryStrip)
        strip.display = tall
        strip.set_class(event.size.width >= WIDE_COLUMNS, "wide")
        self.want_plots(self.plot_span())
        self.call_after_refresh(self._fit_panels)

    # -- plots -------------------------------------------------------------------------

    def plot_span(self) -> float | None:
        """The stretch the plots shown need (seconds, inf: all), None when none shows."""
        if self.plots is not None:
            return RANGES[self.plot_range][1]
        return STRIP_RANGE_S if self.tall else None

    def want_plots(self, span_s: float | None) -> None:
        """Snapshots carry the run over this stretch from now on (the source's part)."""

    def action_plots(self) -> None:
        self.plots = PlotsScreen(self.snapshot.series if self.snapshot else None, self.plot_range)
        self.push_screen(self.plots, lambda _: self._plots_closed())
        self.want_plots(self.plot_span())

    def set_plot_range(self, index: int) -> None:
        self.plot_range = index
        self.want_plots(self.plot_span())

    def _plots_closed(self) -> None:
        self.plots = None
        self.want_plots(self.plot_span())

    # -- snapshots down ------------------------------------------------------------------

    @on(SnapshotReady)
    def _on_snapshot(self, message: SnapshotReady) -> None:
        # one snapshot per session tick: --interval sets both, and so caps the repaints
        self.show(message.snapshot)

    def show(self, snapshot: Snapshot) -> None:
        if snapshot.store_trouble and not (self.snapshot and self.snapshot.store_trouble):
            self.notify(
                _(
                    "cannot write the session store ({trouble}): the records are kept in "
                    "memory and written when it can be"
                ).format(trouble=snapshot.store_trouble),
                severity="warning",
                timeout=8,
            )
        self.snapshot = snapshot
        if self.plots is not None:
            if self.plots.is_mounted:
                self.plots.draw(snapshot.series)
            else:  # pushed, not yet mounted: it draws these when it mounts
                self.plots.series = snapshot.series
        self.sub_title = self.status_words(snapshot)
        # the main screen's panels and plots are built again only when it is in sight:
        # behind the plots screen they cost the doctor of a fast loop about 0.9% of a core
        # (bench/RESULTS.md, "The plots screen and the probe's shorter rows")
        self._hidden = self._main_hidden()
        if self._hidden:
            return
        for panel in (GpuPanel, HostPanel, JobPanel, OutputPanel):
            self.query_one(panel).snapshot = snapshot
        self.query_one(FindingsPanel).show(snapshot)
        strip = self.query_one(HistoryStrip)
        if strip.display:
            strip.draw(snapshot.series)
        self.call_after_refresh(self._fit_panels)  # with the other panels laid out

    @on(PanelResized)
    def _on_panel_resized(self) -> None:
        # a fit made before the layout that shrank the findings (a replay sought to its
        # start: "no findings yet") saw their old height and hid the output: fitted again
        if not self._main_hidden():
            self.call_after_refresh(self._fit_panels)

    def _fit_panels(self) -> None:
        """Host and job as tall as the taller one's content (a layout only when that
        changes): neither keeps empty rows beside a short neighbour's, the output gets
        the rest, or the panels do when it is too little for the output."""
        rows = max(self.query_one(HostPanel).lines, self.query_one(JobPanel).lines) + 2
        # never more than the screen leaves them (the output hides first): a short
        # screen crops their last lines rather than scroll the whole screen
        others = (GpuPanel, FindingsPanel, HistoryStrip, Header, Footer)
        room = self.size.height - sum(self.query_one(w).outer_size.height for w in others)
        rows = min(rows, max(MIN_PANEL_ROWS, room))
        # a tall screen's strip of plots takes what the output would have past
        # OUTPUT_ROWS (the output is a tail: o shows it all), up to STRIP_MAX_ROWS
        strip = self.query_one(HistoryStrip)
        if strip.display:
            base = room + strip.outer_size.height - STRIP_ROWS  # the output's, strip at least
            height = min(STRIP_MAX_ROWS, STRIP_ROWS + max(0, base - rows - OUTPUT_ROWS))
            if height != self._strip_rows:
                self._strip_rows = height
                strip.styles.height = height
            room = base + STRIP_ROWS - height
        # the output with fewer than three rows (its border and one line) is left out,
        # not kept as a strip that pushes the findings off the screen (o shows it); the
        # panels take its rows then, not a blank band above the footer
        output = self.query_one(OutputPanel)
        fits = room - rows >= 3
        if not fits:
            rows = max(MIN_PANEL_ROWS, room)
        if rows > 2 and rows != self._panel_rows:
            self._panel_rows = rows
            self.query_one("#panels").styles.height = rows
        if output.display != fits:
            output.display = fits

    def status_words(self, s: Snapshot) -> str:
        return f"{'running' if s.running else 'ended'} · {s.steps_total} steps"

    # -- actions -------------------------------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_output(self) -> None:
        s = self.snapshot
        self.push_screen(OutputScreen(s.output_tail if s else (), s.output_path if s else None))

    def action_ranks(self) -> None:
        s = self.snapshot
        self.push_screen(RanksScreen(s.ranks if s else ()))

    def action_open_finding(self) -> None:
        panel = self.query_one(FindingsPanel)
        index = panel.highlighted if panel.highlighted is not None else 0
        if panel.option_count and not panel.get_option_at_index(index).disabled:
            self._open(str(panel.get_option_at_index(index).id))

    @on(OptionList.OptionSelected, "#findings-panel")
    def _on_finding_selected(self, event: OptionList.OptionSelected) -> None:
        self._open(str(event.option.id))

    def _open(self, finding_id: str) -> None:
        s = self.snapshot
        finding = next((f for f in s.findings if f.id == finding_id), None) if s else None
        if s is None or finding is None:
            return
        predicted = s.predictions.get(finding.id)
        self.push_screen(
            FindingScreen(finding, s.facts, s.cores_allowed, self.lang, s.hotspots, predicted)
        )

    def action_quit_doctor(self) -> None:
        self.exit(self.job_exit)


class LiveApp(DoctorApp):
    """A job followed live (launched, watched, or recorded by another doctor and viewed
    here): its loop runs in a thread of its own (app/follow.py) that outlives the app."""

    BINDINGS = [Binding("p", "profile", _("Profile")), Binding("i", "inject", _("Inject probe"))]
    PROFILE_STEPS = 20

    def __init__(self, follower: Follower, viewing: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.follower = follower
        self.source = follower.source
        self.viewing = viewing  # attached to this session (another doctor records it)
        self.quitting = False
        self.hung_up = False  # the terminal went away: closed, the recording goes on
        self._inject_said = False
        self._event_loop: asyncio.AbstractEventLoop | None = None

    def on_mount(self) -> None:
        super().on_mount()
        self._event_loop = asyncio.get_running_loop()
        self.follower.listen(self)
        self.follower.start()

    # -- from the loop's thread (a Listener of app/follow.py) ---------------------------

    def on_snapshot(self, snapshot: Snapshot) -> None:
        self.post_message(SnapshotReady(snapshot))

    def want_plots(self, span_s: float | None) -> None:
        self.follower.plot_s = span_s  # the loop's next tick draws them

    def on_end(self, job_exit: JobExit | None, error: str | None, snapshot: Snapshot) -> None:
        if error is not None or job_exit is None:
            self.post_message(SessionFailed(error or _("the loop ended without an end")))
        else:
            self.post_message(JobExited(job_exit, snapshot))

    # -- from a signal handler (the main thread, inside the event loop) ------------------

    def hang_up(self) -> None:
        """The terminal went away: close (the loop records on without the app)."""
        if self._event_loop is not None:
            self._event_loop.call_soon_threadsafe(self._hung_up)

    def _hung_up(self) -> None:
        self.hung_up = True
        self.exit(self.job_exit)

    @on(JobExited)
    def _on_job_exited(self, message: JobExited) -> None:
        self.job_exit = message.job_exit
        self.refresh_bindings()  # p goes from the footer
        self.show(message.snapshot)
        if isinstance(self.screen, QuitScreen):
            # asked whether to stop a job that has ended meanwhile: nothing to stop or
            # leave running; the question goes, and the screen says how it ended
            self.screen.dismiss("ended")
        if self.quitting:
            self.exit(self.job_exit)
        # said in the header, where it hides nothing (a toast covered the findings)
        elif self.viewing is not None and message.job_exit.ended_by == "detached":
            gone = str(getattr(self.source, "gone_words", "") or _("no longer recorded"))
            self.sub_title = gone + _(" · q to quit")
        else:
            e = message.job_exit
            words = ended_words(e.ended_by, e.exit_code, self.source.timeline.watched_pid)
            self.sub_title = _("{words} · q to quit").format(words=words)

    @on(SessionFailed)
    def _on_session_failed(self, message: SessionFailed) -> None:
        pid = self.source.job_pid
        self.exit(
            None,
            return_code=3,
            message=_("gpudoctor: the doctor failed: {error} (the job, pid {pid}, goes on)").format(
                error=message.error, pid=pid
            ),
        )

    def request_trial(self, remedy: str) -> None:
        if self.job_exit is None:
            # a trial needs the machine to itself: not while this job still runs
            self.notify(_("the job is still running: stop it (q, s) or let it end, then t"))
            return
        super().request_trial(remedy)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """`p` only where a profile can be taken: a job the doctor launched, running
        (a watched or viewed job, or one that ended, has no p in the footer)."""
        if action == "profile":
            return self.source.can_profile and self.job_exit is None
        if action == "inject":  # a job watched from outside, still running
            return bool(getattr(self.source, "can_inject", False)) and self.job_exit is None
        return True

    def action_inject(self) -> None:
        if not getattr(self.source, "can_inject", False) or self.job_exit is not None:
            return
        ranks = len(getattr(self.source, "torchrun_ranks", ()))
        planned = getattr(self.source, "planned_route", None)
        slow = planned is not None and planned() == "lldb"
        screen = InjectScreen(self.source.job_pid or 0, ranks, slow=slow)
        self.push_screen(screen, self._inject_choice)

    def _inject_choice(self, choice: bool | None) -> None:
        if choice and self.job_exit is None:
            request = getattr(self.source, "request_inject", None)
            if request is not None:
                request()
                self.refresh_bindings()  # i goes from the footer
                self.notify(_("loading the probe…"))

    def show(self, snapshot: Snapshot) -> None:
        super().show(snapshot)
        self._say_inject_outcome()

    def _say_inject_outcome(self) -> None:
        """What became of an inject asked for (the loop did it): said once."""
        outcome = str(getattr(self.source, "inject_outcome", "") or "")
        if not outcome or self._inject_said:
            return
        self._inject_said = True
        self.refresh_bindings()  # p comes to the footer
        if outcome == "attached":
            self.notify(_("the probe is in: steps are counted from the next one"))
        else:
            self.notify(outcome, severity="error", timeout=10)

    def action_profile(self) -> None:
        if not self.source.can_profile or self.job_exit is not None:
            self.notify(_("a profile needs a job launched by the doctor, still running"))
            return
        before = (self.snapshot.facts.get("profile") or {}) if self.snapshot else {}
        self.source.request_profile(self.PROFILE_STEPS)
        self.push_screen(ProfileScreen(self.PROFILE_STEPS, int(before.get("capture", 0))))

    def status_words(self, s: Snapshot) -> str:
        state = _("running") if s.running else _("ended")
        if self.viewing is not None:
            return _("session {session} (recorded by another doctor) · {state}").format(
                session=self.viewing, state=state
            )
        if s.mode == "watch":
            return _("watching pid {pid} · {state}").format(pid=s.job_pid, state=state)
        if s.mode == "inject":
            return _("watching pid {pid}, the probe in · {state}").format(
                pid=s.job_pid, state=state
            )
        # no step count here: a title that changes every tick lays the header out again
        # each second (the job panel has the steps)
        return f"{state} · pid {s.job_pid}"

    def action_quit_doctor(self) -> None:
        if self.job_exit is not None or self.quitting:
            self.exit(self.job_exit)
            return
        if isinstance(self.screen, QuitScreen):  # Ctrl-C twice: stop the job
            self.screen.dismiss("stop")
            return
        if not self.source.can_stop:  # watched or viewed: leaving leaves it running
            self.quitting = True
            self.source.detach()
            self.notify(_("leaving; the job goes on…"))
            return
        self.push_screen(QuitScreen(), self._quit_choice)

    def _quit_choice(self, choice: str | None) -> None:
        if self.job_exit is not None and choice in ("stop", "leave"):
            self.exit(self.job_exit)  # it ended while the question was asked: quit
            return
        if choice == "stop":
            self.quitting = True
            self.source.stop("signal")
            self.notify(_("stopping the job…"))
        elif choice == "leave":
            self.quitting = True
            self.source.detach()


class ReplayApp(DoctorApp):
    """A recorded session, moved through in time."""

    BINDINGS = [
        # priority: the findings list would take home/end/page keys for itself
        Binding("left", "move(-1)", _("-5 s"), priority=True),
        Binding("right", "move(1)", _("+5 s"), priority=True),
        Binding("pageup", "move(-12)", _("-60 s"), show=False, priority=True),
        Binding("pagedown", "move(12)", _("+60 s"), show=False, priority=True),
        Binding("home", "to_start", _("Start"), show=False, priority=True),
        Binding("end", "to_end", _("End"), show=False, priority=True),
    ]

    def __init__(self, timeline: Timeline, session_id: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.timeline = timeline
        self.session_id = session_id
        self.start_ns, self.end_ns = timeline_span(timeline)
        self.cursor_ns = self.end_ns
        self.plot_s: float | None = None
        self._seen: dict[str, float] | None = None  # when each finding was first seen

    def on_mount(self) -> None:
        super().on_mount()
        self._render_at(self.end_ns)

    def _render_at(self, t_ns: int) -> None:
        self.cursor_ns = max(self.start_ns, min(self.end_ns, t_ns))
        at_end = self.cursor_ns >= self.end_ns
        snapshot = take(self.timeline, None, None, None if at_end else self.cursor_ns)
        if self.plot_s is not None:
            snapshot = replace(snapshot, series=self._series(self.plot_s))
        self.show(snapshot)

    def want_plots(self, span_s: float | None) -> None:
        if span_s != self.plot_s:
            self.plot_s = span_s
            if self.snapshot is not None:  # drawn once already (on_mount)
                self._render_at(self.cursor_ns)

    def _series(self, span_s: float) -> RunSeries:
        """The whole recorded run with the replay's position marked, or the stretch
        before the position (the last minute or ten as they were then)."""
        if self._seen is None:
            self._seen = first_seen(self.timeline)
        if math.isinf(span_s):
            since, until = None, None
        else:
            since, until = self.cursor_ns - int(span_s * 1e9), self.cursor_ns
        series = run_series(self.timeline, POINTS, since, until, seen=self._seen)
        series.cursor_s = round((self.cursor_ns - self.start_ns) / 1e9, 1)
        return series

    def status_words(self, s: Snapshot) -> str:
        at = (self.cursor_ns - self.start_ns) / 1e9
        total = (self.end_ns - self.start_ns) / 1e9
        return _("replay of session {session} · {at:.0f} s of {total:.0f} s").format(
            session=self.session_id, at=at, total=total
        )

    def action_move(self, pages: int) -> None:
        self._render_at(self.cursor_ns + int(pages * REPLAY_STEP_S * 1e9))

    def action_to_start(self) -> None:
        self._render_at(self.start_ns)

    def action_to_end(self) -> None:
        self._render_at(self.end_ns)


def make_live_app(follower: Follower, lang: str, viewing: int | None = None) -> LiveApp:
    return LiveApp(follower, viewing, lang=lang)


def make_replay_app(timeline: Timeline, session_id: int, lang: str = "en") -> ReplayApp:
    return ReplayApp(timeline, session_id, lang=lang)


__all__ = ["DoctorApp", "LiveApp", "ReplayApp", "make_live_app", "make_replay_app"]
