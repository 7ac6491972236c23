"""The run over time in the TUI (issue 17): `h` opens every plot, a tall terminal keeps
a strip of them on the main screen, a small one draws none (and computes none). Driven
by Pilot over the session recorded on an H200 (replayed) and a live job here."""

from __future__ import annotations

import asyncio
import signal
import statistics
import subprocess
from pathlib import Path
from typing import Any

from conftest import FIXTURES, PY, ROOT, SAMPLES, load_recorded_session, load_session_file, wait_for
from rich.text import Text
from test_tui_terminal import close, tmux, wait_screen

from gpudoctor.app.follow import Follower
from gpudoctor.jobs import LaunchedJob
from gpudoctor.series import RunSeries
from gpudoctor.store import Store
from gpudoctor.terminal import TerminalView
from gpudoctor.tui.app import make_live_app, make_replay_app
from gpudoctor.tui.plots import (
    HistoryStrip,
    PlotsScreen,
    RunPlot,
    markers_legend,
    numbered_markers,
    time_ticks,
)
from gpudoctor.tui.widgets import FindingsPanel, JobPanel, OutputPanel

SESSION = "dataloader_bound"  # 21 s on an H200: input-bound, GPU util about 1%


def plain(widget: Any) -> str:
    """What a Static shows, as plain text."""
    return str(widget.render().plain)


def plots(app: Any) -> dict[str, RunPlot]:
    return {p.kind: p for p in app.screen.query(RunPlot)}


def test_h_opens_every_plot_of_a_gpu_run_with_its_markers_and_the_replay_position() -> None:
    timeline = load_recorded_session(SESSION)
    app: Any = make_replay_app(timeline, 7)
    raw_mem = [g.mem_used_bytes / 2**30 for g in timeline.gpus if g.mem_used_bytes is not None]

    async def drive() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            await pilot.press("h")
            await wait_for(pilot, lambda: isinstance(app.screen, PlotsScreen))
            screen: Any = app.screen
            await wait_for(pilot, lambda: screen.series is not None)
            s = screen.series
            assert isinstance(s, RunSeries)
            shown = plots(app)
            # a GPU run: the GPU's plots too, each drawn from readings (no "no readings")
            assert set(shown) == {
                "step",
                "rate",
                "wait",
                "split",
                "gpu_util",
                "gpu_mem",
                "gpu_power",
                "cpu",
            }
            await pilot.pause()
            assert all(p.trouble is None and p.drawn is s for p in shown.values())
            assert shown["rate"].title == "samples/s"  # the job's batches have a size
            # the numbers are the recording's: memory between the least and most read,
            # data wait near the 79% the job panel says for the run
            mem = [v for points in s.gpu_mem_gib.values() for _, v in points]
            assert min(raw_mem) - 0.01 <= min(mem) and max(mem) <= max(raw_mem) + 0.01
            assert 70 <= statistics.median(v for _, v in s.data_wait_pct) <= 90
            # the markers: the findings where first raised, the job's end; numbered on
            # the plots, named below them; the yellow line where the replay stands
            words = plain(screen.query_one("#plots-markers"))
            assert "input-bound" in words and "job ended at 21 s" in words
            assert [n for n, _, _ in numbered_markers(s)] == list(
                range(1, len(numbered_markers(s)) + 1)
            )
            assert s.cursor_s is not None and abs(s.cursor_s - s.until_s) < 1.5  # at the end

            # the replay's seek keys move the yellow line; `1` draws the minute before it
            await pilot.press("home")
            await wait_for(
                pilot, lambda: screen.series is not None and screen.series.cursor_s == 0.0
            )
            for _ in range(2):
                await pilot.press("right")
            await wait_for(pilot, lambda: screen.series.cursor_s == 10.0)
            whole = screen.series
            assert (whole.since_s, round(whole.until_s)) == (0.0, 21)  # still the whole run
            await pilot.press("1")
            await wait_for(pilot, lambda: screen.series.until_s <= 10.5)
            minute = screen.series
            assert minute.since_s == 0.0 and minute.cursor_s == 10.0
            # the minute before the position: no reading after it
            assert all(x <= 10.5 for x, _ in minute.step_p50_ms + minute.cpu_pct)
            assert "last minute" in plain(screen.query_one("#plots-range"))

            await pilot.press("escape")
            assert not isinstance(app.screen, PlotsScreen)
            await wait_for(pilot, lambda: app.plots is None)  # and the stretch is the strip's
            await pilot.press("q")

    asyncio.run(drive())


def test_a_tall_terminal_keeps_a_strip_of_plots_and_a_small_one_computes_none() -> None:
    async def drive(size: tuple[int, int]) -> tuple[bool, RunSeries | None, list[str]]:
        app: Any = make_replay_app(load_recorded_session(SESSION), 7)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            strip = app.query_one(HistoryStrip)
            shown = [p.kind for p in strip.query(RunPlot) if p.display and strip.display]
            series = app.snapshot.series if app.snapshot else None
            tall = bool(strip.display)
            await pilot.press("q")
        return tall, series, shown

    tall, series, kinds = asyncio.run(drive((160, 48)))
    assert tall and series is not None and series.step_p50_ms
    assert kinds == ["step", "wait", "gpu_util"]  # 160 columns: wide enough for three
    assert series.until_s - series.since_s <= 600 + 1  # the strip: the last ten minutes
    small, series, kinds = asyncio.run(drive((80, 24)))
    assert not small and series is None and kinds == []


