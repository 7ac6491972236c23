"""The screens over the dashboard: a finding's remedies, help, and the quit question."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Static

from gpudoctor import display, guide
from gpudoctor.diagnosis.gpu_timeline import RankTimeline
from gpudoctor.diagnosis.hotspots import Hotspots, whose_words
from gpudoctor.diagnosis.ranks import RankMeasure
from gpudoctor.diagnosis.remedies import CATALOGUE
from gpudoctor.i18n import _
from gpudoctor.model import Finding
from gpudoctor.prescribe.how import fitted_snippet, how
from gpudoctor.prescribe.predict import Prediction
from gpudoctor.redact import redact_text
from gpudoctor.report.gpu_timeline import rank_dict, timeline_words
from gpudoctor.terminal import OutputLine
from gpudoctor.tui.widgets import styled
from gpudoctor.units import clip, ms_text, pad


class FindingScreen(Screen[None]):
    """One finding: its evidence, and each remedy with its guide section, snippet and
    how a rerun would apply it."""

    BINDINGS = [
        Binding("escape,q,backspace", "app.pop_screen", _("Back")),
        Binding("t", "trial", _("Trial: rerun with remedy 1")),
        Binding("g", "guide", _("Guide")),
    ]

    def action_guide(self) -> None:
        """The guide's sections the remedies cite, in the remedies' order."""
        cited = dict.fromkeys(CATALOGUE[r].guide_section for r in self.finding.remedies)
        self.app.push_screen(GuideScreen(tuple(cited), self.lang))

    def action_trial(self) -> None:
        if self.finding.remedies:
            self.app.request_trial(self.finding.remedies[0])  # type: ignore[attr-defined]

    def __init__(
        self,
        finding: Finding,
        facts: dict[str, Any],
        cores: int,
        lang: str,
        spots: Hotspots | None = None,
        predicted: Prediction | None = None,
    ) -> None:
        super().__init__()
        self.finding = finding
        self.predicted = predicted
        self.spots = spots if finding.id in LINE_FINDINGS else None
        self.facts = facts
        self.cores = cores
        self.lang = lang

    def compose(self) -> ComposeResult:
        f = self.finding
        head = Text()
        head.append(
            f"{display.severity_words(f.severity)}  ", display.SEVERITY_STYLE.get(f.severity, "")
        )
        head.append(f"{f.id}: {f.title}\n\n", "bold")
        head.append(f.evidence)
        if f.confidence == "estimated":
            head.append(
                "\n\n"
                + _(
                    "Confidence: estimated (watched from outside: py-spy's samples of the main "
                    "thread stand in for step timings)."
                ),
                "italic",
            )
        if self.predicted is not None and f.remedies:
            head.append(
                "\n\n"
                + _(
                    "Predicted with {remedy}: {span} ({basis}). t measures it with a trial."
                ).format(
                    remedy=f.remedies[0], span=self.predicted.words(), basis=self.predicted.basis
                )
            )
        if self.spots is not None and self.spots.lines:
            head.append(hotspot_text(self.spots))
        with VerticalScroll(id="finding-detail"):
            yield Static(head, id="finding-head")
            for n, rid in enumerate(f.remedies, 1):
                remedy = CATALOGUE[rid]
                text = Text()
                title = remedy.title.get(self.lang) or remedy.title["en"]
                explanation = remedy.explanation.get(self.lang) or remedy.explanation["en"]
                text.append(f"{n}. {title}", "bold")
                text.append(
                    "  "
                    + _("[{id}; guide: {section}]").format(id=rid, section=remedy.guide_section)
                    + "\n",
                    "dim",
                )
                text.append(explanation + "\n")
                text.append(_("On a rerun: ") + how(rid, self.facts, self.cores, self.lang))
                if remedy.snippet:  # with this job's values, as the advice above
                    snippet = fitted_snippet(rid, self.facts, self.cores)
                    text.append("\n\n" + snippet, "green")
                yield Static(text, classes="remedy")
        yield Footer()


class GuideScreen(Screen[None]):
    """Sections of the project's guide (gpudoctor/guide/), scrolled, wrapped to the
    terminal."""

    BINDINGS = [Binding("escape,q,backspace,g", "app.pop_screen", _("Back"))]

    def __init__(self, section_ids: tuple[str, ...], lang: str) -> None:
        super().__init__()
        self.section_ids = section_ids
        self.lang = lang

    def compose(self) -> ComposeResult:
        # Markdown's parser (markdown-it, pygments: 3.4 MB) loads when a guide is read,
        # not in every doctor (its peak memory: bench/RESULTS.md)
        from rich.markdown import Markdown

        with VerticalScroll(id="guide"):
            for sid in self.section_ids:
                s = guide.section(sid, self.lang) or guide.section(sid, "en")
                if s is not None:
                    yield Static(Markdown(f"## [{s.id}] {s.title}\n\n{s.body}"), classes="guide")
        yield Footer()


# Findings about the time outside the model: their screen lists the lines it goes to.
LINE_FINDINGS = ("input-bound", "slow-storage", "cpu-saturated")


def hotspot_text(spots: Hotspots) -> Text:
    """The lines of the user's code, each with its share, state and source line."""
    text = Text()
    text.append(
        "\n\n"
        + _(
            "Where the time outside the model goes (py-spy, {samples} samples of the main thread):"
        ).format(samples=spots.main_samples),
        "bold",
    )
    for h in spots.lines:
        text.append(f"\n{h.share:>4.0%} ", "bold")
        text.append(whose_words(h.where, h.state) + "  ")
        text.append(f"{h.place}", "cyan")
        text.append(_(" in {function}").format(function=h.function))
        if h.code:
            text.append(f"\n        {redact_text(h.code)}", "green")
    return text


