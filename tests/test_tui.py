"""The TUI, driven by Textual's Pilot over real sources: a session recorded on an H200
(replayed), a CPU session recorded here, and a live job under the doctor."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import PY, SAMPLES, doctor, load_recorded_session, wait_for
from rich.console import Console
from rich.text import Text
from textual.widgets import DataTable, Footer, Header, Static

from gpudoctor.app.errors import NotPossible
from gpudoctor.app.follow import DIAGNOSE_EVERY_S, Follower
from gpudoctor.app.sessions import find_live
from gpudoctor.jobs import LaunchedJob
from gpudoctor.step_rows import StepRows
from gpudoctor.store import Store
from gpudoctor.terminal import TerminalView
from gpudoctor.timeline import Timeline
from gpudoctor.tui.app import make_live_app, make_replay_app
from gpudoctor.tui.screens import FindingScreen, HelpScreen, QuitScreen
from gpudoctor.tui.widgets import FindingsPanel, GpuPanel, HostPanel, JobPanel, OutputPanel
from gpudoctor.units import cell_width


async def open_finding(app: Any, pilot: Any, finding_id: str) -> FindingScreen:
    """The finding's screen, opened from the findings list as a user does (Enter)."""
    findings = app.query_one(FindingsPanel)
    findings.focus()
    findings.highlighted = [str(o.id) for o in findings.options].index(finding_id)
    await pilot.press("enter")
    assert isinstance(app.screen, FindingScreen)
    return app.screen


def text_of(widget: Any) -> str:
    """What a panel shows, as plain text (its content rendered at the panel's width)."""
    console = Console(width=max(20, widget.size.width), file=io.StringIO(), record=True)
    console.print(widget.content)
    return console.export_text()


def test_replay_of_a_gpu_session_shows_the_gpu_row_and_opens_a_finding() -> None:
    timeline = load_recorded_session("dataloader_bound")
    app = make_replay_app(timeline, 7)

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            gpu = text_of(app.query_one(GpuPanel))
            assert "H200" in gpu and "MiB" in gpu and "util" in gpu
            findings = app.query_one(FindingsPanel)
            ids = [str(o.id) for o in findings.options]
            assert ids[0] == "input-bound", ids
            assert "steps" in text_of(app.query_one(JobPanel))
            findings.focus()
            findings.highlighted = 0
            await pilot.press("enter")
            assert isinstance(app.screen, FindingScreen)
            assert app.screen.finding.id == "input-bound"
            await pilot.press("escape")
            assert not isinstance(app.screen, FindingScreen)
            end_title = app.sub_title
            await pilot.press("home")
            assert app.sub_title != end_title and " 0 s of" in app.sub_title
            assert app.snapshot is not None and app.snapshot.steps_total == 0
            await pilot.press("end")
            assert app.sub_title == end_title
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            await pilot.press("escape")
            await pilot.press("q")
        assert app.return_value is None

    asyncio.run(drive())


def test_at_80x24_the_findings_keep_no_empty_rows_the_output_could_use() -> None:
    """The findings panel is as tall as its findings, up to 30% of a short screen: at the
    start of a replay ("no findings yet") it keeps no empty rows, and the output panel
    has them (it was cut to one line beside a busy machine, whose host panel has one
    more line, under three empty rows); with findings it grows, never past its share."""
    app = make_replay_app(load_recorded_session("dataloader_bound"), 7)

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            findings, output = app.query_one(FindingsPanel), app.query_one(OutputPanel)
            with_findings = findings.outer_size.height
            assert findings.option_count > 0 and 3 < with_findings <= 24 * 3 // 10
            # the output has too few rows beside them: the panels take them, no blank band
            await wait_for(pilot, lambda: rows_used(app) == 24)
            await pilot.press("home")
            await wait_for(pilot, lambda: findings.option_count == 1)  # "no findings yet"
            await wait_for(pilot, lambda: findings.outer_size.height == 3)
            await wait_for(pilot, lambda: output.display and output.outer_size.height >= 5)
            assert app.screen.max_scroll_y == 0
            assert rows_used(app) == 24
            await pilot.press("end")
            await wait_for(pilot, lambda: findings.outer_size.height == with_findings)
            await wait_for(pilot, lambda: rows_used(app) == 24)

    asyncio.run(drive())


