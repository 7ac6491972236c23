"""The batch-size finder on a terminal: a progress bar and the tries as they finish.
The search runs in a thread worker; the app shows what it says, then waits for `q`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Header, Log, ProgressBar, Static


class TuneApp(App[Any]):
    CSS_PATH = "doctor.tcss"
    TITLE = "gpudoctor tune batch-size"
    BINDINGS = [Binding("q", "close", "Quit")]

    def __init__(self, search: Callable[[], Any], show: dict[str, Any], command: str) -> None:
        super().__init__()
        self.search = search
        self.show = show
        self.command = command
        self.result: Any = None
        self.error: BaseException | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"each size a fresh run of: {self.command}", id="tune-command")
        yield ProgressBar(total=1.0, show_eta=False, id="tune-progress")
        yield Log(id="tune-log")
        yield Footer()

    def on_mount(self) -> None:
        self.show["say"] = self._say_from_thread
        self.run_search()

    def _say_from_thread(self, line: str, fraction: float | None = None) -> None:
        self.call_from_thread(self._say, line, fraction)

    def _say(self, line: str, fraction: float | None) -> None:
        self.query_one(Log).write_line(line.removeprefix("gpudoctor tune: "))
        if fraction is not None:
            self.query_one(ProgressBar).update(progress=min(1.0, fraction))

    @work(thread=True, exit_on_error=False)
    def run_search(self) -> None:
        try:
            result = self.search()
        except BaseException as exc:  # shown after the app, as headless would
            self.call_from_thread(self._failed, exc)
            return
        self.call_from_thread(self._done, result)

    def _failed(self, exc: BaseException) -> None:
        self.error = exc
        self.exit(None)

    def _done(self, result: Any) -> None:
        self.result = result
        self.query_one(ProgressBar).update(progress=1.0)
        if isinstance(result, int):
            self._say("the job could not be tuned (see above); q to quit", None)
        else:
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


def run_tune_app(search: Callable[[], Any], show: dict[str, Any], command: str) -> Any:
    app = TuneApp(search, show, command)
    app.run()
    if app.error is not None:
        raise app.error
    return app.result
