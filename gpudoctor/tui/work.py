"""Long work on a terminal (`tune batch-size`, `fix`): what it runs, a progress bar, its
lines as they come, and its outcome when it ends. The work (the application layer's)
runs in a thread worker and reports through a Progress that the app draws; then the
app waits for `q`. The outcome's words are the command line's own (report/render.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Header, ProgressBar, RichLog, Static

from gpudoctor.app.progress import Progress
from gpudoctor.i18n import _

R = TypeVar("R")


class WorkApp(App[None], Generic[R]):
    CSS_PATH = "doctor.tcss"
    BINDINGS = [
        Binding("q", "close", _("Quit")),
        # Textual's own command palette key, its words in the person's language
        Binding("ctrl+p", "command_palette", _("palette"), show=False, priority=True),
    ]

    def __init__(
        self,
        title: str,
        what: str,
        job: Callable[[Progress], R],
        outcome: Callable[[R], str],
        busy: str,
    ) -> None:
        super().__init__()
        self.title = title
        self.what = what  # a line on top: what each run runs
        self.job = job
        self.outcome = outcome  # the result in words, written to the log at the end
        self.busy = busy  # said when q is pressed before the end
        self.result: R | None = None
        self.error: BaseException | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(self.what, id="work-what")
        yield ProgressBar(total=1.0, show_eta=False, id="work-progress")
        yield RichLog(wrap=True, id="work-log")  # long command lines wrapped, not cut
        yield Footer()

    def on_mount(self) -> None:
        self.run_job()

    def _progress_from_thread(self, text: str, fraction: float | None = None) -> None:
        self.call_from_thread(self._say, text, fraction)

    def _say(self, text: str, fraction: float | None) -> None:
        self.query_one(RichLog).write(Text(text))
        if fraction is not None:
            self.query_one(ProgressBar).update(progress=min(1.0, fraction))

    @work(thread=True, exit_on_error=False)
    def run_job(self) -> None:
        try:
            result = self.job(self._progress_from_thread)
        except BaseException as exc:  # shown after the app, as headless would
            self.call_from_thread(self._failed, exc)
            return
        self.call_from_thread(self._done, result)

    def _failed(self, exc: BaseException) -> None:
        self.error = exc
        self.exit()

    def _done(self, result: R) -> None:
        self.result = result
        self.query_one(ProgressBar).update(progress=1.0)
        log = self.query_one(RichLog)
        for line in self.outcome(result).strip("\n").splitlines():
            log.write(Text(line))
        log.write(Text(_("q to quit")))

    def action_close(self) -> None:
        if self.result is None and self.error is None:
            self.notify(self.busy)
            return
        self.exit()


def run_work_app(
    title: str,
    what: str,
    job: Callable[[Progress], R],
    outcome: Callable[[R], str],
    busy: str,
) -> R:
    """The work's result, or what it raised (after the app has closed)."""
    app: WorkApp[R] = WorkApp(title, what, job, outcome, busy)
    app.run()
    if app.error is not None:
        raise app.error
    assert app.result is not None
    return app.result