def rows_used(app: Any) -> int:
    """The rows the main screen's parts take, top to bottom (those shown)."""
    parts = [app.query_one(Header), app.query_one(GpuPanel), app.query_one("#panels")]
    parts += [app.query_one(OutputPanel), app.query_one(FindingsPanel), app.query_one(Footer)]
    return sum(w.outer_size.height for w in parts if w.display)


def gpu_text(app: Any) -> list[str]:
    """The GPU panel's lines as rendered (its Rich Text)."""
    content = app.query_one(GpuPanel).content
    assert isinstance(content, Text)
    return content.plain.split("\n")


def gpus_copied(n: int) -> Any:
    """The recorded H200 session as if the server had `n` such GPUs (the job's process on
    GPU 0): the readings are the real ones, their index rewritten."""
    import dataclasses

    timeline = load_recorded_session("dataloader_bound")
    readings = list(timeline.gpus)
    timeline.gpus.clear()
    for g in readings:
        for i in range(n):
            procs = g.processes if i == 0 else ()
            timeline.gpus.append(dataclasses.replace(g, index=i, processes=procs))
    return timeline


def test_gpu_panel_fits_eight_gpus_into_80x24_and_uses_the_room_at_200x60() -> None:
    async def gpu_lines(n: int, size: tuple[int, int]) -> tuple[list[str], Any]:
        app = make_replay_app(gpus_copied(n), 7)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            panel = app.query_one(GpuPanel)
            lines = gpu_text(app)
            # everything on screen: the panel holds its lines, the screen does not scroll
            assert panel.content_region.height >= len(lines), (panel.content_region, lines)
            assert app.screen.max_scroll_y == 0
            assert max(len(line) for line in lines) <= panel.content_region.width
            return lines, app.query_one(JobPanel).region

    async def drive() -> None:
        one, _ = await gpu_lines(1, (80, 24))  # nvidia-smi's two lines, the process table
        assert one[0].startswith(" 0 NVIDIA H200") and "120W / 700W" in one[1]
        assert "<- job" in one[-1]
        eight, job = await gpu_lines(8, (80, 24))  # a few GPUs a line
        assert len(eight) == 4 and all(f"{i} util" in "".join(eight) for i in range(8))
        assert job.height >= 9  # the job panel keeps its room
        wide, _ = await gpu_lines(8, (200, 60))  # a line each, the process table
        assert [line.split()[0] for line in wide[:8]] == [str(i) for i in range(8)]
        assert "SM 1980MHz" in wide[0] and "<- job" in wide[-1]
        # the terminal made shorter, as wide as before: the panel follows its height
        app = make_replay_app(gpus_copied(8), 7)
        async with app.run_test(size=(80, 60)) as pilot:
            await pilot.pause()
            assert len(gpu_text(app)) == 10
            await pilot.resize_terminal(80, 24)
            await pilot.pause()
            assert len(gpu_text(app)) == 4

    asyncio.run(drive())