# The help: (key or panel, what it is); rows wrap to the terminal's width.
HELP_PANELS = (
    (
        "GPU",
        _(
            "nvidia-smi's figures per GPU, a utilisation history, throttle reasons, the "
            "GPU processes (the job's own marked)"
        ),
    ),
    (
        _("Host"),
        _(
            "CPU per core, load, iowait, memory, swap, disk and network rates; what other "
            "processes keep busy"
        ),
    ),
    (
        _("Job"),
        _(
            "steps, step time p50/p90 and its history, samples/s, where a step goes (D data "
            "wait, F forward, B backward, O optimizer), DataLoader workers"
        ),
    ),
    (_("Output"), _("the tail of the job's own output (also in the log file)")),
    (_("Findings"), _("ranked by severity and estimated gain: Enter opens the remedies")),
)
HELP_KEYS = (
    ("up/down, tab", _("move between findings and panels")),
    (
        "enter",
        _(
            "open the highlighted finding; there, g opens the guide's sections its "
            "remedies cite, and t closes the app and runs the trial of its first remedy "
            "(gpudoctor trial --apply REMEDY)"
        ),
    ),
    ("?", _("this help (up/down or the mouse wheel scroll it)")),
    ("ctrl+p", _("the command palette")),
    ("o", _("the job's output, full screen")),
    (
        "r",
        _(
            "a distributed job's ranks: step p50, data wait, own work, the wait for the "
            "other ranks, the GPU util of each rank's device"
        ),
    ),
    ("p", _("torch.profiler over the next 20 steps: the top operators")),
    (
        "h",
        _(
            "the run over time: step time, throughput, data wait, where a step goes, GPU "
            "and CPU; 1 the last minute, 2 ten minutes, 3 the whole run; numbered lines "
            "mark where findings were first seen, profiles, out-of-memory errors, the end "
            "(a terminal of 40 rows or more keeps a strip of them on the main screen)"
        ),
    ),
    (
        "q",
        _(
            "quit: asks whether to stop the job (s) or leave it running (l); a watched job "
            "is always left running"
        ),
    ),
    (_("replay only"), _("left/right 5 s, pgup/pgdn 60 s, home/end")),
)


HelpContent = tuple[str, tuple[tuple[str, tuple[tuple[str, str], ...]], ...]]
DOCTOR_HELP: HelpContent = (
    _("gpudoctor: the dashboard of a training run"),
    ((_("Panels"), HELP_PANELS), (_("Keys"), HELP_KEYS)),
)