def test_the_strip_comes_and_goes_as_the_terminal_is_resized() -> None:
    app: Any = make_replay_app(load_recorded_session(SESSION), 7)

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            strip = app.query_one(HistoryStrip)
            assert not strip.display and app.snapshot.series is None
            output = app.query_one(OutputPanel)
            assert not output.display  # too short for it at 80x24 (o shows it)
            findings = app.query_one(FindingsPanel)

            def first() -> str:
                return str(findings.get_option_at_index(0).prompt)

            assert "-> more-workers: Load batches in parallel worker processes" in first()
            await pilot.resize_terminal(160, 48)
            await wait_for(pilot, lambda: app.snapshot.series is not None)
            assert strip.display and strip.has_class("wide")
            # the output panel comes back and is given its rows (a paused replay gets
            # no new snapshot to lay it out again)
            await wait_for(pilot, lambda: output.display and output.region.height >= 3)
            # the rows for each finding's first remedy as this job's concrete action
            want = "-> more-workers: Your script has --num-workers (now 0): run it with"
            assert want in first()
            # more rows: the strip takes half of what the output would have past ten
            short = strip.outer_size.height
            await pilot.resize_terminal(200, 60)
            await wait_for(pilot, lambda: strip.outer_size.height > short)
            await pilot.resize_terminal(120, 24)
            await wait_for(pilot, lambda: app.snapshot.series is None)
            assert not strip.display
            assert "-> more-workers: Load batches" in first()
            await pilot.press("q")

    asyncio.run(drive())


def test_the_plots_screen_scrolls_on_a_small_terminal() -> None:
    app: Any = make_replay_app(load_recorded_session(SESSION), 7)

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.press("h")
            await wait_for(pilot, lambda: isinstance(app.screen, PlotsScreen))
            scroll = app.screen.query_one("#plots-scroll")
            assert scroll.scroll_y == 0 and scroll.max_scroll_y > 0  # one plot a row
            await pilot.press("space")  # a page (a replay's PgDn moves it a minute on)
            await wait_for(pilot, lambda: scroll.scroll_y > 0)
            await pilot.press("up")
            await pilot.pause()
            assert scroll.scroll_y >= 0
            await pilot.press("escape", "q")

    asyncio.run(drive())