def test_replay_of_a_cpu_session_says_cpu_only_and_shows_the_host(tmp_path: Path) -> None:
    proc = doctor("run", "--headless", "--", PY, str(SAMPLES / "dataloader_bound.py"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    store = Store(Path(os.environ["GPUDOCTOR_STORE"]))
    timeline = store.load(1)
    store.close()
    app = make_replay_app(timeline, 1)

    async def drive() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            assert "CPU-only" in text_of(app.query_one(GpuPanel))
            host = text_of(app.query_one(HostPanel))
            assert "cpu0" in host and "mem" in host and "disk" in host
            ids = [str(o.id) for o in app.query_one(FindingsPanel).options]
            assert ids[0] == "input-bound"
            assert app.snapshot is not None
            assert app.snapshot.steps_total == timeline.total_steps()

    asyncio.run(drive())


def start_live(tmp_path: Path, *job_args: str) -> tuple[LaunchedJob, Path, Any]:
    store = Store(tmp_path / "s.db")
    log_path = tmp_path / "job.log"
    log = log_path.open("ab")
    session = LaunchedJob(
        [PY, str(SAMPLES / "healthy.py"), *job_args], store, output=log, own_terminal=True
    )
    session.start()
    return session, log_path, log


def test_live_run_fills_the_panels_and_q_can_leave_the_job_running(tmp_path: Path) -> None:
    session, log_path, log = start_live(tmp_path, "--steps", "100000")
    app = make_live_app(Follower(session, TerminalView(log_path)), "en")
    assert session.proc is not None
    pid = session.proc.pid

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.snapshot is not None and app.snapshot.steps_total > 0)
            assert f"pid {pid}" in text_of(app.query_one(JobPanel))
            await pilot.press("q")
            assert isinstance(app.screen, QuitScreen)
            await pilot.press("l")
            await wait_for(pilot, lambda: app.job_exit is not None)

    try:
        asyncio.run(drive())
        assert app.return_value is not None and app.return_value.ended_by == "detached"
        os.kill(pid, 0)  # still running: leaving it running left it running
        assert session.proc.poll() is None
        # attach then says what happened, and how to look again (issue 40, point 4)
        assert session.session_id is not None  # recorded as `run` records the end:
        session.store.finish(session.session_id, time.monotonic_ns(), app.return_value, {})
        for name in (str(session.session_id), "last"):
            with pytest.raises(NotPossible) as said:
                find_live(session.store, name)
            assert "was left running, and its doctor stopped recording it" in str(said.value)
            assert f"gpudoctor watch --pid {pid}" in str(said.value)
    finally:
        session.signal_job(signal.SIGKILL)
        session.proc.wait()
        session.close()
        log.close()


def test_live_run_q_can_stop_the_job(tmp_path: Path) -> None:
    session, log_path, log = start_live(tmp_path, "--steps", "100000")
    app = make_live_app(Follower(session, TerminalView(log_path)), "en")
    assert session.proc is not None

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.snapshot is not None and app.snapshot.steps_total > 0)
            await pilot.press("q", "s")
            await wait_for(pilot, lambda: app.job_exit is not None)

    try:
        asyncio.run(drive())
        assert app.return_value is not None and app.return_value.ended_by == "signal"
        assert session.proc.poll() is not None
    finally:
        session.signal_job(signal.SIGKILL)
        session.close()
        log.close()


def test_the_quit_question_goes_when_the_job_ends_meanwhile(tmp_path: Path) -> None:
    """Issue 40, point 2: q asked "still running" and, once the job had ended, kept
    asking, and s no longer quit. The question goes when the job ends, the screen says
    how it ended, and q quits."""
    session, log_path, log = start_live(tmp_path, "--steps", "100000")
    app = make_live_app(Follower(session, TerminalView(log_path)), "en")
    assert session.proc is not None

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.snapshot is not None and app.snapshot.steps_total > 0)
            assert "p" in app.screen.active_bindings  # a launched job, running: p profiles
            await pilot.press("q")
            assert isinstance(app.screen, QuitScreen)
            session.signal_job(signal.SIGTERM)  # it ends by itself, the question still up
            await wait_for(pilot, lambda: app.job_exit is not None)
            await wait_for(pilot, lambda: not isinstance(app.screen, QuitScreen))
            assert "p" not in app.screen.active_bindings  # ended: nothing to profile
            assert "q to quit" in str(app.sub_title)
            await pilot.press("q")
            await wait_for(pilot, lambda: app.return_value is not None)

    try:
        asyncio.run(drive())
        assert app.return_value is not None and app.return_value.ended_by == "signal"
    finally:
        session.signal_job(signal.SIGKILL)
        session.close()
        log.close()


