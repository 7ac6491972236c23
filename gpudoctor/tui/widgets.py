"""The panels. Each renders the snapshot its parent sets on it (attributes down); the
values come ready-made from gpudoctor.display."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from gpudoctor import display
from gpudoctor.model import Finding
from gpudoctor.snapshot import Snapshot


class Panel(Static):
    # Each tick repaints the panel; the screen is laid out again only when its number of
    # lines changed (a layout per panel per tick cost about a third of the app's CPU).
    snapshot: reactive[Snapshot | None] = reactive(None)
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

    def on_resize(self) -> None:
        """The layout depends on the room: render again at the new size."""
        self._lines = -1
        self.watch_snapshot(self.snapshot)

    def render_snapshot(self, s: Snapshot) -> Text:
        raise NotImplementedError


class GpuPanel(Panel):
    BORDER_TITLE = "GPU"

    def render_snapshot(self, s: Snapshot) -> Text:
        if not s.gpus:
            return Text(f"CPU-only mode: {s.gpu_reason or 'no GPU readings yet'}", "dim")
        width = (self.size.width or 80) - 2
        out = Text()
        for g in s.gpus:
            c = display.gpu_cells(g)
            frac = float(c["mem_fraction"]) if c["mem_fraction"] else None
            history = s.gpu_util_history.get(g.index, ())
            if out:
                out.append("\n")
            out.append(f"{c['index']:>2} ", "bold")
            out.append(f"{c['name'][:24]:<24} ")
            out.append(f"util {c['util']:>4} ", c["util_band"])
            out.append(f"mem {display.bar(frac, 8)} {c['mem']}", c["mem_band"])
            second = Text("   ")
            second.append(f"{c['power']:<13} ")
            second.append(f"{c['temp']:>4} ", c["temp_band"])
            second.append(f"fan {c['fan']:<4} SM {c['sm_clock']:<8} ")
            if width >= 110:
                second.append(f"PCIe {c['pcie']} ")
            spark = max(0, width - len(second.plain) - 6)
            second.append(f"util {display.sparkline(history, min(spark, 60), top=100.0)}", "green")
            out.append("\n")
            out.append(second)
            if c["throttle"]:
                out.append(f"\n   {c['throttle']}", "bold red")
        procs = [p for g in s.gpus for p in g.processes]
        if procs:
            head = f"{'pid':<8} {'user':<10} {'GPU mem':>9} {'SM%':>5}  command"
            out.append(f"\n   {head}", "bold")
            for p in procs[:6]:
                mine = p.pid in s.job_gpu_pids
                sm = display.pct(p.sm_util_pct)
                user = (p.user or "?")[:10]
                mem = display.mib(p.mem_used_bytes)
                row = f"\n   {p.pid:<8d} {user:<10} {mem:>9} {sm:>5}  "
                tag = "<- job " if mine else ""
                room = max(0, width - len(row) - len(tag))
                out.append(row + tag + (p.command or "")[:room], "bold" if mine else "")
        return out


class HostPanel(Panel):
    BORDER_TITLE = "Host"

    def render_snapshot(self, s: Snapshot) -> Text:
        if s.host is None:
            return Text("waiting for the first reading…", "dim")
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
    BORDER_TITLE = "Job"

    def render_snapshot(self, s: Snapshot) -> Text:
        width = max(10, (self.size.width or 60) - 4)
        state = "running" if s.running else _ended(s)
        out = Text()
        out.append(" ".join(s.command)[:width], "bold")
        up = f"up {display.duration(s.elapsed_s)}"
        if s.mode == "watch":
            out.append(f"\nwatching pid {s.job_pid}  {state}  {up}")
            out.append(f"\nfrom outside: {s.stack_samples} stack samples", "")
            if s.steps_per_s:
                out.append(f"  ~{s.steps_per_s:.1f} steps/s (~{display.ms(s.step_p50_ms)})")
            out.append("\nstep times: not timed (estimates from py-spy)", "dim")
        else:
            out.append(f"\npid {s.job_pid or '-'}  {state}  {up}")
            out.append(f"\nsteps {s.steps_total}  step p50 {display.ms(s.step_p50_ms)}")
            out.append(f" p90 {display.ms(s.step_p90_ms)}")
            if s.samples_per_s:
                out.append(f"  {s.samples_per_s:,.0f} samples/s")
            elif s.steps_per_s:
                out.append(f"  {s.steps_per_s:.1f} steps/s")
            out.append(f"\nstep time {display.sparkline(s.step_history_ms, width - 10)}", "cyan")
        bar, legend = display.split_bar(s.split, width)
        out.append(f"\n{bar}\n{legend}", "")
        if s.host is not None:
            workers = [p for p in s.host.job if p.role == "worker"]
            if workers:
                cpu = " ".join(f"{p.cpu_pct:.0f}%" for p in workers[:8])
                out.append(f"\nDataLoader workers: {len(workers)}  CPU {cpu}")
        return out


def _ended(s: Snapshot) -> str:
    e = s.exit
    if e is None:
        return "running"
    if e.ended_by == "detached":
        return "left running"
    return f"ended ({e.ended_by}, exit code {e.exit_code})"


class OutputPanel(Panel):
    BORDER_TITLE = "Output"

    def render_snapshot(self, s: Snapshot) -> Text:
        lines = max(1, (self.size.height or 6) - 2)
        tail = s.output_tail[-lines:]
        if not tail:
            if s.mode == "watch":
                return Text("(a watched job writes to its own terminal)", "dim")
            return Text("(no output yet)" if s.output_path else "(output not recorded)", "dim")
        return Text("\n".join(tail))


class FindingsPanel(OptionList):
    """Ranked findings; Enter opens one (OptionList posts OptionSelected)."""

    BORDER_TITLE = "Findings"

    shown: tuple[Finding, ...] | None = None

    def show(self, s: Snapshot) -> None:
        if s.findings == self.shown:
            return  # unchanged: keep the highlight where the user left it
        self.shown = s.findings
        highlighted = self.highlighted
        self.clear_options()
        if not s.findings:
            self.add_option(Option(Text("no findings yet", "dim"), id="none", disabled=True))
            return
        self.add_options([Option(_prompt(f), id=f.id) for f in s.findings])
        # Enter opens the highlighted finding: the top one until the user moves
        self.highlighted = min(highlighted or 0, len(s.findings) - 1)


def _prompt(f: Finding) -> Text:
    text = Text()
    text.append(f"{f.severity.upper():<6} ", display.SEVERITY_STYLE.get(f.severity, ""))
    text.append(f"{f.id}: ", "bold")
    text.append(f.title)
    if f.confidence == "estimated":
        text.append(" (estimated)", "italic")
    text.append(f"\n       {f.evidence}", "dim")
    return text