def test_a_live_run_plots_its_steps_and_the_range_keys_ask_the_loop_for_them(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s.db")
    log_path = tmp_path / "job.log"
    log = log_path.open("wb")
    session = LaunchedJob(
        [PY, str(SAMPLES / "healthy.py"), "--steps", "100000"], store, output=log, own_terminal=True
    )
    session.start()
    follower = Follower(session, TerminalView(log_path))
    app: Any = make_live_app(follower, "en")

    async def drive() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            # the first snapshots come before any step: the plots say so, and draw
            await wait_for(pilot, lambda: app.snapshot is not None)
            assert follower.plot_s == 600.0  # a tall screen: the strip's ten minutes
            await wait_for(
                pilot,
                lambda: (
                    app.snapshot.series is not None and len(app.snapshot.series.step_p50_ms) >= 2
                ),
            )
            strip = {p.kind: p for p in app.query_one(HistoryStrip).query(RunPlot)}
            await pilot.pause()
            assert strip["step"].drawn is app.snapshot.series and strip["step"].trouble is None
            await pilot.press("h")
            await wait_for(pilot, lambda: isinstance(app.screen, PlotsScreen))
            assert follower.plot_s == float("inf")  # whole run by default
            await pilot.press("1")
            assert follower.plot_s == 60.0
            await wait_for(
                pilot,
                lambda: app.screen.series is not None and app.screen.series.step_p50_ms != [],
            )
            # the main screen, hidden, is not drawn again (its panels still hold what they
            # showed when it was left); shown again, it is up to date at once
            main = app.screen_stack[0].query_one(JobPanel)
            left_with = main.snapshot
            await wait_for(pilot, lambda: app.snapshot is not left_with)
            assert main.snapshot is left_with
            await pilot.press("escape")
            assert follower.plot_s == 600.0
            await pilot.pause()
            assert main.snapshot is app.snapshot
            await app.run_action("quit")

    try:
        asyncio.run(drive())
    finally:
        session.signal_job(signal.SIGKILL)
        assert session.proc is not None
        session.proc.wait()
        session.close()
        log.close()


def test_a_plot_with_no_steps_yet_draws_what_it_has() -> None:
    """The live screen's first seconds: CPU readings and no step (a crash once)."""
    early = RunSeries(
        since_s=0.0, until_s=1.8, cpu_pct=[(1.5, 3.0)], cpu_core_pct={0: [(1.5, 3.0)]}
    )

    from textual.app import App

    class Plots(App[None]):
        def compose(self) -> Any:
            yield RunPlot("step")
            yield RunPlot("cpu")

    async def drive() -> None:
        app = Plots()
        async with app.run_test(size=(100, 30)) as pilot:
            for p in app.query(RunPlot):
                p.draw(early)
            await pilot.pause()
            step, cpu = list(app.query(RunPlot))
            assert step.trouble is None and cpu.trouble is None
            assert "none measured" in step.plt.build()
            # each line named in a row of its own under the plot, in the line's colour,
            # never on the plot, where Plotext puts a legend (over a busy core's line)
            assert "core 0" not in cpu.plt.build()
            rendered = cpu.render()
            assert isinstance(rendered, Text)
            last = rendered.plain.splitlines()[-1]
            assert (
                last.strip() == "── core 0" and len(rendered.plain.splitlines()) == cpu.size.height
            )
            assert any(span.style == "cyan" for span in rendered.spans)

    asyncio.run(drive())


def test_time_ticks_are_round_and_read_as_time() -> None:
    assert time_ticks(0, 21) == [
        (0.0, "0"),
        (5.0, "5 s"),
        (10.0, "10 s"),
        (15.0, "15 s"),
        (20.0, "20 s"),
    ]
    assert [w for _, w in time_ticks(0, 600)] == ["0", "2 min", "4 min", "6 min", "8 min", "10 min"]
    assert [w for _, w in time_ticks(1000, 1060)] == ["16:45", "17:00", "17:15", "17:30"]
    assert [w for _, w in time_ticks(0, 5.5 * 3600)] == ["0", "2 h", "4 h"]
    assert [w for _, w in time_ticks(0, 9 * 86400)][-1] == "8 d"


def test_markers_at_one_place_share_a_number() -> None:
    s = RunSeries(since_s=0.0, until_s=100.0, ended_at_s=99.0, ended_by="exit")
    s.first_seen_s = {"no-mixed-precision": 2.0, "input-bound": 40.0, "low-gpu-util": 40.5}
    s.profiles_s = [70.0]
    assert numbered_markers(s) == [
        (1, "no-mixed-precision first seen", 2.0),
        (2, "input-bound, low-gpu-util first seen", 40.0),
        (3, "profile", 70.0),
        (4, "job ended", 99.0),
    ]
    assert "2 input-bound, low-gpu-util first seen at 40 s" in markers_legend(s).plain


def test_history_in_a_real_terminal(tmp_path: Path) -> None:
    """tmux at 160x45: the strip on the main screen, `h` and its plots, `3`, Esc."""
    name = f"gpudoctor-plots-{tmp_path.name}"
    store = tmp_path / "s.db"
    subprocess.run(
        [PY, "-m", "gpudoctor", "--store", str(store), "run", "--headless", "--",
         PY, str(SAMPLES / "healthy.py"), "--steps", "60"],
        cwd=ROOT, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    # a detached pane starts at tmux's default size (80x24) and is sized after: its
    # command finds COLUMNS=80 LINES=24 set, which Textual (shutil) takes over the tty's
    command = (
        f"while [ \"$(stty size)\" != '45 160' ]; do sleep 0.1; done; unset COLUMNS LINES; "
        f"cd {ROOT} && {PY} -m gpudoctor --store {store} replay 1; sleep 60"
    )
    tmux("new-session", "-d", "-s", name, "-x", "160", "-y", "45", command)
    try:
        text = wait_screen(name, "step time, ms (p50, p90)", "since the start", "Findings")
        tmux("send-keys", "-t", name, "h")
        text = wait_screen(name, "whole run (0 s to", "job ended at", "CPU by core")
        assert "yellow line" in text and "Traceback" not in text
        tmux("send-keys", "-t", name, "Escape")
        wait_screen(name, "Findings", "h History")
    finally:
        close(name, tmp_path)


def test_a_replayed_watch_plots_its_estimates() -> None:
    """Issue 40, point 5: `h` on a replayed watch showed empty plots though its step rate
    and data wait were in the store (py-spy's chunks). Each chunk is a point now."""
    timeline = load_session_file(FIXTURES / "watch_session_dataloader_bound.json.gz")
    app: Any = make_replay_app(timeline, 7)

    async def drive() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            await pilot.press("h")
            await wait_for(pilot, lambda: isinstance(app.screen, PlotsScreen))
            screen: Any = app.screen
            await wait_for(pilot, lambda: screen.series is not None)
            s = screen.series
            assert s.steps_per_s and 60 < s.steps_per_s[0][1] < 90  # ~75 steps/s, as said
            assert s.data_wait_pct and all(v > 80 for _, v in s.data_wait_pct)
            shown = plots(app)
            await pilot.pause()
            assert shown["rate"].trouble is None and shown["wait"].trouble is None
            await pilot.press("escape", "q")

    asyncio.run(drive())