def test_a_broken_loop_keeps_its_traceback_and_leaves_the_job_running(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The doctor's loop failing under the TUI (here: its third snapshot raises): the app
    closes with exit code 3 and one line that names the file keeping the traceback
    beside the store (as a command's own fault does), secrets masked; the job goes on."""
    import gpudoctor.app.follow
    import gpudoctor.snapshot

    token = "hf_" + "Z9y8X7w6" * 4
    taken = 0
    real_take = gpudoctor.snapshot.take

    def take(*args: Any, **kwargs: Any) -> Any:
        nonlocal taken
        taken += 1
        if taken == 3:
            raise KeyError(f"a bug of the doctor's, near {token}")
        return real_take(*args, **kwargs)

    monkeypatch.setattr(gpudoctor.app.follow, "take", take)
    session, log_path, log = start_live(tmp_path, "--steps", "100000")
    follower = Follower(session, TerminalView(log_path))
    app = make_live_app(follower, "en")
    assert session.proc is not None

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: follower.ended)
            await pilot.pause(0.5)

    try:
        asyncio.run(drive())
        assert app.return_code == 3
        (kept,) = (tmp_path / "logs").glob("doctor-failed-*.txt")
        error = follower.error or ""
        assert error.startswith("KeyError: ") and f"the details are in {kept}" in error, error
        text = kept.read_text()
        assert "Traceback" in text and "bug of the doctor's, near ***" in text
        assert token not in text and token not in error
        assert session.proc.poll() is None  # the job goes on
    finally:
        session.signal_job(signal.SIGKILL)
        session.proc.wait()
        session.close()
        log.close()


def test_no_color_is_honoured(monkeypatch: Any) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_replay_app(load_recorded_session("healthy"), 1)

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            assert app.no_color
            assert "H200" in text_of(app.query_one(GpuPanel))

    asyncio.run(drive())


# -- `gpudoctor` alone: the machine dashboard ------------------------------------------------


def test_home_lists_python_processes_and_enter_chooses_one_to_watch() -> None:
    from gpudoctor.machine import Machine
    from gpudoctor.tui.home import HomeChoice, make_home_app

    sleeper = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    app = make_home_app(Machine(), interval_s=0.5)

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: any(r.pid == sleeper.pid for r in app.rows))
            row = next(r for r in app.rows if r.pid == sleeper.pid)
            assert row.python and row.command.startswith(PY) and row.user
            assert "CPU-only" in text_of(app.query_one(GpuPanel))
            assert "cpu" in text_of(app.query_one(HostPanel))
            table = app.query_one(DataTable)
            index = app.rows.index(row)
            table.move_cursor(row=index)
            await pilot.pause()
            # the rows may be re-read between the move and the key: choose by what is shown
            chosen = app.selected()
            await pilot.press("enter")
            await wait_for(pilot, lambda: not app.is_running)
            assert chosen is not None
            assert app.return_value == HomeChoice(
                "watch", pid=chosen.pid, started_s=chosen.started_s
            )

    try:
        asyncio.run(drive())
    finally:
        sleeper.kill()
        sleeper.wait()


def test_home_highlight_follows_the_process_as_the_list_is_sorted_anew() -> None:
    """Issue 40: the list is sorted again at every reading; the highlight stays on the
    process it was on (pid and start), and Enter watches that one, never the process
    that moved into its place (on a shared server, another user's job)."""
    from gpudoctor.machine import Machine
    from gpudoctor.tui.home import HomeChoice, make_home_app

    class Reordering(Machine):  # the real readings, their order turned at each one
        ticks = 0

        def tick(self) -> Any:
            snapshot, rows = super().tick()
            Reordering.ticks += 1
            return snapshot, rows[::-1] if Reordering.ticks % 2 else rows

    sleepers = [subprocess.Popen([PY, "-c", "import time; time.sleep(60)"]) for _ in range(3)]
    pids = {p.pid for p in sleepers}
    app = make_home_app(Reordering(), interval_s=0.2)

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: pids <= {r.pid for r in app.rows})
            table = app.query_one(DataTable)
            # a sleeper away from the middle: turning the list over moves it
            mid = (len(app.rows) - 1) / 2
            target = max(
                (r for r in app.rows if r.pid in pids), key=lambda r: abs(app.rows.index(r) - mid)
            )
            first = app.rows.index(target)
            table.move_cursor(row=first)
            await pilot.pause()
            moved = 0
            for _ in range(12):  # readings come and turn the list over
                start = Reordering.ticks
                await wait_for(pilot, lambda start=start: Reordering.ticks > start)
                await pilot.pause(0.05)
                chosen = app.selected()
                assert chosen is not None and chosen.key == target.key
                moved += table.cursor_row != first
            assert moved, "the list never moved the process: the test proved nothing"
            await pilot.press("enter")
            await wait_for(pilot, lambda: not app.is_running)
            assert app.return_value == HomeChoice(
                "watch", pid=target.pid, started_s=target.started_s
            )

    try:
        asyncio.run(drive())
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