def help_text(content: HelpContent = DOCTOR_HELP) -> Group:
    """The help as wrapped rows: the first column as wide as its longest key."""
    heading, groups = content
    parts: list[Any] = [Text(heading + "\n", "bold")]
    for title, rows in groups:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, style="bold")
        grid.add_column(ratio=1)
        for key, what in rows:
            grid.add_row(key, what)
        parts += [Text(title, "bold underline"), grid, Text("")]
    return Group(*parts)


class RanksScreen(Screen[None]):
    """A distributed job's ranks, one line each (the slowest first when they are more
    than the screen holds)."""

    BINDINGS = [Binding("escape,q,r", "app.pop_screen", _("Back"))]

    def __init__(self, ranks: tuple[RankMeasure, ...]) -> None:
        super().__init__()
        self.ranks = ranks

    def compose(self) -> ComposeResult:
        if not self.ranks:
            body = Text(_("one process: no ranks to compare (a distributed job shows each here)"))
        else:
            room = max(3, (self.app.size.height or 24) - 6)
            lines = [display.rank_header(), *display.rank_rows(self.ranks, room)]
            body = Text("\n".join(lines))
        with Vertical(id="ranks-box"):
            yield Static(Text(_("ranks ({n})").format(n=len(self.ranks)), "bold"))
            yield Static(body, id="ranks-table")
        yield Footer()


class OutputScreen(Screen[None]):
    """The tail of the job's output, with the room of the whole terminal."""

    BINDINGS = [Binding("escape,q,o", "app.pop_screen", _("Back"))]

    def __init__(self, lines: tuple[OutputLine, ...], path: str | None) -> None:
        super().__init__()
        self.lines = lines
        self.path = path

    def compose(self) -> ComposeResult:
        where = (
            _("the job's output ({path})").format(path=self.path)
            if self.path
            else _("the job's output")
        )
        body = styled(self.lines) if self.lines else Text(_("(nothing yet)"))
        with VerticalScroll(id="output-full"):
            yield Static(Text(where, "bold"))
            yield Static(body)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).scroll_end(animate=False)


class ProfileScreen(Screen[None]):
    """torch.profiler's top operators over a few steps of the live job (asked with `p`)."""

    BINDINGS = [Binding("escape,q,p", "app.pop_screen", _("Back"))]

    def __init__(self, steps: int, after_capture: int = 0) -> None:
        super().__init__()
        self.steps = steps
        self.after_capture = after_capture  # shows the first capture newer than this

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="output-full"):
            yield Static(
                Text(
                    _("capturing {steps} steps with torch.profiler…").format(steps=self.steps),
                    "dim",
                ),
                id="profile-table",
            )
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(0.5, self.refresh_table)

    def refresh_table(self) -> None:
        snapshot = getattr(self.app, "snapshot", None)
        facts = snapshot.facts if snapshot is not None else {}
        profile = facts.get("profile")
        status = facts.get("profile_status") or {}
        if not profile or status.get("state") == "running":
            return
        if int(profile.get("capture", 0)) <= self.after_capture:
            return
        timeline = snapshot.gpu_timeline if snapshot is not None else None
        # the trace's path once: the kept one, under the timeline read from it (the
        # probe's copy is in the run's folder, gone when the doctor ends)
        width = self.query_one("#output-full").content_region.width
        text = profile_text(profile, width, trace=timeline is None or not timeline.path)
        if timeline is not None:
            text.append("\n\n")
            text.append(timeline_text(timeline))
        self.query_one("#profile-table", Static).update(text)


