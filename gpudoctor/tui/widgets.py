"""The panels. Each renders the snapshot its parent sets on it (attributes down); the
values come ready-made from gpudoctor.display."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.reactive import reactive
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from gpudoctor import display
from gpudoctor.diagnosis.remedies import CATALOGUE
from gpudoctor.i18n import _
from gpudoctor.model import Finding, GpuProcess, GpuSample
from gpudoctor.prescribe.how import how
from gpudoctor.redact import redact_text
from gpudoctor.report.build import gpu_reason_words
from gpudoctor.report.render import ended_words
from gpudoctor.snapshot import Snapshot
from gpudoctor.terminal import OutputLine
from gpudoctor.tui.messages import PanelResized
from gpudoctor.units import cell_width, clip, crop, ms_text, pad, rate_text, wrap_columns


class Panel(Static):
    # A tick repaints the panel only when its text changed (update() does, the reactive
    # itself does not: every snapshot differs), and lays the screen out again only when
    # its number of lines changed (a layout per panel per tick cost a third of the app's
    # CPU; repainting unchanged panels, a quarter of what was left).
    snapshot: reactive[Snapshot | None] = reactive(None, repaint=False)
    _lines = -1
    _shown: Text | None = None

    def watch_snapshot(self, snapshot: Snapshot | None) -> None:
        content = self.render_snapshot(snapshot) if snapshot is not None else Text("waiting…")
        if content == self._shown and self._lines >= 0:
            return  # the same text (a CPU-only GPU panel, a quiet output): no repaint
        self._shown = content
        width = max(1, self.content_region.width or 80)
        lines = sum(max(1, -(-len(line) // width)) for line in content.plain.split("\n"))
        self.update(content, layout=lines != self._lines)
        self._lines = lines

    @property
    def lines(self) -> int:
        """The rows its content takes at its width (0 before the first snapshot)."""
        return max(0, self._lines)

    def on_resize(self) -> None:
        """The layout depends on the room: render again at the new size."""
        self.rerender()
        self.post_message(PanelResized())

    def rerender(self) -> None:
        self._lines = -1
        self._shown = None
        self.watch_snapshot(self.snapshot)

    def render_snapshot(self, s: Snapshot) -> Text:
        raise NotImplementedError


class GpuPanel(Panel):
    """nvidia-smi's layout (two lines a GPU, the processes below) where the room allows;
    on a short terminal or a many-GPU server, one line a GPU, then a few GPUs a line.
    The room is the panel's max-height (doctor.tcss: 30% of the screen)."""

    BORDER_TITLE = _("GPU")
    MAX_SHARE = 0.30  # as doctor.tcss's max-height
    PROC_ROWS = 6

    def room(self) -> int:
        """Lines inside the border: the share of the screen less its header and footer."""
        return max(2, int((self.screen.size.height - 2) * self.MAX_SHARE) - 2)

    def render_snapshot(self, s: Snapshot) -> Text:
        if not s.gpus:
            reason = gpu_reason_words(s.gpu_reason) if s.gpu_reason else _("no GPU readings yet")
            return Text(_("CPU-only mode: {reason}").format(reason=reason), "dim")
        width = (self.size.width or 80) - 4
        room = self.room()
        procs = [p for g in s.gpus for p in g.processes]
        throttled = sum(1 for g in s.gpus if display.throttle_text(g.clock_event_reasons))
        wanted = min(len(procs), self.PROC_ROWS)
        # the richest layout that leaves a row for a process, if there is one
        for lines_per_gpu in (2, 1):
            used = len(s.gpus) * lines_per_gpu + (throttled if lines_per_gpu == 2 else 0)
            rows = min(wanted, room - used - 1)
            if used <= room and (not procs or rows >= 1):
                out = (
                    self._two_lines_each(s, width)
                    if lines_per_gpu == 2
                    else self._one_line_each(s, width)
                )
                return self._processes(out, s, procs, rows, width)
        out = self._packed(s, width)
        rows = min(wanted, room - len(out.plain.split("\n")) - 1)
        return self._processes(out, s, procs, rows, width)

    def _two_lines_each(self, s: Snapshot, width: int) -> Text:
        out = Text()
        for g in s.gpus:
            c, frac = _gpu_row(out, g)
            out.append(pad(clip(c["name"], 24), 24) + " ")
            out.append(f"util {c['util']:>4} ", c["util_band"])
            out.append(f"mem {display.bar(frac, 8)} {c['mem']}", c["mem_band"])
            second = Text("   ")
            second.append(f"{c['power']:<13} ")
            second.append(f"{c['temp']:>4} ", c["temp_band"])
            second.append(f"fan {c['fan']:<4} SM {c['sm_clock']:<8} ")
            if width >= 108:
                second.append(f"PCIe {c['pcie']} ")
            spark = max(0, width - len(second.plain) - 5)
            history = s.gpu_util_history.get(g.index, ())
            second.append(f"util {display.sparkline(history, min(spark, 60), top=100.0)}", "green")
            out.append("\n")
            out.append(second)
            if c["throttle"]:
                out.append(f"\n   {c['throttle']}", "bold red")
        return out

    def _one_line_each(self, s: Snapshot, width: int) -> Text:
        out = Text()
        for g in s.gpus:
            c, frac = _gpu_row(out, g)
            out.append(pad(clip(c["name"].removeprefix("NVIDIA "), 10), 10) + " ")
            out.append(f"util {c['util']:>4} ", c["util_band"])
            out.append(f"mem {display.bar(frac, 4)} {display.gib_pair(g):<11}", c["mem_band"])
            out.append(f"{display.watts(g.power_w):>5} ")
            out.append(f"{c['temp']:>4}", c["temp_band"])
            if width >= 120:  # the room of a wide terminal: what the two-line rows add
                out.append(f" fan {c['fan']:<4} SM {c['sm_clock']:<8}")
            if width >= 160:
                out.append(f" PCIe {c['pcie']}")
            if c["throttle"]:
                out.append(" throttled", "bold red")
            spark = width - len(out.plain.rsplit("\n", 1)[-1]) - 1
            if spark >= 8:
                history = s.gpu_util_history.get(g.index, ())
                out.append(" " + display.sparkline(history, min(spark, 60), top=100.0), "green")
        return out

    def _packed(self, s: Snapshot, width: int) -> Text:
        cell = 27  # "12 util 100% mem 100%  85C" and a space
        per_line = max(1, width // cell)
        out = Text()
        for i, g in enumerate(s.gpus):
            if i % per_line:
                out.append(" ")
            c, frac = _gpu_row(out, g, new_line=i % per_line == 0)
            out.append(f"util {c['util']:>4} ", c["util_band"])
            out.append(f"mem {display.pct(frac * 100 if frac is not None else None):>4} ")
            out.append(f"{c['temp']:>4}", "bold red" if c["throttle"] else c["temp_band"])
        return out

    def _processes(
        self, out: Text, s: Snapshot, procs: list[GpuProcess], rows: int, width: int
    ) -> Text:
        if not procs or rows < 1:
            return out
        shown = (
            ""
            if rows >= len(procs)
            else "  " + _("({n} of {total})").format(n=rows, total=len(procs))
        )
        user, command = pad(_("user"), 10), _("command")
        head = f"\n   {'pid':<8} {user} {'GPU mem':>9} {'SM%':>5}  {command}"
        out.append(head + shown, "bold")
        for p in procs[:rows]:
            mine = p.pid in s.job_gpu_pids
            row = (
                f"\n   {p.pid:<8d} {pad(clip(p.user or '?', 10), 10)} "
                f"{display.mib(p.mem_used_bytes):>9} {display.pct(p.sm_util_pct):>5}  "
            )
            tag = _("<- job ") if mine else ""
            room = max(0, width - len(row) - cell_width(tag))
            command = redact_text(p.command or "")  # anyone's command line: secrets masked
            out.append(row + tag + command[:room], "bold" if mine else "")
        return out


def _gpu_row(out: Text, g: GpuSample, new_line: bool = True) -> tuple[dict[str, str], float | None]:
    """Starts a GPU's cells (on a new line unless told, its index in bold): its
    nvidia-smi fields and the used share of its memory."""
    c = display.gpu_cells(g)
    if out and new_line:
        out.append("\n")
    out.append(f"{c['index']:>2} ", "bold")
    return c, float(c["mem_fraction"]) if c["mem_fraction"] else None


class HostPanel(Panel):
    BORDER_TITLE = _("Host")

    def render_snapshot(self, s: Snapshot) -> Text:
        if s.host is None:
            return Text(_("waiting for the first reading…"), "dim")
        out = Text()
        # six lines besides the cores (load, memory, swap, disk, network) and the border
        rows = max(4, (self.size.height or 10) - 8)
        lines = display.host_lines(s.host, (self.size.width or 40) - 2, rows)
        for i, (line, style) in enumerate(lines):
            if i:
                out.append("\n")
            out.append(line, style)
        return out


class JobPanel(Panel):
    BORDER_TITLE = _("Job")

    def render_snapshot(self, s: Snapshot) -> Text:
        width = max(10, (self.size.width or 60) - 4)
        state = _("running") if s.running else _ended(s)
        out = Text()
        out.append(crop(display.command_words(s.command, width=width), width), "bold")
        self.tooltip = " ".join(s.command)  # the full line
        up = _("up {duration}").format(duration=display.duration(s.up_s))
        if s.mode == "watch" and s.facts.get("stack_sampling") is False:
            # not Python: there are no steps or stacks to read; say so at once
            out.append("\n" + _("watching pid {pid}").format(pid=s.job_pid) + f"  {state}  {up}")
            out.append(
                "\n" + _("not a Python process: its GPU and host use only (no steps, no stacks)"),
                "dim",
            )
            return out
        if s.mode == "watch":
            out.append("\n" + _("watching pid {pid}").format(pid=s.job_pid) + f"  {state}  {up}")
            out.append(
                "\n" + _("from outside: {samples} stack samples").format(samples=s.stack_samples)
            )
            if s.steps_per_s:
                out.append(
                    "  "
                    + _("~{rate:.1f} steps/s (~{step})").format(
                        rate=s.steps_per_s, step=display.ms(s.step_p50_ms)
                    )
                )
            out.append("\n" + _("step times: not timed (estimates from py-spy)"), "dim")
        else:
            line = f"pid {s.job_pid or '-'}  {state}  {up}"
            # one line: the job's age goes before the line would wrap (issue 40, point 10)
            out.append(
                "\n" + (line if cell_width(line) <= width else f"pid {s.job_pid or '-'}  {state}")
            )
            out.append(
                "\n"
                + _("steps {steps}  step p50 {p50} p90 {p90}").format(
                    steps=s.steps_total,
                    p50=display.ms(s.step_p50_ms),
                    p90=display.ms(s.step_p90_ms),
                )
            )
            # the rate leads the plot's line: appended to the line above, it would wrap
            # or not as the numbers move, and each change of height lays the screen out
            rate = ""
            if s.samples_per_s and len(s.ranks) > 1:  # the job's: all its ranks' together
                total = sum(r.samples_per_s or 0.0 for r in s.ranks)
                rate = _("{rate:,.0f} samples/s ({ranks} ranks)").format(
                    rate=total, ranks=len(s.ranks)
                )
                rate += "  "
            elif s.samples_per_s:
                rate = _("{rate:,.0f} samples/s").format(rate=s.samples_per_s) + "  "
            elif s.steps_per_s:
                rate = _("{rate:.1f} steps/s").format(rate=s.steps_per_s) + "  "
            label = _("step time") + " "
            spark = display.sparkline(
                s.step_history_ms, width - cell_width(rate) - cell_width(label)
            )
            out.append(f"\n{rate}{label}{spark}", "cyan")
        bar, legend = display.split_bar(s.split, width)
        out.append(f"\n{bar}\n{legend}", "")
        sol = s.speed_of_light
        if sol is not None and sol.mfu is not None and sol.peak_tflops and sol.could_take_ms:
            line = _("MFU {mfu:.0%} of {peak}").format(mfu=sol.mfu, peak=rate_text(sol.peak_tflops))
            could = " · " + _("a step could take {ms}").format(ms=ms_text(sol.could_take_ms))
            shown = line + could if cell_width(line + could) <= width else crop(line, width)
            out.append("\n" + shown)
        if s.ranks:  # the slowest rank by its own work; r opens the table
            slow = max(s.ranks, key=lambda r: r.own_ms)
            out.append(
                "\n"
                + crop(
                    _("{ranks} ranks · slowest {rank}: {own} own ({score:.1f}x)").format(
                        ranks=len(s.ranks),
                        rank=slow.rank,
                        own=display.ms(slow.own_ms),
                        score=slow.score,
                    ),
                    width,
                ),
                "yellow" if slow.score >= 1.2 else "",
            )
        if s.host is not None:
            workers = [p for p in s.host.job if p.role == "worker"]
            if workers:
                cpu = " ".join(f"{p.cpu_pct:.0f}%" for p in workers[:8])
                out.append(
                    "\n" + _("DataLoader workers: {n}  CPU {cpu}").format(n=len(workers), cpu=cpu)
                )
        return out


def _ended(s: Snapshot) -> str:
    e = s.exit
    if e is None:
        return _("running")
    # the words of the header, the headless summary and the report (issue 40, point 10)
    return ended_words(e.ended_by, e.exit_code, None)


class OutputPanel(Panel):
    BORDER_TITLE = _("Output")
    # with fewer than three rows it would show a border and nothing else: the app hides
    # it then (DoctorApp._fit_panels, by `display`; an invisible widget that is given
    # rows again would keep them blank, as `visible` set here once did)

    def render_snapshot(self, s: Snapshot) -> Text:
        lines = max(1, self.size.height or 4)  # the content area: inside the border
        tail = s.output_tail[-lines:]
        if not tail:
            if s.mode in ("watch", "inject"):
                return Text(_("(a watched job writes to its own terminal)"), "dim")
            words = _("(no output yet)") if s.output_path else _("(output not recorded)")
            return Text(words, "dim")
        return styled(tail)


class FindingsPanel(OptionList):
    """Ranked findings; Enter opens one (OptionList posts OptionSelected)."""

    BORDER_TITLE = _("Findings")
    # OptionList's own Enter (select) is hidden from the footer: shown here, named
    BINDINGS = [Binding("enter", "select", _("Remedies"), show=True)]

    shown: tuple[Finding, ...] | None = None
    running = True
    lang = "en"  # of the remedies' titles
    # a tall screen has the rows: each finding's first remedy as its concrete action
    # for this job ("run it with --num-workers 4"), not only the remedy's title
    actions = False
    _shown_in: Snapshot | None = None  # the snapshot the prompts' actions are sized to

    def show_actions(self, actions: bool, s: Snapshot | None) -> None:
        if actions != self.actions:
            self.actions = actions
            self.shown = None  # every prompt again
            if s is not None:
                self.show(s)

    def show(self, s: Snapshot) -> None:
        self._shown_in = s
        if s.findings == self.shown and (s.findings or s.running == self.running):
            return  # unchanged: keep the highlight where the user left it
        before, self.shown, self.running = self.shown, s.findings, s.running
        if before and [f.id for f in before] == [f.id for f in s.findings]:
            # the same findings, their numbers moved: new prompts in place (rebuilding
            # the list lays the screen out again, most of the app's CPU on a busy job)
            for i, (old, new) in enumerate(zip(before, s.findings, strict=True)):
                if old != new:
                    self.replace_option_prompt_at_index(i, self._prompt(new))
            return
        highlighted = self.highlighted
        self.clear_options()
        if not s.findings:
            words = _("no findings yet") if s.running else _("no findings: nothing to fix was seen")
            self.add_option(Option(Text(words, "dim"), id="none", disabled=True))
            return
        self.add_options([Option(self._prompt(f), id=f.id) for f in s.findings])
        # Enter opens the highlighted finding: the top one until the user moves
        self.highlighted = min(highlighted or 0, len(s.findings) - 1)

    def _prompt(self, f: Finding) -> Text:
        action, s = None, self._shown_in
        if self.actions and s is not None and f.remedies and f.remedies[0] in CATALOGUE:
            action = how(f.remedies[0], s.facts, s.cores_allowed, self.lang)
        # the width left when the scrollbar is there (it comes when the lines are many)
        width = self.content_region.width - self.styles.scrollbar_size_vertical
        # a short screen's panel shows a few rows: the evidence in two lines, ended by an
        # ellipsis where cut (Enter shows it whole), so that a finding fits them whole
        lines = None if self.actions else SHORT_EVIDENCE_LINES
        return _prompt(f, self.lang, action, width, lines)

    def on_resize(self) -> None:
        """The prompts' lines are wrapped to the panel's width: wrapped again."""
        if self._shown_in is not None and self.shown:
            self.shown = None
            self.show(self._shown_in)
        self.post_message(PanelResized())


INDENT = 7  # a finding's evidence and remedy, under its title (past the severity)
SHORT_EVIDENCE_LINES = 2


def _prompt(
    f: Finding, lang: str = "en", action: str | None = None, width: int = 0,
    lines: int | None = None,
) -> Text:  # fmt: skip
    """A finding in the panel; with the panel's `width` known, its evidence and remedy
    wrap under themselves, not back to the panel's edge."""
    text = Text()
    text.append(
        pad(display.severity_words(f.severity), 6) + " ", display.SEVERITY_STYLE.get(f.severity, "")
    )
    text.append(f"{f.id}: ", "bold")
    text.append(f.title)
    if f.confidence == "estimated":
        text.append(_(" (estimated)"), "italic")
    text.append("\n" + _hanging(f.evidence, width, lines), "dim")
    if f.remedies and f.remedies[0] in CATALOGUE:  # the first remedy; Enter opens them all
        title = CATALOGUE[f.remedies[0]].title
        words = action or title.get(lang) or title["en"]
        text.append("\n" + _hanging(f"-> {f.remedies[0]}: {words}", width), "green")
    return text


def _hanging(words: str, width: int, most: int | None = None) -> str:
    """`words` indented by INDENT, wrapped at `width` cells (wide characters counted as
    two) under themselves, in at most `most` lines (the last ended by `…` where cut);
    one line when the width is not known yet (0)."""
    pad = " " * INDENT
    if width <= INDENT + 10:
        return pad + words
    lines = wrap_columns(words, width - INDENT)
    if most is not None and len(lines) > most:
        lines = lines[:most]
        lines[-1] = crop(lines[-1], width - INDENT - 1) + "…"
    return "\n".join(pad + line for line in lines)


def styled(lines: tuple[OutputLine, ...]) -> Text:
    """The job's output lines, each segment in its own style (terminal.py), cropped at
    the panel's edge rather than wrapped, as a terminal narrower than the job's shows."""
    text = Text(no_wrap=True, overflow="crop", end="")
    for n, line in enumerate(lines):
        if n:
            text.append("\n")
        for part, style in line:
            text.append(part, style or None)
    return text