def test_home_choice_of_an_ended_process_is_not_watched() -> None:
    """A pid whose process ended (and may be reused) between the choice and the watch."""
    from gpudoctor.cli.home import same_process

    proc = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    import psutil

    started = psutil.Process(proc.pid).create_time()
    assert same_process(proc.pid, started)
    assert not same_process(proc.pid, started - 5)  # another process under that pid
    proc.kill()
    proc.wait()
    assert not same_process(proc.pid, started)


def test_home_r_types_a_command_to_run_under_the_doctor() -> None:
    from gpudoctor.machine import Machine
    from gpudoctor.tui.home import HomeChoice, RunPrompt, make_home_app

    app = make_home_app(Machine(), interval_s=0.5)

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("r")
            await wait_for(pilot, lambda: isinstance(app.screen, RunPrompt))
            await pilot.press(*"python 'train it.py' --bs 8")
            await pilot.press("enter")
            await wait_for(pilot, lambda: not app.is_running)
            assert app.return_value == HomeChoice(
                "run", command=("python", "train it.py", "--bs", "8")
            )

    asyncio.run(drive())


def test_home_run_prompt_rejects_unbalanced_quotes_and_esc_cancels() -> None:
    from gpudoctor.machine import Machine
    from gpudoctor.tui.home import RunPrompt, make_home_app

    app = make_home_app(Machine(), interval_s=0.5)

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("r")
            await wait_for(pilot, lambda: isinstance(app.screen, RunPrompt))
            await pilot.press(*"python 'oops", "enter")
            await pilot.pause()
            assert isinstance(app.screen, RunPrompt)  # still asking
            error = app.screen.query_one("#run-error", Static)
            assert "cannot read that command" in str(error.content)
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, RunPrompt))
            await pilot.press("q")
            await wait_for(pilot, lambda: not app.is_running)
            assert app.return_value is None

    asyncio.run(drive())


def test_p_profiles_the_next_steps_of_the_live_job(tmp_path: Path) -> None:
    from gpudoctor.tui.screens import ProfileScreen

    session, log_path, log = start_live(tmp_path, "--steps", "100000")
    app = make_live_app(Follower(session, TerminalView(log_path)), "en")

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(
                pilot, lambda: app.snapshot is not None and app.snapshot.steps_total > 10
            )
            await pilot.press("p")
            await wait_for(pilot, lambda: isinstance(app.screen, ProfileScreen))
            table = app.screen.query_one("#profile-table", Static)

            def shown() -> bool:
                return "top operators by self CPU time" in str(table.content)

            await wait_for(pilot, shown, timeout=60)
            assert "aten::" in str(table.content)
            # the capture read as the GPU's timeline beside it (a CPU job: says so)
            await wait_for(pilot, lambda: "The GPU's timeline" in str(table.content))
            assert "no GPU events (a CPU-only capture)" in str(table.content)
            await pilot.press("escape")
            await pilot.press("q")
            await wait_for(pilot, lambda: isinstance(app.screen, QuitScreen))
            await pilot.press("s")
            await wait_for(pilot, lambda: not app.is_running, timeout=60)

    asyncio.run(drive())
    log.close()
    session.close()


def test_t_on_a_finding_asks_for_the_trial_of_its_first_remedy() -> None:
    app = make_replay_app(load_recorded_session("dataloader_bound"), 7, "en")

    async def drive() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, FindingScreen))
            assert isinstance(app.screen, FindingScreen)
            first = app.screen.finding.remedies[0]
            await pilot.press("t")
            await wait_for(pilot, lambda: not app.is_running)
            assert app.trial_request == first == "more-workers"

    asyncio.run(drive())


def ddp_timeline(ranks: int, slow_rank: int = 1, extra_ms: float = 12.0) -> Timeline:
    """A DDP job's record as the probe sends it: every rank's step as long as the
    slowest's, the others waiting that long in backward."""

    from windows import steps

    timeline = Timeline(["torchrun", "train.py"], 1.7e9, 0)
    for r in range(ranks):
        pid = 100 + r
        rows = steps(
            pid=pid, wall_ms=9.0 + extra_ms, loader_ms=1.0, forward_ms=3.0, optimizer_ms=1.0,
            backward_ms=4.0 + (0.0 if r == slow_rank else extra_ms) + r * 0.01,
        )  # fmt: skip
        timeline.steps[pid] = StepRows(rows)
        timeline.step_counts[pid] = len(rows)
        timeline.facts[pid] = {"rank": str(r), "local_rank": str(r)}
    timeline.end_mono_ns = timeline.steps[100][-1].t_end_mono_ns
    return timeline