def profile_text(profile: dict[str, Any], width: int = 0, trace: bool = True) -> Text:
    """The top operators, each on one line of `width` columns (a long name cut with `…`,
    never wrapped under the numbers' columns)."""
    device = profile.get("sort") == "device"
    key = "self_device_time_total_us" if device else "self_cpu_time_total_us"
    text = Text()
    title = (
        _("torch.profiler over {steps} steps: top operators by self device time")
        if device
        else _("torch.profiler over {steps} steps: top operators by self CPU time")
    )
    text.append(title.format(steps=profile.get("steps")) + "\n\n", "bold")
    head = (pad(_("self us"), 12, right=True), pad(_("calls"), 7, right=True), _("operator"))
    text.append("  ".join(head) + "\n", "bold")
    room = width - 23 if width > 33 else 1000  # past the two number columns
    for op in profile.get("operators", []):
        text.append(f"{op[key]:>12,.0f}  {op['calls']:>7}  {clip(op['name'], room)}\n")
    if trace and profile.get("trace"):
        text.append("\n" + _("trace: {path}").format(path=profile["trace"]), "dim")
    return text


def timeline_text(t: RankTimeline) -> Text:
    """The capture read as the GPU's timeline: where its time went, one step drawn (each
    cell a slice of the step, the taller the busier), the top kernels."""
    text = Text()
    text.append(_("The GPU's timeline") + "\n", "bold")
    text.append(timeline_words(rank_dict(t)) + "\n")
    if t.picture:
        text.append(_("one step on the GPU:") + " ")
        text.append("▕" + "".join(" ▁▂▃▄▅▆▇█"[v] for v in t.picture) + "▏\n", "cyan")
    for k in t.top_kernels[:5]:
        text.append(f"  {k.share_pct:5.1f}%  {ms_text(k.time_us * 1e-3):>9}  {clip(k.name, 60)}\n")
    if t.path:
        text.append(_("trace: {path}").format(path=t.path), "dim")
    return text


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", _("Close"))]

    def __init__(self, content: HelpContent = DOCTOR_HELP) -> None:
        super().__init__()
        self.content = content

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            with VerticalScroll(id="help-scroll"):
                yield Static(help_text(self.content), id="help-text")
            yield Footer()


class InjectScreen(ModalScreen[bool]):
    """Asked before the probe goes into a job the doctor watches (`i`)."""

    BINDINGS = [
        Binding("y", "choose(True)", _("Load the probe")),
        Binding("escape,n", "choose(False)", _("Cancel")),
    ]

    def __init__(self, pid: int, ranks: int = 0, slow: bool = False) -> None:
        super().__init__()
        self.pid = pid
        self.ranks = ranks  # a torchrun job's local ranks: the probe goes into each
        self.slow = slow  # by lldb: it stops the job while it reads every library

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-box"):
            if self.ranks:
                yield Static(
                    _("A torchrun job: the probe goes into each of its {n} local ranks.").format(
                        n=self.ranks
                    )
                )
            stop = (
                _(
                    "The doctor stops the job for about two seconds to load it (lldb reads "
                    "every library the job has loaded first)."
                )
                if self.slow
                else _("The doctor stops the job's main thread for under half a second to load it.")
            )
            yield Static(
                _(
                    "Load gpudoctor's probe into pid {pid}?\n\n"
                    "{stop} From its next "
                    "step the doctor counts every step and times its phases, syncs and "
                    "copies, as gpudoctor run does, and p captures a profile. Leaving (q) "
                    "removes the probe; the job goes on.\n\n"
                    "  y  load it\n"
                    "  esc  cancel"
                ).format(pid=self.pid, stop=stop),
                id="quit-text",
            )
            yield Footer()

    def action_choose(self, choice: bool) -> None:
        self.dismiss(choice)


class QuitScreen(ModalScreen[str]):
    """Asked when the job is still running: stop it, or leave it running."""

    BINDINGS = [
        Binding("s", "choose('stop')", _("Stop the job and quit")),
        Binding("ctrl+c", "choose('stop')", _("Stop the job and quit"), show=False),
        Binding("l", "choose('leave')", _("Leave it running and quit")),
        Binding("escape,c", "choose('cancel')", _("Cancel")),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-box"):
            yield Static(
                _(
                    "The job is still running.\n\n"
                    "  s  stop the job (Ctrl-C to it) and quit; Ctrl-C again does the same\n"
                    "  l  leave it running and quit: the doctor stops recording it (its output "
                    "stays in the log; gpudoctor watch --pid looks at it again)\n"
                    "  esc  cancel"
                ),
                id="quit-text",
            )
            yield Footer()

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)
