"""The batch-size finder on a terminal: a progress bar and the tries as they finish.
The search (the application layer's) runs in a thread worker and reports through a
Progress that the app draws; then the app waits for `q`."""

from __future__ import annotations

from collections.abc import Callable

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Header, Log, ProgressBar, Static

from gpudoctor.app.progress import Progress
from gpudoctor.prescribe.batch_size import Found

Search = Callable[[Progress], Found]


class TuneApp(App[Found | None]):
    CSS_PATH = "doctor.tcss"
    TITLE = "gpudoctor tune batch-size"
    BINDINGS = [Binding("q", "close", "Quit")]

    def __init__(self, search: Search, command: str) -> None:
        super().__init__()
        self.search = search
        self.command = command
        self.result: Found | None = None
        self.error: BaseException | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"each size a fresh run of: {self.command}", id="tune-command")
        yield ProgressBar(total=1.0, show_eta=False, id="tune-progress")
        yield Log(id="tune-log")
        yield Footer()

    def on_mount(self) -> None:
        self.run_search()

    def _progress_from_thread(self, text: str, fraction: float | None = None) -> None:
        self.call_from_thread(self._say, text, fraction)

    def _say(self, text: str, fraction: float | None) -> None:
        self.query_one(Log).write_line(text)
        if fraction is not None:
            self.query_one(ProgressBar).update(progress=min(1.0, fraction))

    @work(thread=True, exit_on_error=False)
    def run_search(self) -> None:
        try:
            result = self.search(self._progress_from_thread)
        except BaseException as exc:  # shown after the app, as headless would
            self.call_from_thread(self._failed, exc)
            return
        self.call_from_thread(self._done, result)

    def _failed(self, exc: BaseException) -> None:
        self.error = exc
        self.exit(None)

    def _done(self, result: Found) -> None:
        self.result = result
        self.query_one(ProgressBar).update(progress=1.0)
        self._say(
            f"largest that fits: {result.largest}; fastest: {result.fastest} "
            f"(stopped by {result.stopped_by}); q to quit",
            None,
        )

    def action_close(self) -> None:
        if self.result is None and self.error is None:
            self.notify("still searching: each try ends within its steps")
            return
        self.exit(self.result)


def run_tune_app(search: Search, command: str) -> Found:
    """The search's result, or what it raised (after the app has closed)."""
    app = TuneApp(search, command)
    app.run()
    if app.error is not None:
        raise app.error
    assert app.result is not None
    return app.result
