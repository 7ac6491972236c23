"""`gpudoctor` alone: the machine's GPUs and host, and the processes worth a look (GPU
holders, Python processes). Enter watches the highlighted one; `r` types a command to
run under the doctor. The app returns the choice; the command line carries it out."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from typing import Any

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Header, Input, Static

from gpudoctor import display
from gpudoctor.i18n import _
from gpudoctor.processes import ProcessRow
from gpudoctor.redact import redact_text
from gpudoctor.snapshot import Snapshot
from gpudoctor.tui.screens import HelpContent, HelpScreen
from gpudoctor.tui.widgets import GpuPanel, HostPanel
from gpudoctor.units import clip


@dataclass(frozen=True)
class HomeChoice:
    action: str  # "watch" | "run"
    pid: int | None = None
    command: tuple[str, ...] = ()
    started_s: float | None = None  # the watched process's start: the pid's process then


class MachineReady(Message):
    def __init__(self, snapshot: Snapshot, rows: list[ProcessRow]) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.rows = rows

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, MachineReady)


class RunPrompt(ModalScreen[tuple[str, ...] | None]):
    """The command to launch under the doctor, typed as in a shell (no shell runs it)."""

    BINDINGS = [Binding("escape", "cancel", _("Cancel"))]

    def compose(self) -> ComposeResult:
        with Vertical(id="run-box"):
            yield Static(_("Run a command under the doctor (Enter to start, Esc to cancel):"))
            yield Input(placeholder="python train.py --epochs 3", id="run-input")
            yield Static("", id="run-error")

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        try:
            argv = tuple(shlex.split(event.value))
        except ValueError as exc:
            self.query_one("#run-error", Static).update(
                _("cannot read that command: {error}").format(error=exc)
            )
            return
        if not argv:
            self.query_one("#run-error", Static).update(_("type a command, or Esc"))
            return
        self.dismiss(argv)

    def action_cancel(self) -> None:
        self.dismiss(None)


WIDE_COLUMNS = 120  # from this many columns the process list sits beside the host panel

# The machine view's help: (key or panel, what it is).
HOME_HELP: HelpContent = (
    _("gpudoctor: the machine"),
    (
        (
            _("Panels"),
            (
                ("GPU", _("nvidia-smi's figures per GPU and the processes holding it")),
                (_("Host"), _("CPU per core, load, iowait, memory, swap, disk and network rates")),
                (_("Processes"), _("the GPU holders and Python processes, busiest first")),
            ),
        ),
        (
            _("Keys"),
            (
                ("up/down", _("choose a process")),
                (
                    "enter, w",
                    _(
                        "watch the chosen process from outside (py-spy; nothing injected, "
                        "never stopped)"
                    ),
                ),
                (
                    "r",
                    _(
                        "run a command under the doctor; when it ends or you leave it, this "
                        "view comes back"
                    ),
                ),
                ("?", _("this help")),
                ("q, ctrl+c", _("quit")),
            ),
        ),
    ),
)


class HomeApp(App[HomeChoice | None]):
    CSS_PATH = "doctor.tcss"
    TITLE = "gpudoctor"
    SUB_TITLE = _("this machine")
    BINDINGS = [
        # Textual's own command palette key, its words in the person's language
        Binding("ctrl+p", "command_palette", _("palette"), show=False, priority=True),
        Binding("enter,w", "watch", _("Watch process")),
        Binding("r", "run", _("Run a command")),
        Binding("question_mark", "help", _("Help")),
        Binding("q", "quit_home", _("Quit")),
        Binding("ctrl+c", "quit_home", _("Quit"), show=False, priority=True),
    ]

    def __init__(self, machine: Any, interval_s: float = 1.0, notice: str | None = None) -> None:
        super().__init__()
        self.machine = machine
        self.interval_s = interval_s
        self.notice = notice  # what the last run or watch said when it could not start
        self.rows: list[ProcessRow] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield GpuPanel(id="gpu-panel")
        with Horizontal(id="middle"):
            yield HostPanel(id="host-panel")
            yield DataTable(id="process-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_resize(self) -> None:
        """Narrow: the process list below the host panel, across the screen, so that its
        commands have room; wide: side by side."""
        narrow = self.size.width < WIDE_COLUMNS
        self.query_one("#middle").set_class(narrow, "stacked")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.border_title = _("Processes (GPU holders, Python)")
        table.add_columns("pid", _("user"), "CPU", "RSS", "GPU mem", _("command"))
        table.focus()
        self.read_machine()
        if self.notice:
            self.notify(self.notice, severity="error", timeout=10)

    @work(thread=True, exclusive=True, exit_on_error=False)
    def read_machine(self) -> None:
        from textual.worker import get_current_worker

        worker = get_current_worker()
        while not worker.is_cancelled:
            snapshot, rows = self.machine.tick()
            self.post_message(MachineReady(snapshot, rows))
            deadline = time.monotonic() + self.interval_s
            while not worker.is_cancelled and time.monotonic() < deadline:
                time.sleep(0.05)

    @on(MachineReady)
    def _on_machine(self, message: MachineReady) -> None:
        for panel in (GpuPanel, HostPanel):
            self.query_one(panel).snapshot = message.snapshot
        table = self.query_one(DataTable)
        # the highlight follows the process, not the row's place: the list is sorted anew
        # at every reading, and Enter must never act on a process that moved under it
        was = self.selected()
        keep = table.cursor_row
        self.rows = message.rows
        table.clear()
        for r in message.rows:
            table.add_row(
                str(r.pid),
                clip(r.user, 10),
                f"{r.cpu_pct:.0f}%",
                display.mib(r.rss_bytes),
                display.mib(r.gpu_mem_bytes) if r.gpu_mem_bytes is not None else "-",
                # anyone's command line: secrets masked; the program by its name
                clip(redact_text(display.command_words(r.command.split(" "))), 120),
                key=r.key,
            )
        if message.rows:
            keys = [r.key for r in message.rows]
            if was is not None and was.key in keys:
                keep = keys.index(was.key)
            table.move_cursor(row=min(keep, len(message.rows) - 1), animate=False)

    @on(DataTable.RowSelected)
    def _on_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a row: the process that row showed (by its key, whatever the list
        has become since the key was pressed)."""
        chosen = next((r for r in self.rows if r.key == event.row_key.value), None)
        self.action_watch(chosen)

    def selected(self) -> ProcessRow | None:
        table = self.query_one(DataTable)
        if not self.rows or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row]

    def action_watch(self, row: ProcessRow | None = None) -> None:
        row = row or self.selected()
        if row is None:
            self.notify(_("no process to watch: r runs a command under the doctor"))
            return
        self.exit(HomeChoice("watch", pid=row.pid, started_s=row.started_s))

    def action_help(self) -> None:
        self.push_screen(HelpScreen(HOME_HELP))

    def action_run(self) -> None:
        self.push_screen(RunPrompt(), self._run_chosen)

    def _run_chosen(self, argv: tuple[str, ...] | None) -> None:
        if argv:
            self.exit(HomeChoice("run", command=argv))

    def action_quit_home(self) -> None:
        self.exit(None)


def make_home_app(machine: Any, interval_s: float = 1.0, notice: str | None = None) -> HomeApp:
    return HomeApp(machine, interval_s, notice)