def test_r_shows_every_rank_and_the_job_panel_names_the_slowest() -> None:
    from gpudoctor.tui.screens import RanksScreen

    app = make_replay_app(ddp_timeline(4, slow_rank=2), 1)

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.snapshot is not None)
            panel = text_of(app.query_one(JobPanel))
            assert "4 ranks · slowest 2: 21.0 ms own (2.3x)" in panel
            # the job's rate is its ranks' together, as the summary and scripts say
            snapshot = app.snapshot
            assert snapshot is not None and snapshot.samples_per_s
            total = sum(r.samples_per_s or 0.0 for r in snapshot.ranks)
            assert total > 3.9 * snapshot.samples_per_s
            assert f"{total:,.0f} samples/s (4 ranks)" in panel, panel
            await pilot.press("r")
            await wait_for(pilot, lambda: isinstance(app.screen, RanksScreen))
            table = str(app.screen.query_one("#ranks-table", Static).content).splitlines()
            assert table[0].startswith("rank  step p50  data wait  own work  comm wait")
            assert [line.split()[0] for line in table[1:]] == ["0", "1", "2", "3"]
            assert "21.0 ms" in table[3] and "0.0 ms" in table[3]  # rank 2: no wait

    asyncio.run(drive())


def test_sixty_four_ranks_are_summarised_to_fit_the_screen() -> None:
    from gpudoctor.diagnosis.ranks import rank_measures
    from gpudoctor.display import rank_rows

    measures = rank_measures(ddp_timeline(64, slow_rank=5).window())
    rows = rank_rows(measures, room=10)
    assert len(rows) == 10
    assert rows[0].split()[0] == "5"  # the slowest first
    assert "... 55 ranks with own work from" in rows[8]


def test_a_live_view_diagnoses_every_few_seconds_and_at_the_end(tmp_path: Path) -> None:
    """The panels get a snapshot each tick; the findings in it are diagnosed again only
    every DIAGNOSE_EVERY_S while the job runs (the same findings kept in between), and at
    once when it ends."""
    store = Store(tmp_path / "s.db")
    job = LaunchedJob(
        [PY, str(SAMPLES / "dataloader_bound.py"), "--seconds", "11"], store, interval_s=0.5
    )
    ticks: list[tuple[float, Any]] = []
    ended: list[Any] = []

    class Listener:
        def on_snapshot(self, snapshot: Any) -> None:
            ticks.append((time.monotonic(), snapshot.findings))

        def on_end(self, job_exit: Any, error: str | None, snapshot: Any) -> None:
            ended.append(snapshot)

    follower = Follower(job)
    follower.listen(Listener())
    job.start()
    follower.start()
    follower.join()
    job.close()
    assert len(ticks) >= 16, len(ticks)  # two ticks a second
    changes = [t for n, (t, found) in enumerate(ticks) if n == 0 or found is not ticks[n - 1][1]]
    assert 2 <= len(changes) <= 4, changes
    gaps = [b - a for a, b in zip(changes, changes[1:], strict=False)]
    assert min(gaps) >= DIAGNOSE_EVERY_S - 0.6, gaps
    (last,) = ended
    assert last.findings is not ticks[-1][1]
    assert "input-bound" in [f.id for f in last.findings]


def test_at_80x24_the_end_reads_as_everywhere_and_never_wraps() -> None:
    """Issue 40, points 8 and 10: at 80x24 'ended (exit, exit code 0)  up 0:08' wrapped
    to a line of its own, and said the end in other words than the header and the
    report. The job panel says it in the report's words, on one line."""
    from conftest import FIXTURES, load_session_file

    from gpudoctor.report.render import ended_words

    timeline = load_session_file(FIXTURES / "cpu_session_dataloader_bound.json.gz")
    app: Any = make_replay_app(timeline, 7)
    assert timeline.exit is not None
    words = ended_words(timeline.exit.ended_by, timeline.exit.exit_code, None)

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            panel = app.query_one(JobPanel)
            lines = text_of(panel).splitlines()
            assert lines[1].startswith("pid ") and words in lines[1], lines
            assert all(cell_width(line) <= panel.size.width for line in lines)
            await pilot.press("q")

    asyncio.run(drive())
